"""The in-process store's activity index against the reference listing (``listed_page`` over every
conversation): any sequence of appends, deletions and expiries, paged with any limits."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import Message
from agentkeep.message_stores import ConversationInfo, InMemoryMessageStore
from agentkeep.message_stores.base import listed_page

_IDS = st.sampled_from(["a::1", "a::2", "a::3", "b::1", "b::2", "plain", "a:x::1", "::e"])
_BASE = datetime(2026, 3, 1, tzinfo=UTC)

_Step = tuple[str, str, int]
_STEPS = st.lists(
    st.tuples(st.sampled_from(["append", "append", "append", "delete", "expire"]), _IDS, st.integers(0, 5)),
    max_size=40,
)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _every(store: InMemoryMessageStore, clock: _Clock) -> list[ConversationInfo]:
    """What the store holds, read conversation by conversation (not through the index)."""
    infos: list[ConversationInfo] = []
    for conversation_id in ["a::1", "a::2", "a::3", "b::1", "b::2", "plain", "a:x::1", "::e"]:
        view = await store.read(conversation_id, raw=True)
        if view.entries:
            newest = view.entries[-1].message.created_at
            infos.append(ConversationInfo(conversation_id, len(view.entries), view.last_seq, newest))
    return infos


async def _run(steps: list[_Step], limit: int, tenant: str | None) -> None:
    clock = _Clock()
    store = InMemoryMessageStore(max_messages=2, clock=clock)
    for number, (action, conversation_id, minutes) in enumerate(steps):
        clock.now = float(number)
        if action == "append":
            when = _BASE + timedelta(minutes=minutes)  # times repeat: ties order by id
            await store.append(conversation_id, [Message("user", [str(number)], created_at=when)])
        elif action == "delete":
            await store.delete(conversation_id)
        else:
            await store.expire(conversation_id, 0.5)  # gone at the next step
    clock.now = float(len(steps))
    expected = listed_page(await _every(store, clock), tenant=tenant, after=None, limit=None)
    pages: list[ConversationInfo] = []
    after: str | None = None
    for _ in range(len(expected) + 1):
        page = await store.list_conversations(tenant=tenant, after=after, limit=limit)
        pages += page
        if len(page) < limit:
            break
        after = page[-1].cursor
    assert pages == expected


@given(steps=_STEPS, limit=st.integers(1, 4), tenant=st.sampled_from([None, "a", "b", "", "nobody"]))
@settings(max_examples=200, deadline=None)
def test_pages_of_the_index_are_the_reference_listing(
    steps: list[_Step], limit: int, tenant: str | None
) -> None:
    asyncio.run(_run(steps, limit, tenant))
