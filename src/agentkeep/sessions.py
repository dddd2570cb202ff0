"""Sessions: :class:`AgentSession`, its :class:`StateBag` and :class:`ProviderSessionState`.

A session is a container with no behaviour: an id, a state bag, and the service-side conversation
id when a service keeps the history. It belongs to no agent; several agents can run on one
session, and providers keep their per-session data in its state bag under their own key.

**StateBag.** Each value lives in object form, JSON form, or both. Setting a value caches the
object; its JSON form is produced only when the session is serialized. A deserialized value is
held as JSON and becomes an object of the requested type on its first typed read, then stays
cached. Keys nobody reads survive a round trip untouched.

Value types the bag can serialize: JSON-compatible builtins; dataclasses, ``TypedDict``,
``msgspec.Struct``, enums, ``datetime`` (through msgspec); classes with ``to_dict()`` and a
``from_dict()`` classmethod (such as :class:`~agentkeep.messages.Message`); pydantic models
(``model_dump`` / ``model_validate``), without agentkeep depending on pydantic.

**Runtime space.** ``session.runtime`` is a plain dict for what this process keeps about the
session besides its state: providers' caches (a compaction index, the loaded history view), the
store version a session store read it at. It is never serialized and starts empty in a restored
session; keys are namespaced by their owner (``"compaction:<source_id>"``,
``"history:<source_id>"``, ``"store:version"``), so providers and stores never reach into each
other's data.

**Tenants.** A session made or saved through a tenant's scoped store
(:class:`~agentkeep.session_stores.IsolationKeyScopedSessionStore`) records that tenant's
:attr:`AgentSession.isolation_key`, and :attr:`AgentSession.storage_key` — what every provider and
store derives its keys from (a history's conversation id, a memory's key) — is then
``{isolation_key}::{session_id}``: two tenants that both call their conversation ``chat-1`` never
share a stored history.

**Payload.** ``session.to_dict()`` gives ``{"type": "session", "version": 1, "session_id": ...,
"service_session_id": ..., "state": {...}}``, plus ``"isolation_key"`` when the session has one.
:meth:`AgentSession.from_dict` refuses a corrupt payload or an unknown version with
:class:`~agentkeep.errors.SessionFormatError`.
"""

from __future__ import annotations

import threading
import types
import typing
import uuid
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, Final, Generic, TypeVar, cast, overload

import msgspec

from ._json_values import encode_json, json_problem, text_problem
from .errors import SessionFormatError, StateTypeError
from .state_types import StateRestoreError, encode_state_value, revive_state_value, state_type_decoder

__all__ = [
    "ISOLATION_SEPARATOR",
    "SESSION_FORMAT_VERSION",
    "AgentSession",
    "ProviderSessionState",
    "ServiceSessionId",
    "StateBag",
    "check_isolation_key",
    "encode_payload",
    "from_builtins",
    "to_builtins",
]

T = TypeVar("T")

ISOLATION_SEPARATOR: Final = "::"
"""What separates a tenant's isolation key from an id in storage keys (``alice::chat-1``)."""

SESSION_FORMAT_VERSION: Final = 1
"""The version written into every session payload; payloads of other versions are refused."""

_MISSING: Final = object()

ServiceSessionId = str | dict[str, Any]
"""A service-side conversation id: a string, or a mapping of ids (a service that names a
conversation by a context and a task)."""


def check_isolation_key(value: object) -> str:
    """``value`` if it can be a tenant's isolation key: a non-empty string without ``"::"`` that
    does not end in ``":"``, so ``{isolation_key}::{id}`` can only be read one way.

    Raises:
        ValueError: It cannot.
    """
    if not isinstance(value, str) or not value or ISOLATION_SEPARATOR in value or value.endswith(":"):
        raise ValueError(
            f"isolation_key must be a non-empty string without {ISOLATION_SEPARATOR!r} that does "
            f"not end in ':', not {value!r}"
        )
    return value


_REFERENCE_VERSIONS: Final = frozenset({"1.0"})
"""Snapshot versions of the reference's file session store, read as its shape."""

_SESSION_FIELDS: Final = frozenset(
    {"type", "version", "session_id", "service_session_id", "isolation_key", "state"}
)


# -- value codec ------------------------------------------------------------------------------


def _enc_hook(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json")
    raise TypeError(f"cannot serialize a {type(value).__name__}: give it to_dict(), or use a dataclass")


def _dec_hook(target: Any, value: Any) -> Any:
    decoder = state_type_decoder(target) if isinstance(target, type) else None
    if decoder is not None:  # a registered type (messages: in the shape they are stored in)
        return decoder(value)
    from_dict = getattr(target, "from_dict", None)
    if callable(from_dict):
        return from_dict(value)
    model_validate = getattr(target, "model_validate", None)
    if callable(model_validate):
        return model_validate(value)
    raise NotImplementedError(f"no way to build a {getattr(target, '__name__', target)} from JSON")


def to_builtins(value: Any) -> Any:
    """``value`` as JSON-compatible builtins (dicts, lists, strings, numbers, booleans, None).

    Raises:
        TypeError: ``value`` holds something with no known JSON form.
    """
    if callable(getattr(value.__class__, "to_dict", None)):
        # A to_dict() contract already yields builtins: walking (and copying) its result again
        # would double the cost of serializing a long history.
        return value.to_dict()
    return msgspec.to_builtins(value, enc_hook=_enc_hook)


def from_builtins(data: Any, typ: Any) -> Any:
    """Build an instance of ``typ`` (any type expression, e.g. ``list[Message]``) from builtins.

    Raises:
        msgspec.ValidationError: ``data`` does not fit ``typ``.
    """
    return msgspec.convert(data, typ, dec_hook=_dec_hook, strict=False)


def _type_name(typ: Any) -> str:
    try:
        return typ.__name__
    except AttributeError:
        return repr(typ)


def _is_instance(value: Any, typ: Any) -> bool:
    origin = typing.get_origin(typ) or typ
    return isinstance(origin, type) and isinstance(value, origin)


def _is_type_expression(value: Any) -> bool:
    """Whether ``value`` names a type (``MyState``, ``list[str]``, ``A | B``) rather than being a
    default value (``{}``, ``[]``, ``0``): what tells ``bag.get(key, type)`` from a dict's
    ``get(key, default)``."""
    return (
        isinstance(value, type)
        or typing.get_origin(value) is not None
        or isinstance(value, types.UnionType | typing.TypeVar)
        or type(value).__module__ == "typing"
    )


class _Entry:
    """One state value: object form, JSON form, or both.

    ``revived``: the object was made from the JSON by an untyped read (registered types restored
    in plain structures), not stored by someone; a typed read may still convert it.
    """

    __slots__ = ("json", "obj", "revived", "typ")

    def __init__(self, obj: Any = _MISSING, typ: Any = None, json: Any = _MISSING) -> None:
        self.obj = obj
        self.typ = typ
        self.json = json
        self.revived = False


class StateBag(MutableMapping[str, Any]):
    """Thread-safe mapping from state key to value, with lazy JSON and typed reads.

    A mutable mapping, so code written for a plain dict works on it (``bag[key]``, ``key in
    bag``, ``bag.setdefault(key, {})``, ``items()``, ``update()``, ``bag == {...}``). Untyped reads
    work on object form; a value that arrived as JSON comes back as JSON, with the objects of
    registered types (:func:`~agentkeep.state_types.register_state_type`, messages) restored in
    it. Typed reads (``bag.get(key, MyState)``) turn JSON into ``MyState`` once and cache it;
    ``bag.get(key, default)`` with a value that is not a type is a dict's ``get``.
    """

    __slots__ = ("_entries", "_lock")

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self._lock = threading.RLock()
        self._entries: dict[str, _Entry] = {}
        if values:
            for key, value in values.items():
                self._entries[key] = _Entry(obj=value)

    @classmethod
    def from_json_values(cls, values: dict[str, Any]) -> StateBag:
        """A bag whose values are held in JSON form (as read from a serialized session)."""
        bag = cls()
        bag._entries = {key: _Entry(json=value) for key, value in values.items()}
        return bag

    # -- typed access ---------------------------------------------------------------------------
    @overload
    def get(self, key: str) -> Any: ...
    @overload
    def get(self, key: str, type: type[T]) -> T | None: ...
    @overload
    def get(self, key: str, type: Any) -> Any: ...
    def get(self, key: str, type: Any = None) -> Any:
        """The value under ``key`` (``None`` if absent), read as ``type`` when given.

        ``type`` may also be a default value, as in a dict's ``get`` (anything that is not a type:
        ``bag.get("notes", [])`` gives ``[]`` when there are none).

        Raises:
            StateTypeError: The stored value cannot be read as ``type``.
        """
        with self._lock:
            entry = self._entries.get(key)
            if type is not None and not _is_type_expression(type):
                return type if entry is None else self._read(key, entry, None)
            if entry is None:
                return None
            return self._read(key, entry, type)

    def get_or_create(self, key: str, type: Any, factory: Callable[[], Any]) -> Any:
        """The value under ``key`` read as ``type``; when absent (or ``None``), ``factory()``'s
        result, stored under ``key`` first. Atomic: concurrent callers get one value.

        Raises:
            StateTypeError: The stored value cannot be read as ``type``.
        """
        with self._lock:
            value = self.get(key, type)
            if value is None:
                value = factory()
                self.set(key, value, type)
            return value

    def try_get(self, key: str, type: Any = None) -> Any:
        """Like :meth:`get`, but ``None`` instead of an error when the value does not fit ``type``."""
        try:
            return self.get(key, type)
        except StateTypeError:
            return None

    def set(self, key: str, value: Any, type: Any = None) -> None:
        """Store ``value`` in object form (its JSON is made only when the session is serialized).

        Args:
            key: The state key.
            value: The value.
            type: The declared type of ``value`` (defaults to its class), used to decide whether a
                later typed read can return the cached object as is.
        """
        if not isinstance(key, str) or not key:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise StateTypeError("state keys must be non-empty strings", key=str(key))
        with self._lock:
            self._entries[key] = _Entry(obj=value, typ=type)

    def _read(self, key: str, entry: _Entry, typ: Any) -> Any:
        obj = entry.obj
        if obj is not _MISSING:
            if typ is None or entry.typ == typ or _is_instance(obj, typ):
                return obj
            if not entry.revived:
                # An object someone stored is never silently converted (and so rewritten) to another type.
                raise StateTypeError(
                    f"state value {key!r} holds a {type(obj).__name__}, which is not a {_type_name(typ)}",
                    key=key,
                )
            entry.json = self._json_of(key, entry)  # read untyped before: convert what it is now
        data = entry.json
        if typ is None:
            try:
                revived = revive_state_value(data, f"state.{key}")
            except StateRestoreError as exc:
                raise StateTypeError(f"state value {key!r} cannot be restored: {exc}", key=key) from exc
            if revived is not data:  # objects of registered types in it: they are the value now
                entry.obj, entry.typ, entry.revived, entry.json = revived, None, True, _MISSING
            return revived  # otherwise plain JSON, the stored form, so in-place edits persist
        try:
            value = from_builtins(data, typ)
        except (msgspec.ValidationError, NotImplementedError, TypeError, ValueError) as exc:
            raise StateTypeError(
                f"state value {key!r} cannot be read as {_type_name(typ)}: {exc}", key=key
            ) from exc
        entry.obj = value
        entry.typ = typ
        entry.revived = False
        entry.json = _MISSING  # the typed object is now the source of truth
        return value

    def _json_of(self, key: str, entry: _Entry) -> Any:
        if entry.obj is _MISSING:
            return entry.json  # checked when the session was restored
        try:
            value = encode_state_value(entry.obj, f"state.{key}")
        except TypeError as exc:
            raise StateTypeError(f"state value {key!r} cannot be serialized: {exc}", key=key) from exc
        except RecursionError as exc:
            raise StateTypeError(
                f"state value {key!r} cannot be serialized: it is nested too deeply, or contains itself",
                key=key,
            ) from exc
        return value  # what JSON cannot carry (NaN, lone surrogates) is refused when encoding

    # -- mapping-style access ---------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                raise KeyError(key)
            return self._read(key, entry, None)

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        with self._lock:
            del self._entries[key]

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def setdefault(self, key: str, default: Any = None) -> Any:
        """The value under ``key``; stores and returns ``default`` when absent."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._entries[key] = _Entry(obj=default)
                return default
            return self._read(key, entry, None)

    def pop(self, key: str, *default: Any) -> Any:
        """Remove ``key`` and return its (untyped) value, or ``default``.

        Raises:
            KeyError: ``key`` is absent and no default is given (as a dict's ``pop``).
        """
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                if default:
                    return default[0]
                raise KeyError(key)
            value = self._read(key, entry, None)
            del self._entries[key]
            return value

    def clear(self) -> None:
        """Remove every value."""
        with self._lock:
            self._entries.clear()

    # -- serialization --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every value in JSON form; objects are serialized now, JSON-only values pass through.

        Raises:
            StateTypeError: A value has no JSON form.
        """
        with self._lock:
            return {key: self._json_of(key, entry) for key, entry in self._entries.items()}

    def __repr__(self) -> str:
        return f"StateBag(keys={list(self._entries)!r})"


def encode_payload(payload: dict[str, Any]) -> bytes:
    """A session payload (:meth:`AgentSession.to_dict`) as JSON bytes, refusing what JSON cannot
    carry faithfully instead of writing it changed (NaN as ``null``) or failing half-way.

    Each state value is encoded once, on its own (so a problem names its key), and the payload
    around them is put together from those bytes.

    Raises:
        StateTypeError: A state value cannot be encoded (the error names its key).
        SessionFormatError: Another field cannot be encoded.
    """
    state: Any = payload.get("state")
    if isinstance(state, dict):
        encoded: dict[str, msgspec.Raw] = {}
        for key, value in cast("dict[str, Any]", state).items():
            try:
                encoded[key] = msgspec.Raw(encode_json(value))
            except ValueError as exc:
                raise StateTypeError(f"state value {key!r} cannot be serialized: {exc}", key=key) from exc
        payload = {**payload, "state": encoded}
    try:
        return encode_json(payload)
    except ValueError as exc:
        raise SessionFormatError(f"session {payload.get('session_id')!r} cannot be encoded: {exc}") from exc


# -- sessions ---------------------------------------------------------------------------------


class AgentSession:
    """A conversation session: an id, a state bag and (for service-kept history) a service id.

    Args:
        session_id: The id; a new UUID when not given.
        service_session_id: The remote conversation id when a service keeps the history.

    Attributes:
        state: The :class:`StateBag` providers keep their per-session data in.
        service_session_id: Remote conversation id (``None`` when history is local).
        isolation_key: The tenant the session belongs to (``None``: no tenant), set by a scoped
            session store; for views over views, the tenants' keys outermost last
            (``"org-7::alice"``). Once set it can only narrow to a sub-tenant. See
            :attr:`storage_key`.
        runtime: This process's caches about the session, keyed by their owner; never serialized
            (see the module docs).
        extra_fields: Top-level payload fields this agentkeep does not know, written back as read.
    """

    __slots__ = (
        "_isolation_key",
        "_service_session_id",
        "_session_id",
        "_state",
        "extra_fields",
        "runtime",
    )

    def __init__(
        self,
        *,
        session_id: str | None = None,
        service_session_id: ServiceSessionId | None = None,
        isolation_key: str | None = None,
    ) -> None:
        if session_id is not None and (not isinstance(session_id, str) or not session_id):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError("session_id must be a non-empty string (or None for a new id)")
        problem = None if session_id is None else text_problem(session_id)
        if problem is not None:
            raise ValueError(f"session_id cannot be stored: {problem}")
        self._session_id = session_id or str(uuid.uuid4())
        self.service_session_id = service_session_id
        self._isolation_key: str | None = None
        if isolation_key is not None:
            self.isolation_key = isolation_key
        self._state = StateBag()
        self.extra_fields: dict[str, Any] | None = None
        self.runtime: dict[str, Any] = {}

    @property
    def state(self) -> StateBag:
        """The :class:`StateBag` providers keep their per-session data in."""
        return self._state

    @state.setter
    def state(self, value: StateBag | Mapping[str, Any]) -> None:
        # A mapping (``session.state = {"key": "value"}``, as the reference allows) becomes the
        # bag's values, in object form.
        self._state = value if isinstance(value, StateBag) else StateBag(dict(value))

    @property
    def service_session_id(self) -> ServiceSessionId | None:
        """The service-side conversation id: a string, or a mapping of ids for services that name
        a conversation by several (``{"context_id": ..., "task_id": ...}``); ``None`` for local
        history."""
        return self._service_session_id

    @service_session_id.setter
    def service_session_id(self, value: ServiceSessionId | Mapping[str, Any] | None) -> None:
        given: object = value
        stored: ServiceSessionId | None = None
        if given is None:
            problem = None
        elif isinstance(given, str):
            stored, problem = given, text_problem(given)
        elif isinstance(given, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            stored = dict(cast("Mapping[str, Any]", given))
            problem = json_problem(stored)
        else:
            problem = f"a {type(given).__name__}, not a string or a mapping"
        if problem is not None:
            raise ValueError(f"service_session_id cannot be stored: {problem}")
        self._service_session_id = stored

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self._session_id

    @property
    def isolation_key(self) -> str | None:
        """The tenant this session belongs to, or ``None``."""
        return self._isolation_key

    @isolation_key.setter
    def isolation_key(self, value: str | None) -> None:
        current = self._isolation_key
        if value == current:
            return
        if current is not None and not (
            isinstance(value, str) and value.startswith(current + ISOLATION_SEPARATOR)
        ):
            raise ValueError(
                f"session {self._session_id} belongs to tenant {current!r}; its isolation key "
                "cannot change (only narrow to a sub-tenant of it)"
            )
        for part in value.split(ISOLATION_SEPARATOR) if isinstance(value, str) else [value]:
            check_isolation_key(part)
        self._isolation_key = value

    @property
    def storage_key(self) -> str:
        """The id storage keys derive from: :attr:`session_id`, scoped to the tenant when the session
        has an :attr:`isolation_key` (``{isolation_key}::{session_id}``).

        A history provider's conversation id defaults to it, so the stored history of one tenant's
        ``chat-1`` is never another's.
        """
        key = self._isolation_key
        return self._session_id if key is None else f"{key}{ISOLATION_SEPARATOR}{self._session_id}"

    def to_dict(self) -> dict[str, Any]:
        """The versioned payload for storage; see the module docs for its shape."""
        payload: dict[str, Any] = {
            "type": "session",
            "version": SESSION_FORMAT_VERSION,
            "session_id": self._session_id,
            "service_session_id": self.service_session_id,
            "state": self.state.to_dict(),
        }
        if self._isolation_key is not None:
            payload["isolation_key"] = self._isolation_key
        if self.extra_fields:
            for key, value in self.extra_fields.items():
                payload.setdefault(key, value)
        return payload

    @classmethod
    def from_dict(cls, data: Any, *, checked: bool = False) -> AgentSession:
        """Restore a session from :meth:`to_dict` output; state values stay JSON until read.

        The reference Python edition's payloads (no ``"version"``, or its file store's
        ``"1.0"``) are read as they are: a missing ``session_id`` gets a new one, a missing
        ``state`` is empty, and the messages in its state come back as messages on an untyped
        read (see :mod:`agentkeep.state_types`).

        Args:
            data: The payload.
            checked: The caller knows every value in ``data`` has a faithful JSON form (it was
                just decoded from JSON text, as :meth:`from_json` does), so the check is skipped.

        Raises:
            SessionFormatError: The payload is not an object, misses fields, has fields of the
                wrong type, holds values that cannot be written back (lone surrogates, NaN), or
                has a version other than :data:`SESSION_FORMAT_VERSION` (or the reference's).
        """
        if not isinstance(data, dict):
            raise SessionFormatError(f"a session payload must be an object, not {type(data).__name__}")
        payload = cast("dict[str, Any]", data)
        version: Any = payload.get("version", _MISSING)
        # The reference writes no version (its file store writes "1.0"): its shape is read as it is.
        reference = version is _MISSING or (isinstance(version, str) and version in _REFERENCE_VERSIONS)
        if not reference and (type(version) is not int or version != SESSION_FORMAT_VERSION):
            raise SessionFormatError(
                f"session payload version {version!r} is not supported (this agentkeep reads "
                f"version {SESSION_FORMAT_VERSION}, and the reference's payloads)"
            )
        kind = payload.get("type", "session")
        if kind != "session":
            raise SessionFormatError(f"payload 'type' is {kind!r}, expected 'session'")
        session_id = payload.get("session_id")
        if session_id is None and version is _MISSING:
            session_id = str(uuid.uuid4())  # the reference makes one, as its constructor does
        if not isinstance(session_id, str) or not session_id:
            raise SessionFormatError("session payload 'session_id' must be a non-empty string")
        service_id = payload.get("service_session_id")
        if service_id is not None and not isinstance(service_id, str | dict):
            raise SessionFormatError(
                "session payload 'service_session_id' must be a string, an object or null"
            )
        isolation_key = payload.get("isolation_key")
        if isolation_key is not None and not isinstance(isolation_key, str):
            raise SessionFormatError("session payload 'isolation_key' must be a string or absent")
        state = payload.get("state", {})
        if not isinstance(state, dict):
            raise SessionFormatError("session payload 'state' must be an object")
        try:
            session = cls(
                session_id=session_id,
                service_session_id=cast("ServiceSessionId | None", service_id),
                isolation_key=isolation_key,
            )
        except ValueError as exc:
            raise SessionFormatError(f"session payload: {exc}") from exc
        unknown = {k: v for k, v in payload.items() if k not in _SESSION_FIELDS}
        if checked is not True:  # the payload did not come from JSON that cannot hold bad values
            problem = json_problem([state, unknown])
            if problem is not None:
                raise SessionFormatError(f"session payload cannot be stored again: {problem}")
        session.state = StateBag.from_json_values(cast("dict[str, Any]", state))
        session.extra_fields = unknown or None  # written back unchanged by to_dict()
        return session

    def to_json(self) -> bytes:
        """The payload as JSON bytes.

        Raises:
            StateTypeError: A state value has no JSON form, or one JSON cannot carry faithfully
                (NaN, an infinity, a lone surrogate, a structure that contains itself).
            SessionFormatError: Another field set after construction cannot be encoded.
        """
        return encode_payload(self.to_dict())

    @classmethod
    def from_json(cls, text: str | bytes) -> AgentSession:
        """Restore a session from JSON text.

        Raises:
            SessionFormatError: Invalid JSON, or an invalid payload.
        """
        try:
            data = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            raise SessionFormatError(f"session payload is not valid JSON: {exc}") from exc
        except RecursionError as exc:
            raise SessionFormatError("session payload is not valid JSON: nested too deeply") from exc
        except UnicodeError as exc:
            raise SessionFormatError(f"session payload is not valid UTF-8 text: {exc}") from exc
        # Decoded JSON can be written back as it is: JSON has no NaN and no objects of other
        # types, and the decoder refuses escaped lone surrogates.
        return cls.from_dict(data, checked=True)

    def __repr__(self) -> str:
        return (
            f"AgentSession(session_id={self._session_id!r}, service_session_id={self.service_session_id!r}, "
            + (f"isolation_key={self._isolation_key!r}, " if self._isolation_key is not None else "")
            + f"state_keys={list(self.state)!r})"
        )


class ProviderSessionState(Generic[T]):
    """Typed access to one provider's value in a session's state bag.

    Args:
        state_initializer: Makes the initial value when the session has none yet: a callable
            taking the session (or ``None``), or a class, which is called without arguments.
        state_key: The state-bag key; must not clash with another provider of the same agent.
        state_type: The value's type for typed reads after deserialization. When omitted it is
            taken from the subscription (``ProviderSessionState[MyState](...)``) or, if
            ``state_initializer`` is a class, from that class.

    Example:
        ```python
        todo_state = ProviderSessionState[list[str]](lambda _: [], "todo")
        items = todo_state.get_or_initialize_state(session)
        items.append("buy milk")
        todo_state.save_state(session, items)
        ```
    """

    def __init__(
        self,
        state_initializer: Callable[[AgentSession | None], T] | type[T],
        state_key: str,
        *,
        state_type: Any = None,
    ) -> None:
        if not state_key:
            raise ValueError("state_key must be a non-empty string")
        self.state_initializer = state_initializer
        self.state_key = state_key
        self._state_type = state_type

    @property
    def state_type(self) -> Any:
        """The type values are read as (``None``: untyped JSON)."""
        if self._state_type is None:
            orig = getattr(self, "__orig_class__", None)
            args = typing.get_args(orig) if orig is not None else ()
            if args:
                self._state_type = args[0]
            elif isinstance(self.state_initializer, type):
                self._state_type = self.state_initializer
        return self._state_type

    def get_or_initialize_state(self, session: AgentSession | None) -> T:
        """The session's value; initialized (and stored) when absent. ``session=None`` gives a fresh value.

        Raises:
            StateTypeError: The stored value cannot be read as :attr:`state_type`.
        """
        if session is None:
            return self._initialize(None)
        value = session.state.get_or_create(
            self.state_key, self.state_type, lambda: self._initialize(session)
        )
        return cast(T, value)

    def _initialize(self, session: AgentSession | None) -> T:
        if isinstance(self.state_initializer, type):  # ProviderSessionState(MyState, "key")
            return cast(T, self.state_initializer())
        return self.state_initializer(session)

    def save_state(self, session: AgentSession | None, state: T) -> None:
        """Store ``state`` as the session's value."""
        if session is not None:
            session.state.set(self.state_key, state, self.state_type)
