"""Contents: the typed parts a :class:`~agentkeep.messages.Message` is made of.

A closed set of small dataclasses discriminated by ``type`` (the seeds' wire names): ``text``,
``text_reasoning``, ``function_call``, ``function_result``, ``data``, ``uri``, ``usage`` and
``error``. A content of a type agentkeep does not know (other frameworks have many) is kept whole
as :class:`UnknownContent` and written back unchanged, and fields agentkeep does not know on a
known type are kept too: nothing read is ever dropped.

Build contents with the factories on :class:`Content` (``Content.from_text("hi")``), the names
the reference Python edition uses. ``to_dict()`` / ``content_from_dict()`` convert to and from the
wire shape ``{"type": "text", "text": "..."}``; defaults are left out so stored history stays small.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, cast

from ._json_values import check_text, json_problem
from .errors import MessageFormatError

__all__ = [
    "OPAQUE_CONTENT_TYPE",
    "Content",
    "DataContent",
    "ErrorContent",
    "FunctionCallContent",
    "FunctionResultContent",
    "TextContent",
    "TextReasoningContent",
    "UnknownContent",
    "UriContent",
    "UsageContent",
    "UsageDetails",
    "content_from_dict",
]


@dataclass(slots=True, frozen=True)
class UsageDetails:
    """Token counts a model reported for one call (or the sum over several calls).

    Attributes:
        input_token_count: Tokens in the request (prompt).
        output_token_count: Tokens the model generated.
        total_token_count: Both together.
    """

    input_token_count: int | None = None
    output_token_count: int | None = None
    total_token_count: int | None = None

    def __add__(self, other: UsageDetails) -> UsageDetails:
        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return UsageDetails(
            add(self.input_token_count, other.input_token_count),
            add(self.output_token_count, other.output_token_count),
            add(self.total_token_count, other.total_token_count),
        )

    def to_dict(self) -> dict[str, int]:
        """The counts that are set, in wire form."""
        out: dict[str, int] = {}
        if self.input_token_count is not None:
            out["input_token_count"] = self.input_token_count
        if self.output_token_count is not None:
            out["output_token_count"] = self.output_token_count
        if self.total_token_count is not None:
            out["total_token_count"] = self.total_token_count
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: str = "usage_details") -> UsageDetails:
        """Read counts in wire form; unknown keys are ignored, wrong types are an error."""
        values: list[int | None] = []
        for name in ("input_token_count", "output_token_count", "total_token_count"):
            value = data.get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise MessageFormatError(f"{name} must be an integer", path=f"{path}.{name}")
            values.append(value)
        return cls(*values)


class Content:
    """Base of every content kind; use the ``from_*`` factories to build one.

    Attributes:
        type: The wire discriminator of this kind (``"text"``, ``"function_call"``, ...).
        FIELDS: The wire fields this kind knows; others are kept in ``extra_fields``.
    """

    __slots__ = ()
    type: ClassVar[str] = ""
    FIELDS: ClassVar[frozenset[str]] = frozenset()

    # -- factories (names as in the reference Python edition) ---------------------------------
    @staticmethod
    def from_text(text: str, **additional_properties: Any) -> TextContent:
        """A plain text part."""
        return TextContent(text, additional_properties=additional_properties or None)

    @staticmethod
    def from_text_reasoning(text: str, **additional_properties: Any) -> TextReasoningContent:
        """A reasoning ("thinking") text part."""
        return TextReasoningContent(text, additional_properties=additional_properties or None)

    @staticmethod
    def from_function_call(
        call_id: str, name: str, *, arguments: Mapping[str, Any] | str | None = None
    ) -> FunctionCallContent:
        """A request from the model to call tool ``name``; ``arguments`` as a mapping or JSON text."""
        args = dict(arguments) if isinstance(arguments, Mapping) else arguments
        return FunctionCallContent(call_id, name, args)

    @staticmethod
    def from_function_result(
        call_id: str, *, result: Any = None, exception: str | BaseException | None = None
    ) -> FunctionResultContent:
        """The outcome of a tool call: its ``result``, or the ``exception`` it raised."""
        if isinstance(exception, BaseException):
            exception = f"{type(exception).__name__}: {exception}"
        return FunctionResultContent(call_id, result, exception)

    @staticmethod
    def from_data(data: bytes, media_type: str) -> DataContent:
        """Inline binary data (an image, audio, a file), kept as a base64 data URI."""
        encoded = base64.b64encode(data).decode("ascii")
        return DataContent(f"data:{media_type};base64,{encoded}", media_type)

    @staticmethod
    def from_uri(uri: str, media_type: str | None = None) -> UriContent:
        """A reference to media by URI."""
        return UriContent(uri, media_type)

    @staticmethod
    def from_usage(usage_details: UsageDetails | Mapping[str, Any]) -> UsageContent:
        """Token usage reported by the model."""
        if not isinstance(usage_details, UsageDetails):
            usage_details = UsageDetails.from_dict(usage_details)
        return UsageContent(usage_details)

    @staticmethod
    def from_error(
        message: str, *, error_code: str | None = None, details: str | None = None
    ) -> ErrorContent:
        """An error the model or service reported in place of content."""
        return ErrorContent(message, error_code, details)

    # -- the reference's hosted-tool kinds, kept whole (see UnknownContent) --------------------------
    @staticmethod
    def from_code_interpreter_tool_call(**fields: Any) -> UnknownContent:
        """A hosted code interpreter's call (``call_id``, ``inputs``, ...), as the reference writes it."""
        return _hosted("code_interpreter_tool_call", fields)

    @staticmethod
    def from_code_interpreter_tool_result(**fields: Any) -> UnknownContent:
        """A hosted code interpreter's result (``call_id``, ``outputs``, ...)."""
        return _hosted("code_interpreter_tool_result", fields)

    @staticmethod
    def from_shell_tool_call(**fields: Any) -> UnknownContent:
        """A hosted shell's call (``call_id``, ``commands``, ...)."""
        return _hosted("shell_tool_call", fields)

    @staticmethod
    def from_shell_tool_result(**fields: Any) -> UnknownContent:
        """A hosted shell's result (``call_id``, ``outputs``, ...)."""
        return _hosted("shell_tool_result", fields)

    @staticmethod
    def from_image_generation_tool_call(**fields: Any) -> UnknownContent:
        """A hosted image generator's call (``image_id``, ...)."""
        return _hosted("image_generation_tool_call", fields)

    @staticmethod
    def from_image_generation_tool_result(**fields: Any) -> UnknownContent:
        """A hosted image generator's result (``image_id``, ``outputs``, ...)."""
        return _hosted("image_generation_tool_result", fields)

    @staticmethod
    def from_mcp_server_tool_call(call_id: str, tool_name: str, **fields: Any) -> UnknownContent:
        """A call of a tool on an MCP server that the service runs (``server_name``, ``arguments``)."""
        return _hosted("mcp_server_tool_call", {"call_id": call_id, "tool_name": tool_name, **fields})

    @staticmethod
    def from_mcp_server_tool_result(call_id: str, **fields: Any) -> UnknownContent:
        """The result of an MCP server's tool the service ran (``output``)."""
        return _hosted("mcp_server_tool_result", {"call_id": call_id, **fields})

    @staticmethod
    def from_hosted_file(file_id: str, **fields: Any) -> UnknownContent:
        """A file the service keeps (``media_type``, ``name``)."""
        return _hosted("hosted_file", {"file_id": file_id, **fields})

    @staticmethod
    def from_hosted_vector_store(vector_store_id: str, **fields: Any) -> UnknownContent:
        """A vector store the service keeps."""
        return _hosted("hosted_vector_store", {"vector_store_id": vector_store_id, **fields})

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - every subclass overrides
        """The wire form of this content."""
        raise NotImplementedError


def _hosted(kind: str, fields: dict[str, Any]) -> UnknownContent:
    """A content of a kind agentkeep keeps whole, in the reference's wire shape (contents in it as
    their wire form, unset fields left out); its values are checked as any content's are."""
    raw: dict[str, Any] = {"type": kind}
    for name, value in fields.items():
        if value is None:
            continue
        if isinstance(value, Content):
            value = value.to_dict()
        elif isinstance(value, list | tuple) and any(
            isinstance(v, Content) for v in cast("list[Any]", value)
        ):
            value = [v.to_dict() if isinstance(v, Content) else v for v in cast("list[Any]", value)]
        raw[name] = value
    raw.setdefault("additional_properties", {})
    content = content_from_dict(raw)
    assert isinstance(content, UnknownContent)  # none of these kinds is one agentkeep models
    return content


def _finish(content: Any, out: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] | None = content.extra_fields
    if extra:
        for key, value in extra.items():
            out.setdefault(key, value)
    props: dict[str, Any] | None = content.additional_properties
    if props:
        out["additional_properties"] = props
    return out


@dataclass(slots=True)
class TextContent(Content):
    """Plain text."""

    type: ClassVar[str] = "text"
    FIELDS: ClassVar[frozenset[str]] = frozenset({"type", "text", "additional_properties"})
    text: str
    additional_properties: dict[str, Any] | None = field(default=None, kw_only=True)
    extra_fields: dict[str, Any] | None = field(default=None, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        check_text(self.text, "text")

    def to_dict(self) -> dict[str, Any]:
        out = {"type": "text", "text": self.text}
        if self.additional_properties or self.extra_fields:
            return _finish(self, out)
        return out


@dataclass(slots=True)
class TextReasoningContent(Content):
    """Reasoning text the model produced before its answer."""

    type: ClassVar[str] = "text_reasoning"
    FIELDS: ClassVar[frozenset[str]] = frozenset({"type", "text", "additional_properties"})
    text: str
    additional_properties: dict[str, Any] | None = field(default=None, kw_only=True)
    extra_fields: dict[str, Any] | None = field(default=None, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        check_text(self.text, "text")

    def to_dict(self) -> dict[str, Any]:
        return _finish(self, {"type": "text_reasoning", "text": self.text})


@dataclass(slots=True)
class FunctionCallContent(Content):
    """A tool call the model asks for.

    Attributes:
        call_id: Id pairing this call with its :class:`FunctionResultContent`.
        name: The tool's name.
        arguments: Arguments as a mapping, or as the JSON text the model produced.
    """

    type: ClassVar[str] = "function_call"
    FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"type", "call_id", "name", "arguments", "additional_properties"}
    )
    call_id: str
    name: str
    arguments: dict[str, Any] | str | None = None
    additional_properties: dict[str, Any] | None = field(default=None, kw_only=True)
    extra_fields: dict[str, Any] | None = field(default=None, kw_only=True, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "function_call", "call_id": self.call_id, "name": self.name}
        if self.arguments is not None:
            out["arguments"] = self.arguments
        return _finish(self, out)


@dataclass(slots=True)
class FunctionResultContent(Content):
    """The outcome of a tool call.

    Attributes:
        call_id: The id of the :class:`FunctionCallContent` this answers.
        result: What the tool returned (JSON-compatible).
        exception: ``"ErrorType: message"`` when the tool raised instead.
    """

    type: ClassVar[str] = "function_result"
    FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"type", "call_id", "result", "exception", "additional_properties"}
    )
    call_id: str
    result: Any = None
    exception: str | None = None
    additional_properties: dict[str, Any] | None = field(default=None, kw_only=True)
    extra_fields: dict[str, Any] | None = field(default=None, kw_only=True, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "function_result", "call_id": self.call_id}
        if self.result is not None:
            out["result"] = self.result
        if self.exception is not None:
            out["exception"] = self.exception
        return _finish(self, out)


@dataclass(slots=True)
class DataContent(Content):
    """Inline binary data as a ``data:`` URI; ``.data`` gives the bytes."""

    type: ClassVar[str] = "data"
    FIELDS: ClassVar[frozenset[str]] = frozenset({"type", "uri", "media_type", "additional_properties"})
    uri: str
    media_type: str | None = None
    additional_properties: dict[str, Any] | None = field(default=None, kw_only=True)
    extra_fields: dict[str, Any] | None = field(default=None, kw_only=True, repr=False)

    @property
    def data(self) -> bytes:
        """The decoded bytes."""
        _, _, payload = self.uri.partition(",")
        return base64.b64decode(payload)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "data", "uri": self.uri}
        if self.media_type is not None:
            out["media_type"] = self.media_type
        return _finish(self, out)


@dataclass(slots=True)
class UriContent(Content):
    """Media referenced by URI."""

    type: ClassVar[str] = "uri"
    FIELDS: ClassVar[frozenset[str]] = frozenset({"type", "uri", "media_type", "additional_properties"})
    uri: str
    media_type: str | None = None
    additional_properties: dict[str, Any] | None = field(default=None, kw_only=True)
    extra_fields: dict[str, Any] | None = field(default=None, kw_only=True, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "uri", "uri": self.uri}
        if self.media_type is not None:
            out["media_type"] = self.media_type
        return _finish(self, out)


@dataclass(slots=True)
class UsageContent(Content):
    """Token usage reported by the model, carried inside a message."""

    type: ClassVar[str] = "usage"
    FIELDS: ClassVar[frozenset[str]] = frozenset({"type", "usage_details", "additional_properties"})
    usage_details: UsageDetails
    additional_properties: dict[str, Any] | None = field(default=None, kw_only=True)
    extra_fields: dict[str, Any] | None = field(default=None, kw_only=True, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return _finish(self, {"type": "usage", "usage_details": self.usage_details.to_dict()})


@dataclass(slots=True)
class ErrorContent(Content):
    """An error reported by the model or service in place of content."""

    type: ClassVar[str] = "error"
    FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"type", "message", "error_code", "details", "additional_properties"}
    )
    message: str
    error_code: str | None = None
    details: str | None = None
    additional_properties: dict[str, Any] | None = field(default=None, kw_only=True)
    extra_fields: dict[str, Any] | None = field(default=None, kw_only=True, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "error", "message": self.message}
        if self.error_code is not None:
            out["error_code"] = self.error_code
        if self.details is not None:
            out["details"] = self.details
        return _finish(self, out)


@dataclass(slots=True)
class UnknownContent(Content):
    """A content of a kind agentkeep does not know, kept whole and written back unchanged.

    Also what keeps a content of a kind agentkeep knows but that its type cannot hold exactly
    (another framework's reasoning with only encrypted data, usage with provider-specific
    counts); such a content is stored wrapped, ``{"type": "agentkeep.opaque", "content": {...}}``, so that
    reading it back does not take it for the known kind (see :mod:`agentkeep.maf`).

    Attributes:
        raw: The content exactly as read (it has a string ``"type"``).
    """

    raw: dict[str, Any]

    @property
    def kind(self) -> str:
        """The foreign content's ``type``."""
        return cast(str, self.raw["type"])

    @property
    def type(self) -> str:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The foreign content's ``type`` (as on every content)."""
        return cast(str, self.raw["type"])

    def __getattr__(self, name: str) -> Any:
        # The reference reads a foreign kind's fields as attributes (content.call_id).
        raw: dict[str, Any] = object.__getattribute__(self, "raw")
        if name in raw and not name.startswith("_"):
            return raw[name]
        raise AttributeError(f"{type(self).__name__} ({raw.get('type')!r}) has no field {name!r}")

    def to_dict(self) -> dict[str, Any]:
        if self.raw["type"] in _DECODERS:  # a known kind (or "opaque" itself) must not be read as one
            return {"type": _OPAQUE, "content": dict(self.raw)}
        return dict(self.raw)


# -- decoding ---------------------------------------------------------------------------------


def _req_str(data: Mapping[str, Any], key: str, path: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        what = "missing" if value is None else f"must be a string, not {type(value).__name__}"
        raise MessageFormatError(f"{key!r} {what}", path=f"{path}.{key}")
    return value


def _opt_str(data: Mapping[str, Any], key: str, path: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise MessageFormatError(
            f"{key!r} must be a string, not {type(value).__name__}", path=f"{path}.{key}"
        )
    return value


def _common(cls: type[Content], data: Mapping[str, Any], path: str) -> dict[str, Any]:
    """additional_properties and unknown fields, as keyword arguments."""
    kwargs: dict[str, Any] = {}
    props = data.get("additional_properties")
    if props is not None:
        if not isinstance(props, dict):
            raise MessageFormatError(
                "'additional_properties' must be an object", path=f"{path}.additional_properties"
            )
        if props:
            kwargs["additional_properties"] = props
    if len(data) > 2:
        unknown = data.keys() - cls.FIELDS
        if unknown:
            kwargs["extra_fields"] = {k: data[k] for k in unknown}
    return kwargs


def _text(data: Mapping[str, Any], path: str) -> Content:
    text = _req_str(data, "text", path)
    if len(data) == 2:
        return TextContent(text)
    return TextContent(text, **_common(TextContent, data, path))


def _reasoning(data: Mapping[str, Any], path: str) -> Content:
    return TextReasoningContent(_req_str(data, "text", path), **_common(TextReasoningContent, data, path))


def _call(data: Mapping[str, Any], path: str) -> Content:
    args = data.get("arguments")
    if args is not None and not isinstance(args, dict | str):
        raise MessageFormatError("'arguments' must be an object or a string", path=f"{path}.arguments")
    return FunctionCallContent(
        _req_str(data, "call_id", path),
        _req_str(data, "name", path),
        cast("dict[str, Any] | str | None", args),
        **_common(FunctionCallContent, data, path),
    )


def _result(data: Mapping[str, Any], path: str) -> Content:
    return FunctionResultContent(
        _req_str(data, "call_id", path),
        data.get("result"),
        _opt_str(data, "exception", path),
        **_common(FunctionResultContent, data, path),
    )


def _data(data: Mapping[str, Any], path: str) -> Content:
    uri = _req_str(data, "uri", path)
    head, sep, payload = uri.partition(",")
    if not uri.startswith("data:") or not sep or not head.endswith(";base64"):
        raise MessageFormatError("'uri' must be a base64 data URI", path=f"{path}.uri")
    try:
        base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MessageFormatError("'uri' holds invalid base64 data", path=f"{path}.uri") from exc
    return DataContent(uri, _opt_str(data, "media_type", path), **_common(DataContent, data, path))


def _uri(data: Mapping[str, Any], path: str) -> Content:
    return UriContent(
        _req_str(data, "uri", path), _opt_str(data, "media_type", path), **_common(UriContent, data, path)
    )


def _usage(data: Mapping[str, Any], path: str) -> Content:
    details = data.get("usage_details")
    if not isinstance(details, dict):
        raise MessageFormatError("'usage_details' must be an object", path=f"{path}.usage_details")
    return UsageContent(
        UsageDetails.from_dict(cast("dict[str, Any]", details), path=f"{path}.usage_details"),
        **_common(UsageContent, data, path),
    )


def _error(data: Mapping[str, Any], path: str) -> Content:
    return ErrorContent(
        _req_str(data, "message", path),
        _opt_str(data, "error_code", path),
        _opt_str(data, "details", path),
        **_common(ErrorContent, data, path),
    )


def _opaque(data: Mapping[str, Any], path: str) -> Content:
    inner = data.get("content")
    if (
        len(data) == 2
        and isinstance(inner, dict)
        and isinstance(cast("dict[str, Any]", inner).get("type"), str)
    ):
        return UnknownContent(dict(cast("dict[str, Any]", inner)))
    return UnknownContent(dict(data))  # not agentkeep's wrapper: a foreign kind of that name


OPAQUE_CONTENT_TYPE: Final = "agentkeep.opaque"
"""The wire type of a content kept whole whose own type agentkeep knows (see UnknownContent)."""
_OPAQUE = OPAQUE_CONTENT_TYPE
_DECODERS: dict[str, Callable[[Mapping[str, Any], str], Content]] = {
    "text": _text,
    "text_reasoning": _reasoning,
    "function_call": _call,
    "function_result": _result,
    "data": _data,
    "uri": _uri,
    "usage": _usage,
    "error": _error,
    _OPAQUE: _opaque,
}


def content_from_dict(data: Any, *, path: str = "content", checked: bool = False) -> Content:
    """Build a content from its wire form.

    Args:
        data: A mapping with a string ``"type"``.
        path: Where ``data`` sits in a larger document, for error messages.
        checked: The caller knows the values in ``data`` have a faithful JSON form (checked when
            they were stored), so that check is skipped.

    Returns:
        The typed content, or :class:`UnknownContent` for a type agentkeep does not know.

    Raises:
        MessageFormatError: ``data`` is not a mapping, has no string ``type``, or a known type has
            missing or mistyped fields.
    """
    if not isinstance(data, dict):
        raise MessageFormatError(f"a content must be an object, not {type(data).__name__}", path=path)
    data = cast("dict[str, Any]", data)
    if len(data) == 2 and data.get("type") == "text":
        text = data.get("text")
        if type(text) is str:
            return TextContent(text)  # the common case, without the general checks
    problem = None if checked else json_problem(data)  # free-form values (arguments, results, ...)
    if problem is not None:
        raise MessageFormatError(f"a content cannot be stored: {problem}", path=path)
    kind = data.get("type")
    decoder = _DECODERS.get(kind) if isinstance(kind, str) else None
    if decoder is not None:
        return decoder(data, path)
    if not isinstance(kind, str) or not kind:
        raise MessageFormatError("a content needs a non-empty string 'type'", path=f"{path}.type")
    return UnknownContent(dict(data))
