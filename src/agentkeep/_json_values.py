"""What a JSON value must be to be stored and read back faithfully, checked at C speed.

Messages and session state accept free-form values (tool arguments and results, additional
properties, state). A value JSON cannot carry — a string with a lone surrogate (not valid
Unicode, so not encodable as UTF-8), NaN or infinity (JSON has neither; encoders write ``null``),
a structure that contains itself or is nested too deeply, an object of no JSON type — must be
refused when it comes in, not when it is written out.
"""

from __future__ import annotations

import math
from typing import Any, Final

import msgspec

from .errors import MessageFormatError

__all__ = ["check_text", "encode_json", "json_problem", "text_problem"]

_encoder: Final = msgspec.json.Encoder()


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored (a lone surrogate), or ``None``; free for ASCII text."""
    if text.isascii():
        return None
    try:
        text.encode()
    except UnicodeEncodeError:
        return "it holds a lone surrogate (not valid Unicode text)"
    return None


def check_text(value: Any, path: str) -> None:
    """Refuse ``value`` as the text field at ``path`` unless it is a string that can be stored.

    Raises:
        MessageFormatError: It is not a string, or holds a lone surrogate.
    """
    name = path.rsplit(".", 1)[-1]
    if type(value) is not str:
        raise MessageFormatError(f"'{name}' must be a string, not {type(value).__name__}", path=path)
    problem = text_problem(value)
    if problem is not None:
        raise MessageFormatError(f"'{name}' cannot be stored: {problem}", path=path)


def encode_json(value: Any) -> bytes:
    """``value`` (builtins) as JSON, refusing what JSON cannot carry faithfully.

    One C-level encode; a Python walk only when the output has a ``null`` that might have been
    a NaN or an infinity.

    Raises:
        ValueError: Why ``value`` has no faithful JSON form.
    """
    try:
        encoded = _encoder.encode(value)
    except UnicodeEncodeError as exc:
        raise ValueError("a string in it holds a lone surrogate (not valid Unicode text)") from exc
    except RecursionError as exc:
        raise ValueError("it is nested too deeply, or contains itself") from exc
    except (TypeError, OverflowError) as exc:
        raise ValueError(str(exc)) from exc
    if b"null" in encoded and _has_non_finite(value):
        raise ValueError("it holds NaN or an infinity, which JSON cannot carry")
    return encoded


def json_problem(value: Any) -> str | None:
    """Why ``value`` (builtins) has no faithful JSON form (see :func:`encode_json`), or ``None``."""
    try:
        encode_json(value)
    except ValueError as exc:
        return str(exc)
    return None


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is float:
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
        elif isinstance(item, list | tuple):
            stack.extend(item)  # pyright: ignore[reportUnknownArgumentType]
    return False
