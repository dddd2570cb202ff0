"""A host process with an instant model, for tests and benchmarks that run several processes over
one store: ``python -m tests.host.instant_host --port P --url STORE_URL [--delay SECONDS]``.

The agent ``chat`` keeps its history (the newest 50 messages loaded) and its sessions in the store
``--url`` names (one pool per process); its model answers ``ok`` after ``--delay`` seconds. The
process serves under uvicorn on 127.0.0.1 until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence

from agentkeep import Agent, BaseChatClient, ChatOptions, ChatResponse, ChatResponseUpdate, Message
from agentkeep.contents import TextContent
from agentkeep.host import AgentHost
from agentkeep.store_urls import open_history_provider, open_session_store


class InstantChatClient(BaseChatClient):
    """A model that answers ``ok`` after ``delay`` seconds."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        return ChatResponse([Message("assistant", [TextContent("ok")])], finish_reason="stop")

    async def get_streaming_response(
        self, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        if self.delay:
            await asyncio.sleep(self.delay)
        message_id = uuid.uuid4().hex
        yield ChatResponseUpdate(
            [TextContent("ok")], message_id=message_id, response_id=message_id, finish_reason="stop"
        )


def build(url: str, *, delay: float = 0.0) -> AgentHost:
    """The host: agent ``chat`` on the store ``url`` with an instant model."""
    history = open_history_provider(url, load_limit=50)
    agent = Agent(InstantChatClient(delay), name="chat", context_providers=[history])
    host = AgentHost()
    host.add_agent("chat", agent, session_store=open_session_store(url))
    host.on_shutdown.append(history.aclose)
    return host


def serve(port: int, url: str, *, delay: float = 0.0) -> None:
    """Serve :func:`build`'s host on ``127.0.0.1:port`` until interrupted."""
    import uvicorn

    config = uvicorn.Config(
        build(url, delay=delay).app, host="127.0.0.1", port=port, loop="asyncio", http="h11",
        lifespan="on", log_level="warning", access_log=False,
    )  # fmt: skip
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    serve(args.port, args.url, delay=args.delay)


if __name__ == "__main__":
    main()
