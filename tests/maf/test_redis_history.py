"""Copying Agent Framework's Redis history into agentkeep stores, against the real Redis server
holding exactly what the reference's ``RedisHistoryProvider`` wrote (``redis/dump.json``: keys
and stored strings, replayed byte for byte under a prefix of the test's own)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from agentkeep._db.redis import RedisConnection
from agentkeep.errors import TransferError
from agentkeep.maf.redis_history import (
    RedisImportProgress,
    find_maf_conversations,
    import_maf_redis_history,
    key_segment,
    parse_maf_key,
)
from agentkeep.message_stores.base import MessageStore
from tests.maf.fixtures import REDIS_DUMP
from tests.message_stores import backend_memory, backend_postgres, backend_redis, backend_sqlite

REDIS_URL = backend_redis.REDIS_URL
TENANT_CONVERSATION = "Tenant-A::Conv-Two/Ünïcode"
BACKENDS = {
    "sqlite": backend_sqlite.open_store,
    "memory": backend_memory.open_store,
    "postgres": backend_postgres.open_store,
    "redis": backend_redis.open_store,
}


class Replayed:
    """The dump's keys under a prefix of this test's own, on the real server."""

    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection
        self.prefix = f"akmaf-{uuid.uuid4().hex[:12]}"
        self.keys: list[str] = []

    def key(self, dumped: str) -> str:
        return self.prefix + dumped[len(REDIS_DUMP["key_prefix"]) :]

    async def write(self) -> None:
        for entry in REDIS_DUMP["keys"]:
            await self.push(self.key(entry["key"]), *entry["values"])

    async def push(self, key: str, *values: str) -> None:
        self.keys.append(key)
        await self.connection.execute("RPUSH", key, *(v.encode() for v in values))

    async def clean(self) -> None:
        for key in set(self.keys):
            await self.connection.execute("DEL", key)


@pytest.fixture
async def replayed() -> AsyncIterator[Replayed]:
    connection = RedisConnection(redis_url=REDIS_URL)
    data = Replayed(connection)
    try:
        await data.write()
        yield data
    finally:
        await data.clean()
        await connection.aclose()


def _conversation(name: str) -> dict[str, Any]:
    return next(c for c in REDIS_DUMP["conversations"] if c["name"] == name)


def test_our_key_layout_is_the_references() -> None:
    for conversation in REDIS_DUMP["conversations"]:
        config = conversation["provider_config"]
        parsed = parse_maf_key(conversation["key"], config["key_prefix"])
        assert parsed is not None
        assert parsed.session_id == conversation["session_id"]
        assert parsed.tenant_id == config["tenant_id"]
        assert parsed.layout == config["key_format"]
        if parsed.layout == "scoped":
            assert (parsed.application_id, parsed.agent_id, parsed.source_id) == (
                config["application_id"],
                config["agent_id"],
                config["source_id"],
            )
            rebuilt = "|".join(
                [
                    key_segment(config["key_prefix"], "key-prefix"),
                    "v2",
                    "~none" if config["tenant_id"] is None else key_segment(config["tenant_id"], "tenant"),
                    key_segment(config["application_id"], "application"),
                    "~none" if config["agent_id"] is None else key_segment(config["agent_id"], "agent"),
                    key_segment(config["source_id"], "source"),
                    key_segment(conversation["session_id"], "session"),
                ]
            )
            assert rebuilt == conversation["key"]


def test_a_digest_segment_cannot_be_read_back() -> None:
    long_id = "Ä" * 200
    key = f"p|v2|~none|app|~none|src|{key_segment(long_id, 'session')}"
    assert "sha256-" in key
    with pytest.raises(TransferError, match="SHA-256"):
        parse_maf_key(key, "p")
    assert parse_maf_key("other|v2|~none|app|~none|src|s", "p") is None


@pytest.mark.parametrize("backend", sorted(BACKENDS))
async def test_import_copies_every_conversation_then_only_what_is_new(
    replayed: Replayed, backend: str
) -> None:
    opener: Any = BACKENDS[backend]
    manager: AbstractAsyncContextManager[MessageStore] = opener()
    async with manager as store:
        steps: list[RedisImportProgress] = []
        report = await import_maf_redis_history(
            replayed.connection, store, key_prefix=replayed.prefix, progress=steps.append
        )
        assert sorted(report.copied) == [
            "Tenant-A::Conv-Two/Ünïcode",
            "conv-legacy-0003",
            "conv-weather-0001",
        ]
        assert report.messages_copied == sum(len(e["values"]) for e in REDIS_DUMP["keys"])
        assert [s.conversations_done for s in steps] == [0, 1, 2, 3]
        for name, conversation_id in [
            ("scoped_tool_call", "conv-weather-0001"),
            ("scoped_tenant_encoded_ids", "Tenant-A::Conv-Two/Ünïcode"),
            ("legacy_key_format", "conv-legacy-0003"),
        ]:
            entries = (await store.read(conversation_id)).entries
            assert [e.message.role for e in entries] == _conversation(name)["read_back_via_get_messages"][
                "roles"
            ]
        tenant = [e.message for e in (await store.read("Tenant-A::Conv-Two/Ünïcode")).entries]
        assert tenant[0].message_id == "u-r2-1"  # the framework's own ids are kept
        assert tenant[0].text == "Je m'appelle Bob."

        again = await import_maf_redis_history(replayed.connection, store, key_prefix=replayed.prefix)
        assert again.copied == {}
        assert again.already_present == report.messages_copied

        # The framework appends a turn; the next import copies just that.
        weather = replayed.key(_conversation("scoped_tool_call")["key"])
        turn = {"type": "message", "role": "user", "contents": [{"type": "text", "text": "Thanks!"}]}
        await replayed.push(weather, json.dumps(turn))
        third = await import_maf_redis_history(replayed.connection, store, key_prefix=replayed.prefix)
        assert third.copied == {"conv-weather-0001": 1}
        assert (await store.read("conv-weather-0001")).entries[-1].message.text == "Thanks!"


async def test_filters_choose_the_conversations(replayed: Replayed) -> None:
    by_agent = await find_maf_conversations(replayed.connection, replayed.prefix, agent_id="weather-agent")
    assert [k.session_id for k in by_agent] == ["conv-weather-0001"]
    by_tenant = await find_maf_conversations(replayed.connection, replayed.prefix, tenant_id="Tenant-A")
    assert [k.conversation_id for k in by_tenant] == ["Tenant-A::Conv-Two/Ünïcode"]
    by_source = await find_maf_conversations(replayed.connection, replayed.prefix, source_id="chat_history")
    assert len(by_source) == 1


async def test_the_same_session_of_two_agents_is_refused_before_anything_is_written(
    replayed: Replayed,
) -> None:
    original = _conversation("scoped_tool_call")
    other_agent = replayed.key(original["key"]).replace("|weather-agent|", "|other-agent|")
    await replayed.push(
        other_agent, *next(k for k in REDIS_DUMP["keys"] if k["key"] == original["key"])["values"]
    )
    async with backend_memory.open_store() as store:
        with pytest.raises(TransferError, match="both hold conversation 'conv-weather-0001'"):
            await import_maf_redis_history(replayed.connection, store, key_prefix=replayed.prefix)
        assert (await store.read("conv-legacy-0003")).entries == []
        fine = await import_maf_redis_history(
            replayed.connection, store, key_prefix=replayed.prefix, agent_id="other-agent"
        )
        assert list(fine.copied) == ["conv-weather-0001"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [("{not json", "is not JSON"), (json.dumps({"role": "robot"}), "robot"), (json.dumps([1]), "object")],
)
async def test_a_bad_element_stops_its_conversation_with_nothing_written(
    replayed: Replayed, value: str, problem: str
) -> None:
    legacy = replayed.key(_conversation("legacy_key_format")["key"])
    await replayed.push(legacy, value)
    async with backend_memory.open_store() as store:
        with pytest.raises(TransferError, match=problem):
            await import_maf_redis_history(replayed.connection, store, key_prefix=replayed.prefix)
        assert (await store.read("conv-legacy-0003")).entries == []  # first in key order: nothing


async def test_a_key_that_is_not_a_list_is_refused(replayed: Replayed) -> None:
    key = f"{replayed.prefix}:a-string"
    replayed.keys.append(key)
    await replayed.connection.execute("SET", key, "x")
    async with backend_memory.open_store() as store:
        with pytest.raises(TransferError, match="not the list"):
            await import_maf_redis_history(replayed.connection, store, key_prefix=replayed.prefix)
        for conversation in ("conv-legacy-0003", "conv-weather-0001", TENANT_CONVERSATION):
            assert (await store.read(conversation)).entries == []  # checked before anything is written


def _text_message(role: str, text: str, message_id: str | None = None) -> str:
    message: dict[str, Any] = {"type": "message", "role": role, "contents": [{"type": "text", "text": text}]}
    if message_id is not None:
        message["message_id"] = message_id
    return json.dumps(message)


async def test_a_trimmed_list_with_repeated_messages_copies_only_what_is_new(replayed: Replayed) -> None:
    key = f"{replayed.prefix}:trimmed"
    await replayed.push(
        key, _text_message("user", "A"), _text_message("assistant", "ok"), _text_message("assistant", "ok")
    )
    async with backend_memory.open_store() as store:
        first = await import_maf_redis_history(replayed.connection, store, key_prefix=replayed.prefix)
        assert first.copied["trimmed"] == 3
        # The framework trims the list (max_messages) and appends a turn that repeats a reply.
        await replayed.connection.execute("LTRIM", key, 1, -1)
        await replayed.push(key, _text_message("user", "Y"), _text_message("assistant", "ok"))
        second = await import_maf_redis_history(replayed.connection, store, key_prefix=replayed.prefix)
        assert second.copied == {"trimmed": 2}
        texts = [e.message.text for e in (await store.read("trimmed")).entries]
        assert texts == ["A", "ok", "ok", "Y", "ok"]
        third = await import_maf_redis_history(replayed.connection, store, key_prefix=replayed.prefix)
        assert third.copied == {}


async def test_a_repeated_framework_id_is_numbered(replayed: Replayed) -> None:
    key = f"{replayed.prefix}:twice"
    await replayed.push(key, _text_message("user", "a", "m1"), _text_message("user", "b", "m1"))
    async with backend_memory.open_store() as store:
        await import_maf_redis_history(replayed.connection, store, key_prefix=replayed.prefix)
        ids = [e.message.message_id for e in (await store.read("twice")).entries]
        assert ids == ["m1", "m1-2"]


@pytest.mark.parametrize("session", ["acme::chat-1", "ends-with:", ""])
async def test_a_session_id_that_could_reach_another_tenant_is_refused(
    replayed: Replayed, session: str
) -> None:
    await replayed.push(f"{replayed.prefix}:{session}", _text_message("user", "hi"))
    async with backend_memory.open_store() as store:
        with pytest.raises(TransferError, match="cannot be kept apart"):
            await import_maf_redis_history(replayed.connection, store, key_prefix=replayed.prefix)
        assert (await store.read("conv-legacy-0003")).entries == []
