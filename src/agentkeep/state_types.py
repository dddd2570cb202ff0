"""Objects in session state: the type registry and the codec of state values.

A state value may be any JSON-compatible structure, a typed object a provider reads back with a
type (``bag.get(key, MyState)``), or — the reference Python edition's way — plain dicts and lists
holding objects of *registered* types, which come back as those objects from an untyped read
(``session.state["notes"]["items"][0]`` is a ``Note`` again after a round trip).

* :func:`register_state_type` adds a class under a type id (explicit; else the class's
  ``_get_type_identifier()``, its ``TYPE`` constant, or its lowercased name). Its instances are
  written as ``{"type": <id>, ...}`` by its encoder (default: ``to_dict()``, or ``model_dump()``
  for a pydantic model) and read back by its decoder (default: ``from_dict()`` /
  ``model_validate()``). :class:`~agentkeep.messages.Message` is registered as ``"message"``
  in the framework's message shape (:mod:`agentkeep.maf.sessions`), so a session holding messages
  in plain state loads in the framework too; only a dict with that shape's ``role`` and
  ``contents`` list is read as one (other formats tag their items ``"message"`` too).
* :func:`encode_state_value` walks a value: registered objects are tagged, other objects with
  ``to_dict()`` give its result, dataclasses, enums and the like go through msgspec; a pydantic
  model of an unregistered type is registered on the spot with a ``DeprecationWarning`` (a new
  process would not know it). What has no JSON form raises ``TypeError`` naming where it is
  (``state.notes[0].value``).
* :func:`revive_state_value` walks JSON top-down: a dict whose ``"type"`` is a registered id
  becomes that object (its own fields are left to its decoder, so a message's ``{"type": "text"}``
  contents never turn into some other ``"text"`` type); a dict of an unknown type stays a dict.
  It returns its input unchanged (the same object) when there is nothing to revive.

The registry is process-wide, as type ids are written into stored sessions.
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Final, cast

import msgspec

__all__ = [
    "StateRestoreError",
    "encode_state_value",
    "register_state_type",
    "registered_state_type",
    "revive_state_value",
    "state_type_decoder",
]

StateEncoder = Callable[[Any], Mapping[str, Any]]
StateDecoder = Callable[[Mapping[str, Any]], Any]

_SCALARS: Final = (str, int, float, bool, type(None))


class StateRestoreError(ValueError):
    """A registered type's decoder refused its stored form (``path`` says where)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


@dataclasses.dataclass(frozen=True, slots=True)
class _Registration:
    cls: type[Any]
    type_id: str
    encoder: StateEncoder
    decoder: StateDecoder
    custom: bool
    matches: Callable[[Mapping[str, Any]], bool] | None = None
    """For a common tag: whether a dict with it really is this type's (else it stays a dict)."""


def _is_reference_message(data: Mapping[str, Any]) -> bool:
    # "message" also tags other formats' items (an OpenAI Responses output item has "content"):
    # only a dict with the reference's "contents" list and a role is a message.
    return isinstance(data.get("contents"), list) and isinstance(data.get("role"), str)


_lock = threading.Lock()
_by_id: dict[str, _Registration] = {}
_by_class: dict[type[Any], _Registration] = {}


def _resolve_type_id(cls: type[Any], type_id: str | None) -> str:
    if type_id is not None:
        resolved: object = type_id
    elif callable(identify := getattr(cls, "_get_type_identifier", None)):
        resolved = identify()
    elif isinstance(constant := getattr(cls, "TYPE", None), str):
        resolved = constant
    else:
        resolved = cls.__name__.lower()
    if not isinstance(resolved, str) or not resolved:
        raise ValueError(f"the state type id of {cls.__name__} must be a non-empty string, not {resolved!r}")
    return resolved


def _is_pydantic_model(cls: type[Any]) -> bool:
    return callable(getattr(cls, "model_dump", None)) and callable(getattr(cls, "model_validate", None))


def _default_encoder(cls: type[Any]) -> StateEncoder:
    if callable(getattr(cls, "to_dict", None)):
        return lambda value: value.to_dict()
    if _is_pydantic_model(cls):
        return lambda value: value.model_dump(mode="json")
    raise ValueError(
        f"state type {cls.__name__} has no to_dict()/from_dict() and is not a pydantic model: "
        "give register_state_type() an encoder and a decoder"
    )


def _default_decoder(cls: type[Any]) -> StateDecoder:
    from_dict = getattr(cls, "from_dict", None)
    if callable(from_dict):
        return cast(StateDecoder, from_dict)
    if _is_pydantic_model(cls):
        return cast(StateDecoder, cls.model_validate)  # pyright: ignore[reportAttributeAccessIssue]
    raise ValueError(
        f"state type {cls.__name__} has no to_dict()/from_dict() and is not a pydantic model: "
        "give register_state_type() an encoder and a decoder"
    )


def register_state_type(
    cls: type[Any],
    *,
    type_id: str | None = None,
    encoder: StateEncoder | None = None,
    decoder: StateDecoder | None = None,
) -> None:
    """Let session state hold instances of ``cls`` anywhere, and restore them on read.

    Call it where the class is defined, at import time, so a process that loads a stored session
    knows the type before it reads it. Registering the same class again the same way is a no-op.

    Args:
        cls: The class.
        type_id: The stable id written as the value's ``"type"``; default the class's
            ``_get_type_identifier()``, else its ``TYPE`` constant, else its lowercased name.
            Ids are process-wide: a package should qualify its ids.
        encoder: Instance → mapping (default ``to_dict()`` or a pydantic ``model_dump``).
        decoder: Mapping → instance (default ``from_dict()`` or ``model_validate``). Give both
            callbacks or neither.

    Raises:
        ValueError: The id is taken by another class, the class is registered under another id or
            other callbacks, only one callback is given, or the class has no default codec.
    """
    if (encoder is None) != (decoder is None):
        raise ValueError("give register_state_type() both an encoder and a decoder, or neither")
    resolved = _resolve_type_id(cls, type_id)
    with _lock:
        known = _by_class.get(cls)
        if known is not None:
            if known.type_id != resolved:
                raise ValueError(f"state type {cls.__name__} is already registered as {known.type_id!r}")
            if encoder is not None and (known.encoder is not encoder or known.decoder is not decoder):
                raise ValueError(f"state type {cls.__name__} is already registered with other callbacks")
            return
        taken = _by_id.get(resolved)
        if taken is not None:
            raise ValueError(f"state type id {resolved!r} is already registered for {taken.cls.__name__}")
        registration = _Registration(
            cls,
            resolved,
            encoder if encoder is not None else _default_encoder(cls),
            decoder if decoder is not None else _default_decoder(cls),
            custom=encoder is not None,
        )
        _by_id[resolved] = registration
        _by_class[cls] = registration


def state_type_decoder(cls: type[Any]) -> StateDecoder | None:
    """The decoder registered for exactly ``cls``, or ``None``."""
    _ensure_builtins()
    found = _by_class.get(cls)
    return found.decoder if found is not None else None


def registered_state_type(type_id: str) -> type[Any] | None:
    """The class registered under ``type_id``, or ``None``."""
    _ensure_builtins()
    found = _by_id.get(type_id)
    return found.cls if found is not None else None


_builtins_ready = False


def _ensure_builtins() -> None:
    """Register agentkeep's own types (on first use: the message codec lives in a higher layer)."""
    global _builtins_ready
    if _builtins_ready:
        return
    from .maf.sessions import message_from_maf, message_to_maf
    from .messages import Message

    with _lock:
        if not _builtins_ready:
            registration = _Registration(
                Message,
                "message",
                message_to_maf,
                message_from_maf,
                custom=True,
                matches=_is_reference_message,
            )
            _by_id.setdefault("message", registration)
            _by_class.setdefault(Message, registration)
            _builtins_ready = True


def _registration_of(cls: type[Any]) -> _Registration | None:
    """The registration of ``cls`` or of its nearest registered base (a ``Message`` subclass is
    written as a message)."""
    for klass in cls.__mro__[:-1]:
        found = _by_class.get(klass)
        if found is not None:
            return found
    return None


# -- writing --------------------------------------------------------------------------------------


def encode_state_value(value: Any, path: str = "state") -> Any:
    """``value`` as JSON-compatible builtins, registered objects tagged with their type id.

    Raises:
        TypeError: Something in ``value`` has no JSON form (the message names where).
    """
    _ensure_builtins()
    return _encode(value, path)


def _encode(value: object, path: str) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return {key: _encode(item, f"{path}.{key}") for key, item in cast("dict[Any, Any]", value).items()}
    if kind is list or kind is tuple:
        return [_encode(item, f"{path}[{i}]") for i, item in enumerate(cast("list[Any]", value))]
    registration = _registration_of(kind)
    if registration is None and _is_pydantic_model(kind):
        registration = _register_on_the_fly(kind, path)
    if registration is not None:
        encoded = dict(registration.encoder(value))
        encoded.setdefault("type", registration.type_id)
        return encoded
    if callable(getattr(kind, "to_dict", None)):
        # Its own builtins: not walked again (a long history stays one call).
        return cast(Any, value).to_dict()
    if isinstance(value, dict):
        return _encode(dict(cast("dict[Any, Any]", value)), path)
    if isinstance(value, list | tuple):
        return _encode(list(cast("list[Any]", value)), path)
    if isinstance(value, Enum) or dataclasses.is_dataclass(value) or isinstance(value, msgspec.Struct):
        try:
            return msgspec.to_builtins(value, enc_hook=lambda inner: _encode(inner, path))
        except TypeError as exc:
            raise TypeError(f"{path}: {exc}") from exc
    try:
        return msgspec.to_builtins(value)  # datetimes, UUIDs, sets, ...
    except TypeError:
        raise TypeError(
            f"{path} holds a {kind.__name__}, which has no JSON form: give it to_dict() and "
            "from_dict() and register it with register_state_type(), or use a dataclass"
        ) from None


def _register_on_the_fly(cls: type[Any], path: str) -> _Registration | None:
    type_id = _resolve_type_id(cls, None)
    try:
        register_state_type(cls)
    except ValueError:
        return None  # its id is another class's: written without a tag (it stays a dict on read)
    warnings.warn(
        f"{path} is a {cls.__name__}, a pydantic model not registered as a state type: registered "
        f"now as {type_id!r}, for this process only. Cold-start deserialization (another process "
        f"reading this session) restores it only after register_state_type({cls.__name__}) runs "
        "at import time; call it where the class is defined.",
        DeprecationWarning,
        stacklevel=4,
    )
    return _by_class.get(cls)


# -- reading --------------------------------------------------------------------------------------


def revive_state_value(value: Any, path: str = "state") -> Any:
    """JSON with registered objects restored (the same object when there are none).

    Raises:
        StateRestoreError: A registered type's decoder failed on its stored form.
    """
    _ensure_builtins()
    return _revive(value, path)


def _revive(value: object, path: str) -> Any:
    kind = type(value)
    if kind is dict:
        data = cast("dict[str, Any]", value)
        tag = data.get("type")
        if type(tag) is str:
            registration = _by_id.get(tag)
            if registration is not None and (registration.matches is None or registration.matches(data)):
                try:
                    return registration.decoder(data)
                except (ValueError, TypeError, KeyError, AttributeError) as exc:
                    raise StateRestoreError(
                        f"{path}: a stored {tag!r} ({registration.cls.__name__}) cannot be read: {exc}",
                        path=path,
                    ) from exc
        changed: dict[str, Any] | None = None
        for key, item in data.items():
            revived = _revive(item, f"{path}.{key}")
            if revived is not item:
                if changed is None:
                    changed = dict(data)
                changed[key] = revived
        return data if changed is None else changed
    if kind is list:
        items = cast("list[Any]", value)
        out: list[Any] | None = None
        for index, item in enumerate(items):
            revived = _revive(item, f"{path}[{index}]")
            if revived is not item:
                if out is None:
                    out = list(items)
                out[index] = revived
        return items if out is None else out
    return value
