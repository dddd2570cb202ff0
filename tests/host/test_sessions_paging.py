"""The sessions list of the sessions API by page, over real HTTP, on the in-memory and SQLite
stores: pages from ``next`` join up into the whole listing, newest first; a tenant's pages never
hold another tenant's conversations; ``q`` reads on within a bound of rows per request and goes on
from the last row it looked at; a bad cursor, another tenant's cursor and ``offset`` are 400."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentkeep import Agent, Message
from agentkeep.host import AgentHost
from agentkeep.host._sessions_api import SCAN_LIMIT
from agentkeep.message_stores import InMemoryMessageStore
from agentkeep.message_stores.base import MessageStore, close_store
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.providers import StorageHistoryProvider
from agentkeep.session_stores.memory import InMemorySessionStore
from agentkeep.testing import ScriptedChatClient
from tests.clients.servers import ThreadedUvicorn
from tests.host.conftest import ALICE, BOB, keys_of

BASE = datetime(2026, 3, 1, tzinfo=UTC)
ALICE_HEADERS = {"Authorization": f"Bearer {ALICE[0]}"}
BOB_HEADERS = {"Authorization": f"Bearer {BOB[0]}"}


def at(second: int) -> datetime:
    return BASE + timedelta(seconds=second)


class Listed:
    """A host whose agent's history is in ``store``, served, with alice's and bob's keys."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        agent = Agent(
            ScriptedChatClient(lambda _: "unused"),
            name="chat",
            context_providers=[StorageHistoryProvider(store, "history", owns_store=True)],
        )
        self.host = AgentHost(api_keys=keys_of(ALICE, BOB))
        self.host.add_agent("chat", agent, session_store=InMemorySessionStore())
        self.server = ThreadedUvicorn(self.host.app, name="agentkeep host", lifespan="on")

    async def add(self, conversations: Mapping[str, int]) -> None:
        """Store one message in each conversation (a whole key), created at its second."""
        for key, second in conversations.items():
            await self.store.append(key, [Message("user", [key], created_at=at(second))])

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=f"{self.server.url}/api/agents/chat", timeout=30)


@pytest.fixture(params=["memory", "sqlite"])
async def listed(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Listed]:
    """A :class:`Listed` host, not yet started: a test adds its data, then starts it."""
    store: MessageStore = (
        InMemoryMessageStore() if request.param == "memory" else SQLiteMessageStore(tmp_path / "host.db")
    )
    hosted = Listed(store)
    try:
        yield hosted
    finally:
        hosted.server.stop()
        await close_store(store)


async def every_page(
    client: httpx.AsyncClient, headers: dict[str, str], **params: Any
) -> list[dict[str, Any]]:
    """The answers of the list, page after page from ``next`` until it is null (at most 100)."""
    answers: list[dict[str, Any]] = []
    after: str | None = None
    for _ in range(100):
        query = dict(params) | ({} if after is None else {"after": after})
        answer = await client.get("/sessions", params=query, headers=headers)
        assert answer.status_code == 200, answer.text
        answers.append(answer.json())
        after = answers[-1]["next"]
        if after is None:
            return answers
    raise AssertionError("the pages did not end")


def ids(answers: list[dict[str, Any]]) -> list[str]:
    return [session["id"] for answer in answers for session in answer["sessions"]]


async def test_pages_join_up_newest_first_and_hold_only_the_tenants_own(listed: Listed) -> None:
    alice = {f"alice::a-{i:02}": 2 * i for i in range(23)}
    alice |= {"alice::tie-x": 100, "alice::tie-y": 100}  # equal times: the greater id first
    bob = {f"bob::b-{i}": 2 * i + 1 for i in range(5)}  # interleaved with alice's in time
    await listed.add(alice | bob | {"no-tenant": 7})
    listed.server.start()
    expected = ["tie-y", "tie-x", *[f"a-{i:02}" for i in reversed(range(23))]]
    async with listed.client() as client:
        pages = await every_page(client, ALICE_HEADERS, limit=5)
        assert ids(pages) == expected
        assert [len(page["sessions"]) for page in pages] == [5, 5, 5, 5, 5, 0]  # a full page has a next
        assert {page["limit"] for page in pages} == {5}
        assert [page["scanned"] for page in pages] == [5, 5, 5, 5, 5, 0]
        assert pages[0]["sessions"][0] == {
            "id": "tie-y",
            "messages": 1,
            "last_seq": 1,
            "updated_at": at(100).isoformat(),
        }
        uneven = await every_page(client, ALICE_HEADERS, limit=7)
        assert ids(uneven) == expected
        assert [len(page["sessions"]) for page in uneven] == [7, 7, 7, 4]  # the short page ends it
        assert ids(await every_page(client, BOB_HEADERS, limit=2)) == [f"b-{i}" for i in reversed(range(5))]
        default = (await client.get("/sessions", headers=ALICE_HEADERS)).json()
        assert (len(default["sessions"]), default["limit"], default["next"]) == (25, 50, None)


async def test_q_reads_on_from_the_last_row_it_looked_at_within_a_bound(listed: Listed) -> None:
    rows = SCAN_LIMIT + 200
    # every 7th id has a "7" marker; the rare one is the oldest of all; bob has one too
    conversations = {f"alice::n-{i:04}{'-seven' if i % 7 == 0 else ''}": 10 + i for i in range(rows)}
    conversations |= {"alice::needle": 0, "bob::needle": 5}
    await listed.add(conversations)
    listed.server.start()
    async with listed.client() as client:
        sevens = [
            key.removeprefix("alice::") for key in sorted(conversations, reverse=True) if "-seven" in key
        ]
        pages = await every_page(client, ALICE_HEADERS, limit=4, q="seven")
        assert ids(pages) == sevens  # no match skipped between pages
        assert all(len(page["sessions"]) == 4 for page in pages[:-1])
        assert pages[0]["scanned"] == 24  # n-1199 down to n-1176, the 4th match

        first = (await client.get("/sessions", params={"q": "needle"}, headers=ALICE_HEADERS)).json()
        assert (first["sessions"], first["scanned"]) == ([], SCAN_LIMIT)
        assert first["next"] is not None  # the bound stopped it, not the end
        second = (
            await client.get(
                "/sessions", params={"q": "needle", "after": first["next"]}, headers=ALICE_HEADERS
            )
        ).json()
        assert [s["id"] for s in second["sessions"]] == ["needle"]
        assert (second["scanned"], second["next"]) == (rows + 1 - SCAN_LIMIT, None)
        # the inspector's list says how far a search that found nothing yet has looked
        fragment = await client.get(
            f"{listed.server.url}/inspector/sessions",
            params={"agent": "chat", "q": "needle"},
            headers=ALICE_HEADERS,
        )
        assert f"{SCAN_LIMIT} sessions looked at for “needle” so far" in fragment.text
        assert 'id="sessions-more"' in fragment.text
        bobs = (await client.get("/sessions", params={"q": "needle"}, headers=BOB_HEADERS)).json()
        assert ([s["id"] for s in bobs["sessions"]], bobs["scanned"], bobs["next"]) == (["needle"], 1, None)


async def test_a_bad_cursor_another_tenants_cursor_offset_and_a_bad_limit_are_400(listed: Listed) -> None:
    await listed.add({"alice::mine": 1, "alice::also-mine": 2, "bob::theirs": 3})
    listed.server.start()
    async with listed.client() as client:
        bobs = (await client.get("/sessions", params={"limit": 1}, headers=BOB_HEADERS)).json()
        assert bobs["next"] is not None
        refused = {
            "not a cursor": {"after": "not a cursor!"},
            "another tenant's": {"after": bobs["next"]},
            "offset": {"offset": "10"},
            "limit 0": {"limit": "0"},
            "limit 501": {"limit": "501"},
        }
        for case, params in refused.items():
            answer = await client.get("/sessions", params=params, headers=ALICE_HEADERS)
            assert answer.status_code == 400, case
            assert answer.json()["error"]["type"] == "invalid_request", case
        offset = await client.get("/sessions", params={"offset": "0"}, headers=ALICE_HEADERS)
        assert "after=" in offset.json()["error"]["message"]
        cursor = await client.get("/sessions", params={"after": "bm9wZQ"}, headers=ALICE_HEADERS)
        assert cursor.json()["error"]["message"].startswith("after: not a listing cursor")
        mine = (await client.get("/sessions", params={"limit": 1}, headers=ALICE_HEADERS)).json()
        rest = (await client.get("/sessions", params={"after": mine["next"]}, headers=ALICE_HEADERS)).json()
        assert [s["id"] for s in mine["sessions"] + rest["sessions"]] == ["also-mine", "mine"]
