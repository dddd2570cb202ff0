"""Long-term memory behind the host: a request names its user (``X-Agentkeep-User``, or the
Responses API's ``user``), a conversation is bound to its first user, memories stay within the
tenant and the user, and the memory API lists, searches, shows history, deletes and forgets; over
a real uvicorn server, with the memories in the host's SQLite file (sqlite-vec)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agentkeep import Agent
from agentkeep.host import AgentHost
from agentkeep.memory import MemoryBlocksProvider, MemoryScope
from agentkeep.testing import ScriptedChatClient
from tests.clients.servers import ThreadedUvicorn
from tests.host.conftest import ALICE, BOB, conversation, keys_of, run, user
from tests.host.memory_host import MemoryHost, recalling


def said(events: list[dict[str, Any]]) -> str:
    assert events[-1]["type"] == "RUN_FINISHED", events
    return conversation(events)[-1]["content"]


async def test_a_users_memories_follow_them_across_conversations_and_nobody_else(served: MemoryHost) -> None:
    url = served.url
    assert said(
        await run(url, "monday", [user("My dog is called Pixel.")], key=ALICE[0], as_user="maren")
    ) == ("recalled nothing")
    # another conversation of the same user: the memory is recalled
    friday = await run(url, "friday", [user("What is my dog called?")], key=ALICE[0], as_user="maren")
    assert said(friday) == "recalled: My dog is called Pixel."
    # another user of the tenant, the same user id in another tenant, no user at all: nothing
    for key, as_user in ((ALICE[0], "jonas"), (BOB[0], "maren"), (ALICE[0], None)):
        events = await run(
            url, f"other-{as_user}-{key[:6]}", [user("What is my dog called?")], key=key, as_user=as_user
        )
        assert said(events) == "recalled nothing", (key, as_user)
    scopes = await served.memories.scopes(tenant_id="alice")
    assert [(s.scope.user_id, s.memories) for s in scopes] == [("jonas", 1), ("maren", 2)]
    assert [s.scope.user_id for s in await served.memories.scopes(tenant_id="bob")] == ["maren"]
    bobs = await served.memories.list_memories(MemoryScope("maren", tenant_id="bob"))
    assert [m.text for m in bobs] == ["What is my dog called?"]


async def test_a_conversation_belongs_to_its_first_user(served: MemoryHost) -> None:
    url = served.url
    first = [user("I live in Porto.")]
    answer = conversation(await run(url, "t", first, key=ALICE[0], as_user="maren"))
    # the same conversation without a user header: still maren's, her memories recalled
    events = await run(url, "t", [*first, *answer, user("Where do I live?")], key=ALICE[0])
    assert said(events) == "recalled: I live in Porto."
    # another user naming it: not found, and nothing is stored, nor is the owner changed
    history = [m.text for m in await served.stored("alice::t")]
    events = await run(url, "t", [user("Where does she live?")], key=ALICE[0], as_user="jonas")
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == "not_found"
    assert await served.memories.scopes(tenant_id="alice", q="jonas") == []
    assert [m.text for m in await served.stored("alice::t")] == history
    events = await run(url, "t", [user("Where do I live?")], key=ALICE[0], as_user="maren")
    assert said(events) == "recalled: Where do I live? / I live in Porto."
    # an existing conversation without a user is bound by the first turn that names one
    await run(url, "loose", [user("hello")], key=ALICE[0])
    assert said(await run(url, "loose", [user("I live in Porto too.")], key=ALICE[0], as_user="jonas"))
    events = await run(url, "loose", [user("x")], key=ALICE[0], as_user="maren")
    assert events[-1]["code"] == "not_found"
    # a malformed user id is refused before anything runs
    async with served.client(ALICE[0]) as client:
        body = {
            "threadId": "u",
            "runId": "r",
            "messages": [user("x")],
            "tools": [],
            "context": [],
            "state": {},
        }
        refused = await client.post("/agents/chat", json=body, headers={"X-Agentkeep-User": "a\x1fb"})
        assert refused.status_code == 400
        refused = await client.post("/agents/chat", json=body, headers={"X-Agentkeep-User": "x" * 300})
        assert refused.status_code == 400
        twice = [("X-Agentkeep-User", "maren"), ("X-Agentkeep-User", "jonas")]
        refused = await client.post("/agents/chat", json=body, headers=httpx.Headers(twice))
        assert refused.status_code == 400
        assert "one X-Agentkeep-User header" in refused.json()["error"]["message"]


async def test_the_responses_api_takes_its_own_user_field(served: MemoryHost) -> None:
    async with openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key=ALICE[0], max_retries=0) as sdk:
        first = await sdk.responses.create(model="chat", input="My sister is called Ines.", user="maren")
        assert first.output_text == "recalled nothing"
        later = await sdk.responses.create(model="chat", input="What is my sister called?", user="maren")
        assert later.output_text == "recalled: My sister is called Ines."
        # continuing maren's conversation as another user: not found
        with pytest.raises(openai.NotFoundError):
            await sdk.responses.create(
                model="chat", input="and mine?", user="jonas", previous_response_id=first.id
            )
        with pytest.raises(openai.NotFoundError):
            await sdk.responses.retrieve(first.id, extra_headers={"X-Agentkeep-User": "jonas"})
        assert (await sdk.responses.retrieve(first.id)).output_text == "recalled nothing"
        # the conversation's items and description are hers only
        jonas = {"X-Agentkeep-User": "jonas"}
        with pytest.raises(openai.NotFoundError):
            await sdk.conversations.items.list(f"conv_{first.id[5:37]}", extra_headers=jonas)
        with pytest.raises(openai.NotFoundError):
            await sdk.conversations.retrieve(f"conv_{first.id[5:37]}", extra_headers=jonas)
        assert (await sdk.conversations.items.list(f"conv_{first.id[5:37]}")).data
        # a user id beyond ASCII names the same user in the body and in the header (UTF-8)
        umlaut = await sdk.responses.create(model="chat", input="Ich heiße Jürgen.", user="Jürgen")
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        same = await client.post(
            "/v1/responses",
            json={"model": "chat", "input": "Wie heiße ich?", "previous_response_id": umlaut.id},
            headers=[
                (b"Authorization", f"Bearer {ALICE[0]}".encode()),
                (b"X-Agentkeep-User", "Jürgen".encode()),
            ],
        )
        assert same.status_code == 200, same.text
        assert same.json()["output"][0]["content"][0]["text"] == "recalled: Ich heiße Jürgen."
    async with openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key=ALICE[0], max_retries=0) as sdk:
        # header and body naming two users
        with pytest.raises(openai.BadRequestError):
            await sdk.responses.create(
                model="chat", input="x", user="maren", extra_headers={"X-Agentkeep-User": "jonas"}
            )
        # a continuation without naming the user is still hers
        onward = await sdk.responses.create(
            model="chat", input="What is my sister called?", previous_response_id=later.id
        )
        assert "My sister is called Ines." in onward.output_text


async def test_the_memory_api_lists_searches_shows_history_deletes_and_forgets(served: MemoryHost) -> None:
    maren = MemoryScope("maren", tenant_id="alice")
    await run(served.url, "a", [user("My dog is called Pixel.")], key=ALICE[0], as_user="maren")
    await run(served.url, "b", [user("I drink green tea.")], key=ALICE[0], as_user="maren")
    await run(served.url, "c", [user("I like jazz.")], key=ALICE[0], as_user="jonas")
    await run(served.url, "d", [user("Bob's own secret.")], key=BOB[0], as_user="maren")
    blocks = MemoryBlocksProvider(served.memories)
    await blocks.append(maren, "human", "Prefers short answers.")
    await blocks.replace(maren, "human", "short", "very short")
    async with served.client(ALICE[0]) as alice, served.client(BOB[0]) as bob:
        users = (await alice.get("/api/memory/users")).json()
        assert [(u["user"], u["memories"]) for u in users["users"]] == [("maren", 3), ("jonas", 1)]
        assert users["more"] is False
        assert users["next"] is None
        first = (await alice.get("/api/memory/users", params={"limit": 1})).json()
        assert [u["user"] for u in first["users"]] == ["maren"]
        assert first["more"] is True
        rest = (await alice.get("/api/memory/users", params={"limit": 1, "after": first["next"]})).json()
        assert [u["user"] for u in rest["users"]] == ["jonas"]
        assert rest["next"] is None
        assert (await alice.get("/api/memory/users", params={"after": "no cursor"})).status_code == 400
        both = {"after": first["next"], "offset": 1}
        assert (await alice.get("/api/memory/users", params=both)).status_code == 400
        assert [
            u["user"] for u in (await alice.get("/api/memory/users", params={"q": "jon"})).json()["users"]
        ] == ["jonas"]
        assert [u["user"] for u in (await bob.get("/api/memory/users")).json()["users"]] == ["maren"]
        listed = (await alice.get("/api/memory/memories", params={"user": "maren"})).json()["memories"]
        assert [m["text"] for m in listed] == [
            "Prefers very short answers.",
            "I drink green tea.",
            "My dog is called Pixel.",
        ]
        assert {m["source_session_id"] for m in listed if m["kind"] == "chunk"} == {"a", "b"}
        hits = (await alice.get("/api/memory/search", params={"user": "maren", "q": "what dog"})).json()[
            "hits"
        ]
        assert hits[0]["text"] == "My dog is called Pixel."
        assert 0 < hits[0]["score"] <= 1
        history = (
            await alice.get("/api/memory/history", params={"user": "maren", "key": "block.human"})
        ).json()
        assert [m["text"] for m in history["memories"]] == [
            "Prefers short answers.",
            "Prefers very short answers.",
        ]
        assert history["memories"][0]["superseded_by"] == history["memories"][1]["id"]
        # another tenant's key, or naming another tenant, reaches none of it
        assert (await bob.get("/api/memory/memories", params={"user": "maren"})).json()["memories"][0][
            "text"
        ] == ("Bob's own secret.")
        assert (await bob.get("/api/memory/users", params={"tenant": "alice"})).status_code == 403
        pixel = next(m for m in listed if m["text"].startswith("My dog"))
        assert (
            await bob.delete(f"/api/memory/memories/{pixel['id']}", params={"user": "maren"})
        ).status_code == 404
        assert (
            await alice.delete(f"/api/memory/memories/{pixel['id']}", params={"user": "maren"})
        ).status_code == 204
        assert (
            await alice.delete(f"/api/memory/memories/{pixel['id']}", params={"user": "maren"})
        ).status_code == 404
        # bad requests
        assert (await alice.get("/api/memory/memories")).status_code == 400
        assert (await alice.get("/api/memory/search", params={"user": "maren"})).status_code == 400
        assert (await alice.get("/api/memory/users", params={"limit": 0})).status_code == 400
        assert (await alice.get("/api/memory/users", params={"offset": 10**30})).status_code == 400
        assert (await alice.get("/api/memory/memories", params={"user": " maren"})).status_code == 400
        wrong_type = await alice.get("/api/memory/users", params={"limit": "many"})
        assert wrong_type.status_code == 422
        assert wrong_type.json()["error"]["type"] == "invalid_request"
        # forget: every memory of maren in alice's tenant, history too; bob's maren stays
        forgot = await alice.delete("/api/memory/memories", params={"user": "maren"})
        assert forgot.json() == {"removed": 3}  # the tea, and the block's two versions
        assert (await alice.get("/api/memory/memories", params={"user": "maren"})).json()["memories"] == []
        assert (
            await alice.get("/api/memory/history", params={"user": "maren", "key": "block.human"})
        ).json()["memories"] == []
        assert [u["user"] for u in (await alice.get("/api/memory/users")).json()["users"]] == ["jonas"]
        assert len((await bob.get("/api/memory/memories", params={"user": "maren"})).json()["memories"]) == 1
    async with httpx.AsyncClient(base_url=served.url) as anonymous:
        assert (await anonymous.get("/api/memory/users")).status_code == 401


async def test_a_host_without_keys_answers_to_loopback_names_only() -> None:
    """A page of another site whose name points at 127.0.0.1 (DNS rebinding) is refused."""
    keyless = AgentHost()
    keyless.add_agent("chat", Agent(ScriptedChatClient(recalling), name="chat"))
    server = ThreadedUvicorn(keyless.app, name="keyless host")
    server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as client:
            port = server.url.rsplit(":", 1)[1]
            assert (await client.get("/api/agents/chat/sessions")).status_code != 403
            for name in ("localhost", "127.0.0.1", "[::1]"):
                answer = await client.get("/api/agents/chat/sessions", headers={"Host": f"{name}:{port}"})
                assert answer.status_code != 403, name
            for name in ("evil.example", "testclient"):  # no name is let in for the test rig's sake
                rebound = await client.get("/api/agents/chat/sessions", headers={"Host": f"{name}:{port}"})
                assert rebound.status_code == 403, name
                assert "loopback names" in rebound.json()["error"]["message"]
    finally:
        server.stop()


async def test_a_host_without_memory_or_embedder_says_so(tmp_path: Path) -> None:
    bare = AgentHost(api_keys=keys_of(ALICE))
    bare.add_agent("chat", Agent(ScriptedChatClient(recalling), name="chat"))
    server = ThreadedUvicorn(bare.app, name="bare host")
    server.start()
    try:
        async with httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {ALICE[0]}"}
        ) as client:
            answer = await client.get("/api/memory/users")
            assert answer.status_code == 404
            assert "no long-term memory" in answer.json()["error"]["message"]
    finally:
        server.stop()
    listing = MemoryHost(tmp_path, searchable=False)
    listing.server.start()
    try:
        async with listing.client(ALICE[0]) as client:
            assert (await client.get("/api/memory/users")).json()["users"] == []
            answer = await client.get("/api/memory/search", params={"user": "maren", "q": "dog"})
            assert answer.status_code == 501
    finally:
        listing.server.stop()


async def test_the_inspectors_memory_changes_need_the_page_and_stay_in_the_tenant(
    served: MemoryHost,
) -> None:
    await run(served.url, "m", [user("My dog is called Pixel.")], key=ALICE[0], as_user="maren")
    async with httpx.AsyncClient(
        base_url=served.url, headers={"Authorization": f"Bearer {ALICE[0]}"}
    ) as client:
        refused = await client.delete("/inspector/memory/user", params={"user": "maren"})
        assert refused.status_code == 403  # no HX-Request: not the page
        other = await client.get("/inspector/memory/users", params={"tenant": "bob"})
        assert other.status_code == 403
    assert len(await served.memories.list_memories(MemoryScope("maren", tenant_id="alice"))) == 1
