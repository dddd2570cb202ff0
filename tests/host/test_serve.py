"""``agentkeep serve`` as real processes with the real offline model: a fresh install serves, API
keys gate it, a non-loopback bind without keys is refused, and two processes on one PostgreSQL
store serve one conversation in turns (how the server scales out)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentkeep.message_stores.base import close_store
from agentkeep.message_stores.postgres import PostgresMessageStore
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from tests.clients.servers import free_port
from tests.clients.test_openai import ModelList
from tests.host.conftest import conversation, run, user
from tests.host.processes import running
from tests.message_stores.backend_postgres import URL as POSTGRES_URL
from tests.message_stores.backend_postgres import drop_schema, new_schema
from tests.private_pgbouncer import PgBouncer
from tests.test_cli import ok, one_line_error
from tests.test_cli import run as run_cli


@contextmanager
def serving(env: dict[str, str], *arguments: str) -> Iterator[str]:
    """``agentkeep serve`` on a free port until the block ends; yields its URL."""
    with running(env, "serve", "--max-tokens", "8", *arguments, ready="/readyz", wait=120) as url:
        yield url


def add_key(env: dict[str, str], tenant: str, file: Path) -> str:
    key = ok(run_cli(env, "api-keys", "add", tenant, "--file", str(file))).strip()
    assert key.startswith("ak_")
    return key


def test_api_keys_are_printed_once_and_stored_hashed(env: dict[str, str], tmp_path: Path) -> None:
    file = tmp_path / "keys"
    alice, bob = add_key(env, "alice", file), add_key(env, "bob", file)
    text = file.read_text()
    assert alice not in text
    assert bob not in text
    assert [line.split()[0] for line in text.splitlines()] == ["alice", "bob"]
    assert file.stat().st_mode & 0o777 == 0o600
    one_line_error(run_cli(env, "api-keys", "add", "a::b", "--file", str(file)), "cannot be used")


def test_a_non_loopback_bind_without_keys_is_refused(env: dict[str, str]) -> None:
    one_line_error(run_cli(env, "serve", "--host", "0.0.0.0", "--port", str(free_port())), "without API keys")


@pytest.mark.model
async def test_serve_answers_over_agui_with_the_local_model_and_remembers(
    env: dict[str, str], tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    key = add_key(env, "alice", keys)
    path = tmp_path / "served.db"
    with serving(env, "--store", f"sqlite://{path}", "--api-key-file", str(keys)) as url:
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"threadId": "t", "runId": "r", "messages": [user("hi")]}
            assert (await client.post(f"{url}/agents/chat", json=body)).status_code == 401
        first = [user("My name is Ada.")]
        events = await run(url, "t", first, key=key)
        assert events[-1]["type"] == "RUN_FINISHED", events
        answer = conversation(events)
        assert answer
        assert answer[0]["content"]
        events = await run(url, "t", [*first, *answer, user("What is my name?")], key=key)
        assert events[-1]["type"] == "RUN_FINISHED", events
    store = SQLiteMessageStore(path)
    try:
        stored = (await store.read("alice::t")).messages
    finally:
        await close_store(store)
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[1].message_id == answer[0]["id"]


@pytest.fixture(params=["direct", "pgbouncer"])
def postgres_store(request: pytest.FixtureRequest) -> Iterator[str]:
    """A store URL on a schema of its own: straight to the server, or through the session's
    private pgbouncer in transaction pooling mode (``pooler=transaction``)."""
    schema = new_schema("akserve")
    if request.param == "direct":
        yield f"{POSTGRES_URL}?schema={schema}"
    else:
        pooler: PgBouncer = request.getfixturevalue("pgbouncer")
        yield f"{pooler.url}?pooler=transaction&schema={schema}"
    asyncio.run(drop_schema(schema))


@pytest.mark.model
async def test_serve_keeps_each_users_memory_with_the_local_models(
    env: dict[str, str], tmp_path: Path
) -> None:
    """``--memory recall --memory blocks``: the local chat model and the packaged embedding model;
    what a user said in one conversation is in their memory (found by meaning through the memory
    API), in the history's SQLite file, and another tenant sees none of it."""
    keys = tmp_path / "keys"
    alice, bob = add_key(env, "alice", keys), add_key(env, "bob", keys)
    path = tmp_path / "served.db"
    arguments = ("--store", f"sqlite://{path}", "--api-key-file", str(keys), "--memory", "recall")
    with serving(env, *arguments, "--memory", "blocks") as url:
        events = await run(url, "monday", [user("My dog is called Pixel.")], key=alice, as_user="ada")
        assert events[-1]["type"] == "RUN_FINISHED", events
        events = await run(url, "friday", [user("I play the cello.")], key=alice, as_user="ada")
        assert events[-1]["type"] == "RUN_FINISHED", events
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            as_alice = {"Authorization": f"Bearer {alice}"}
            listed = (
                await client.get("/api/memory/memories", params={"user": "ada"}, headers=as_alice)
            ).json()
            assert [m["text"] for m in listed["memories"]] == ["I play the cello.", "My dog is called Pixel."]
            found = await client.get(
                "/api/memory/search", params={"user": "ada", "q": "pets", "k": 1}, headers=as_alice
            )
            assert found.json()["hits"][0]["text"] == "My dog is called Pixel."  # by meaning: no word shared
            as_bob = {"Authorization": f"Bearer {bob}"}
            assert (await client.get("/api/memory/users", headers=as_bob)).json()["users"] == []
    one_line_error(run_cli(env, "serve", "--memory", "recall", "--memory", "facts"), "not both")


@pytest.mark.model
async def test_two_server_processes_on_one_postgres_store_serve_one_conversation(
    env: dict[str, str], postgres_store: str
) -> None:
    messages: list[dict[str, Any]] = []
    with serving(env, "--store", postgres_store) as first, serving(env, "--store", postgres_store) as second:
        for turn in range(4):
            messages.append(user(f"turn {turn}"))
            events = await run((first, second)[turn % 2], "shared", messages, key=None)
            assert events[-1]["type"] == "RUN_FINISHED", events
            messages.extend(conversation(events))
    schema = postgres_store.rsplit("schema=", 1)[1]
    store = PostgresMessageStore.from_url(POSTGRES_URL, schema=schema)
    try:
        stored = (await store.read("local::shared", raw=True)).messages
    finally:
        await close_store(store)
    assert [m.text for m in stored[::2]] == [f"turn {turn}" for turn in range(4)]
    assert [m.role for m in stored] == ["user", "assistant"] * 4
    assert [m.message_id for m in stored[1::2]] == [m["id"] for m in messages if m["role"] == "assistant"]


def test_serve_on_a_model_server_without_a_model_name_takes_its_only_model_or_refuses(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Without --api-model the server's model list decides: one model is used, several (or an
    unreachable server) are refused before the server starts, in one line."""
    store = f"sqlite://{tmp_path / 'serve.db'}"
    with ModelList("first", "second") as listing:
        one_line_error(
            run_cli(
                env, "serve", "--store", store, "--base-url", listing.base_url, "--port", str(free_port())
            ),
            "offers first, second",
            "--api-model",
        )
        listing.names = ["only"]
        with running(env, "serve", "--store", store, "--base-url", listing.base_url, ready="/readyz") as url:
            assert httpx.get(f"{url}/readyz", timeout=10).json() == {"ready": True, "agents": {"chat": "ok"}}
