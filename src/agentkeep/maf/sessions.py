"""Agent Framework sessions in and out: ``AgentSession.to_dict()`` of ``agent-framework-core``
(1.23) to an agentkeep session with its history, and back.

**What maps to what.** A framework session is ``{"type": "session", "session_id",
"service_session_id", "state"}`` (a file-store snapshot adds ``"version": "1.0"``); its in-memory
history is ``state[<source_id>]["messages"]`` (``"in_memory"`` by default), each message
``{"type": "message", "role", "contents", "author_name"?, "message_id"?,
"additional_properties"}``. Importing gives the history as agentkeep messages and every other
state value unchanged (opaque JSON) in an :class:`~agentkeep.sessions.AgentSession`; exporting
writes the same layout.

**Lossless for what both know, opaque for the rest.** Contents agentkeep models keep their
fields, fields it does not model (``hosted``, ``id``, ``items``, ``annotations``, ...) ride along,
and a content agentkeep cannot hold exactly (an unknown kind, reasoning with only encrypted data)
is kept whole as :class:`~agentkeep.contents.UnknownContent` and written back as it was. The
documented differences of a round trip framework → agentkeep → framework:

* every message gains a ``message_id`` (the framework's ids are kept; agentkeep needs one per
  message) and its creation time, stored as ``additional_properties["agentkeep.created_at"]``
  because the framework's messages have no time field (and reject unknown fields);
* a ``developer`` message is a ``system`` message in agentkeep and a ``developer`` one again on
  the way out (``additional_properties["agentkeep.role"]`` remembers it);
* agentkeep's tenant (isolation key) is not written: the framework has no such field.

agentkeep → framework → agentkeep gives the messages back with their ids and times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast, get_args

from .._json_values import json_problem
from ..contents import (
    OPAQUE_CONTENT_TYPE,
    Content,
    DataContent,
    ErrorContent,
    FunctionCallContent,
    FunctionResultContent,
    TextContent,
    TextReasoningContent,
    UnknownContent,
    UriContent,
    UsageContent,
    content_from_dict,
)
from ..errors import MessageFormatError, SessionFormatError
from ..messages import Message, Role
from ..sessions import SESSION_FORMAT_VERSION, AgentSession

__all__ = [
    "CREATED_AT_PROPERTY",
    "MAF_HISTORY_SOURCE_ID",
    "ROLE_PROPERTY",
    "MafSession",
    "message_from_maf",
    "message_to_maf",
    "session_from_maf",
    "session_to_maf",
]

MAF_HISTORY_SOURCE_ID: Final = "in_memory"
"""Where the framework's ``InMemoryHistoryProvider`` keeps a session's messages by default."""

CREATED_AT_PROPERTY: Final = "agentkeep.created_at"
"""The ``additional_properties`` key that carries a message's creation time in the framework."""

ROLE_PROPERTY: Final = "agentkeep.role"
"""The ``additional_properties`` key that remembers a framework role agentkeep maps to another."""

_EXTRA_FIELDS_PROPERTY: Final = "agentkeep.extra_fields"
_SNAPSHOT_VERSIONS: Final = frozenset({"1.0"})
_MAPPED_ROLES: Final = {"developer": "system"}
_ROLES: Final = frozenset(get_args(Role))
_MESSAGE_FIELDS: Final = frozenset(
    {"type", "role", "contents", "author_name", "message_id", "additional_properties"}
)
_WIRE_FIELDS: Final = _MESSAGE_FIELDS | {"created_at"}
_MODELED_FIELDS: Final[dict[str, frozenset[str]]] = {
    kind.type: kind.FIELDS | frozenset({"error_details"} if kind is ErrorContent else ())
    for kind in (
        TextContent,
        TextReasoningContent,
        FunctionCallContent,
        FunctionResultContent,
        DataContent,
        UriContent,
        UsageContent,
        ErrorContent,
    )
}


@dataclass(slots=True)
class MafSession:
    """A framework session read into agentkeep.

    Attributes:
        session: The session: its id, service id and every state value except the history.
        messages: The history, oldest first.
        history_source_id: The state key the history was read from (``None``: there was none).
    """

    session: AgentSession
    messages: list[Message] = field(default_factory=list[Message])
    history_source_id: str | None = None

    def in_memory_session(self, *, source_id: str = MAF_HISTORY_SOURCE_ID) -> AgentSession:
        """A copy of :attr:`session` with :attr:`messages` as the history of an
        :class:`~agentkeep.providers.InMemoryHistoryProvider` with ``source_id`` (what an
        agent with in-memory history continues)."""
        payload = self.session.to_dict()
        state = dict(payload["state"])
        holder = state.get(source_id)
        state[source_id] = {
            **(cast("dict[str, Any]", holder) if isinstance(holder, dict) else {}),
            "messages": [m.to_dict() for m in self.messages],
        }
        return AgentSession.from_dict({**payload, "state": state})


# -- messages --------------------------------------------------------------------------------------


def message_from_maf(data: Any, *, path: str = "message") -> Message:
    """A framework message dict as an agentkeep message.

    Raises:
        MessageFormatError: Not a framework message (the error names where).
    """
    try:
        return _message_from_maf(data, path)
    except RecursionError as exc:
        raise MessageFormatError("the message is nested too deeply", path=path) from exc


def _message_from_maf(data: Any, path: str) -> Message:
    if not isinstance(data, dict):
        raise MessageFormatError(f"a message must be an object, not {type(data).__name__}", path=path)
    raw = cast("dict[str, Any]", data)
    kind = raw.get("type", "message")
    if kind != "message":
        raise MessageFormatError(f"'type' is {kind!r}, expected 'message'", path=f"{path}.type")
    given: Any = raw.get("additional_properties") or {}
    if not isinstance(given, dict):
        raise MessageFormatError(
            "'additional_properties' must be an object", path=f"{path}.additional_properties"
        )
    properties = dict(cast("dict[str, Any]", given))
    properties.pop(ROLE_PROPERTY, None)  # only a mapped role below sets it
    role = raw.get("role")
    if not isinstance(role, str):
        raise MessageFormatError("'role' must be a string", path=f"{path}.role")
    if role in _MAPPED_ROLES:
        properties[ROLE_PROPERTY] = role
        role = _MAPPED_ROLES[role]
    elif role not in _ROLES:
        raise MessageFormatError(
            f"role {role!r} has no agentkeep counterpart (known: {sorted(_ROLES | _MAPPED_ROLES.keys())})",
            path=f"{path}.role",
        )
    created = properties.pop(CREATED_AT_PROPERTY, None)
    extra: Any = properties.pop(_EXTRA_FIELDS_PROPERTY, None)
    if extra is not None and not isinstance(extra, dict):
        raise MessageFormatError(
            f"'{_EXTRA_FIELDS_PROPERTY}' must be an object", path=f"{path}.additional_properties"
        )
    contents_data = raw.get("contents", [])
    if not isinstance(contents_data, list):
        raise MessageFormatError("'contents' must be a list", path=f"{path}.contents")
    contents = [
        _content_from_maf(item, f"{path}.contents[{index}]")
        for index, item in enumerate(cast("list[Any]", contents_data))
    ]
    wire: dict[str, Any] = {"role": role, "contents": []}
    for key in ("author_name", "message_id"):
        if raw.get(key) is not None:
            wire[key] = raw[key]
    if created is not None:
        wire["created_at"] = created
    if properties:
        wire["additional_properties"] = properties
    unknown = {key: value for key, value in raw.items() if key not in _WIRE_FIELDS}
    if extra:  # agentkeep's own unknown fields, never one of the fields checked above
        unknown.update({k: v for k, v in cast("dict[str, Any]", extra).items() if k not in _WIRE_FIELDS})
    wire.update(unknown)
    message = Message.from_dict(wire, path=path)
    message.contents = contents
    return message


def _content_from_maf(item: Any, path: str) -> Content:
    """A framework content: typed when agentkeep's type holds it exactly, else kept whole."""
    if isinstance(item, str):  # the framework reads a plain string as text
        return TextContent(item)
    if not isinstance(item, dict):
        raise MessageFormatError(f"a content must be an object, not {type(item).__name__}", path=path)
    raw = cast("dict[str, Any]", item)
    kind = raw.get("type")
    if not isinstance(kind, str) or not kind:
        raise MessageFormatError("a content needs a non-empty string 'type'", path=f"{path}.type")
    problem = json_problem(raw)
    if problem is not None:
        raise MessageFormatError(f"a content cannot be stored: {problem}", path=path)
    # A null in a field agentkeep models means "not given" (agentkeep leaves such fields out, as
    # the framework itself does); so do empty properties.
    modeled = _MODELED_FIELDS.get(kind, frozenset())
    wanted = {
        k: v
        for k, v in raw.items()
        if not (v is None and k in modeled) and (k != "additional_properties" or v)
    }
    if kind == "error" and "error_details" in wanted and "details" not in wanted:
        wanted["details"] = wanted.pop("error_details")  # the framework's name for the field
    try:
        content = content_from_dict(wanted, path=path, checked=True)
    except MessageFormatError:
        content = None
    # A kind agentkeep does not know, or one it models but cannot hold exactly (reasoning with
    # only encrypted data, usage with provider-specific counts), is kept whole (the empty
    # properties the framework writes on every content are written back on the way out).
    if content is None or isinstance(content, UnknownContent) or content.to_dict() != wanted:
        return UnknownContent({k: v for k, v in raw.items() if k != "additional_properties" or v != {}})
    return content


def message_to_maf(message: Message) -> dict[str, Any]:
    """An agentkeep message as a framework message dict (``Message.from_dict`` loads it)."""
    wire = message.to_dict()
    properties: dict[str, Any] = dict(wire.pop("additional_properties", None) or {})
    created = wire.pop("created_at", None)
    if created is not None:
        properties[CREATED_AT_PROPERTY] = created
    role = wire["role"]
    if properties.pop(ROLE_PROPERTY, None) == "developer" and role == "system":
        role = "developer"
    extra = {key: wire.pop(key) for key in list(wire) if key not in _MESSAGE_FIELDS}
    if extra:
        properties[_EXTRA_FIELDS_PROPERTY] = extra
    out: dict[str, Any] = {
        "type": "message",
        "role": role,
        "contents": [_content_to_maf(c) for c in wire["contents"]],
    }
    for key in ("author_name", "message_id"):
        if key in wire:
            out[key] = wire[key]
    out["additional_properties"] = properties
    return out


def _content_to_maf(content: dict[str, Any]) -> dict[str, Any]:
    if content.get("type") == OPAQUE_CONTENT_TYPE:  # kept whole (a known kind held opaque): as it was
        content = cast("dict[str, Any]", content["content"])
    if content.get("type") == "error" and "details" in content:
        content = {("error_details" if k == "details" else k): v for k, v in content.items()}
    if "additional_properties" in content:
        return content
    return {**content, "additional_properties": {}}


# -- sessions --------------------------------------------------------------------------------------


def session_from_maf(data: Any, *, history_source_id: str | None = None) -> MafSession:
    """Read a framework session (``AgentSession.to_dict()``, or a file-store snapshot).

    Args:
        data: The parsed JSON.
        history_source_id: The state key holding the history; by default ``"in_memory"``, or the
            only state value that holds a ``messages`` list.

    Raises:
        SessionFormatError: Not a framework session, an unknown snapshot version, several
            histories and none chosen, or a message that cannot be read (named by its path).
    """
    try:
        return _session_from_maf(data, history_source_id)
    except RecursionError as exc:
        raise SessionFormatError("the Agent Framework session is nested too deeply") from exc


def _session_from_maf(data: Any, history_source_id: str | None) -> MafSession:
    """:func:`session_from_maf` without the guard against deep nesting."""
    if not isinstance(data, dict):
        raise SessionFormatError(f"an Agent Framework session must be a JSON object, not {_kind(data)}")
    raw = cast("dict[str, Any]", data)
    if "format" in raw and "session_id" not in raw:
        raise SessionFormatError(
            f"not an Agent Framework session: it has format {raw['format']!r} (an agentkeep export?)"
        )
    kind = raw.get("type", "session")
    if kind != "session":
        raise SessionFormatError(f"not an Agent Framework session: 'type' is {kind!r}, expected 'session'")
    version = raw.get("version")
    if version is not None and (not isinstance(version, str) or version not in _SNAPSHOT_VERSIONS):
        raise SessionFormatError(
            f"Agent Framework session version {version!r} is not supported "
            f"(known: {sorted(_SNAPSHOT_VERSIONS)})"
        )
    session_id = raw.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        raise SessionFormatError("not an Agent Framework session: 'session_id' must be a non-empty string")
    service_id = raw.get("service_session_id")
    extra: dict[str, Any] = {}
    if isinstance(service_id, dict):  # the framework's structured service ids ride along
        extra["maf_service_session_id"] = service_id
        service_id = None
    elif service_id is not None and (not isinstance(service_id, str) or not service_id):
        raise SessionFormatError("'service_session_id' must be a string, an object or null")
    state = raw.get("state", {})
    if not isinstance(state, dict):
        raise SessionFormatError("'state' must be an object")
    state = dict(cast("dict[str, Any]", state))
    source = _history_source(state, history_source_id)
    messages: list[Message] = []
    if source is not None:
        holder = dict(cast("dict[str, Any]", state[source]))
        items = cast("list[Any]", holder.pop("messages"))
        try:
            messages = [
                _message_from_maf(item, f"state.{source}.messages[{index}]")
                for index, item in enumerate(items)
            ]
        except MessageFormatError as exc:
            raise SessionFormatError(f"session {session_id}: {exc}") from exc
        if holder:
            state[source] = holder
        else:
            del state[source]
    payload: dict[str, Any] = {
        "type": "session",
        "version": SESSION_FORMAT_VERSION,
        "session_id": session_id,
        "service_session_id": service_id,
        "state": state,
        **extra,
    }
    session = AgentSession.from_dict(payload)
    return MafSession(session, messages, source)


def _history_source(state: Mapping[str, Any], wanted: str | None) -> str | None:
    candidates = [
        key
        for key, value in state.items()
        if isinstance(value, dict) and isinstance(cast("dict[str, Any]", value).get("messages"), list)
    ]
    if wanted is not None:
        if wanted not in candidates:
            raise SessionFormatError(
                f"the session's state holds no history under {wanted!r} (found: {candidates})"
            )
        return wanted
    if MAF_HISTORY_SOURCE_ID in candidates:
        return MAF_HISTORY_SOURCE_ID
    if len(candidates) > 1:
        raise SessionFormatError(
            f"the session holds several histories {candidates}: choose one by its source id"
        )
    return candidates[0] if candidates else None


def session_to_maf(
    session: AgentSession,
    messages: Sequence[Message] | None = None,
    *,
    history_source_id: str = MAF_HISTORY_SOURCE_ID,
) -> dict[str, Any]:
    """A framework session (``AgentSession.from_dict`` loads it) with ``messages`` as its
    in-memory history under ``history_source_id`` and the session's other state as it is.

    Args:
        session: The session.
        messages: The history (e.g. read from a message store); ``None``: the session's own
            in-memory history under ``history_source_id``.
        history_source_id: Where the framework's in-memory history provider finds it.

    Raises:
        SessionFormatError: A state value cannot be serialized, or the session's own history
            cannot be read.
    """
    payload = session.to_dict()
    state: dict[str, Any] = dict(payload.get("state") or {})
    holder = state.get(history_source_id)
    holder = dict(cast("dict[str, Any]", holder)) if isinstance(holder, dict) else {}
    if messages is None:
        own: Any = holder.get("messages", [])
        if not isinstance(own, list):
            raise SessionFormatError(
                f"session {session.session_id}: state.{history_source_id}.messages is not a list"
            )
        try:
            messages = [
                Message.from_dict(item, path=f"state.{history_source_id}.messages[{index}]")
                for index, item in enumerate(cast("list[Any]", own))
            ]
        except MessageFormatError as exc:
            raise SessionFormatError(f"session {session.session_id}: {exc}") from exc
    if messages or holder or history_source_id in state:  # a session without history stays without
        holder["messages"] = [message_to_maf(m) for m in messages]
        state[history_source_id] = holder
    service_id = payload.get("service_session_id")
    structured = payload.get("maf_service_session_id")
    return {
        "type": "session",
        "session_id": payload["session_id"],
        "service_session_id": structured
        if service_id is None and isinstance(structured, dict)
        else service_id,
        "state": state,
    }


def _kind(value: Any) -> str:
    return "a list" if isinstance(value, list) else type(value).__name__
