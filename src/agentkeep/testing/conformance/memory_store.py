"""The memory-store contract as checks: what every :class:`~agentkeep.memory.MemoryStore` does.

Describe your store with a :class:`MemoryStoreBackend` and run :data:`MEMORY_STORE_CHECKS`
against it (see :mod:`agentkeep.testing.conformance`). Covered: round trips, exact scopes
(another user, tenant or agent never sees a record), similarity order and filters, keys that
supersede (with history), updates, deletion, ``forget`` of a user, expiry, bad input, concurrent
writers of one key, the scopes of a tenant (pages joined by cursors, every write and expiry
reflected), searches by words and hybrid ones (the word index follows every write; other scopes
never match), time windows, what was said next in a session, and (for durable stores) reopening.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from ...errors import ConflictError, CorruptMemoryError, ListingCursorError, MemoryFormatError
from ...memory.base import MAX_K, NO_CURRENT, MemoryStore, rewrite_keyed
from ...memory.records import MemoryRecord, MemoryScope
from ._checks import (
    ConformanceCheck,
    NotApplicable,
    Raised,
    check_list,
    expect,
    expect_equal,
    expect_raises,
)

__all__ = ["MEMORY_STORE_CHECKS", "META_DAMAGES", "ROW_DAMAGES", "MemoryStoreBackend"]

DIMENSIONS = 8


@dataclass(frozen=True, slots=True)
class MemoryStoreBackend:
    """How the suite gets the stores of one memory-store backend.

    Attributes:
        name: The backend's name.
        open: ``open(dimensions=..., ttl=...)``: an async context manager giving a fresh,
            isolated, set-up store (its own file, schema or namespace), closed afterwards.
        reopen: ``reopen(store)``: a new store on the same data as ``store`` (``None``: the
            store keeps nothing past its lifetime, and the durability check is skipped).
        damage: ``await damage(store, memory_id, what)`` damages that stored memory's row in one
            of the ways :data:`ROW_DAMAGES` names, writing to the backend directly; it raises
            :class:`NotApplicable` for a damage the backend's columns cannot hold (``None``: the
            store keeps objects, not rows).
        damage_meta: ``await damage_meta(store, name)`` makes the store's bookkeeping row ``name``
            (one of :data:`META_DAMAGES`) hold what is no number (``NotApplicable`` where the
            store has no such row).
    """

    name: str
    open: Callable[..., AbstractAsyncContextManager[MemoryStore]]
    reopen: Callable[[MemoryStore], AbstractAsyncContextManager[MemoryStore]] | None = None
    damage: Callable[[MemoryStore, str, str], Awaitable[None]] | None = None
    damage_meta: Callable[[MemoryStore, str], Awaitable[None]] | None = None


ROW_DAMAGES: Final = (
    "metadata not JSON",
    "metadata not an object",
    "created_at out of range",
    "updated_at not a number",
    "embedding of 3 bytes",
    "embedding of NaN",
)
"""The damages :attr:`MemoryStoreBackend.damage` applies to one memory's row."""

META_DAMAGES: Final = ("layout", "dimensions")
"""The bookkeeping rows :attr:`MemoryStoreBackend.damage_meta` damages."""


MEMORY_STORE_CHECKS: list[ConformanceCheck[MemoryStoreBackend]] = []
"""The checks, in the order they run."""

_check = check_list(MEMORY_STORE_CHECKS)

ALICE = MemoryScope("alice", tenant_id="acme")


def axis(index: int, *, tilt: float = 0.0) -> list[float]:
    """A unit vector along ``index`` (tilted toward the next axis by ``tilt``)."""
    vector = [0.0] * DIMENSIONS
    vector[index % DIMENSIONS] = 1.0
    vector[(index + 1) % DIMENSIONS] = tilt
    return vector


def fact(text: str, index: int, **fields: object) -> MemoryRecord:
    return MemoryRecord(text, embedding=axis(index), **fields)  # pyright: ignore[reportArgumentType]


@_check
async def round_trip(backend: MemoryStoreBackend) -> None:
    """A stored record reads back with its fields; its embedding comes back normalized."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        record = MemoryRecord(
            "Alice lives in Lisbon.",
            embedding=[3.0, 4.0, 0, 0, 0, 0, 0, 0],
            key="home_city",
            source_session_id="s-1",
            metadata={"confidence": 0.9, "tags": ["home"]},
        )
        stored = await store.add(ALICE, record)
        embedding = stored.embedding or []
        expect(len(embedding) == DIMENSIONS, "add returns the stored embedding")
        expect(math.isclose(embedding[0], 0.6, rel_tol=1e-5), "embeddings are normalized")
        got = await store.get(ALICE, record.id)
        expect(got is not None, "get finds the record")
        assert got is not None
        for field in ("text", "key", "kind", "source_session_id", "metadata", "id", "superseded_by"):
            expect_equal(getattr(got, field), getattr(record, field), f"the stored {field}")
        expect(abs((got.created_at - record.created_at).total_seconds()) < 0.001, "created_at survives")
        expect_equal(await store.get(ALICE, "no-such-id"), None, "get of an unknown id")


@_check
async def scopes_are_exact(backend: MemoryStoreBackend) -> None:
    """A record is found only in its own scope: not by another user, tenant or agent."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        record = await store.add(ALICE, fact("Alice's PIN hint is 'blue'.", 0))
        others = [
            MemoryScope("bob", tenant_id="acme"),
            MemoryScope("alice", tenant_id="globex"),
            MemoryScope("alice"),
            MemoryScope("alice", tenant_id="acme", agent_id="travel"),
            MemoryScope("acme", tenant_id="alice"),
        ]
        for other in others:
            expect_equal(await store.get(other, record.id), None, f"get from {other}")
            expect_equal(await store.list_memories(other), [], f"list of {other}")
            expect_equal(await store.search(other, axis(0), k=5), [], f"search of {other}")
            expect_equal(await store.delete(other, record.id), False, f"delete from {other}")
        expect_equal([r.id for r in await store.list_memories(ALICE)], [record.id], "the owner's list")


@_check
async def search_is_best_first(backend: MemoryStoreBackend) -> None:
    """Searches return the k most similar current records, best first, with cosine scores."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        near = await store.add(ALICE, MemoryRecord("near", embedding=axis(0, tilt=0.1)))
        middle = await store.add(ALICE, MemoryRecord("middle", embedding=axis(0, tilt=1.0)))
        far = await store.add(ALICE, MemoryRecord("far", embedding=axis(3), kind="chunk"))
        hits = await store.search(ALICE, axis(0), k=3)
        expect_equal([h.record.id for h in hits], [near.id, middle.id, far.id], "the order")
        expect(all(-1.0001 <= h.score <= 1.0001 for h in hits), "scores are cosines")
        expect(hits[0].score > hits[1].score > hits[2].score, "scores fall")
        expect(math.isclose(hits[1].score, 1 / math.sqrt(2), rel_tol=1e-3), "the cosine of 45 degrees")
        expect_equal(len(await store.search(ALICE, axis(0), k=1)), 1, "k limits")
        chunks = await store.search(ALICE, axis(0), k=5, kind="chunk")
        expect_equal([h.record.id for h in chunks], [far.id], "kind filters")
        good = await store.search(ALICE, axis(0), k=5, min_score=0.5)
        expect_equal([h.record.id for h in good], [near.id, middle.id], "min_score filters")


async def _by_words(store: MemoryStore, scope: MemoryScope, text: str) -> list[str]:
    """The texts a lexical search for ``text`` finds in ``scope``."""
    return [h.record.text for h in await store.search(scope, None, k=10, text=text, mode="lexical")]


@_check
async def searches_by_words_and_fused(backend: MemoryStoreBackend) -> None:
    """A lexical search finds records by their words (best match first); a hybrid one finds a
    record that shares the query's words even when its embedding is far, its score still the
    cosine; a vector search ignores the words; records without an embedding are never found."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        teal = await store.add(ALICE, fact("Alice painted the kayak teal last summer.", 3))
        tea = await store.add(ALICE, fact("Alice drinks green tea every morning.", 4, kind="chunk"))
        near = [await store.add(ALICE, fact(f"note {n} about nothing", 0)) for n in range(3)]
        await store.add(ALICE, MemoryRecord("Alice's kayak club: teal paddlers", key="block"))
        expect_equal(await _by_words(store, ALICE, "What colour is the kayak?"), [teal.text], "by words")
        expect_equal(await _by_words(store, ALICE, "the of and"), [], "stop words alone match nothing")
        hits = await store.search(ALICE, None, k=5, text="green tea", mode="lexical")
        expect_equal([h.record.id for h in hits], [tea.id], "a lexical search")
        expect(hits[0].score > 0 and hits[0].lexical_score == hits[0].score, "its score: relevance")
        hybrid = await store.search(ALICE, axis(0), k=4, text="When was the kayak painted?")
        ids = [h.record.id for h in hybrid]
        expect(teal.id in ids, "hybrid finds the word match the vectors rank last")
        expect(near[0].id in ids or near[1].id in ids or near[2].id in ids, "and the nearest")
        by_id = {h.record.id: h for h in hybrid}
        expect(math.isclose(by_id[teal.id].score, 0.0, abs_tol=1e-5), "its score is its cosine")
        expect(by_id[teal.id].lexical_score is not None, "with its relevance")
        vector = await store.search(ALICE, axis(0), k=2, text="kayak", mode="vector")
        expect(teal.id not in [h.record.id for h in vector], "a vector search ignores the words")
        strict = await store.search(ALICE, axis(0), k=5, text="kayak", min_score=0.5)
        expect(teal.id in [h.record.id for h in strict], "min_score does not drop word matches")
        kinds = await store.search(ALICE, axis(4), k=5, text="tea kayak", kind="chunk")
        expect_equal([h.record.id for h in kinds], [tea.id], "kind filters both rankings")
        for other in (MemoryScope("bob", tenant_id="acme"), MemoryScope("alice", tenant_id="globex")):
            await store.add(other, fact("Bob's kayak is teal too.", 3))
            expect_equal(await _by_words(store, ALICE, "Bob"), [], f"{other}'s words stay theirs")
            expect_equal(len(await _by_words(store, ALICE, "kayak")), 1, f"{other}'s kayak is theirs")
        expect_equal(await _by_words(store, MemoryScope("carol"), "kayak"), [], "an empty scope")


@_check
async def hybrid_search_reads_speakers_and_contexts(backend: MemoryStoreBackend) -> None:
    """Words of a record's ``speaker`` and ``context`` metadata are found as its own; in a hybrid
    search, of records alike a record said by someone the query names comes first."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        said = {"speaker": "Bo Lind", "context": "Alice: Did the ferry to Svalbard run?"}
        reply = await store.add(ALICE, MemoryRecord("Yes, twice.", embedding=axis(1), metadata=said))
        other = await store.add(
            ALICE, MemoryRecord("Yes, once.", embedding=axis(1), metadata={"speaker": "Cy"})
        )
        expect_equal(await _by_words(store, ALICE, "Svalbard ferry"), [reply.text], "by its context's words")
        expect_equal(await _by_words(store, ALICE, "lind"), [reply.text], "by its speaker's words")
        for text, first in (("What did Cy say?", other), ("Did Bo Lind ever go?", reply)):
            hits = await store.search(ALICE, axis(1), k=2, text=text)
            expect_equal(hits[0].record.id, first.id, f"{text!r}: its named speaker's record first")
        await store.update(ALICE, other.id, metadata={"speaker": "Cy", "context": "Alice: Any orcas?"})
        expect_equal(await _by_words(store, ALICE, "orcas"), [other.text], "a metadata update re-indexes")


@_check
async def the_word_index_follows_every_write(backend: MemoryStoreBackend) -> None:
    """A record's words are found while it is current: superseded, updated, deleted, forgotten
    or purged, its old words match nothing."""
    async with backend.open(dimensions=DIMENSIONS, ttl=3600) as store:
        await store.add(ALICE, fact("Alice lives in Lisbon.", 0, key="home"))
        await store.add(ALICE, fact("Alice lives in Porto.", 0, key="home"))
        expect_equal(await _by_words(store, ALICE, "Lisbon"), [], "a superseded record's words")
        expect_equal(await _by_words(store, ALICE, "Porto"), ["Alice lives in Porto."], "its successor's")
        changed = await store.add(ALICE, fact("Alice owns a bicycle.", 1))
        await store.update(ALICE, changed.id, text="Alice owns a motorbike.", embedding=axis(1))
        expect_equal(await _by_words(store, ALICE, "bicycle"), [], "an updated record's old words")
        expect_equal(await _by_words(store, ALICE, "motorbike"), ["Alice owns a motorbike."], "its new")
        await store.update(ALICE, changed.id, metadata={"checked": True})
        expect_equal(await _by_words(store, ALICE, "motorbike"), ["Alice owns a motorbike."], "metadata")
        await store.delete(ALICE, changed.id)
        expect_equal(await _by_words(store, ALICE, "motorbike"), [], "a deleted record's words")
        travel = MemoryScope("alice", tenant_id="acme", agent_id="travel")
        await store.add(travel, fact("Alice flies to Reykjavik.", 2))
        await store.forget(user_id="alice", tenant_id="acme")
        for scope in (ALICE, travel):
            expect_equal(await _by_words(store, scope, "Porto Reykjavik"), [], f"forgotten in {scope}")
        again = await store.add(ALICE, fact("Alice lives in Porto again.", 0))
        expect_equal(await _by_words(store, ALICE, "Porto"), [again.text], "only what came after")
        long_ago = datetime.now(UTC) - timedelta(hours=2)
        await store.add(ALICE, fact("Alice sailed to Madeira.", 3, created_at=long_ago))
        expect_equal(await _by_words(store, ALICE, "Madeira"), [], "an expired record's words")
        hybrid = await store.search(ALICE, axis(3), k=5, text="Madeira")
        expect("Alice sailed to Madeira." not in [h.record.text for h in hybrid], "nor by hybrid")
        expect_equal(await store.purge_expired(), 1, "purged")
        expect_equal(await _by_words(store, ALICE, "Madeira"), [], "a purged record's words")


@_check
async def searches_keep_a_time_window(backend: MemoryStoreBackend) -> None:
    """``since`` and ``until`` keep the records said (``created_at``) in ``[since, until)``, in
    every mode; the window is on when a memory was said, not on when it was stored."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        start = datetime(2023, 5, 1, tzinfo=UTC)
        said = [
            await store.add(
                ALICE, fact(f"Alice went hiking in week {n}.", 0, created_at=start + timedelta(weeks=n))
            )
            for n in range(6)
        ]
        since, until = start + timedelta(weeks=2), start + timedelta(weeks=4)
        wanted = {said[2].id, said[3].id}
        for mode in ("hybrid", "vector", "lexical"):
            hits = await store.search(
                ALICE,
                None if mode == "lexical" else axis(0),
                k=10,
                text="hiking",
                mode=mode,
                since=since,
                until=until,
            )
            expect_equal({h.record.id for h in hits}, wanted, f"a {mode} search in the window")
        later = await store.search(ALICE, axis(0), k=10, since=start + timedelta(weeks=5))
        expect_equal([h.record.id for h in later], [said[5].id], "since alone")
        earlier = await store.search(ALICE, axis(0), k=10, until=start + timedelta(weeks=1))
        expect_equal([h.record.id for h in earlier], [said[0].id], "until alone")
        nothing = await store.search(ALICE, axis(0), k=10, since=until, until=since)
        expect_equal(nothing, [], "an empty window")
        with expect_raises(ValueError, "a naive since"):
            await store.search(ALICE, axis(0), since=datetime(2023, 5, 1))


@_check
async def following_gives_what_was_said_next_in_a_session(backend: MemoryStoreBackend) -> None:
    """``following`` gives, for each record, the current records of its scope, session and kind
    said after it (by ``created_at``, then ``updated_at``), oldest first, at most ``limit``:
    never another scope's, session's or kind's, nor a superseded or deleted one; a record
    without a session is followed by nothing."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        start = datetime(2023, 5, 1, tzinfo=UTC)

        async def said(
            text: str, minute: int, session: str | None = "s1", kind: str = "chunk", key: str | None = None
        ) -> MemoryRecord:
            at = start + timedelta(minutes=minute)
            return await store.add(
                ALICE, fact(text, minute, created_at=at, source_session_id=session, kind=kind, key=key)
            )

        asked = await said("Bo: been to Svalbard?", 0)
        answer = await said("Ana: yes, twice!", 1)
        again = await said("Bo: in winter?", 2)
        await said("Ana: another day", 1, session="s2")
        await said("Ana: a fact of that minute", 1, kind="fact")
        await store.add(
            MemoryScope("bob", tenant_id="acme"),
            fact(
                "Bob's line",
                1,
                created_at=start + timedelta(seconds=30),
                source_session_id="s1",
                kind="chunk",
            ),
        )
        await said("Ana: old words", 3, key="words")
        newer = await said("Ana: new words", 4, key="words")  # supersedes the old words
        alone = await said("said in no session", 0, session=None)

        def ids(found: list[list[MemoryRecord]]) -> list[list[str]]:
            return [[r.id for r in records] for records in found]

        found = await store.following(ALICE, [asked, answer, again, alone])
        expect_equal(ids(found), [[answer.id], [again.id], [newer.id], []], "what was said next")
        expect_equal(found[0][0].text, answer.text, "a following record reads back whole")
        expect_equal(ids(await store.following(ALICE, [asked], limit=2)), [[answer.id, again.id]], "limit 2")
        expect_equal(
            ids(await store.following(ALICE, [asked], limit=10)),
            [[answer.id, again.id, newer.id]],
            "everything after, the superseded version left out",
        )
        expect_equal(await store.following(ALICE, []), [], "nothing asked")
        expect_equal(
            ids(await store.following(MemoryScope("carol", tenant_id="acme"), [asked])),
            [[]],
            "another scope's session of the same name",
        )
        await store.delete(ALICE, answer.id)
        expect_equal(ids(await store.following(ALICE, [asked])), [[again.id]], "after a delete")
        # a session imported with one time for all its messages: in the order they were remembered
        imported = [
            await store.add(
                ALICE,
                fact(
                    f"imported {n}",
                    n,
                    created_at=start,
                    updated_at=start + timedelta(seconds=10 - n),
                    source_session_id="s3",
                    kind="chunk",
                ),
            )
            for n in range(3)
        ]
        expect_equal(
            ids(await store.following(ALICE, imported, limit=5)),
            [[], [imported[0].id], [imported[1].id, imported[0].id]],
            "said at one time: in the order remembered",
        )
        tied = [
            await store.add(
                ALICE,
                fact(f"tied {n}", 0, id=f"tied-{n}", created_at=start, source_session_id="s4", kind="chunk"),
            )
            for n in ("a", "_", "B")
        ]
        expect_equal(
            ids(await store.following(ALICE, tied, limit=5)),
            [[], ["tied-a"], ["tied-_", "tied-a"]],
            "said and remembered at one time: by id, in code point order",
        )
        for limit in (0, MAX_K + 1):
            with expect_raises(ValueError, f"limit {limit}"):
                await store.following(ALICE, [asked], limit=limit)


@_check
async def search_requests_that_ask_for_nothing_sensible_are_refused(backend: MemoryStoreBackend) -> None:
    """A lexical search needs text and takes no min_score; the others need an embedding."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        with expect_raises(ValueError, "a lexical search without text"):
            await store.search(ALICE, axis(0), mode="lexical")
        with expect_raises(ValueError, "a hybrid search without an embedding"):
            await store.search(ALICE, None, text="tea")
        with expect_raises(ValueError, "a vector search without an embedding"):
            await store.search(ALICE, None, mode="vector")
        with expect_raises(ValueError, "a lexical search with min_score"):
            await store.search(ALICE, None, text="tea", mode="lexical", min_score=0.5)
        with expect_raises(ValueError, "an unknown mode"):
            await store.search(ALICE, axis(0), text="tea", mode="fuzzy")  # pyright: ignore[reportArgumentType]


@_check
async def a_key_supersedes_with_history(backend: MemoryStoreBackend) -> None:
    """A newer record with a key replaces the current one of that key; the older one stays in history."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        old = await store.add(ALICE, fact("Alice lives in Lisbon.", 0, key="home_city"))
        other = await store.add(ALICE, fact("Alice likes tea.", 2, key="drink"))
        new = await store.add(ALICE, fact("Alice lives in Porto.", 1, key="home_city"))
        listed = {r.id for r in await store.list_memories(ALICE)}
        expect_equal(listed, {new.id, other.id}, "current records")
        found = [h.record.id for h in await store.search(ALICE, axis(0), k=5)]
        expect(old.id not in found, "a superseded record is not found")
        history = await store.history(ALICE, "home_city")
        expect_equal([r.id for r in history], [old.id, new.id], "the key's history, oldest first")
        expect_equal(history[0].superseded_by, new.id, "the older record names its successor")
        expect(history[1].current, "the newest is current")
        now = await store.current(ALICE, "home_city")
        expect(now is not None and now.id == new.id, "current() names the newest")
        expect_equal(await store.current(ALICE, "no_such_key"), None, "current() of an unknown key")
        again = await store.get(ALICE, old.id)
        expect(again is not None and again.superseded_by == new.id, "get still reads a superseded record")
        bob = MemoryScope("bob", tenant_id="acme")
        await store.add(bob, fact("Bob lives in Faro.", 4, key="home_city"))
        expect_equal(len(await store.history(ALICE, "home_city")), 2, "another scope's key is its own")


@_check
async def replaces_refuses_a_record_that_is_no_longer_current(backend: MemoryStoreBackend) -> None:
    """add(..., replaces=id) stores only while id is the key's current record (compare and set)."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        first = await store.add(ALICE, MemoryRecord("v1", key="block.human", kind="block"))
        second = await store.add(
            ALICE, MemoryRecord("v2", key="block.human", kind="block"), replaces=first.id
        )
        with expect_raises(ConflictError, "a write based on a superseded record"):
            await store.add(ALICE, MemoryRecord("v2'", key="block.human", kind="block"), replaces=first.id)
        listed = [r.text for r in await store.list_memories(ALICE, kind="block")]
        expect_equal(listed, ["v2"], "what is current after the refused write")
        expect_equal(second.key, "block.human", "the accepted write")
        with expect_raises(ConflictError, "replaces on a key with no current record"):
            await store.add(ALICE, MemoryRecord("x", key="block.other", kind="block"), replaces=first.id)
        fresh = await store.add(ALICE, MemoryRecord("y", key="block.new", kind="block"), replaces=NO_CURRENT)
        with expect_raises(ConflictError, "NO_CURRENT on a key that has a current record"):
            await store.add(ALICE, MemoryRecord("y'", key="block.new", kind="block"), replaces=NO_CURRENT)
        expect_equal(
            [r.id for r in await store.history(ALICE, "block.new")], [fresh.id], "the first write only"
        )


@_check
async def read_modify_writes_of_one_key_lose_nothing(backend: MemoryStoreBackend) -> None:
    """Concurrent rewrite_keyed calls of one (new) key each land: none is lost."""
    async with backend.open(dimensions=DIMENSIONS) as store:

        def adder(line: str) -> Callable[[MemoryRecord | None], MemoryRecord]:
            def change(current: MemoryRecord | None) -> MemoryRecord:
                text = line if current is None else f"{current.text}\n{line}"
                return MemoryRecord(text, key="block.log", kind="block")

            return change

        await asyncio.gather(
            *(rewrite_keyed(store, ALICE, "block.log", adder(f"l{n}"), attempts=20) for n in range(6))
        )
        (current,) = [r for r in await store.list_memories(ALICE) if r.key == "block.log"]
        expect_equal(sorted(current.text.splitlines()), [f"l{n}" for n in range(6)], "every line")


@_check
async def the_same_id_in_two_scopes_is_two_records(backend: MemoryStoreBackend) -> None:
    """Ids are unique within a scope; another scope's record of the same id is its own."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        bob = MemoryScope("bob", tenant_id="acme")
        mine = await store.add(ALICE, fact("alice's", 0, id="shared-id"))
        theirs = await store.add(bob, fact("bob's", 1, id="shared-id"))
        got = await store.get(ALICE, mine.id)
        expect(got is not None and got.text == "alice's", "each scope reads its own")
        expect_equal(await store.delete(bob, theirs.id), True, "bob deletes his")
        got = await store.get(ALICE, mine.id)
        expect(got is not None and got.text == "alice's", "alice's stays")
        later = await store.add(bob, fact("bob's new", 0))
        found = [h.record.id for h in await store.search(ALICE, axis(0), k=5)]
        expect(later.id not in found, "a record added after a delete in another scope is not found")


@_check
async def concurrent_writers_of_one_key_leave_one_current(backend: MemoryStoreBackend) -> None:
    """Records of one key written at once: exactly one is current, all are in the history."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        await asyncio.gather(*(store.add(ALICE, fact(f"mood {n}", n, key="mood")) for n in range(10)))
        current = [r for r in await store.list_memories(ALICE) if r.key == "mood"]
        expect_equal(len(current), 1, "current records of the key")
        history = await store.history(ALICE, "mood")
        expect_equal(len(history), 10, "the key's history")
        expect_equal(sum(r.current for r in history), 1, "current records in the history")


@_check
async def update_and_delete(backend: MemoryStoreBackend) -> None:
    """Updates change a current record (a new text with its embedding); deletes remove it."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        record = await store.add(ALICE, fact("Alice has a cat.", 0))
        with expect_raises(MemoryFormatError, "a new text without its embedding"):
            await store.update(ALICE, record.id, text="Alice has two cats.")
        changed = await store.update(ALICE, record.id, text="Alice has two cats.", embedding=axis(5))
        expect_equal(changed.text, "Alice has two cats.", "the new text")
        hits = await store.search(ALICE, axis(5), k=1)
        expect_equal([h.record.text for h in hits], ["Alice has two cats."], "found by its new embedding")
        await store.update(ALICE, record.id, metadata={"checked": True})
        got = await store.get(ALICE, record.id)
        expect(got is not None and got.metadata == {"checked": True}, "the new metadata")
        with expect_raises(LookupError, "an update of an unknown record"):
            await store.update(ALICE, "missing", metadata={})
        expect_equal(await store.delete(ALICE, record.id), True, "the first delete")
        expect_equal(await store.delete(ALICE, record.id), False, "the second delete")
        expect_equal(await store.search(ALICE, axis(5), k=5), [], "a deleted record is not found")


@_check
async def forget_removes_a_users_memories_everywhere(backend: MemoryStoreBackend) -> None:
    """forget removes a user's memories of one tenant in every agent scope, history included."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        travel = MemoryScope("alice", tenant_id="acme", agent_id="travel")
        await store.add(ALICE, fact("a", 0, key="k"))
        await store.add(ALICE, fact("b", 1, key="k"))
        await store.add(travel, fact("c", 2))
        bob = await store.add(MemoryScope("bob", tenant_id="acme"), fact("d", 3))
        elsewhere = await store.add(MemoryScope("alice", tenant_id="globex"), fact("e", 4))
        expect_equal(await store.forget(user_id="alice", tenant_id="acme"), 3, "records removed")
        for scope in (ALICE, travel):
            expect_equal(await store.list_memories(scope), [], f"what is left in {scope}")
            expect_equal(await store.search(scope, axis(0), k=5), [], f"what is found in {scope}")
        expect_equal(await store.history(ALICE, "k"), [], "the history")
        expect(await store.get(MemoryScope("bob", tenant_id="acme"), bob.id) is not None, "another user")
        kept = await store.get(MemoryScope("alice", tenant_id="globex"), elsewhere.id)
        expect(kept is not None, "the same user in another tenant")
        expect_equal(await store.forget(user_id="alice", tenant_id="acme"), 0, "a second forget")


@_check
async def expired_memories_are_neither_found_nor_kept(backend: MemoryStoreBackend) -> None:
    """With a ttl, a memory last updated longer ago is not listed or found, and purge removes it."""
    async with backend.open(dimensions=DIMENSIONS, ttl=3600) as store:
        long_ago = datetime.now(UTC) - timedelta(hours=2)
        old = await store.add(ALICE, fact("old", 0, created_at=long_ago))
        fresh = await store.add(ALICE, fact("fresh", 1))
        expect_equal([r.id for r in await store.list_memories(ALICE)], [fresh.id], "listed")
        expect_equal([h.record.id for h in await store.search(ALICE, axis(0), k=5)], [fresh.id], "found")
        said = await store.add(ALICE, fact("said", 2, created_at=long_ago, source_session_id="s"))
        await store.add(
            ALICE, fact("expired reply", 3, created_at=long_ago + timedelta(seconds=1), source_session_id="s")
        )
        reply = await store.add(ALICE, fact("fresh reply", 4, source_session_id="s"))
        following = await store.following(ALICE, [said], limit=5)
        expect_equal([[r.id for r in f] for f in following], [[reply.id]], "followed")
        expect_equal(await store.purge_expired(), 3, "purged")
        expect_equal(await store.get(ALICE, old.id), None, "a purged record")


@_check
async def bad_input_is_refused_and_changes_nothing(backend: MemoryStoreBackend) -> None:
    """Wrong dimensions, a reused id, a bad query: typed errors, nothing stored."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        with expect_raises(MemoryFormatError, "an embedding of another length"):
            await store.add(ALICE, MemoryRecord("x", embedding=[1.0, 0.0]))
        record = await store.add(ALICE, fact("once", 0))
        with expect_raises(MemoryFormatError, "a reused id"):
            await store.add(ALICE, MemoryRecord("twice", embedding=axis(1), id=record.id))
        with expect_raises(MemoryFormatError, "a query of another length"):
            await store.search(ALICE, [1.0, 0.0])
        with expect_raises(ValueError, "k = 0"):
            await store.search(ALICE, axis(0), k=0)
        expect_equal([r.text for r in await store.list_memories(ALICE)], ["once"], "what is stored")
        with expect_raises(MemoryFormatError, "NaN in an embedding"):
            MemoryRecord("x", embedding=[math.nan] * DIMENSIONS)
        with expect_raises(MemoryFormatError, "an empty text"):
            MemoryRecord("  ", embedding=axis(0))
        with expect_raises(MemoryFormatError, "an embedding of zeros"):
            MemoryRecord("x", embedding=[0.0] * DIMENSIONS)
        with expect_raises(MemoryFormatError, "a naive time"):
            MemoryRecord("x", embedding=axis(0), created_at=datetime(2026, 1, 1))
        with expect_raises(ValueError, "k above the limit"):
            await store.search(ALICE, axis(0), k=MAX_K + 1)
        with expect_raises(ValueError, "replaces for a record without a key"):
            await store.add(ALICE, fact("loose", 1), replaces=record.id)


@_check
async def a_record_without_an_embedding_is_listed_never_found(backend: MemoryStoreBackend) -> None:
    """A record without an embedding (read by key, not by meaning) is stored and listed, never found."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        plain = await store.add(ALICE, MemoryRecord("name: Alice", key="profile.name", kind="profile"))
        found = await store.add(ALICE, fact("Alice likes tea.", 0))
        expect_equal({r.id for r in await store.list_memories(ALICE)}, {plain.id, found.id}, "listed")
        expect_equal([h.record.id for h in await store.search(ALICE, axis(0), k=5)], [found.id], "found")
        newer = await store.add(ALICE, MemoryRecord("name: Alicia", key="profile.name", kind="profile"))
        expect_equal(
            [r.id for r in await store.history(ALICE, "profile.name")], [plain.id, newer.id], "history"
        )
        changed = await store.update(ALICE, newer.id, text="name: Ali", embedding=axis(4))
        expect_equal(changed.text, "name: Ali", "an update that gives it an embedding")
        expect_equal([h.record.id for h in await store.search(ALICE, axis(4), k=1)], [newer.id], "then found")


@_check
async def listing_is_newest_first(backend: MemoryStoreBackend) -> None:
    """Listings are newest first, limited by limit, filtered by kind."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        start = datetime.now(UTC) - timedelta(minutes=10)
        for n in range(5):
            kind = "chunk" if n % 2 else "fact"
            await store.add(ALICE, fact(f"m{n}", n, kind=kind, created_at=start + timedelta(minutes=n)))
        expect_equal(
            [r.text for r in await store.list_memories(ALICE)], ["m4", "m3", "m2", "m1", "m0"], "order"
        )
        expect_equal([r.text for r in await store.list_memories(ALICE, limit=2)], ["m4", "m3"], "limit")
        expect_equal([r.text for r in await store.list_memories(ALICE, kind="chunk")], ["m3", "m1"], "kind")


@_check
async def scopes_lists_one_tenants_users_newest_first(backend: MemoryStoreBackend) -> None:
    """scopes lists the scopes of exactly one tenant that hold current, unexpired memories, the most
    recently updated first, with their counts; q filters by user id; pages by limit and offset."""
    async with backend.open(dimensions=DIMENSIONS, ttl=3600) as store:
        start = datetime.now(UTC) - timedelta(minutes=30)
        travel = MemoryScope("alice", tenant_id="acme", agent_id="travel")
        bob = MemoryScope("bob", tenant_id="acme")
        await store.add(ALICE, fact("a1", 0, key="k", created_at=start))
        await store.add(ALICE, fact("a2", 1, key="k", created_at=start + timedelta(minutes=1)))
        await store.add(ALICE, MemoryRecord("name: Alice", key="profile.name", created_at=start))
        await store.add(bob, fact("b1", 2, created_at=start + timedelta(minutes=5)))
        await store.add(travel, fact("t1", 3, created_at=start + timedelta(minutes=3)))
        await store.add(
            MemoryScope("carol", tenant_id="acme"), fact("old", 4, created_at=start - timedelta(hours=2))
        )
        await store.add(MemoryScope("alice", tenant_id="acme::team"), fact("narrowed", 5))
        await store.add(MemoryScope("alice", tenant_id="acm"), fact("prefix", 6))
        await store.add(MemoryScope("alice", tenant_id="acmez"), fact("longer", 6))
        await store.add(
            MemoryScope("zed", tenant_id="acme", agent_id="alice"), fact("agent", 6, created_at=start)
        )
        await store.add(MemoryScope("alice"), fact("no tenant", 7))
        listed = await store.scopes(tenant_id="acme")
        zed = MemoryScope("zed", tenant_id="acme", agent_id="alice")
        expect_equal(
            [(s.scope, s.memories) for s in listed],
            [(bob, 1), (travel, 1), (ALICE, 2), (zed, 1)],
            "acme's scopes, newest first, superseded and expired memories not counted",
        )
        expect(listed[0].updated_at == start + timedelta(minutes=5), "a scope's newest update")
        expect_equal(
            [s.scope for s in await store.scopes(tenant_id="acme", q="lic")],
            [travel, ALICE],
            "q: the user id only",
        )
        expect_equal(await store.scopes(tenant_id="acme", q="acme"), [], "q never matches the tenant")
        expect_equal(
            [s.scope for s in await store.scopes(tenant_id="acme", limit=1, offset=1)], [travel], "page"
        )
        expect_equal(
            [s.scope for s in await store.scopes(tenant_id=None)], [MemoryScope("alice")], "no tenant"
        )
        expect_equal(
            [s.scope.tenant_id for s in await store.scopes(tenant_id="acme::team")],
            ["acme::team"],
            "narrowed",
        )
        expect_equal(await store.scopes(tenant_id="globex"), [], "a tenant with none")
        await store.forget(user_id="bob", tenant_id="acme")
        expect_equal(
            [s.scope for s in await store.scopes(tenant_id="acme")], [travel, ALICE, zed], "after forget"
        )
        with expect_raises(ValueError, "limit 0"):
            await store.scopes(tenant_id="acme", limit=0)
        with expect_raises(MemoryFormatError, "a tenant that holds the separator"):
            await store.scopes(tenant_id="acme\x1falice")


@_check
async def scopes_pages_joined_by_cursors_list_each_scope_once(backend: MemoryStoreBackend) -> None:
    """Pages of scopes joined by their cursors (``after=page[-1].cursor``) list each scope of the
    tenant once, in the order of one long page, equal times by key; with ``q`` and ``offset``
    too; a cursor no listing issued raises ListingCursorError."""
    async with backend.open(dimensions=DIMENSIONS) as store:
        start = datetime.now(UTC) - timedelta(minutes=30)
        scopes = [MemoryScope(f"{'ab'[n % 2]}-{n:02}", tenant_id="acme") for n in range(9)]
        for n, scope in enumerate(scopes):  # three scopes at each of three times: ties by key
            when = start + timedelta(minutes=n // 3)
            await store.add(scope, fact(f"m{n}", n, created_at=when))
        await store.add(MemoryScope("a-99", tenant_id="other"), fact("elsewhere", 0))
        whole = await store.scopes(tenant_id="acme", limit=100)
        expect_equal(
            [s.scope for s in whole],
            [
                scope
                for group in (6, 3, 0)
                for scope in sorted(scopes[group : group + 3], key=lambda s: s.key)
            ],
            "one long page: newest first, equal times by key",
        )
        for size in (1, 2, 4):
            joined: list[MemoryScope] = []
            after: str | None = None
            for _ in range(20):  # bounded: 9 scopes take at most 9 pages
                page = await store.scopes(tenant_id="acme", limit=size, after=after)
                joined += [s.scope for s in page]
                if len(page) < size:
                    break
                after = page[-1].cursor
            expect_equal(joined, [s.scope for s in whole], f"pages of {size} joined by cursors")
        first = await store.scopes(tenant_id="acme", limit=2)
        expect_equal(
            await store.scopes(tenant_id="acme", limit=3, after=first[-1].cursor, offset=2),
            whole[4:7],
            "offset after a cursor",
        )
        expect_equal(
            [s.scope for s in await store.scopes(tenant_id="acme", q="a-", limit=2, after=whole[3].cursor)],
            [scopes[0], scopes[2]],
            "q after a cursor",
        )
        expect_equal(
            await store.scopes(tenant_id="other", after=whole[0].cursor), [], "another tenant's page"
        )
        expect_equal(await store.scopes(tenant_id="acme", after=whole[-1].cursor), [], "past the last")
        for bad in ("", "not a cursor", "eHl6", whole[0].cursor[:-3]):
            with expect_raises(ListingCursorError, f"the cursor {bad!r}"):
                await store.scopes(tenant_id="acme", after=bad)


@_check
async def scopes_follow_every_write_and_expiry(backend: MemoryStoreBackend) -> None:
    """The listing of scopes follows every write (add, supersede, update, delete, forget,
    purge): counts of current memories, the newest change; expired memories leave the counts
    and a scope whose memories all expired leaves the listing, without any write."""
    async with backend.open(dimensions=DIMENSIONS, ttl=3600) as store:
        now = datetime.now(UTC)
        old = now - timedelta(hours=2)
        ana, ben, cy = (MemoryScope(name, tenant_id="acme") for name in ("ana", "ben", "cy"))
        await store.add(ana, fact("a old", 0, created_at=old))
        a1 = await store.add(ana, fact("a1", 1, key="k", created_at=now - timedelta(minutes=5)))
        await store.add(ben, fact("b old", 2, created_at=old))
        await store.add(cy, fact("c1", 3, created_at=now - timedelta(minutes=10)))

        async def listed() -> list[tuple[str, int]]:
            return [(s.scope.user_id, s.memories) for s in await store.scopes(tenant_id="acme")]

        expect_equal(await listed(), [("ana", 1), ("cy", 1)], "expired: left out of counts and the listing")
        await store.add(ana, fact("a2", 4, key="k", created_at=now - timedelta(minutes=20)))
        expect_equal(await listed(), [("cy", 1), ("ana", 1)], "superseded by an older one: newest moves back")
        await store.update(cy, (await store.list_memories(cy))[0].id, metadata={"seen": True})
        expect_equal(await listed(), [("cy", 1), ("ana", 1)], "updated: newest now")
        newest = (await store.scopes(tenant_id="acme"))[0].updated_at
        expect(newest >= now, "an update moves the scope's newest change")
        await store.update(ana, (await store.current(ana, "k") or a1).id, metadata={"seen": True})
        expect_equal(await listed(), [("ana", 1), ("cy", 1)], "updated again")
        await store.delete(ana, (await store.current(ana, "k") or a1).id)
        expect_equal(await listed(), [("cy", 1)], "deleted: only expired ones left")
        await store.add(ben, fact("b1", 5))
        expect_equal(await listed(), [("ben", 1), ("cy", 1)], "a new memory brings a scope back")
        expect_equal(await store.purge_expired(), 2, "purged")
        expect_equal(await listed(), [("ben", 1), ("cy", 1)], "after the purge")
        await store.forget(user_id="ben", tenant_id="acme")
        expect_equal(await listed(), [("cy", 1)], "after forget")


@_check
async def memories_survive_reopening(backend: MemoryStoreBackend) -> None:
    """A durable store's memories, keys and history are there after reopening."""
    if backend.reopen is None:
        raise NotApplicable(f"{backend.name} keeps nothing past its lifetime")
    async with backend.open(dimensions=DIMENSIONS) as store:
        await store.add(ALICE, fact("Lisbon", 0, key="home_city"))
        new = await store.add(ALICE, fact("Porto", 1, key="home_city"))
        async with backend.reopen(store) as again:
            expect_equal(
                [r.id for r in await again.list_memories(ALICE)], [new.id], "current after reopening"
            )
            hits = await again.search(ALICE, axis(1), k=1)
            expect_equal([h.record.id for h in hits], [new.id], "found after reopening")
            expect_equal(len(await again.history(ALICE, "home_city")), 2, "history after reopening")


def _expect_corrupt(raised: Raised, store: MemoryStore, memory_id: str | None, what: str) -> None:
    error = raised.error
    assert isinstance(error, CorruptMemoryError)
    expect_equal(
        (error.store, error.memory_id), (store.location, memory_id), f"what the error names ({what})"
    )


@_check
async def damaged_rows_are_reported_not_returned(backend: MemoryStoreBackend) -> None:
    """A memory whose row was damaged (metadata, times, embedding) raises CorruptMemoryError
    naming the store and the memory from every read that meets it; a search never returns a
    score that is not a finite number; the other memories still read."""
    if backend.damage is None:
        raise NotApplicable(f"{backend.name} keeps objects, not rows: nothing can be damaged")
    applied = 0
    for what in ROW_DAMAGES:
        async with backend.open(dimensions=DIMENSIONS) as store:
            damaged = await store.add(ALICE, fact("Alice lives in Lisbon.", 0, key="home_city"))
            other = await store.add(ALICE, fact("Alice likes tea.", 1))
            try:
                await backend.damage(store, damaged.id, what)
            except NotApplicable:
                continue
            applied += 1
            reads: dict[str, Callable[[], Awaitable[object]]] = {
                "search": lambda store=store: store.search(ALICE, axis(0), k=5),
            }
            if not what.startswith("embedding"):  # reads without vectors meet the other damages
                reads |= {
                    "get": lambda store=store, damaged=damaged: store.get(ALICE, damaged.id),
                    "list_memories": lambda store=store: store.list_memories(ALICE),
                    "history": lambda store=store: store.history(ALICE, "home_city"),
                    "current": lambda store=store: store.current(ALICE, "home_city"),
                }
            for name, read in reads.items():
                with expect_raises(CorruptMemoryError, f"{name} with {what}") as raised:
                    await read()
                _expect_corrupt(raised, store, damaged.id, f"{name} with {what}")
            kept = await store.get(ALICE, other.id)
            expect_equal(kept.text if kept else None, "Alice likes tea.", f"another memory, with {what}")
    if not applied:
        raise NotApplicable(f"{backend.name} can be damaged in none of the ways the suite knows")


@_check
async def damaged_bookkeeping_is_reported_on_open(backend: MemoryStoreBackend) -> None:
    """A store whose meta rows (layout, dimensions) were damaged raises CorruptMemoryError naming
    the store and the row when opened again."""
    if backend.damage_meta is None or backend.reopen is None:
        raise NotApplicable(f"{backend.name} gives the suite no way to damage its bookkeeping")
    applied = 0
    for name in META_DAMAGES:
        async with backend.open(dimensions=DIMENSIONS) as store:
            await store.add(ALICE, fact("Alice lives in Lisbon.", 0))
            try:
                await backend.damage_meta(store, name)
            except NotApplicable:
                continue
            applied += 1
            with expect_raises(CorruptMemoryError, f"opening with a damaged {name} row") as raised:
                async with backend.reopen(store) as again:
                    await again.list_memories(ALICE)
            error = raised.error
            assert isinstance(error, CorruptMemoryError)
            expect_equal((error.store, error.row), (store.location, f"meta {name!r}"), "what the error names")
    if not applied:
        raise NotApplicable(f"{backend.name} has none of the meta rows the suite knows")
