"""The host's OpenAI Responses-compatible API with the official ``openai`` SDK as the client (plain,
streaming, ``previous_response_id``, ``conversation``, tools, ``store: false``), agentkeep's own
``OpenAIResponsesClient`` running an agent whose history the host keeps, and tenant isolation of
every ``resp_`` / ``conv_`` id."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agentkeep.clients.openai import OpenAIResponsesClient
from agentkeep.message_stores import HistoryView
from tests.host.conftest import ALICE, BOB, Hosted

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def sessions_in(path: Path) -> list[str]:
    """The conversation ids of every session stored in the host's SQLite file."""
    with sqlite3.connect(path) as db:
        return [row[0] for row in db.execute("SELECT conversation_id FROM agentkeep_sessions")]


def sdk(hosted: Hosted, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{hosted.server.url}/v1", api_key=key, max_retries=0)


async def test_responses_chain_by_previous_response_id_and_are_retrievable(hosted: Hosted) -> None:
    async with sdk(hosted, ALICE[0]) as client:
        first = await client.responses.create(model="chat", input="hello")
        assert first.id.startswith("resp_")
        assert first.status == "completed"
        assert first.output_text == "heard 1: hello"
        second = await client.responses.create(model="chat", input="again", previous_response_id=first.id)
        assert second.output_text == "heard 2: hello | again"  # the host kept the conversation
        again = await client.responses.retrieve(first.id)
        assert again.output_text == "heard 1: hello"
        fork = await client.responses.create(model="chat", input="fork", previous_response_id=first.id)
        assert fork.output_text == "heard 2: hello | fork"  # branched from the first response
        assert fork.id[5:37] != first.id[5:37]  # in a conversation of its own
        onward = await client.responses.create(model="chat", input="on", previous_response_id=second.id)
        assert onward.output_text == "heard 3: hello | again | on"  # the original line is unchanged
        deeper = await client.responses.create(model="chat", input="deeper", previous_response_id=fork.id)
        assert deeper.output_text == "heard 3: hello | fork | deeper"
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="nope", input="x")


async def test_a_failed_response_is_an_error_status_and_the_last_good_one_goes_on(hosted: Hosted) -> None:
    async with sdk(hosted, ALICE[0]) as client:
        first = await client.responses.create(model="chat", input="hello")
        with pytest.raises(openai.InternalServerError) as caught:
            await client.responses.create(model="chat", input="boom", previous_response_id=first.id)
        assert caught.value.status_code == 503
        assert caught.value.code == "model_unavailable"
        with pytest.raises(openai.InternalServerError):  # a new conversation's first turn too
            await client.responses.create(model="chat", input="boom")
        onward = await client.responses.create(model="chat", input="again", previous_response_id=first.id)
        assert onward.output_text == "heard 2: hello | again"  # nothing of the failed turn
        with pytest.raises(openai.InternalServerError):  # a branch (from an earlier response) too
            await client.responses.create(model="chat", input="boom", previous_response_id=first.id)
        [conversation] = {f"conv_{response.id[5:37]}" for response in (first, onward)}
        [key] = [key for key in await hosted.conversations() if key.endswith(f"::{conversation}")]
        assert [m.text for m in await hosted.stored(key)] == [
            "hello",
            "heard 1: hello",
            "again",
            "heard 2: hello | again",
        ]
    # the failed new conversation and the failed branch left nothing behind: no messages, no session
    assert await hosted.conversations() == [key]
    stored = await asyncio.to_thread(sessions_in, hosted.path)
    assert [name for name in stored if name.startswith("alice::")] == [key]


async def test_streaming_sends_the_documented_events(hosted: Hosted) -> None:
    async with sdk(hosted, ALICE[0]) as client:
        stream = await client.responses.create(model="chat", input="stream me", stream=True)
        events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_item.added" in kinds
    assert "response.content_part.added" in kinds
    assert kinds.count("response.output_item.done") == 1
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert deltas == "heard 1: stream me"
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output_text == deltas
    assert [e.sequence_number for e in events] == list(range(len(events)))


async def test_a_caller_tool_call_ends_the_response_and_its_output_continues_it(hosted: Hosted) -> None:
    async with sdk(hosted, ALICE[0]) as client:
        asked = await client.responses.create(model="chat", input="weather in Paris?", tools=[WEATHER])  # type: ignore[list-item]
        [call] = asked.output
        assert call.type == "function_call"
        assert call.name == "get_weather"
        answered = await client.responses.create(
            model="chat",
            previous_response_id=asked.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
            tools=[WEATHER],  # type: ignore[list-item]
        )
        assert answered.output_text == "the tool said sunny"


async def test_conversations_hold_responses_and_list_their_items(hosted: Hosted) -> None:
    async with sdk(hosted, ALICE[0]) as client:
        conversation = await client.conversations.create(metadata={"topic": "tests"})
        assert conversation.id.startswith("conv_")
        first = await client.responses.create(model="chat", input="one", conversation=conversation.id)
        second = await client.responses.create(model="chat", input="two", conversation=conversation.id)
        assert second.output_text == "heard 2: one | two"
        assert first.output_text == "heard 1: one"
        items = await client.conversations.items.list(conversation.id, order="asc")
        texts = [item.content[0].text for item in items.data if item.type == "message"]  # type: ignore[union-attr]
        assert texts == ["one", "heard 1: one", "two", "heard 2: one | two"]
        assert (await client.conversations.retrieve(conversation.id)).metadata == {"topic": "tests"}


async def test_store_false_keeps_nothing(hosted: Hosted) -> None:
    async with sdk(hosted, ALICE[0]) as client:
        answer = await client.responses.create(model="chat", input="off the record", store=False)
        assert answer.output_text == "heard 1: off the record"
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(answer.id)
    assert await hosted.conversations() == []  # no history, no session


async def test_no_tenant_reaches_another_tenants_responses_or_conversations(hosted: Hosted) -> None:
    async with sdk(hosted, ALICE[0]) as alice, sdk(hosted, BOB[0]) as bob:
        secret = await alice.responses.create(model="chat", input="alice's secret")
        conversation = await alice.conversations.create()
        await alice.responses.create(model="chat", input="in the conversation", conversation=conversation.id)
        attempts = [
            bob.responses.retrieve(secret.id),
            bob.responses.create(model="chat", input="continue", previous_response_id=secret.id),
            bob.responses.create(model="chat", input="join", conversation=conversation.id),
            bob.conversations.retrieve(conversation.id),
            bob.conversations.items.list(conversation.id),
        ]
        for attempt in attempts:
            with pytest.raises(openai.NotFoundError):
                await attempt
        mine = await alice.responses.create(model="chat", input="still mine", previous_response_id=secret.id)
        assert mine.output_text == "heard 2: alice's secret | still mine"


async def test_agentkeeps_responses_client_runs_an_agent_whose_history_the_host_keeps(hosted: Hosted) -> None:
    client = OpenAIResponsesClient("chat", base_url=f"{hosted.server.url}/v1", api_key=ALICE[0])
    try:
        agent = client.as_agent("You are terse.")
        session = agent.create_session()
        first = await agent.run("My name is Ada.", session=session)
        assert first.text == "heard 1: My name is Ada."
        saved = session.service_session_id
        assert isinstance(saved, str)
        assert saved.startswith("resp_")
        resumed = agent.get_session(service_session_id=saved)
        second = await agent.run("What is my name?", session=resumed)
        assert second.text == "heard 2: My name is Ada. | What is my name?"
    finally:
        await client.aclose()


async def test_items_page_newest_first_and_a_page_reads_only_what_lies_before_it(hosted: Hosted) -> None:
    store = hosted.history.store
    reads: list[int | None] = []
    real_read = store.read

    async def read(conversation_id: str, **options: Any) -> HistoryView:
        reads.append(options.get("last"))
        return await real_read(conversation_id, **options)

    store.read = read  # type: ignore[method-assign]
    seeded = [{"type": "message", "role": "user", "content": f"note {i}"} for i in range(60)]
    async with sdk(hosted, ALICE[0]) as client:
        conversation = await client.conversations.create(items=seeded)  # type: ignore[arg-type]
        reads.clear()
        first = await client.conversations.items.list(conversation.id, limit=7)
        assert [item.content[0].text for item in first.data] == [f"note {i}" for i in range(59, 52, -1)]  # type: ignore[union-attr]
        assert first.has_more
        assert reads
        assert all(last is not None and last <= 16 for last in reads)  # not the whole view
        paged = [item.id async for item in client.conversations.items.list(conversation.id, limit=7)]
        everything = await client.conversations.items.list(conversation.id, order="asc", limit=100)
    assert paged == [item.id for item in reversed(everything.data)]
    assert len(paged) == len(set(paged)) == 60


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


async def test_a_request_sent_again_with_its_idempotency_key_is_answered_from_the_store(
    hosted: Hosted,
) -> None:
    """A client that retries (a dropped connection, a crashed process) sends the same request with
    the same key: it gets the same response, streamed or not, and nothing runs or is stored twice;
    in a new conversation, continuing the newest response, and branching from an earlier one."""
    async with sdk(hosted, ALICE[0]) as client:
        first = await client.responses.create(model="chat", input="hello", extra_headers=keyed("k-new"))
        again = await client.responses.create(model="chat", input="hello", extra_headers=keyed("k-new"))
        assert (again.id, again.output_text) == (first.id, "heard 1: hello")
        stream = await client.responses.create(
            model="chat", input="hello", stream=True, extra_headers=keyed("k-new")
        )
        events = [event async for event in stream]
        assert events[-1].type == "response.completed"
        assert events[-1].response.id == first.id  # type: ignore[union-attr]
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
        assert deltas == "heard 1: hello"

        def on(previous: str, text: str, key: str) -> Any:
            return client.responses.create(
                model="chat", input=text, previous_response_id=previous, extra_headers=keyed(key)
            )

        second = await on(first.id, "again", "k-next")
        retried = await on(first.id, "again", "k-next")  # first is no longer the newest: no branch
        assert (retried.id, retried.output_text) == (second.id, "heard 2: hello | again")
        fork = await on(first.id, "fork", "k-fork")
        fork_again = await on(first.id, "fork", "k-fork")
        assert (fork_again.id, fork_again.output_text) == (fork.id, "heard 2: hello | fork")

        with pytest.raises(openai.UnprocessableEntityError) as reused:
            await client.responses.create(model="chat", input="something else", extra_headers=keyed("k-new"))
        assert reused.value.code == "idempotency_key_reused"
    async with sdk(hosted, BOB[0]) as client:  # a key is the tenant's own
        bobs = await client.responses.create(model="chat", input="hello", extra_headers=keyed("k-new"))
        assert bobs.id != first.id
    main, branch = f"conv_{first.id[5:37]}", f"conv_{fork.id[5:37]}"
    stored = {
        key.split("::", 1)[1]: [m.text for m in await hosted.stored(key)]
        for key in await hosted.conversations()
    }
    assert stored[main] == ["hello", "heard 1: hello", "again", "heard 2: hello | again"]
    assert stored[branch] == ["hello", "heard 1: hello", "fork", "heard 2: hello | fork"]
    async with httpx.AsyncClient(base_url=hosted.server.url, timeout=30) as raw:
        doubled = await raw.post(
            "/v1/responses",
            json={"model": "chat", "input": "x"},
            headers=[
                ("Authorization", f"Bearer {ALICE[0]}"),
                ("Idempotency-Key", "a"),
                ("Idempotency-Key", "b"),
            ],
        )
        assert (doubled.status_code, doubled.json()["error"]["param"]) == (400, "Idempotency-Key")
