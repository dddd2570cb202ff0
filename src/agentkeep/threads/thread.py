"""The earlier API's conversation handle: :class:`AgentThread`, a thin wrapper over an
:class:`~agentkeep.sessions.AgentSession`.

A thread *is* a session plus the earlier attributes: ``service_thread_id`` is the session's
``service_session_id``; ``message_store`` is the thread's
:class:`~agentkeep.threads.ChatMessageStoreProtocol` (kept in the session's runtime space, where
the agent's :class:`~agentkeep.threads.MessageStoreHistoryProvider` finds it);
``context_provider`` holds the agent's context providers (``thread.context_provider.providers``).

**Serialized form** (``await thread.serialize()``)::

    {"type": "agent_thread_state", "version": 1,
     "service_thread_id": null,
     "chat_message_store_state": <the store's serialize_state()>,
     "context_provider_state": {"<source_id>": <an earlier-shape provider's serialize()>},
     "session": <the session's payload: the state of today's providers>}

``context_provider_state`` records what earlier-shape providers report; they keep their data on
themselves, shared by all threads of their agent, so restoring it (e.g. through the provider's
constructor, as seed 004 suggests) is the application's choice.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ..errors import SessionFormatError, StateTypeError
from ..providers.context import ContextProvider
from ..sessions import AgentSession, ServiceSessionId
from .message_stores import MESSAGE_STORE_KEY, ChatMessageStoreProtocol

__all__ = ["THREAD_STATE_TYPE", "AgentThread", "AggregateContextProvider", "read_thread_state"]

THREAD_STATE_TYPE: Final = "agent_thread_state"
_THREAD_STATE_VERSION: Final = 1


class AggregateContextProvider:
    """The context providers of an agent, as a thread shows them (``.providers``, in run order).

    Passing one as ``ChatAgent(context_providers=...)`` gives the agent its providers.
    """

    def __init__(self, providers: ContextProvider | Iterable[ContextProvider] | None = None) -> None:
        if providers is None:
            self.providers: list[ContextProvider] = []
        elif isinstance(providers, ContextProvider):
            self.providers = [providers]
        else:
            self.providers = list(providers)

    def add(self, provider: ContextProvider) -> None:
        """Add a provider (to this list; an agent's providers are fixed when it is made)."""
        self.providers.append(provider)

    def __repr__(self) -> str:
        return f"AggregateContextProvider({[p.source_id for p in self.providers]!r})"


class AgentThread:
    """One conversation of a ``ChatAgent`` (``agent.get_new_thread()``).

    Args:
        service_thread_id: The service-side conversation id, when the service keeps history.
        message_store: The thread's message store (local history).
        context_provider: The providers this thread shows (normally the agent's).
        session: The session to wrap (a new one if not given).

    Raises:
        ValueError: Both a ``service_thread_id`` and a ``message_store`` were given (history is
            either kept by the service or locally).
    """

    def __init__(
        self,
        *,
        service_thread_id: str | None = None,
        message_store: ChatMessageStoreProtocol | None = None,
        context_provider: AggregateContextProvider | None = None,
        session: AgentSession | None = None,
    ) -> None:
        if service_thread_id is not None and message_store is not None:
            raise ValueError("a thread keeps history either at the service or in a message store, not both")
        self.session = session if session is not None else AgentSession()
        if service_thread_id is not None:
            self.session.service_session_id = service_thread_id
        if message_store is not None:
            self.session.runtime[MESSAGE_STORE_KEY] = message_store
        self.context_provider = context_provider or AggregateContextProvider()

    @property
    def id(self) -> str:
        """The thread's (session's) id."""
        return self.session.session_id

    @property
    def service_thread_id(self) -> ServiceSessionId | None:
        """The service-side conversation id (the session's ``service_session_id``)."""
        return self.session.service_session_id

    @service_thread_id.setter
    def service_thread_id(self, value: ServiceSessionId | None) -> None:
        self.session.service_session_id = value

    @property
    def message_store(self) -> ChatMessageStoreProtocol | None:
        """The thread's message store (``None`` until the agent made one, or when the service
        keeps the history)."""
        return self.session.runtime.get(MESSAGE_STORE_KEY)

    @message_store.setter
    def message_store(self, store: ChatMessageStoreProtocol | None) -> None:
        if store is None:
            self.session.runtime.pop(MESSAGE_STORE_KEY, None)
        else:
            self.session.runtime[MESSAGE_STORE_KEY] = store

    async def serialize(self, **kwargs: Any) -> dict[str, Any]:
        """The thread's serialized form (see the module docstring); ``kwargs`` go to the store's
        ``serialize_state``.

        Raises:
            SessionFormatError: A state value cannot be serialized.
        """
        store = self.message_store
        out: dict[str, Any] = {
            "type": THREAD_STATE_TYPE,
            "version": _THREAD_STATE_VERSION,
            "service_thread_id": self.service_thread_id,
            "chat_message_store_state": None if store is None else await store.serialize_state(**kwargs),
        }
        provider_state: dict[str, Any] = {}
        for provider in self.context_provider.providers:
            serialize = getattr(provider, "serialize", None)
            if provider.uses_earlier_hooks and callable(serialize):
                value = serialize()
                provider_state[provider.source_id] = await value if inspect.isawaitable(value) else value
        if provider_state:
            out["context_provider_state"] = provider_state
        try:
            out["session"] = self.session.to_dict()
        except StateTypeError as exc:  # a provider's state value with no JSON form
            raise SessionFormatError(f"thread {self.id}: {exc}") from exc
        return out

    def __repr__(self) -> str:
        return f"AgentThread(id={self.id!r}, service_thread_id={self.service_thread_id!r})"


def read_thread_state(data: Any) -> Mapping[str, Any]:
    """Check the outline of a serialized thread (the agent reads the parts).

    Raises:
        SessionFormatError: Not a serialized thread, or of an unknown version.
    """
    if not isinstance(data, Mapping):
        raise SessionFormatError(f"a serialized thread must be an object, not {type(data).__name__}")
    state: Mapping[str, Any] = data  # pyright: ignore[reportUnknownVariableType]
    kind = state.get("type", THREAD_STATE_TYPE)
    if kind != THREAD_STATE_TYPE:
        raise SessionFormatError(f"a serialized thread has type {THREAD_STATE_TYPE!r}, not {kind!r}")
    version = state.get("version", _THREAD_STATE_VERSION)
    if version != _THREAD_STATE_VERSION:
        raise SessionFormatError(
            f"serialized thread version {version!r} is not supported (this agentkeep reads "
            f"version {_THREAD_STATE_VERSION})"
        )
    service_id = state.get("service_thread_id")
    if service_id is not None and (not isinstance(service_id, str) or not service_id):
        raise SessionFormatError("'service_thread_id' must be a non-empty string or null")
    session = state.get("session")
    if session is not None and not isinstance(session, Mapping):
        raise SessionFormatError("'session' must be an object")
    return state
