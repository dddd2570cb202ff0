"""The sessions API (``/api/agents/{name}/sessions``) over real HTTP: a tenant's own conversations,
their messages paged from the newest, their message groups, deletion; another tenant's are 404."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentkeep.host._schemas import CompactionResult, ErrorBody, GroupsPage, MessagesPage, SessionList
from tests.host.conftest import ALICE, BOB, Hosted, conversation, keys_of, run, user


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
        found = (await client.get("/sessions", params={"q": "-1"}, headers=alice)).json()
        assert ([s["id"] for s in found["sessions"]], found["next"], found["scanned"]) == (["t-1"], None, 2)
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


async def test_a_compaction_is_previewed_then_recorded_and_the_session_exported(hosted: Hosted) -> None:
    sent: list[dict[str, object]] = []
    for turn in range(6):
        sent.append(user(f"turn {turn}"))
        sent.extend(conversation(await run(hosted.server.url, "long", sent, key=ALICE[0])))
    alice = {"Authorization": f"Bearer {ALICE[0]}"}
    plan = {"strategies": ["turns"], "keep": 2}
    async with httpx.AsyncClient(
        base_url=f"{hosted.server.url}/api/agents/chat/sessions", timeout=30
    ) as client:
        preview = (await client.post("/long/compaction/preview", json=plan, headers=alice)).json()
        assert preview["before"]["messages"] == 12
        assert preview["after"]["messages"] == 4
        assert len(preview["excluded"]) == 8
        assert preview["recorded"] is False
        assert (
            len((await client.get("/long/messages", params={"limit": 100}, headers=alice)).json()["messages"])
            == 12
        )

        bad = await client.post(
            "/long/compaction/preview", json={"strategies": ["turns"], "max_tokens": 5}, headers=alice
        )
        assert bad.status_code == 422
        assert "max_tokens" in bad.json()["error"]["message"]
        unknown = await client.post("/long/compaction/preview", json={"strategies": ["shred"]}, headers=alice)
        assert unknown.status_code == 422

        applied = (await client.post("/long/compaction", json=plan, headers=alice)).json()
        assert applied["recorded"] is True
        assert applied["excluded"] == preview["excluded"]
        view = (await client.get("/long/messages", params={"limit": 100}, headers=alice)).json()
        assert [m["text"] for m in view["messages"]] == [
            "turn 4",
            "heard 5: turn 0 | turn 1 | turn 2 | turn 3 | turn 4",
            "turn 5",
            "heard 6: turn 0 | turn 1 | turn 2 | turn 3 | turn 4 | turn 5",
        ]
        raw = (await client.get("/long/messages", params={"limit": 100, "raw": True}, headers=alice)).json()
        assert len(raw["messages"]) == 12  # every original kept
        assert sum(m["excluded"] for m in raw["messages"]) == 8

        exported = (await client.get("/long/export", headers=alice)).json()
        assert exported["format"] == "agentkeep.conversation"
        assert exported["conversation_id"] == "long"
        assert len(exported["messages"]) == 12
        assert len(exported["excluded"]) == 8
        markdown = await client.get("/long/export", params={"format": "markdown"}, headers=alice)
        assert markdown.headers["content-type"].startswith("text/markdown")
        assert markdown.text.startswith("# Session `long`")
        bob = {"Authorization": f"Bearer {BOB[0]}"}
        assert (await client.get("/long/export", headers=bob)).status_code == 404
        assert (await client.post("/long/compaction", json=plan, headers=bob)).status_code == 404

    # the next turn runs on the compacted view
    sent.append(user("after"))
    events = await run(hosted.server.url, "long", sent, key=ALICE[0])
    assert conversation(events)[0]["content"] == "heard 3: turn 4 | turn 5 | after"


@pytest.fixture
def documented(tmp_path: Path) -> Iterator[Hosted]:
    """A keyed host that serves its OpenAPI document (off by default with keys)."""
    served = Hosted(tmp_path, api_keys=keys_of(ALICE, BOB), api_docs=True)
    served.server.start()
    try:
        yield served
    finally:
        served.server.stop()


async def test_the_openapi_document_describes_the_answers_the_endpoints_give(documented: Hosted) -> None:
    hosted = documented
    await two_turns(hosted, "doc", ALICE[0])
    alice = {"Authorization": f"Bearer {ALICE[0]}"}
    async with httpx.AsyncClient(base_url=hosted.server.url, timeout=30) as client:
        document = (await client.get("/openapi.json")).json()
        schemas = document["components"]["schemas"]
        assert {"SessionList", "MessagesPage", "GroupsPage", "CompactionResult", "ErrorBody"} <= set(schemas)
        agui = document["paths"]["/agents/{name}"]["post"]
        body = agui["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/RunAgentInput"}
        assert {"threadId", "runId", "messages"} <= set(schemas["RunAgentInput"]["properties"])
        assert "text/event-stream" in agui["responses"]["200"]["content"]
        listed = document["paths"]["/api/agents/{name}/sessions"]["get"]["responses"]
        assert listed["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/SessionList")
        base = "/api/agents/chat/sessions"
        SessionList.model_validate((await client.get(base, headers=alice)).json())
        MessagesPage.model_validate((await client.get(f"{base}/doc/messages", headers=alice)).json())
        GroupsPage.model_validate((await client.get(f"{base}/doc/groups", headers=alice)).json())
        plan = {"strategies": ["turns"], "keep": 1}
        CompactionResult.model_validate(
            (await client.post(f"{base}/doc/compaction/preview", json=plan, headers=alice)).json()
        )
        ErrorBody.model_validate((await client.get(f"{base}/nope/messages", headers=alice)).json())


async def test_a_compaction_posted_as_a_form_or_text_is_refused(hosted: Hosted) -> None:
    """A page of another site can post a form or text without asking the host first (CORS), never
    JSON: the compaction endpoints take JSON only, so such a post changes nothing."""
    await two_turns(hosted, "csrf", ALICE[0])
    alice = {"Authorization": f"Bearer {ALICE[0]}"}
    base = "/api/agents/chat/sessions/csrf"
    async with httpx.AsyncClient(base_url=hosted.server.url, timeout=30) as client:
        plan = '{"strategies": ["turns"], "keep": 1}'
        for kind in ("text/plain", "application/x-www-form-urlencoded"):
            refused = await client.post(
                f"{base}/compaction", content=plan, headers={**alice, "Content-Type": kind}
            )
            assert (refused.status_code, refused.json()["error"]["type"]) == (415, "unsupported_media_type")
        view = (await client.get(f"{base}/messages", headers=alice)).json()
    assert len(view["messages"]) == 4  # nothing was compacted
