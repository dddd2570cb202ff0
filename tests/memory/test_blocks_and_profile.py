"""Memory blocks the model edits through tools, and the profile extracted after each run (merge
rules with a scripted client; structure with the real local model)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentkeep import Agent, ChatOptions, ChatResponse, Message
from agentkeep.clients import ScriptedChatClient
from agentkeep.clients.local import LocalChatClient
from agentkeep.memory import InMemoryMemoryStore, MemoryScope
from agentkeep.memory.blocks import MemoryBlock, MemoryBlocksProvider
from agentkeep.memory.profile import ProfileMemoryProvider
from agentkeep.memory.semantic import set_memory_user
from agentkeep.memory.sqlite import SQLiteMemoryStore


async def test_the_model_edits_its_blocks_and_they_persist(tmp_path: Path) -> None:
    store = SQLiteMemoryStore(tmp_path / "memory.db", dimensions=384)
    await store.setup()
    try:
        client = ScriptedChatClient(
            [
                ScriptedChatClient.tool_call("memory_append", {"block": "human", "text": "Name: Maren."}),
                ScriptedChatClient.tool_call("memory_append", {"block": "human", "text": "Likes green tea."}),
                "Noted, Maren.",
                ScriptedChatClient.tool_call(
                    "memory_replace", {"block": "human", "old": "green tea", "new": "coffee"}
                ),
                ScriptedChatClient.tool_call(
                    "memory_replace", {"block": "human", "old": "absent", "new": "x"}
                ),
                ScriptedChatClient.tool_call("memory_append", {"block": "nope", "text": "x"}),
                ScriptedChatClient.tool_call("memory_append", {"block": "human", "text": "x" * 500}),
                "Updated.",
                "Hello again, Maren.",
            ]
        )
        blocks = MemoryBlocksProvider(store, [MemoryBlock("human", limit=200, description="About the user.")])
        agent = Agent(client, context_providers=blocks)
        first = agent.create_session()
        scope = set_memory_user(first, "maren")
        await agent.run("I'm Maren and I like green tea.", session=first)
        await agent.run("Actually I switched to coffee.", session=first)
        # The refused edits came back to the model as tool errors and changed nothing.
        results = [c for m in client.calls[-1] for c in m.function_results]
        errors = [str(r.exception) for r in results if r.exception]
        assert any("occurs nowhere" in e for e in errors)
        assert any("no memory block 'nope'" in e for e in errors)
        assert any("its limit is 200" in e for e in errors)

        later = agent.create_session()
        set_memory_user(later, "maren")
        await agent.run("Hi!", session=later)
        instructions = str(client.call_options[-1].get("instructions"))
        assert (
            '<block name="human" size="26/200"> About the user.\nName: Maren.\nLikes coffee.\n</block>'
            in instructions
        )
        history = [r.text for r in await store.history(scope, "block.human")]
        assert history == ["Name: Maren.", "Name: Maren.\nLikes green tea.", "Name: Maren.\nLikes coffee."]
        other = agent.create_session()
        set_memory_user(other, "bob")
        assert (await blocks.read(MemoryScope("bob")))["human"] is None
    finally:
        await store.aclose()


async def test_concurrent_edits_of_one_block_are_all_kept(tmp_path: Path) -> None:
    store = SQLiteMemoryStore(tmp_path / "memory.db", dimensions=8)  # its calls really interleave
    blocks = MemoryBlocksProvider(store, [MemoryBlock("human")])
    agent = Agent(ScriptedChatClient(), context_providers=blocks)
    session = agent.create_session()
    scope = set_memory_user(session, "maren")
    tools = {t.name: t for t in blocks.tools(scope, session)}
    await asyncio.gather(
        *(tools["memory_append"].invoke({"block": "human", "text": f"line {n}"}) for n in range(5))
    )
    text = (await blocks.read(scope))["human"]
    assert text is not None
    assert sorted(text.text.splitlines()) == [f"line {n}" for n in range(5)]  # the first edit too
    await blocks.replace(scope, "human", text.text, "   ")  # only whitespace left: the block is empty
    emptied = (await blocks.read(scope))["human"]
    assert emptied is not None
    assert emptied.metadata == {"empty": True}
    await store.aclose()


class UserInfo(BaseModel):
    name: str | None = None
    age: int | None = None
    city: str | None = None


def scripted_extraction(messages: Sequence[Message], options: ChatOptions) -> str:
    """Answers the profile call from what the user said (scripted), other calls with 'ok'."""
    if options.get("response_format") is None:
        return "ok"
    said = messages[-1].text
    facts: dict[str, object] = {}
    if "Maren" in said:
        facts["name"] = "Maren"
    if "34" in said:
        facts["age"] = 34
    for city in ("Bergen", "Oslo"):
        if city in said:
            facts["city"] = city
    return json.dumps(facts)


async def test_profile_merge_rules() -> None:
    store = InMemoryMemoryStore(dimensions=8)
    client = ScriptedChatClient(scripted_extraction)
    profile = ProfileMemoryProvider(store, UserInfo, client)
    agent = Agent(client, context_providers=profile)
    session = agent.create_session()
    scope = set_memory_user(session, "maren")
    await agent.run("I'm Maren, 34, living in Bergen.", session=session)
    assert await profile.profile(scope) == {"age": 34, "city": "Bergen", "name": "Maren"}
    await agent.run("I'm Maren.", session=session)  # unchanged: nothing new stored
    assert len(await store.history(scope, "profile.name")) == 1
    await agent.run("I moved to Oslo.", session=session)  # a newer value replaces the older
    await agent.run("Nice weather today.", session=session)  # nothing mentioned: nothing erased
    assert await profile.profile(scope) == {"age": 34, "city": "Oslo", "name": "Maren"}
    assert [r.metadata["value"] for r in await store.history(scope, "profile.city")] == ["Bergen", "Oslo"]
    answer_options = [o for o in client.call_options if o.get("response_format") is None]
    assert "city: Oslo" in str(answer_options[-1].get("instructions"))
    assert "name: Maren" in str(answer_options[-1].get("instructions"))
    assert "What you know" not in str(answer_options[0].get("instructions"))  # nothing known yet


async def test_a_failed_run_or_no_user_changes_no_profile() -> None:
    store = InMemoryMemoryStore(dimensions=8)

    down = [True]

    def broken(messages: Sequence[Message], options: ChatOptions) -> str:
        if options.get("response_format") is None and down[0]:
            raise RuntimeError("down")
        return json.dumps({"name": "Maren"}) if options.get("response_format") else "ok"

    client = ScriptedChatClient(broken)
    agent = Agent(client, context_providers=ProfileMemoryProvider(store, UserInfo, client))
    session = agent.create_session()
    scope = set_memory_user(session, "maren")
    with pytest.raises(RuntimeError):
        await agent.run("I'm Maren.", session=session)
    assert await store.list_memories(scope) == []
    down[0] = False
    await agent.run("I'm Maren.", session=agent.create_session())  # no user: no profile, no call
    assert all(o.get("response_format") is None for o in client.call_options)


class RecordingLocalClient(LocalChatClient):
    """The local model, keeping the structured-output responses."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, n_ctx=2048, max_tokens=32)  # short answers; extraction asks for more
        self.structured: list[ChatResponse] = []

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        response = await super().get_response(messages, options=options)
        if options.get("response_format") is not None:
            self.structured.append(response)
        return response


async def test_profile_extraction_with_the_local_model(local_model_path: Path) -> None:
    client = RecordingLocalClient(local_model_path)
    try:
        store = InMemoryMemoryStore(dimensions=8)
        profile = ProfileMemoryProvider(store, UserInfo, client)
        agent = Agent(client, instructions="Be brief.", context_providers=profile)
        session = agent.create_session()
        scope = set_memory_user(session, "maren")
        await agent.run("Hello! My name is Maren, I am 34 years old and I live in Bergen.", session=session)
        (extraction,) = client.structured
        assert isinstance(extraction.value, UserInfo)  # the grammar made it fit the schema
        known = await profile.profile(scope)
        assert set(known) <= {"name", "age", "city"}
        assert known == {k: v for k, v in extraction.value.model_dump().items() if v not in (None, "")}
        assert all(isinstance(known[f], str) for f in ("name", "city") if f in known)
        assert "age" not in known or isinstance(known["age"], int)
        for record in await store.list_memories(scope):
            assert record.kind == "profile"
            assert record.key is not None
            assert record.key.startswith("profile.")
    finally:
        await client.aclose()
