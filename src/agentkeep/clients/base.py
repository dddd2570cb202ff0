"""The chat client contract: what an agent needs from a model.

A chat client answers a sequence of messages plus :class:`ChatOptions` with a
:class:`ChatResponse`, or streams :class:`ChatResponseUpdate` objects. :class:`ChatClient` is the
protocol the agent relies on; :class:`BaseChatClient` is an optional base class that adds
``as_agent()`` and a default streaming method built on ``get_response``.

Messages arrive as a ``Sequence[Message]`` that may be a zero-copy view over a long history
(see :mod:`agentkeep.message_log`): iterate or index it, don't assume it is a ``list``.

**Other call shapes.** Every :class:`BaseChatClient` also takes the earlier API's call (seed
004: ``get_response(messages=..., chat_options=ChatOptions(...))``, options as keywords, text as
messages), and a subclass may be written the reference's way (``_inner_get_response``); the
adapters live in :mod:`agentkeep._compat.client_calls`, applied when a class is made. A call in
today's shape passes straight through. :data:`ChatClientProtocol` is the earlier name of
:class:`ChatClient`.

A client that keeps conversations itself (a service-managed history, e.g. the OpenAI Responses
API) sets ``stores_by_default = True`` and returns the conversation id in
:attr:`ChatResponse.conversation_id`; it receives that id back in ``options["conversation_id"]``
together with only the new messages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Generic,
    Literal,
    Protocol,
    TypedDict,
    TypeVar,
    runtime_checkable,
)

from .._compat import client_calls as _compat
from ..contents import Content, TextContent, UsageContent, UsageDetails
from ..messages import Message, Role
from ..sessions import ServiceSessionId
from ..tools import FunctionTool

if TYPE_CHECKING:
    from ..agent import Agent
    from ..compaction.strategies import StrategyLike
    from ..compaction.tokenizers import Tokenizer
    from ..providers import ContextProvider
    from ..tools import ToolLike

__all__ = [
    "CHAT_OPTION_NAMES",
    "BaseChatClient",
    "ChatClient",
    "ChatClientProtocol",
    "ChatOptions",
    "ChatResponse",
    "ChatResponseUpdate",
    "OptionsCoT",
    "check_chat_options",
    "merge_updates",
]


class ChatOptions(TypedDict, total=False):
    """Options for one model call. Every key is optional; clients ignore what they don't support.

    Attributes:
        instructions: System instructions (agent instructions plus what providers added).
        tools: The tools the model may call.
        tool_choice: ``"auto"``, ``"none"`` or ``"required"``.
        response_format: A type (dataclass, TypedDict, pydantic model, ...) or a JSON schema dict
            the reply must follow (structured output).
        conversation_id: The service-side conversation to continue.
        store: Ask a service to keep (``True``) or not keep (``False``) the conversation.
        model: Model name.
        temperature: Sampling temperature.
        top_p: Nucleus sampling.
        max_tokens: Upper bound on generated tokens.
        stop: Stop sequences.
        seed: Sampling seed.
        user: End-user id for the service's abuse monitoring.
        metadata: Free-form metadata.
        additional_properties: Client-specific options.
    """

    instructions: str
    tools: list[FunctionTool]
    tool_choice: Literal["auto", "none", "required"]
    response_format: Any
    conversation_id: ServiceSessionId
    store: bool
    model: str
    temperature: float
    top_p: float
    max_tokens: int
    stop: list[str]
    seed: int
    user: str
    metadata: dict[str, str]
    additional_properties: dict[str, Any]


@dataclass(slots=True)
class ChatResponse:
    """A model's answer to one call.

    Attributes:
        messages: The new messages (normally one assistant message).
        usage: Token usage of this call.
        conversation_id: Service-side conversation id, when the service keeps history.
        response_id: The service's id for this response.
        finish_reason: Why generation stopped (``"stop"``, ``"tool_calls"``, ``"length"``, ...).
        model: The model that answered.
        value: The parsed structured output, when ``response_format`` was a type.
        created_at: When the service made the response (its own timestamp text), if it says.
    """

    messages: list[Message]
    usage: UsageDetails | None = None
    conversation_id: str | None = None
    response_id: str | None = None
    finish_reason: str | None = None
    model: str | None = None
    value: Any = None
    created_at: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.messages, Message):  # pyright: ignore[reportUnnecessaryIsInstance]
            self.messages = [self.messages]  # the reference takes one message too

    @property
    def text(self) -> str:
        """The text of the response's messages."""
        return "".join(m.text for m in self.messages)

    @classmethod
    def from_updates(
        cls, updates: Sequence[ChatResponseUpdate], *, output_format_type: Any = None
    ) -> ChatResponse:
        """The response streamed ``updates`` add up to (see :func:`merge_updates`).

        ``output_format_type`` is the reference's keyword, taken and not applied: a response made
        from updates carries no parsed ``value``.
        """
        return merge_updates(updates)


@dataclass(slots=True)
class ChatResponseUpdate:
    """One streamed piece of a :class:`ChatResponse`.

    Text contents are deltas to append; other contents (a whole tool call, usage) arrive whole.
    Updates with the same ``message_id`` (or, without ids, consecutive updates with the same
    role) belong to one message.
    """

    contents: list[Content] = field(default_factory=list[Content])
    role: Role = "assistant"
    message_id: str | None = None
    author_name: str | None = None
    conversation_id: str | None = None
    response_id: str | None = None
    finish_reason: str | None = None
    model: str | None = None
    created_at: str | None = None

    @property
    def text(self) -> str:
        """The text in this update."""
        return "".join(c.text for c in self.contents if isinstance(c, TextContent))


def merge_updates(updates: Sequence[ChatResponseUpdate]) -> ChatResponse:
    """Combine streamed updates into the response they add up to.

    Consecutive text deltas of one message become one text content; usage contents are summed into
    :attr:`ChatResponse.usage` and left out of the messages.
    """
    messages: list[Message] = []
    usage: UsageDetails | None = None
    conversation_id = response_id = finish_reason = model = None
    current: Message | None = None
    for update in updates:
        conversation_id = update.conversation_id or conversation_id
        response_id = update.response_id or response_id
        finish_reason = update.finish_reason or finish_reason
        model = update.model or model
        if (
            current is None
            or update.role != current.role
            or (update.message_id is not None and update.message_id != current.message_id)
        ):
            current = Message(update.role, [], message_id=update.message_id, author_name=update.author_name)
            messages.append(current)
        for content in update.contents:
            if isinstance(content, UsageContent):
                usage = content.usage_details if usage is None else usage + content.usage_details
                continue
            last = current.contents[-1] if current.contents else None
            if (
                isinstance(content, TextContent)
                and type(last) is TextContent
                and not content.additional_properties
                and not last.additional_properties
            ):
                current.contents[-1] = TextContent(last.text + content.text)
            else:
                current.contents.append(content)
    return ChatResponse(
        [m for m in messages if m.contents],
        usage=usage,
        conversation_id=conversation_id,
        response_id=response_id,
        finish_reason=finish_reason,
        model=model,
    )


@runtime_checkable
class ChatClient(Protocol):
    """What an :class:`~agentkeep.agent.Agent` needs from a model."""

    @property
    def stores_by_default(self) -> bool:
        """Whether the service keeps the conversation unless told ``store=False``."""
        ...

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        """Answer ``messages`` with one response."""
        ...

    def get_streaming_response(
        self, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        """Answer ``messages`` as a stream of updates."""
        ...


ChatClientProtocol = ChatClient
"""The earlier name of :class:`ChatClient` (seed 004)."""


OptionsCoT = TypeVar("OptionsCoT", covariant=True)
"""The options type a client is generic in (``BaseChatClient[OptionsCoT]``, the reference's
spelling; agentkeep's clients all take :class:`ChatOptions`)."""


class BaseChatClient(Generic[OptionsCoT]):
    """Convenience base for chat clients: ``as_agent()`` and streaming built on ``get_response``.

    Subclasses implement :meth:`get_response`, and override :meth:`get_streaming_response` when
    the model can really stream. Both also accept the earlier call shape (module docstring).

    A subclass written the reference's way implements ``_inner_get_response(*, messages, stream,
    options, **kwargs)`` instead, returning (or awaiting to) a :class:`ChatResponse`, or, with
    ``stream=True``, an async iterable of :class:`ChatResponseUpdate` (such as a
    :class:`~agentkeep.clients.layers.ResponseStream`); both methods here then call it.
    """

    stores_by_default: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _compat.adapt_client_class(cls, option_names=CHAT_OPTION_NAMES, check=_check_call_options)

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        """Answer ``messages`` with one response."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_response()")

    async def get_streaming_response(
        self, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        """Stream the response of :meth:`get_response` as one update per message (or the updates
        of a reference-style ``_inner_get_response``)."""
        response = await self.get_response(messages, options=options)
        last = len(response.messages) - 1
        for index, message in enumerate(response.messages):
            yield self._update(
                response,
                message.contents,
                last=index == last,
                role=message.role,
                message_id=message.message_id,
                author_name=message.author_name,
            )

    @staticmethod
    def _update(
        response: ChatResponse,
        contents: Iterable[Content],
        *,
        last: bool = True,
        role: Role = "assistant",
        message_id: str | None = None,
        author_name: str | None = None,
    ) -> ChatResponseUpdate:
        """An update streaming part of ``response``, with its ids and model.

        The ``last`` update of a stream also carries the response's usage and finish reason.
        """
        pieces = list(contents)
        if last and response.usage is not None:
            pieces.append(UsageContent(response.usage))
        return ChatResponseUpdate(
            pieces,
            role=role,
            message_id=message_id,
            author_name=author_name,
            conversation_id=response.conversation_id,
            response_id=response.response_id,
            finish_reason=response.finish_reason if last else None,
            model=response.model,
        )

    def as_agent(
        self,
        instructions: str | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        tools: ToolLike | Sequence[ToolLike] | None = None,
        context_providers: ContextProvider | Sequence[ContextProvider] | None = None,
        require_per_service_call_history_persistence: bool = False,
        default_options: Mapping[str, Any] | None = None,
        max_tool_iterations: int = 10,
        compaction_strategy: StrategyLike | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> Agent:
        """An :class:`~agentkeep.agent.Agent` on this client (same arguments as ``Agent``)."""
        from ..agent import Agent

        return Agent(
            self,
            instructions,
            name=name,
            description=description,
            tools=tools,
            context_providers=context_providers,
            require_per_service_call_history_persistence=require_per_service_call_history_persistence,
            default_options=default_options,
            max_tool_iterations=max_tool_iterations,
            compaction_strategy=compaction_strategy,
            tokenizer=tokenizer,
        )


CHAT_OPTION_NAMES: Final[frozenset[str]] = frozenset(ChatOptions.__annotations__)
"""The keys of :class:`ChatOptions`."""


def check_chat_options(given: Mapping[str, Any], *, what: str) -> dict[str, Any]:
    """``given`` as chat options.

    Raises:
        TypeError: A key that is no chat option (named, with ``what`` the call it was given to).
    """
    unknown = sorted(set(given) - CHAT_OPTION_NAMES)
    if unknown:
        raise TypeError(f"{what} got unknown chat option(s) {unknown}; known: {sorted(CHAT_OPTION_NAMES)}")
    return dict(given)


def _check_call_options(given: Mapping[str, Any]) -> dict[str, Any]:
    return check_chat_options(given, what="get_response()")


_compat.adapt_base_client(BaseChatClient, option_names=CHAT_OPTION_NAMES, check=_check_call_options)
