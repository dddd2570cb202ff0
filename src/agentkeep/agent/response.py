"""What an agent run returns: :class:`AgentResponse`, and when streaming an :class:`AgentRunStream`
of :class:`AgentResponseUpdate` that ends with the same response."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..contents import Content, TextContent, UsageDetails
from ..messages import Message, Role
from ..sessions import ServiceSessionId

__all__ = ["AgentResponse", "AgentResponseUpdate", "AgentRunStream"]


@dataclass(slots=True)
class AgentResponse:
    """The result of one ``agent.run``.

    Attributes:
        messages: Every message the run produced, in order: assistant messages (including tool
            calls) and the tool-result messages of the tool loop.
        usage: Token usage summed over every model call of the run.
        response_id: The last model response's id.
        conversation_id: The service-side conversation id after the run (service-managed only).
        finish_reason: Why the last model call stopped.
        value: Parsed structured output, when ``response_format`` was a type.
    """

    messages: list[Message] = field(default_factory=list[Message])
    usage: UsageDetails | None = None
    response_id: str | None = None
    conversation_id: ServiceSessionId | None = None
    finish_reason: str | None = None
    value: Any = None

    @property
    def text(self) -> str:
        """The text of the assistant's messages, joined."""
        return "".join(m.text for m in self.messages if m.role == "assistant")

    def __str__(self) -> str:
        return self.text


@dataclass(slots=True)
class AgentResponseUpdate:
    """One streamed piece of an agent run.

    Attributes:
        contents: New contents (text deltas, whole tool calls, tool results).
        role: The role of the message these contents belong to.
        message_id: The id of that message.
        author_name: The author (the agent's name for assistant messages).
        response_id: The model response's id.
    """

    contents: Sequence[Content] = field(default_factory=list[Content])
    role: Role = "assistant"
    message_id: str | None = None
    author_name: str | None = None
    response_id: str | None = None

    @property
    def text(self) -> str:
        """The text in this update."""
        return "".join(c.text for c in self.contents if isinstance(c, TextContent))

    def __str__(self) -> str:
        return self.text


class AgentRunStream:
    """The updates of a streamed run; ``get_final_response()`` gives the same :class:`AgentResponse`.

    Iterate it with ``async for``. The run's providers (and so history storage) finish when the
    stream is exhausted; a stream abandoned half-way stores nothing, like a failed run. A run holds
    its session until it ends (runs on one session take turns), so close a stream you leave early
    with :meth:`aclose` (or ``async with``); one that is dropped is closed when it is collected.
    """

    def __init__(self, source: AsyncIterator[AgentResponseUpdate | AgentResponse]) -> None:
        self._source = source
        self._response: AgentResponse | None = None

    def __aiter__(self) -> AsyncIterator[AgentResponseUpdate]:
        return self._updates()

    async def _updates(self) -> AsyncIterator[AgentResponseUpdate]:
        async for item in self._source:
            if isinstance(item, AgentResponse):
                self._response = item
            else:
                yield item

    @property
    def response(self) -> AgentResponse | None:
        """The final response once the stream is exhausted, else ``None``."""
        return self._response

    async def get_final_response(self) -> AgentResponse:
        """Consume what is left of the stream and return the run's response."""
        async for _ in self._updates():
            pass
        if self._response is None:  # pragma: no cover - the source always ends with a response
            raise RuntimeError("the stream ended without a response")
        return self._response

    def __await__(self) -> Generator[Any, None, AgentResponse]:
        return self.get_final_response().__await__()

    async def aclose(self) -> None:
        """End the run where it is (nothing is stored unless it had finished); idempotent."""
        close = getattr(self._source, "aclose", None)
        if close is not None:
            await close()

    async def __aenter__(self) -> AgentRunStream:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()
