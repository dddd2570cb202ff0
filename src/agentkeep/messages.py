"""Messages: roles, the :class:`Message` type, source stamps and the message JSON codec.

A message is a role plus a list of :mod:`contents <agentkeep.contents>`. It gets a stable
``message_id`` and a ``created_at`` time when it enters a session (unless the caller set them), so
storage never has to compare message bodies to tell messages apart.

**Source stamps.** A message added to a request carries where it came from: the caller
(``external``), a history provider (``chat_history``) or another context provider
(``context_provider``), plus that provider's ``source_id``. :func:`get_source_type` and
:func:`get_source_id` read the stamp. Stamps are request metadata, not part of the wire form.
Stamping never mutates a caller's message: :meth:`Message.with_source` returns a shallow copy,
and a history log stamps each message once, when it is stored (see
:mod:`agentkeep.message_log`), so loading a long history stamps nothing.

**Wire form.** ``{"role": "user", "contents": [{"type": "text", "text": "hi"}], "message_id":
"...", "created_at": "2026-01-01T00:00:00Z"}``; empty optional fields are left out. Unknown
top-level fields and unknown content types are kept and written back (never dropped).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from itertools import chain, repeat
from typing import Any, Final, Literal, TypeAlias, cast, get_args

import msgspec

from ._json_values import check_text, encode_json, json_problem
from .contents import Content, FunctionCallContent, FunctionResultContent, TextContent, content_from_dict
from .errors import MessageFormatError

__all__ = [
    "Message",
    "MessageInput",
    "MessageSourceType",
    "Role",
    "get_source_id",
    "get_source_type",
    "message_id_generator",
    "new_message_id",
    "normalize_messages",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
_ROLES: Final[frozenset[str]] = frozenset(get_args(Role))
_KNOWN_FIELDS: Final[frozenset[str]] = frozenset(
    {"type", "role", "contents", "author_name", "message_id", "created_at", "additional_properties"}
)


class MessageSourceType(StrEnum):
    """Where a message in a request came from."""

    EXTERNAL = "external"
    """Given by the caller of ``agent.run``."""
    CHAT_HISTORY = "chat_history"
    """Loaded from history by a history provider."""
    CONTEXT_PROVIDER = "context_provider"
    """Injected by a (non-history) context provider."""


_SourceStamp: TypeAlias = "tuple[MessageSourceType, str | None]"


def new_message_id() -> str:
    """A new time-ordered message id: 48 bits of milliseconds then 80 random bits, as 32 hex digits.

    Ids sort by creation time, which keeps storage indexes append-friendly.
    """
    return f"{time.time_ns() // 1_000_000:012x}{int.from_bytes(os.urandom(10)):020x}"


def message_id_generator(*, batch: int = 256) -> Callable[[], str]:
    """A source of ids like :func:`new_message_id` that reads the clock and random bytes once per
    ``batch`` ids; call it for the next id.

    For code that names many messages at once (a compaction collapsing a long history names tens
    of thousands): one system call per ``batch`` ids instead of two per id. The ids of one batch
    share the millisecond they were made in, so they still sort by creation time. The callable is
    the C-level ``__next__`` of an endless chain of batches, so an id costs no Python frame;
    a batch is made only when the previous one is used up.

    Args:
        batch: How many ids to make at a time.

    Raises:
        ValueError: ``batch`` is not positive.

    Example:
        >>> next_id = message_id_generator()
        >>> len(next_id()), next_id() != next_id()
        (32, True)
    """
    if batch <= 0:
        raise ValueError("batch must be positive")
    return chain.from_iterable(map(_id_batch, repeat(batch))).__next__


def _id_batch(size: int) -> list[str]:
    prefix = f"{time.time_ns() // 1_000_000:012x}"
    random = os.urandom(10 * size).hex()
    return [prefix + random[at : at + 20] for at in range(0, 20 * size, 20)]


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
FLOAT_EXACT_MICROS: Final = 2**31 * 1_000_000
"""Below this many microseconds (2038), seconds as a double round back to the exact microsecond:
the double's error is under 0.25 us, so ``fromtimestamp``'s rounding to microseconds recovers it."""


def time_of_micros(micros: int) -> datetime:
    """The UTC time ``micros`` microseconds after the epoch (through a double where that is exact,
    about twice as fast as adding a ``timedelta``).

    Raises:
        OverflowError: Outside the range of a ``datetime``.
    """
    if 0 <= micros < FLOAT_EXACT_MICROS:
        return datetime.fromtimestamp(micros / 1_000_000, UTC)
    return _EPOCH + timedelta(microseconds=micros)


def _format_time(value: datetime) -> str:
    # msgspec writes RFC 3339 ("...Z" for UTC) in C, several times faster than isoformat().
    return cast(str, msgspec.to_builtins(value))


class Message:
    """One chat message.

    Args:
        role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
        contents: The parts; plain strings become text contents. A single string is one text part.
        author_name: Optional name of the author (e.g. the agent's name).
        message_id: Stable id; assigned when the message enters a session if not given.
        created_at: Creation time (timezone-aware); assigned with the id if not given.
        additional_properties: Free-form metadata that round-trips with the message.

    Raises:
        MessageFormatError: Unknown role, or contents that are neither strings nor contents.
    """

    __slots__ = (
        "_created_at",
        "_source",
        "additional_properties",
        "author_name",
        "contents",
        "extra_fields",
        "message_id",
        "role",
    )

    role: Role
    contents: list[Content]
    author_name: str | None
    message_id: str | None
    additional_properties: dict[str, Any]
    extra_fields: dict[str, Any] | None
    _source: _SourceStamp | None
    _created_at: datetime | int | None
    """The creation time, or, for a message a store decoded, its microseconds since the epoch
    until it is first read (:attr:`created_at`)."""

    def __init__(
        self,
        role: Role,
        contents: Sequence[Content | str] | str | None = None,
        *,
        author_name: str | None = None,
        message_id: str | None = None,
        created_at: datetime | None = None,
        additional_properties: dict[str, Any] | None = None,
    ) -> None:
        if type(role) is not str:
            role = _plain_role(role)
        if role not in _ROLES:
            raise MessageFormatError(f"unknown role {role!r}; expected one of {sorted(_ROLES)}", path="role")
        self.role = role
        if contents is None:
            self.contents = []
        elif isinstance(contents, str):
            self.contents = [TextContent(contents)]
        else:
            items: list[Content] = []
            for index, item in enumerate(contents):
                if isinstance(item, str):
                    items.append(TextContent(item))
                elif isinstance(item, Content):  # pyright: ignore[reportUnnecessaryIsInstance]
                    items.append(item)
                else:
                    raise MessageFormatError(
                        f"a content must be a Content or a str, not {type(item).__name__}",
                        path=f"contents[{index}]",
                    )
            self.contents = items
        if author_name is not None:
            check_text(author_name, "author_name")
        if message_id is not None:
            check_text(message_id, "message_id")
        if additional_properties:
            _check_free_form(additional_properties, "additional_properties")
        self.author_name = author_name
        self.message_id = message_id
        self.created_at = None if created_at is None else _check_time(created_at, "created_at")
        self.additional_properties = additional_properties if additional_properties is not None else {}
        self.extra_fields = None
        self._source = None

    @classmethod
    def from_checked_text(
        cls,
        role: Role,
        text: str,
        author_name: str | None,
        message_id: str | None,
        created_at: datetime | None,
    ) -> Message:
        """A message of one text part, made without checking its fields again: for decoders of
        records whose message was checked before it was stored (and whose text was just decoded
        from strict UTF-8, so it holds no lone surrogate). ``role`` must be one of the four."""
        part = TextContent.__new__(TextContent)
        part.text = text
        part.additional_properties = None
        part.extra_fields = None
        message = cls.__new__(cls)
        message.role = role
        message.contents = [part]
        message.author_name = author_name
        message.message_id = message_id
        message._created_at = created_at
        message.additional_properties = {}
        message.extra_fields = None
        message._source = None
        return message

    @property
    def created_at(self) -> datetime | None:
        """Creation time (timezone-aware). A message read from a store keeps the stored
        microseconds and makes its ``datetime`` when this is first read: a whole history's load
        does not make ten thousand of them for a caller that reads none."""
        when = self._created_at
        if when.__class__ is not int:  # a datetime or None: the common case, one check
            return when  # pyright: ignore[reportReturnType] - not an int, so a datetime or None
        made = self._created_at = time_of_micros(when)  # pyright: ignore[reportArgumentType] - an int
        return made

    @created_at.setter
    def created_at(self, value: datetime | None) -> None:
        self._created_at = value

    # -- reading ------------------------------------------------------------------------------
    @property
    def text(self) -> str:
        """The text contents joined together (reasoning and other kinds are left out)."""
        contents = self.contents
        if len(contents) == 1:
            only = contents[0]
            return only.text if isinstance(only, TextContent) else ""
        return "".join(c.text for c in contents if isinstance(c, TextContent))

    @property
    def function_calls(self) -> list[FunctionCallContent]:
        """The tool calls this message asks for."""
        return [c for c in self.contents if isinstance(c, FunctionCallContent)]

    @property
    def function_results(self) -> list[FunctionResultContent]:
        """The tool results this message carries."""
        return [c for c in self.contents if isinstance(c, FunctionResultContent)]

    # -- identity and stamps -----------------------------------------------------------------
    def copy(self) -> Message:
        """A shallow copy: contents are shared (they are treated as immutable), the
        ``additional_properties`` dict is copied."""
        clone = Message.__new__(Message)
        role = self.role
        clone.role = role if type(role) is str else _plain_role(role)
        clone.contents = self.contents
        clone.author_name = self.author_name
        clone.message_id = self.message_id
        clone._created_at = self._created_at
        props = self.additional_properties
        clone.additional_properties = dict(props) if props else {}  # a copy's edits stay its own
        clone.extra_fields = self.extra_fields
        clone._source = self._source
        return clone

    def ensure_identity(self) -> Message:
        """Give this message an id and a creation time if it has none; returns ``self``."""
        if self.message_id is None:
            self.message_id = new_message_id()
        if self._created_at is None:
            self._created_at = datetime.now(UTC)
        return self

    @property
    def source(self) -> tuple[MessageSourceType, str | None] | None:
        """The request-time source stamp, ``(source type, source id)``; ``None`` if unstamped (see
        :func:`get_source_type`)."""
        return self._source

    def stamp(self, source_type: MessageSourceType, source_id: str | None) -> None:
        """Stamp this message in place. Only for the owner of the message (a history log stamping
        what it decoded); everyone else uses :meth:`with_source`, which never changes ``self``."""
        self._source = (source_type, source_id)

    def with_source(self, source_type: MessageSourceType, source_id: str | None) -> Message:
        """This message stamped with a source: ``self`` if already so stamped, else a stamped copy."""
        stamp = self._source
        if stamp is not None and stamp[0] is source_type and stamp[1] == source_id:
            return self
        clone = self.copy()
        clone._source = (source_type, source_id)
        return clone

    # -- wire form ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The wire form (a JSON-compatible dict); empty optional fields are left out."""
        contents = self.contents
        wire = [contents[0].to_dict()] if len(contents) == 1 else [c.to_dict() for c in contents]
        out: dict[str, Any] = {"role": self.role, "contents": wire}
        if self.author_name is not None:
            out["author_name"] = self.author_name
        if self.message_id is not None:
            out["message_id"] = self.message_id
        created_at = self.created_at
        if created_at is not None:
            out["created_at"] = _format_time(created_at)
        if self.additional_properties:
            out["additional_properties"] = self.additional_properties
        if self.extra_fields:
            for key, value in self.extra_fields.items():
                out.setdefault(key, value)
        return out

    @classmethod
    def from_dict(cls, data: Any, *, path: str = "", checked: bool = False) -> Message:
        """Build a message from its wire form.

        Args:
            data: A mapping as produced by :meth:`to_dict` (or by the reference edition).
            path: Where ``data`` sits in a larger document, for error messages.
            checked: The caller knows the free-form values in ``data`` (tool arguments and
                results, properties) have a faithful JSON form — they were checked when stored —
                so they are not checked again.

        Raises:
            MessageFormatError: ``data`` is malformed; the error names the field.
        """
        if not isinstance(data, dict):
            raise MessageFormatError(f"a message must be an object, not {type(data).__name__}", path=path)
        data = cast("dict[str, Any]", data)
        at = f"{path}." if path else ""
        role = data.get("role")
        if type(role) is not str or role not in _ROLES:
            what = "missing" if role is None else f"unknown role {role!r}"
            raise MessageFormatError(f"'role' {what}; expected one of {sorted(_ROLES)}", path=f"{at}role")
        raw_contents: Any = data.get("contents", [])
        if not isinstance(raw_contents, list):
            raise MessageFormatError("'contents' must be a list", path=f"{at}contents")
        message = Message.__new__(Message)
        message.role = role  # pyright: ignore[reportAttributeAccessIssue]
        try:
            message.contents = [content_from_dict(item, checked=checked) for item in raw_contents]  # pyright: ignore[reportUnknownVariableType]
        except MessageFormatError:  # rare: decode again, naming where the bad content is
            message.contents = [
                content_from_dict(item, path=f"{at}contents[{i}]", checked=checked)
                for i, item in enumerate(cast("list[Any]", raw_contents))
            ]
        author = data.get("author_name")
        if author is not None:
            check_text(author, f"{at}author_name")
        message.author_name = author
        message_id = data.get("message_id")
        if message_id is not None:
            check_text(message_id, f"{at}message_id")
        message.message_id = message_id
        created = data.get("created_at")
        message.created_at = None if created is None else _parse_time(created, f"{at}created_at")
        props = data.get("additional_properties")
        if props is not None and not isinstance(props, dict):
            raise MessageFormatError(
                "'additional_properties' must be an object", path=f"{at}additional_properties"
            )
        if props and not checked:
            _check_free_form(props, f"{at}additional_properties")
        message.additional_properties = props if props is not None else {}  # pyright: ignore[reportUnknownMemberType]
        kind = data.get("type")
        if kind is not None and kind != "message":  # the reference edition writes "type": "message"
            raise MessageFormatError(f"'type' is {kind!r}, expected 'message' (or no type)", path=f"{at}type")
        if _KNOWN_FIELDS.issuperset(data):
            message.extra_fields = None
        else:
            extra = {key: value for key, value in data.items() if key not in _KNOWN_FIELDS}
            if not checked:
                _check_free_form(extra, f"{at}(unknown fields)")
            message.extra_fields = extra
        message._source = None
        return message

    def to_json(self) -> str:
        """The wire form as JSON text.

        Raises:
            MessageFormatError: A value set after construction has no JSON form (a lone surrogate,
                NaN, a structure that contains itself).
        """
        try:
            return encode_json(self.to_dict()).decode()
        except ValueError as exc:
            raise MessageFormatError(f"the message cannot be written as JSON: {exc}") from exc

    @classmethod
    def from_json(cls, text: str | bytes) -> Message:
        """Parse JSON text in wire form.

        Raises:
            MessageFormatError: Invalid JSON, or a malformed message.
        """
        try:
            data = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            raise MessageFormatError(f"invalid JSON: {exc}") from exc
        except RecursionError as exc:
            raise MessageFormatError("invalid JSON: nested too deeply") from exc
        return cls.from_dict(data)

    # -- comparison / display ----------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (
            self.role == other.role
            and self.contents == other.contents
            and self.author_name == other.author_name
            and self.message_id == other.message_id
            and self.created_at == other.created_at
            and self.additional_properties == other.additional_properties
            and self.extra_fields == other.extra_fields
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        body = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        return (
            f"Message(role={self.role!r}, text={body!r}, contents={len(self.contents)}, "
            f"id={self.message_id!r})"
        )


def _plain_role(role: object) -> Any:
    """A role given as a ``str`` subclass or an enum member (the earlier API's ``role.value``)
    as plain text, so what a message stores is always an exact ``str``."""
    value = getattr(role, "value", role)
    if isinstance(value, str):
        return str.__str__(value)
    raise MessageFormatError(f"unknown role {role!r}; expected one of {sorted(_ROLES)}", path="role")


def _check_free_form(value: Any, path: str) -> None:
    problem = json_problem(value)
    if problem is not None:
        raise MessageFormatError(f"cannot be stored: {problem}", path=path)


def _parse_time(value: Any, path: str) -> datetime:
    if not isinstance(value, str):
        raise MessageFormatError("'created_at' must be an ISO-8601 string", path=path)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise MessageFormatError(f"'created_at' is not an ISO-8601 time: {value!r}", path=path) from exc
    if parsed.tzinfo is None:
        raise MessageFormatError("'created_at' must carry a timezone", path=path)
    return _check_time(parsed, path)


def _check_time(value: datetime, path: str) -> datetime:
    """``value`` if it is a timezone-aware time whose instant a UTC ``datetime`` can hold."""
    if not isinstance(value, datetime):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise MessageFormatError(f"created_at must be a datetime, not {type(value).__name__}", path=path)
    if value.tzinfo is None or value.utcoffset() is None:
        raise MessageFormatError("created_at must be timezone-aware", path=path)
    if value.year in (1, 9999):  # only there can an offset move the instant out of range
        try:
            value.astimezone(UTC)
        except OverflowError as exc:
            raise MessageFormatError(
                f"created_at {value.isoformat()} is outside the UTC range of a datetime", path=path
            ) from exc
    return value


def get_source_type(message: Message) -> MessageSourceType:
    """Where ``message`` came from in the current request; unstamped messages are ``EXTERNAL``."""
    stamp = message.source
    return MessageSourceType.EXTERNAL if stamp is None else stamp[0]


def get_source_id(message: Message) -> str | None:
    """The ``source_id`` of the provider that added ``message`` (``None`` for caller input)."""
    stamp = message.source
    return None if stamp is None else stamp[1]


MessageInput: TypeAlias = "str | Message | Iterable[str | Message] | None"
"""What ``agent.run`` accepts as messages: text, a message, or a sequence of either."""


def normalize_messages(messages: str | Message | Iterable[str | Message] | None) -> list[Message]:
    """Turn run input into a list of messages: a string becomes one user message.

    Raises:
        MessageFormatError: An item is neither a string nor a :class:`Message`.
    """
    if messages is None:
        return []
    if isinstance(messages, str):
        return [Message("user", [messages])]
    if isinstance(messages, Message):
        return [messages]
    if isinstance(messages, Mapping):
        raise MessageFormatError("got a mapping; use Message.from_dict() to read a message dict")
    out: list[Message] = []
    for index, item in enumerate(messages):
        if isinstance(item, str):
            out.append(Message("user", [item]))
        elif isinstance(item, Message):  # pyright: ignore[reportUnnecessaryIsInstance]
            out.append(item)
        else:
            raise MessageFormatError(
                f"run input must be str or Message, not {type(item).__name__}", path=f"messages[{index}]"
            )
    return out
