"""A chat client written the reference's way (layers over _inner_get_response) works as any client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from agentkeep import (
    Agent,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    ChatTelemetryLayer,
    Content,
    FunctionInvocationLayer,
    Message,
    ResponseStream,
    ToolError,
    tool,
)
from agentkeep.clients.base import ChatOptions, OptionsCoT


class ReferenceStyleClient(
    FunctionInvocationLayer[OptionsCoT],
    ChatMiddlewareLayer[OptionsCoT],
    ChatTelemetryLayer[OptionsCoT],
    BaseChatClient[OptionsCoT],
):
    """Answers with a tool call first when asked, then with the last message's text."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(middleware=[], **kwargs)
        self.seen: list[list[str]] = []

    def _inner_get_response(self, *, messages: list[Message], stream: bool, options: dict[str, Any]) -> Any:
        self.seen.append([m.text for m in messages])
        if any(m.role == "tool" for m in messages) or not options.get("tools"):
            last = messages[-1]
            said = last.function_results[0].result if last.function_results else last.text
            reply = Message("assistant", f"echo: {said}")
        else:
            reply = Message("assistant", [Content.from_function_call("c1", "double", arguments={"x": 21})])
        if not stream:

            async def answer() -> ChatResponse:
                return ChatResponse(messages=reply)  # type: ignore[arg-type]  # one message, as the reference allows

            return answer()

        async def updates() -> AsyncIterator[ChatResponseUpdate]:
            yield ChatResponseUpdate(reply.contents, role="assistant")

        return ResponseStream(updates(), finalizer=lambda got: ChatResponse.from_updates(got))


@tool
def double(x: int) -> int:
    """Twice x."""
    return 2 * x


async def test_an_agent_runs_a_reference_style_client() -> None:
    client: ReferenceStyleClient = ReferenceStyleClient()
    agent = Agent(client, tools=[double])
    assert (await agent.run("hi")).text == "echo: 42"
    assert client.seen[0] == ["hi"]
    streamed = agent.run("again", stream=True)
    assert [u.text async for u in streamed] != []
    assert (await streamed.get_final_response()).text == "echo: 42"


async def test_function_invocation_off_leaves_the_calls_to_the_caller() -> None:
    client: ReferenceStyleClient = ReferenceStyleClient()
    client.function_invocation_configuration["enabled"] = False
    response = await Agent(client, tools=[double]).run("hi")
    assert response.messages[-1].function_calls[0].name == "double"
    assert len(client.seen) == 1


async def test_max_iterations_bounds_the_tool_loop() -> None:
    client: ReferenceStyleClient = ReferenceStyleClient()
    client.function_invocation_configuration["max_iterations"] = 0
    response = await Agent(client, tools=[double]).run("hi")
    assert "max_tool_iterations" in (response.messages[-1].function_results[0].exception or "")


def test_middleware_is_refused_rather_than_ignored() -> None:
    class WithMiddleware(ChatMiddlewareLayer[ChatOptions], BaseChatClient[ChatOptions]):
        pass

    with pytest.raises(TypeError, match="no chat middleware"):
        WithMiddleware(middleware=[object()])


async def test_a_response_stream_gives_its_updates_then_one_final_value() -> None:
    async def numbers() -> AsyncIterator[int]:
        for n in (1, 2, 3):
            yield n

    calls: list[Sequence[int]] = []

    def total(seen: Sequence[int]) -> int:
        calls.append(list(seen))
        return sum(seen)

    stream = ResponseStream(numbers(), finalizer=total)
    assert [n async for n in stream] == [1, 2, 3]
    assert await stream == 6
    assert await stream.get_final_response() == 6
    assert calls == [[1, 2, 3]]


def test_tools_run_without_approval_requests() -> None:
    @tool(approval_mode="never_require")
    def free() -> str:
        """Free."""
        return "ok"

    assert free.name == "free"
    with pytest.raises(ToolError, match="approval"):

        @tool(approval_mode="always_require")
        def guarded() -> str:
            """Guarded."""
            return "ok"
