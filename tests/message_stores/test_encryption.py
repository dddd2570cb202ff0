"""Encryption at rest on every durable message store: the whole contract with a key ring, nothing
readable at rest, wrong keys typed and harmless, mixed data, and online key rotation."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import pytest

from agentkeep import DecryptionError, KeyRing, Message
from agentkeep.key_rotation import RotationProgress, rotate_messages
from agentkeep.message_stores import MessageStore, Summary, close_store
from agentkeep.message_stores.base import SupportsRecordRewrite
from agentkeep.message_stores.codec import record_key_id
from agentkeep.testing.conformance import ConformanceCheck, MessageStoreBackend, message_store_checks
from tests.discovery import message_store_backend, run_check
from tests.message_stores.conftest import BACKEND_MODULES

K1, K2 = KeyRing.generate_key(), KeyRing.generate_key()
OLD = KeyRing({"k1": K1})
ROTATED = KeyRing({"k2": K2, "k1": K1})  # k2 current, k1 still readable
NEW_ONLY = KeyRing({"k2": K2})
SECRET = "the vault code is 7319-alpha-omega"


@pytest.fixture(params=[m for m in BACKEND_MODULES if m.NAME != "memory"], ids=lambda m: m.NAME)
def backend(request: pytest.FixtureRequest) -> ModuleType:
    """Every durable backend (memory keeps nothing at rest)."""
    return request.param


@asynccontextmanager
async def opened(backend: ModuleType, **options: Any) -> AsyncIterator[MessageStore]:
    async with backend.open_store(**options) as store:
        yield store


def reopened(backend: ModuleType, store: MessageStore, key_ring: KeyRing | None) -> MessageStore:
    """Another store object on the same data, with another key ring."""
    spec = backend.spec_of(store)
    other = backend.store_from_spec(spec)
    other.key_ring = key_ring
    return other


@pytest.mark.parametrize("check", message_store_checks(), ids=str)
async def test_the_contract_holds_with_encryption(
    check: ConformanceCheck[MessageStoreBackend], backend: ModuleType
) -> None:

    @asynccontextmanager
    async def open_encrypted(**options: Any) -> AsyncIterator[MessageStore]:
        async with backend.open_store(key_ring=OLD, **options) as store:
            yield store

    plain = message_store_backend(backend)
    described = dataclasses.replace(
        plain, open=open_encrypted, reopen=lambda store: reopened(backend, store, OLD)
    )
    await run_check(check, described)


async def test_nothing_is_readable_at_rest(backend: ModuleType) -> None:
    async with opened(backend, key_ring=OLD) as store:
        author = Message("assistant", [SECRET * 3], author_name="secret-bot")
        await store.append("c", [Message("user", [SECRET]), author])
        await store.record_compaction(
            "c", summaries=[Summary(Message("assistant", [f"summary: {SECRET}"]), [author.message_id or ""])]
        )
        view = await store.read("c")
        assert [m.text for m in view.messages][-1] == SECRET * 3
        at_rest = await backend.stored_bytes(store)
        for needle in (SECRET, "vault code", "secret-bot", "summary:"):
            assert needle.encode() not in at_rest, needle


async def test_a_wrong_or_missing_key_is_a_typed_error_and_changes_nothing(backend: ModuleType) -> None:
    async with opened(backend, key_ring=OLD) as store:
        await store.append("c", [Message("user", [SECRET]), Message("assistant", ["ok"])])
        before = await backend.stored_bytes(store)
        for ring in (None, NEW_ONLY, KeyRing({"k1": K2})):  # none, another key, other material as k1
            other = reopened(backend, store, ring)
            try:
                for raw in (False, True):
                    with pytest.raises(DecryptionError) as caught:
                        await other.read("c", raw=raw)
                    assert caught.value.key_id == "k1"
                    assert caught.value.conversation_id == "c"
                    assert caught.value.seq == 1
                    assert K1 not in str(caught.value)
                    assert K2 not in str(caught.value)
            finally:
                await close_store(other)
        assert await backend.stored_bytes(store) == before  # byte for byte
        assert [m.text for m in (await store.read("c")).messages] == [SECRET, "ok"]


async def test_plain_and_encrypted_records_mix_in_one_conversation(backend: ModuleType) -> None:
    async with opened(backend) as plain:
        await plain.append("c", [Message("user", ["written before encryption"])])
        encrypted = reopened(backend, plain, OLD)
        try:
            await encrypted.append("c", [Message("user", ["written after"])])
            assert [m.text for m in (await encrypted.read("c")).messages] == [
                "written before encryption",
                "written after",
            ]
            stored = (
                await encrypted.stored_records("c") if isinstance(encrypted, SupportsRecordRewrite) else []
            )
            assert [record_key_id(r.body) for r in stored] == [None, "k1"]
        finally:
            await close_store(encrypted)


async def test_rotation_under_concurrent_writers_loses_nothing(backend: ModuleType) -> None:
    async with opened(backend) as plain:
        for c in range(3):  # plaintext history, then some under k1
            await plain.append(f"c{c}", [Message("user", [f"{SECRET} plain {c}.{i}"]) for i in range(30)])
        old = reopened(backend, plain, OLD)
        rotated = reopened(backend, plain, ROTATED)
        try:
            for c in range(3):
                await old.append(f"c{c}", [Message("user", [f"{SECRET} k1 {c}.{i}"]) for i in range(30)])
            stop = asyncio.Event()
            written: list[str] = []

            async def writer(n: int) -> None:  # writers already on the new ring, as they should be
                for i in range(200):
                    if stop.is_set():
                        return
                    text = f"during {n}.{i}"
                    await rotated.append(f"c{i % 3}", [Message("user", [text])])
                    written.append(text)
                    await asyncio.sleep(0)

            async def rotation() -> RotationProgress:
                try:
                    return await rotate_messages(rotated, ROTATED, batch_size=7)
                finally:
                    stop.set()

            async with asyncio.timeout(60):
                done, *_ = await asyncio.gather(rotation(), writer(1), writer(2))
            assert done.records_reencrypted >= 180
            assert not done.damaged
            final = reopened(backend, plain, NEW_ONLY)  # k1 retired: everything must be under k2
            try:
                texts = [m.text for c in range(3) for m in (await final.read(f"c{c}", raw=True)).messages]
            finally:
                await close_store(final)
            expected = {
                f"{SECRET} {kind} {c}.{i}" for kind in ("plain", "k1") for c in range(3) for i in range(30)
            }
            assert len(texts) == len(set(texts)) == len(expected) + len(written)
            assert set(texts) == expected | set(written)
            assert isinstance(rotated, SupportsRecordRewrite)
            for c in range(3):
                records = await rotated.stored_records(f"c{c}", limit=10_000)
                assert {record_key_id(r.body) for r in records} == {"k2"}
        finally:
            await close_store(old)
            await close_store(rotated)


async def test_a_rotation_that_crashed_resumes(backend: ModuleType) -> None:
    async with opened(backend, key_ring=OLD) as store:
        for c in range(4):
            await store.append(f"c{c}", [Message("user", [f"m{c}.{i}"]) for i in range(20)])
        rotated = reopened(backend, store, ROTATED)
        try:

            def crash(progress: RotationProgress) -> None:
                if progress.records >= 25:
                    raise KeyboardInterrupt  # the process dies after some batches

            with pytest.raises(KeyboardInterrupt):
                await rotate_messages(rotated, ROTATED, batch_size=10, on_progress=crash)
            again = await rotate_messages(rotated, ROTATED, batch_size=10)
            assert again.records == 80
            assert 0 < again.records_reencrypted < 80  # the first run's work is not redone
            assert (await rotate_messages(rotated, ROTATED)).records_reencrypted == 0
            final = reopened(backend, store, NEW_ONLY)
            try:
                assert len((await final.read("c3")).messages) == 20
            finally:
                await close_store(final)
        finally:
            await close_store(rotated)


async def test_rotation_stops_at_a_key_the_ring_lacks(backend: ModuleType) -> None:
    async with opened(backend, key_ring=OLD) as store:
        await store.append("c", [Message("user", [SECRET])])
        before = await backend.stored_bytes(store)
        lacking = reopened(backend, store, NEW_ONLY)
        try:
            with pytest.raises(DecryptionError, match="'k1'"):
                await rotate_messages(lacking, NEW_ONLY)
        finally:
            await close_store(lacking)
        assert await backend.stored_bytes(store) == before
