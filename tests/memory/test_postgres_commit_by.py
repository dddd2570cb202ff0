"""PostgreSQL memories: a memory whose add was reported failed is never stored later.

A private server behind the pausing proxy of the message store's tests
(:mod:`tests.message_stores.pausing_proxy`): the server is paused just before the add's COMMIT
reaches it, resumed as soon as the caller gives up (before the server's idle-in-transaction
timeout would end the transaction by itself), and refuses the COMMIT: it came after the
transaction's commit-by time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from agentkeep.errors import StorageUnavailableError
from agentkeep.memory import MemoryRecord, MemoryScope
from agentkeep.memory.postgres import PostgresMemoryStore
from tests.message_stores.backend_postgres import new_schema
from tests.message_stores.pausing_proxy import PausingProxy
from tests.message_stores.private_postgres import PostgresServer

pytestmark = pytest.mark.postgres

ANA = MemoryScope("ana", tenant_id="t")
TIMEOUT = 3.0  # the server's idle-in-transaction timeout (twice this) leaves 2 s to resume it in


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    own = PostgresServer()
    own.start()
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture
async def proxy(server: PostgresServer) -> AsyncIterator[PausingProxy]:
    own = PausingProxy(server)
    await own.start()
    try:
        yield own
    finally:
        server.resume()
        await own.close()


async def test_an_add_whose_commit_the_paused_server_gets_late_is_not_stored(
    server: PostgresServer, proxy: PausingProxy
) -> None:
    store = PostgresMemoryStore.from_url(proxy.url, schema=new_schema("akmp"), dimensions=2, timeout=TIMEOUT)
    try:
        await store.add(ANA, MemoryRecord("kept", embedding=[1.0, 0.0]))
        late = MemoryRecord("paused memory", embedding=[0.0, 1.0])
        proxy.pause_before(b"paused memory", at="commit")
        async with asyncio.timeout(60):  # a hang guard
            pending = asyncio.ensure_future(store.add(ANA, late))
            await proxy.cancelled.wait()  # the caller stopped waiting
            server.resume()
            with pytest.raises(StorageUnavailableError):
                await pending
            await proxy.paused_answered.wait()  # the server ran (or refused) the COMMIT
        assert [record.text for record in await store.list_memories(ANA)] == ["kept"]
        await store.add(ANA, late)  # the retry
        assert sorted(record.text for record in await store.list_memories(ANA)) == ["kept", "paused memory"]
    finally:
        await store.aclose()
