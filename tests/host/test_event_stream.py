"""``EventStreamResponse`` driven as an ASGI app with a recording ``send``: what is made before the
run waits travels in one body message, nothing made waits for a later chunk, a slow reader holds
the run back, a failed send and a client that hangs up end the run, and the chunks are closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from starlette.types import Message

from agentkeep.host._event_stream import BACKLOG, EventStreamResponse

HANG = 10.0  # seconds: the hang guard of every test


class Client:
    """The ASGI side: records the messages sent; hangs up when told to."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.gone = asyncio.Event()
        self.body_arrived = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body":
            self.body_arrived.set()

    @property
    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


async def respond(chunks: AsyncGenerator[tuple[str, bool]], client: Client) -> None:
    async with asyncio.timeout(HANG):
        await EventStreamResponse(chunks)({"type": "http"}, client.receive, client.send)


async def never_answered(stopped: list[str]) -> AsyncGenerator[tuple[str, bool]]:
    """A run that starts, then waits for a model that never answers; notes its cancellation."""
    try:
        yield "started\n\n", True
        await asyncio.Event().wait()
        yield "never made\n\n", False
    except asyncio.CancelledError:
        stopped.append("cancelled")
        raise


async def test_chunks_made_without_waiting_travel_in_one_message_that_ends_the_response() -> None:
    async def chunks() -> AsyncGenerator[tuple[str, bool]]:
        yield "a\n\n", True
        yield "b\n\n", True
        yield "c\n\n", False

    client = Client()
    await respond(chunks(), client)
    assert client.sent[0]["type"] == "http.response.start"
    assert client.bodies == [b"a\n\nb\n\nc\n\n"]
    assert client.sent[-1]["more_body"] is False


async def test_what_is_made_before_the_run_waits_is_sent_while_it_waits() -> None:
    model_answers = asyncio.Event()
    client = Client()

    async def chunks() -> AsyncGenerator[tuple[str, bool]]:
        yield "started\n\n", True
        yield "loaded\n\n", True
        await model_answers.wait()  # the model thinks
        yield "answer\n\n", True
        yield "finished\n\n", False

    response = asyncio.create_task(respond(chunks(), client))
    async with asyncio.timeout(HANG):
        await client.body_arrived.wait()  # sent before the model answers
    assert client.bodies == [b"started\n\nloaded\n\n"]
    assert client.sent[-1]["more_body"] is True
    model_answers.set()
    await response
    assert client.bodies == [b"started\n\nloaded\n\n", b"answer\n\nfinished\n\n"]
    assert client.sent[-1]["more_body"] is False


async def test_chunks_that_run_out_without_an_end_end_the_response_with_an_empty_message() -> None:
    async def chunks() -> AsyncGenerator[tuple[str, bool]]:
        yield "a\n\n", True

    client = Client()
    await respond(chunks(), client)
    assert client.bodies == [b"a\n\n"]
    assert client.sent[-1]["more_body"] is False


async def test_a_full_backlog_is_sent_before_the_run_goes_on() -> None:
    big = "x" * (BACKLOG // 4)
    sent_when_made: list[int] = []
    client = Client()

    async def chunks() -> AsyncGenerator[tuple[str, bool]]:
        for _ in range(12):
            sent_when_made.append(len(client.bodies))
            yield big, True
        yield "end", False

    await respond(chunks(), client)
    assert b"".join(client.bodies) == (big * 12 + "end").encode()
    assert all(len(body) <= BACKLOG + len(big) for body in client.bodies)
    assert len(client.bodies) >= 12 * len(big) // BACKLOG
    assert sent_when_made[-1] > 0  # the run did not make everything before anything was sent


async def test_a_send_that_fails_ends_the_run_with_its_error_and_closes_the_chunks() -> None:
    closed: list[str] = []
    model_answers = asyncio.Event()

    async def chunks() -> AsyncGenerator[tuple[str, bool]]:
        try:
            yield "started\n\n", True
            await model_answers.wait()
            yield "never sent\n\n", False
        finally:
            closed.append("closed")

    class Broken(Client):
        async def send(self, message: Message) -> None:
            if message["type"] == "http.response.body":
                model_answers.set()
                raise ConnectionResetError("the connection broke")
            await super().send(message)

    with pytest.raises(ConnectionResetError, match="broke"):
        await respond(chunks(), Broken())
    assert closed == ["closed"]


async def test_a_client_that_hangs_up_stops_the_run_at_its_wait_and_nothing_more_is_sent() -> None:
    stopped: list[str] = []
    client = Client()
    response = asyncio.create_task(respond(never_answered(stopped), client))
    async with asyncio.timeout(HANG):
        await client.body_arrived.wait()
    client.gone.set()
    await response  # ends quietly: nobody is left to read it
    assert stopped == ["cancelled"]
    assert client.bodies == [b"started\n\n"]


async def test_the_chunks_are_closed_when_the_response_ends_at_their_last_chunk() -> None:
    closed: list[str] = []

    async def chunks() -> AsyncGenerator[tuple[str, bool]]:
        try:
            yield "data: {}\n\n", False
            yield "never sent", False
        finally:
            closed.append("closed")  # at once, not when the garbage collector finds it

    client = Client()
    await respond(chunks(), client)
    assert closed == ["closed"]
    assert client.bodies == [b"data: {}\n\n"]
    assert client.sent[-1]["more_body"] is False


async def test_a_client_gone_before_the_run_waits_is_seen_once_it_waits() -> None:
    stopped: list[str] = []
    client = Client()
    client.gone.set()  # hung up before anything was sent
    await respond(never_answered(stopped), client)
    assert stopped == ["cancelled"]
