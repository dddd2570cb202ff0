"""The reference's way of writing a chat client, on agentkeep's client contract.

The reference Python edition builds a client from layers over a ``BaseChatClient`` whose subclass
implements ``_inner_get_response(*, messages, stream, options)``, returning a response, or a
:class:`ResponseStream` of updates when ``stream`` is true. agentkeep's
:class:`~agentkeep.clients.base.BaseChatClient` calls that hook when a subclass has it, so such a
client works as any agentkeep client. The layers:

* :class:`FunctionInvocationLayer`: its ``function_invocation_configuration`` (``enabled``,
  ``max_iterations``) is what the agent's tool loop honours for this client (agentkeep runs tools
  in the agent, not in the client): ``enabled=False`` ends a run with the model's tool calls for
  the caller to answer, ``max_iterations`` lowers the agent's ``max_tool_iterations``.
* :class:`ChatMiddlewareLayer`: takes ``middleware=``; agentkeep runs no chat middleware, so
  anything but an empty list is refused (``TypeError``) rather than ignored.
* :class:`ChatTelemetryLayer`: traces each call as an ``agentkeep.chat`` span (see
  :mod:`agentkeep.telemetry`).

:data:`OptionsCoT` is the type variable the layers are generic in (``BaseChatClient[OptionsCoT]``).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Generator, Sequence
from typing import Any, Final, Generic, TypeVar, cast

from .. import telemetry
from ..messages import Message
from .base import ChatOptions, ChatResponse, OptionsCoT

__all__ = [
    "DEFAULT_MAX_ITERATIONS",
    "ChatMiddlewareLayer",
    "ChatTelemetryLayer",
    "FunctionInvocationLayer",
    "OptionsCoT",
    "ResponseStream",
]

UpdateT = TypeVar("UpdateT")
FinalT = TypeVar("FinalT")

DEFAULT_MAX_ITERATIONS: Final = 40
"""The tool-loop rounds a :class:`FunctionInvocationLayer` client allows by default."""


class ResponseStream(Generic[UpdateT, FinalT]):
    """A stream of updates that ends in one final value (``finalizer(updates)``).

    Iterate it with ``async for``; ``await stream`` (or :meth:`get_final_response`) reads what is
    left and gives the final value, which is made once.

    Args:
        updates: The updates, in order.
        finalizer: Makes the final value from every update the stream gave.
    """

    def __init__(
        self, updates: AsyncIterable[UpdateT], *, finalizer: Callable[[Sequence[UpdateT]], FinalT]
    ) -> None:
        self._source = updates.__aiter__()
        self._finalizer = finalizer
        self._seen: list[UpdateT] = []
        self._final: list[FinalT] = []

    def __aiter__(self) -> AsyncIterator[UpdateT]:
        return self._updates()

    async def _updates(self) -> AsyncIterator[UpdateT]:
        async for update in self._source:
            self._seen.append(update)
            yield update

    async def get_final_response(self) -> FinalT:
        """Read what is left of the stream and give its final value."""
        if not self._final:
            async for _ in self._updates():
                pass
            self._final.append(self._finalizer(self._seen))
        return self._final[0]

    def __await__(self) -> Generator[Any, None, FinalT]:
        return self.get_final_response().__await__()


class FunctionInvocationLayer(Generic[OptionsCoT]):
    """The reference's function-invocation layer: a client whose tool loop settings the agent
    honours (see the module docs)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.function_invocation_configuration: dict[str, Any] = {
            "enabled": True,
            "max_iterations": DEFAULT_MAX_ITERATIONS,
        }


class ChatMiddlewareLayer(Generic[OptionsCoT]):
    """The reference's chat-middleware layer: takes ``middleware=``, of which agentkeep supports
    none (see the module docs).

    Raises:
        TypeError: ``middleware`` holds anything.
    """

    def __init__(self, *args: Any, middleware: Sequence[object] | None = None, **kwargs: Any) -> None:
        if middleware:
            raise TypeError(
                "agentkeep runs no chat middleware: providers (ContextProvider) shape runs instead; "
                f"got {len(middleware)} middleware"
            )
        super().__init__(*args, **kwargs)


class ChatTelemetryLayer(Generic[OptionsCoT]):
    """The reference's telemetry layer: each ``get_response`` call is an ``agentkeep.chat`` span."""

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        with telemetry.span("agentkeep.chat", **{"agentkeep.client": type(self).__name__}):
            parent: Any = super()
            respond = cast("Callable[..., Awaitable[ChatResponse]]", parent.get_response)
            return await respond(messages, options=options)
