"""The sessions API (``/api/agents/{name}/sessions``) over real HTTP: a tenant's own conversations,
their messages paged from the newest, their message groups, deletion; another tenant's are 404."""

from __future__ import annotations

import httpx

from tests.host.conftest import ALICE, BOB, Hosted, conversation, run, user


async def two_turns(hosted: Hosted, thread: str, key: str) -> None:
    first = [user(f"{thread} one")]
    answer = conversation(await run(hosted.server.url, thread, first, key=key))
    await run(hosted.server.url, thread, [*first, *answer, user(f"{thread} two")], key=key)


async def test_a_tenant_lists_reads_groups_and_deletes_only_its_own_sessions(hosted: Hosted) -> None:
    await two_turns(hosted, "t-1", ALICE[0])
    await run(hosted.server.url, "t-2", [user("t-2 one")], key=ALICE[0])
    await run(hosted.server.url, "t-1", [user("bob's own t-1")], key=BOB[0])
    alice = {"Authorization": f"Bearer {ALICE[0]}"}
    bob = {"Authorization": f"Bearer {BOB[0]}"}
    async with httpx.AsyncClient(base_url=f"{hosted.server.url}/api/agents/chat", timeout=30) as client:
        listed = (await client.get("/sessions", headers=alice)).json()
        assert [s["id"] for s in listed["sessions"]] == ["t-2", "t-1"]  # most recently active first
        assert [s["messages"] for s in listed["sessions"]] == [2, 4]
        assert (await client.get("/sessions", params={"q": "-1"}, headers=alice)).json()["total"] == 1
        assert [s["id"] for s in (await client.get("/sessions", headers=bob)).json()["sessions"]] == ["t-1"]

        newest = (await client.get("/sessions/t-1/messages", params={"limit": 2}, headers=alice)).json()
        assert [m["text"] for m in newest["messages"]] == ["t-1 two", "heard 2: t-1 one | t-1 two"]
        assert newest["more"] is True
        older = (
            await client.get("/sessions/t-1/messages", params={"limit": 2, "offset": 2}, headers=alice)
        ).json()
        assert [m["text"] for m in older["messages"]] == ["t-1 one", "heard 1: t-1 one"]
        assert [m["seq"] for m in older["messages"]] == [1, 2]
        raw = (await client.get("/sessions/t-1/messages", params={"raw": True}, headers=alice)).json()
        assert raw["raw"] is True
        assert [m["excluded"] for m in raw["messages"]] == [False] * 4

        groups = (await client.get("/sessions/t-1/groups", headers=alice)).json()
        assert [g["kind"] for g in groups["groups"]] == ["user", "assistant_text", "user", "assistant_text"]
        assert groups["turns"] == 2
        assert groups["tokenizer"].startswith("estimate")
        assert sum(g["tokens"] for g in groups["groups"]) == groups["tokens"]
        assert (
            await client.get("/sessions/t-1/groups", params={"tokenizer": "nope"}, headers=alice)
        ).status_code == 400

        assert (await client.get("/sessions/t-2/messages", headers=bob)).status_code == 404
        assert (await client.delete("/sessions/t-2", headers=bob)).status_code == 404
        assert (await client.delete("/sessions/t-2", headers=alice)).status_code == 204
        assert (await client.get("/sessions/t-2/messages", headers=alice)).status_code == 404
        assert (await client.delete("/sessions/t-2", headers=alice)).status_code == 404
        assert (await client.get("/sessions", headers={})).status_code == 401
    assert [m.text for m in await hosted.stored("bob::t-1")] == ["bob's own t-1", "heard 1: bob's own t-1"]
