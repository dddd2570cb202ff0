"""``agentkeep inspect`` as a real process over a SQLite store: without keys (loopback only) the
store's operator sees every conversation under its stored id, what ``agentkeep chat`` stored
included; no agent runs there; a non-loopback bind without keys is refused."""

from __future__ import annotations

from pathlib import Path

import httpx

from agentkeep import Message
from agentkeep.memory import MemoryRecord, MemoryScope
from agentkeep.memory.sqlite import SQLiteMemoryStore
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from tests.host.processes import running
from tests.test_cli import one_line_error
from tests.test_cli import run as run_cli


async def test_inspect_shows_the_whole_store_to_its_operator_and_runs_nothing(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = tmp_path / "store.db"
    store = SQLiteMessageStore(path)
    try:
        await store.append("demo-1", [Message("user", ["from agentkeep chat"])])  # no tenant
        await store.append("alice::chat-1", [Message("user", ["from a keyed host"])])
    finally:
        await store.aclose()
    with running(env, "inspect", "--store", f"sqlite:///{path}") as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            listed = (await client.get("/api/agents/chat/sessions")).json()
            assert sorted(s["id"] for s in listed["sessions"]) == ["alice::chat-1", "demo-1"]
            page = await client.get("/api/agents/chat/sessions/demo-1/messages")
            assert [m["text"] for m in page.json()["messages"]] == ["from agentkeep chat"]
            assert (await client.get("/inspector/")).status_code == 200
            fragment = await client.get("/inspector/sessions", params={"agent": "chat"})
            assert "demo-1" in fragment.text
            assert (await client.post("/agents/chat", json={})).status_code == 404  # no agent runs
            assert (await client.post("/v1/responses", json={})).status_code == 404


def test_inspect_refuses_a_public_address_without_keys(env: dict[str, str]) -> None:
    one_line_error(run_cli(env, "inspect", "--host", "0.0.0.0"), "refusing to listen on 0.0.0.0")


async def test_inspect_shows_the_memories_of_the_tenant_its_operator_names(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = tmp_path / "store.db"
    memories = SQLiteMemoryStore(path, dimensions=384)
    try:
        await memories.add(MemoryScope("maren", tenant_id="acme"), MemoryRecord("Likes tea.", key="drink"))
        await memories.add(MemoryScope("solo"), MemoryRecord("No tenant here."))
        await memories.add(MemoryScope("maren", tenant_id="acme::team"), MemoryRecord("Narrowed."))
    finally:
        await memories.aclose()
    url_of = f"sqlite:///{path}"
    with running(env, "inspect", "--store", url_of, "--memory-store", url_of) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            page = (await client.get("/inspector/")).text
            assert 'id="show-memory"' in page
            assert 'id="tenant"' in page  # the operator names the tenant to look at
            users = (await client.get("/api/memory/users", params={"tenant": "acme"})).json()["users"]
            assert [(u["user"], u["memories"]) for u in users] == [("maren", 1)]
            assert [u["user"] for u in (await client.get("/api/memory/users")).json()["users"]] == ["solo"]
            narrowed = (await client.get("/api/memory/users", params={"tenant": "acme::team"})).json()
            assert [u["user"] for u in narrowed["users"]] == ["maren"]
            bad = await client.get("/api/memory/users", params={"tenant": "acme\x1fmaren"})
            assert bad.status_code == 400
            listed = await client.get("/api/memory/memories", params={"user": "maren", "tenant": "acme"})
            assert [m["text"] for m in listed.json()["memories"]] == ["Likes tea."]
            fragment = await client.get("/inspector/memory", params={"user": "maren", "tenant": "acme"})
            assert "Likes tea." in fragment.text
    store = SQLiteMemoryStore(path, dimensions=384)
    try:
        assert len(await store.list_memories(MemoryScope("maren", tenant_id="acme"))) == 1  # nothing changed
    finally:
        await store.aclose()
