"""The earlier API's agent: :class:`ChatAgent`, an :class:`~agentkeep.agent.Agent` on threads.

``ChatAgent(chat_client=..., instructions=..., name=..., context_providers=...,
chat_message_store_factory=...)`` is an ``Agent`` whose history lives in per-thread message
stores (:class:`~agentkeep.threads.MessageStoreHistoryProvider` first among its providers; the
in-memory :class:`~agentkeep.threads.ChatMessageStore` when no factory is given). Everything else
is the one pipeline every agent runs: ``agent.run(..., thread=thread)`` is
``agent.run(..., session=thread.session)``; a run without a thread gets a new thread, as it did
then, so context providers still see it. Chat options may be given as keywords
(``run("hi", thread=t, temperature=0.2)``).

When a context provider of the agent already loads history (a today-style history provider), the
agent uses it and makes no message stores.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self, overload

from ..agent import Agent, AgentResponse, AgentRunStream
from ..clients.base import ChatClient, ChatOptions, check_chat_options
from ..compaction.strategies import StrategyLike
from ..compaction.tokenizers import Tokenizer
from ..errors import SessionFormatError
from ..messages import MessageInput
from ..providers.context import ContextProvider
from ..providers.history import HistoryProvider
from ..sessions import AgentSession
from ..tools import ToolLike
from .message_stores import (
    ChatMessageStore,
    ChatMessageStoreFactory,
    ChatMessageStoreProtocol,
    MessageStoreHistoryProvider,
)
from .thread import AgentThread, AggregateContextProvider, read_thread_state

__all__ = ["ChatAgent"]

ContextProviders = ContextProvider | Sequence[ContextProvider] | AggregateContextProvider | None


class ChatAgent(Agent):
    """An agent on threads with per-thread message stores (seeds 003 and 004).

    Args:
        chat_client: The chat client (model).
        instructions: System instructions for every run.
        id: The agent's id.
        name: The agent's name.
        description: What the agent does.
        chat_message_store_factory: Makes each new thread's message store (default: in memory).
        context_providers: A provider, a list of them, or an :class:`AggregateContextProvider`.
        tools: Tools the model may call in every run.
        default_options: Chat options for every run.
        max_tool_iterations: As for :class:`~agentkeep.agent.Agent`.
        compaction_strategy: As for :class:`~agentkeep.agent.Agent`.
        tokenizer: As for :class:`~agentkeep.agent.Agent`.
        **chat_options: More chat options for every run (``temperature=0.2``, ...).

    Raises:
        TypeError: A keyword that is no chat option.
        ProviderConfigurationError: As for :class:`~agentkeep.agent.Agent`.
    """

    def __init__(
        self,
        chat_client: ChatClient,
        instructions: str | None = None,
        *,
        id: str | None = None,
        name: str | None = None,
        description: str | None = None,
        chat_message_store_factory: ChatMessageStoreFactory | None = None,
        context_providers: ContextProviders = None,
        tools: ToolLike | Sequence[ToolLike] | None = None,
        default_options: Mapping[str, Any] | None = None,
        max_tool_iterations: int = 10,
        compaction_strategy: StrategyLike | None = None,
        tokenizer: Tokenizer | None = None,
        **chat_options: Any,
    ) -> None:
        if isinstance(context_providers, AggregateContextProvider):
            providers = list(context_providers.providers)
        else:
            providers = list(AggregateContextProvider(context_providers).providers)
        self.chat_message_store_factory = chat_message_store_factory
        self._made_stores: weakref.WeakSet[Any] = weakref.WeakSet()
        loads = any(isinstance(p, HistoryProvider) and p.load_messages for p in providers)
        self.message_store_provider: MessageStoreHistoryProvider | None = None
        """The provider that runs the threads' message stores (``None`` when another history
        provider loads history)."""
        if not loads or chat_message_store_factory is not None:
            self.message_store_provider = MessageStoreHistoryProvider(self._make_store)
            providers.insert(0, self.message_store_provider)
        super().__init__(
            chat_client,
            instructions,
            id=id,
            name=name,
            description=description,
            tools=tools,
            context_providers=providers,
            default_options={**(default_options or {}), **check_chat_options(chat_options, what="ChatAgent")},
            max_tool_iterations=max_tool_iterations,
            compaction_strategy=compaction_strategy,
            tokenizer=tokenizer,
        )

    @property
    def chat_client(self) -> ChatClient:
        """The chat client (the earlier name of ``client``)."""
        return self.client

    @property
    def context_provider(self) -> AggregateContextProvider:
        """The agent's own context providers (without the message-store provider)."""
        own = self.message_store_provider
        return AggregateContextProvider(p for p in self.context_providers if p is not own)

    def _make_store(self) -> ChatMessageStoreProtocol:
        store = self.chat_message_store_factory() if self.chat_message_store_factory else ChatMessageStore()
        if self.chat_message_store_factory is not None:
            # A store that takes no weak references is not closed by the agent.
            with contextlib.suppress(TypeError):
                self._made_stores.add(store)
        return store

    # -- threads -------------------------------------------------------------------------------
    def get_new_thread(self, *, service_thread_id: str | None = None) -> AgentThread:
        """A new thread: a new session with its own message store (none when the service keeps
        the history)."""
        store = None
        if service_thread_id is None and self.message_store_provider is not None:
            store = self._make_store()
        return AgentThread(
            service_thread_id=service_thread_id, message_store=store, context_provider=self.context_provider
        )

    async def deserialize_thread(self, serialized_thread: Any, **kwargs: Any) -> AgentThread:
        """Resume a thread from :meth:`AgentThread.serialize`'s output: a new message store from
        the factory restores its state (``kwargs`` go to its ``deserialize_state``).

        Raises:
            SessionFormatError: Not a serialized thread, of an unknown version, or with state the
                store or a provider cannot read.
        """
        state = read_thread_state(serialized_thread)
        payload = state.get("session")
        session = self.deserialize_session(dict(payload)) if payload is not None else AgentSession()
        service_id = state.get("service_thread_id")
        if service_id is not None:
            session.service_session_id = service_id
        thread = AgentThread(session=session, context_provider=self.context_provider)
        store_state = state.get("chat_message_store_state")
        if service_id is None and self.message_store_provider is not None:
            store = self._make_store()
            if store_state is not None:
                try:
                    await store.deserialize_state(store_state, **kwargs)
                except SessionFormatError:
                    raise
                except Exception as exc:  # the user's store refused its state
                    raise SessionFormatError(
                        f"thread {thread.id}: the message store could not read its state: {exc}"
                    ) from exc
            thread.message_store = store
        return thread

    # -- running -------------------------------------------------------------------------------
    @overload
    def run(
        self,
        messages: MessageInput = None,
        *,
        stream: Literal[False] = False,
        thread: AgentThread | None = None,
        session: AgentSession | None = None,
        tools: ToolLike | Sequence[ToolLike] | None = None,
        options: ChatOptions | Mapping[str, Any] | None = None,
        compaction_strategy: StrategyLike | None = None,
        tokenizer: Tokenizer | None = None,
        **chat_options: Any,
    ) -> Coroutine[Any, Any, AgentResponse]: ...
    @overload
    def run(
        self,
        messages: MessageInput = None,
        *,
        stream: Literal[True],
        thread: AgentThread | None = None,
        session: AgentSession | None = None,
        tools: ToolLike | Sequence[ToolLike] | None = None,
        options: ChatOptions | Mapping[str, Any] | None = None,
        compaction_strategy: StrategyLike | None = None,
        tokenizer: Tokenizer | None = None,
        **chat_options: Any,
    ) -> AgentRunStream: ...
    def run(
        self,
        messages: MessageInput = None,
        *,
        stream: bool = False,
        thread: AgentThread | None = None,
        session: AgentSession | None = None,
        tools: ToolLike | Sequence[ToolLike] | None = None,
        options: ChatOptions | Mapping[str, Any] | None = None,
        compaction_strategy: StrategyLike | None = None,
        tokenizer: Tokenizer | None = None,
        **chat_options: Any,
    ) -> Coroutine[Any, Any, AgentResponse] | AgentRunStream:
        """Run on ``thread`` (a new thread if neither ``thread`` nor ``session`` is given).

        Raises:
            TypeError: A keyword that is no chat option, or both ``thread`` and ``session``.
        """
        if thread is not None and session is not None:
            raise TypeError("pass run() a thread or a session, not both")
        if session is None:
            session = (thread if thread is not None else self.get_new_thread()).session
        if chat_options:
            options = {**(options or {}), **check_chat_options(chat_options, what="run()")}
        run: Any = super().run  # one call for both overloads (stream is a plain bool here)
        return run(
            messages,
            stream=stream,
            session=session,
            tools=tools,
            options=options,
            compaction_strategy=compaction_strategy,
            tokenizer=tokenizer,
        )

    def run_stream(
        self,
        messages: MessageInput = None,
        *,
        thread: AgentThread | None = None,
        tools: ToolLike | Sequence[ToolLike] | None = None,
        options: ChatOptions | Mapping[str, Any] | None = None,
        **chat_options: Any,
    ) -> AgentRunStream:
        """The earlier name of ``run(..., stream=True)``."""
        return self.run(messages, stream=True, thread=thread, tools=tools, options=options, **chat_options)

    # -- lifetime ------------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close the message stores the factory made that can be closed (``aclose()``)."""
        for store in list(self._made_stores):
            close: Callable[[], Awaitable[Any]] | None = getattr(store, "aclose", None)
            if callable(close):
                await close()
        self._made_stores = weakref.WeakSet()

    def __repr__(self) -> str:
        return f"ChatAgent(name={self.name!r}, providers={[p.source_id for p in self.context_providers]!r})"
