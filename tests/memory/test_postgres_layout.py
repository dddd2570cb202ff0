"""The PostgreSQL memory schema's recorded layout: a schema written before layouts were recorded
is upgraded in place (and recorded), one of layout 3 gains the commit-by check, one of a newer
layout is refused, each once per schema."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from agentkeep.errors import SchemaVersionError
from agentkeep.memory import MemoryRecord, MemoryScope
from agentkeep.memory.postgres import MEMORY_LAYOUT, PostgresMemoryStore
from tests.message_stores.backend_postgres import URL, drop_schema, execute, new_schema

pytestmark = pytest.mark.postgres

ANA = MemoryScope("ana", tenant_id="t")


def fact(text: str, axis: int) -> MemoryRecord:
    return MemoryRecord(text, embedding=[1.0 if i == axis else 0.0 for i in range(4)])


async def layout_of(schema: str) -> str | None:
    rows = await execute(
        sql.SQL("SELECT value FROM {} WHERE name = 'layout'").format(sql.Identifier(schema, "memory_meta"))
    )
    return rows[0][0] if rows else None


async def test_a_schema_written_before_layouts_were_recorded_is_upgraded() -> None:
    schema = new_schema("akmlay")
    old = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
    try:
        kept = [await old.add(ANA, fact(f"fact {n}", n)) for n in range(3)]
        await old.aclose()
        # what the first layout left: the memories, no change log, no recorded layout
        for table in ("memory_changes", "memory_scopes"):
            await execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, table)))
        meta = sql.Identifier(schema, "memory_meta")
        await execute(sql.SQL("DELETE FROM {} WHERE name IN ('layout', 'change_log')").format(meta))
        upgraded = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4, cache_min_vectors=1)
        try:
            await upgraded.setup()
            assert await layout_of(schema) == str(MEMORY_LAYOUT)
            hits = await upgraded.search(ANA, [0.0, 1.0, 0.0, 0.0], k=1)
            assert [hit.record.id for hit in hits] == [kept[1].id]
            counted = await execute(
                sql.SQL("SELECT vectors FROM {} WHERE scope = %s").format(
                    sql.Identifier(schema, "memory_scopes")
                ),
                (ANA.key,),
            )
            assert counted == [(3,)]  # the scope's vectors, counted once by the upgrade
        finally:
            await upgraded.aclose()
        again = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
        try:
            await again.setup()  # a recorded layout: nothing to run
            assert len(await again.list_memories(ANA)) == 3
        finally:
            await again.aclose()
    finally:
        await drop_schema(schema)


async def test_a_schema_of_layout_3_gains_the_commit_by_check_and_keeps_its_memories() -> None:
    schema = new_schema("akmlay")
    old = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
    try:
        kept = [await old.add(ANA, fact(f"fact {n}", n)) for n in range(2)]
        await old.aclose()
        scopes, meta = (sql.Identifier(schema, table) for table in ("memory_scopes", "memory_meta"))
        await execute(sql.SQL("DROP TRIGGER commit_by ON {}").format(scopes))  # what layout 3 had
        await execute(sql.SQL("UPDATE {} SET value = '3' WHERE name = 'layout'").format(meta))
        upgraded = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
        try:
            await upgraded.setup()
            assert await layout_of(schema) == str(MEMORY_LAYOUT) == "7"
            triggers = await execute(
                "SELECT tgdeferrable AND tginitdeferred FROM pg_trigger "
                "WHERE tgrelid = %s::regclass AND tgname = 'commit_by'",
                (f'"{schema}"."memory_scopes"',),
            )
            assert triggers == [(True,)]
            assert {record.id for record in await upgraded.list_memories(ANA)} == {r.id for r in kept}
            await upgraded.add(ANA, fact("fact 2", 2))
            # a write past its commit-by time is refused at its COMMIT
            async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
                await conn.execute("BEGIN")
                past = "(clock_timestamp() - interval '1 s')::text"
                await conn.execute(f"SELECT set_config('agentkeep.commit_by', {past}, true)")
                await conn.execute(sql.SQL("UPDATE {} SET seq = seq").format(scopes))
                with pytest.raises(psycopg.Error, match="after the commit-by time"):
                    await conn.execute("COMMIT")
            assert len(await upgraded.list_memories(ANA)) == 3
        finally:
            await upgraded.aclose()
    finally:
        await drop_schema(schema)


async def test_a_schema_of_a_newer_layout_is_refused() -> None:
    schema = new_schema("akmlay")
    store = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
    try:
        await store.add(ANA, fact("kept", 0))
        await store.aclose()
        meta = sql.Identifier(schema, "memory_meta")
        await execute(
            sql.SQL("UPDATE {} SET value = %s WHERE name = 'layout'").format(meta), (str(MEMORY_LAYOUT + 1),)
        )
        newer = PostgresMemoryStore.from_url(URL, schema=schema, dimensions=4)
        try:
            with pytest.raises(SchemaVersionError, match="newer layout"):
                await newer.setup()
        finally:
            await newer.aclose()
    finally:
        await drop_schema(schema)
