"""The session inspector in a real headless browser: Debian's chromium driven by Playwright (its
own browser download is not reachable here), against the host served by uvicorn. Screenshots of
each step go to ``tests/.artifacts/inspector/`` (ignored by git)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from agentkeep import Message
from agentkeep.compaction import CharacterEstimatorTokenizer, MessageIndex, apply_compaction
from agentkeep.compaction.plans import StrategyName, plan_compaction
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from tests.host.conftest import ALICE, BOB, Hosted, conversation, run, user

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = Path(__file__).resolve().parents[1] / ".artifacts" / "inspector"
PAYLOAD = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make test installs it)")


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    assert CHROMIUM is not None
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


async def opened(browser: Browser, url: str, key: str) -> Page:
    """The inspector page with ``key`` entered, its sessions list loaded."""
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    await page.goto(f"{url}/inspector/")
    await page.fill("#key", key)
    await page.click("#key-form button")
    await page.wait_for_selector("#session-list")
    return page


async def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def test_a_person_opens_the_list_a_session_and_its_raw_log(hosted: Hosted, browser: Browser) -> None:
    first = [user("hello")]
    answer = conversation(await run(hosted.server.url, "plain", first, key=ALICE[0]))
    await run(hosted.server.url, "plain", [*first, *answer, user("again")], key=ALICE[0])
    await run(hosted.server.url, "hostile", [user(PAYLOAD)], key=ALICE[0])
    await run(hosted.server.url, "bobs-own", [user("bob's secret")], key=BOB[0])

    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    blocked: list[str] = []  # what the Content-Security-Policy refused
    page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
    response = await page.goto(f"{hosted.server.url}/inspector/")
    assert response is not None
    assert "script-src 'self'" in response.headers["content-security-policy"]
    await page.fill("#key", ALICE[0])
    await page.click("#key-form button")
    await page.wait_for_selector("#session-list")
    await shot(page, "1-sessions")
    ids = await page.eval_on_selector_all("tr.session", "rows => rows.map(r => r.dataset.id)")
    assert sorted(ids) == ["hostile", "plain"]  # bob's session is not alice's to see

    await page.click("tr.session[data-id=plain]")
    await page.wait_for_selector("#messages .message")
    roles = await page.eval_on_selector_all("#messages .message", "ms => ms.map(m => m.dataset.role)")
    assert roles == ["user", "assistant", "user", "assistant"]
    texts = await page.eval_on_selector_all("#messages pre.text", "ps => ps.map(p => p.textContent)")
    assert texts[-1] == "heard 2: hello | again"
    await shot(page, "2-session-view")

    await page.click("#tab-raw")
    await page.wait_for_selector("#tab-raw.current")
    assert await page.locator("#messages .message").count() == 4
    await shot(page, "3-session-raw")

    await page.click("tr.session[data-id=hostile]")
    await expect(page.locator("#session h2")).to_have_text("hostile")
    shown = await page.eval_on_selector_all("#messages pre.text", "ps => ps.map(p => p.textContent)")
    assert shown[0] == PAYLOAD  # shown literally
    assert await page.evaluate("window.__pwned") is None  # and nothing of it ran
    assert await page.locator("#messages img, #messages script").count() == 0
    assert blocked == []  # the policy blocked nothing the page itself needs
    await shot(page, "4-hostile-text")


async def test_without_a_valid_key_the_page_shows_the_refusal_and_no_sessions(
    hosted: Hosted, browser: Browser
) -> None:
    await run(hosted.server.url, "private", [user("mine")], key=ALICE[0])
    page = await browser.new_page()
    await page.goto(f"{hosted.server.url}/inspector/")
    await page.fill("#key", "ak_not-a-key")
    await page.click("#key-form button")
    await expect(page.locator("#status")).to_contain_text("401")
    assert await page.locator("tr.session").count() == 0


async def test_a_10000_message_session_opens_on_its_newest_page_and_pages_back(
    hosted: Hosted, browser: Browser
) -> None:
    store = SQLiteMessageStore(hosted.path)
    try:
        for start in range(0, 10_000, 1_000):
            await store.append(
                "alice::long",
                [
                    Message("user" if i % 2 == 0 else "assistant", [f"m{i}"])
                    for i in range(start, start + 1_000)
                ],
            )
        await store.append("alice::short", [Message("user", [f"s{i}"]) for i in range(100)])
    finally:
        await store.aclose()
    page = await opened(browser, hosted.server.url, ALICE[0])
    timings: dict[str, float] = {}
    for session, count in (("short", 100), ("long", 10_000)):
        started = await page.evaluate("performance.now()")
        await page.click(f"tr.session[data-id={session}]")
        await expect(page.locator("#session h2")).to_have_text(session)
        await page.locator("#messages .message").first.wait_for()
        timings[f"{count} messages"] = round(await page.evaluate("performance.now()") - started, 1)
    assert await page.locator("#messages .message").count() == 50  # never all rows at once
    texts = await page.eval_on_selector_all("#messages pre.text", "ps => ps.map(p => p.textContent)")
    assert (texts[0], texts[-1]) == ("m9950", "m9999")  # the newest page, oldest first
    await shot(page, "5-long-session")
    await page.click("button.older")
    await expect(page.locator("#messages .message")).to_have_count(100)
    texts = await page.eval_on_selector_all("#messages pre.text", "ps => ps.map(p => p.textContent)")
    assert (texts[0], texts[49], texts[50]) == ("m9900", "m9949", "m9950")
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / "first-render-ms.json").write_text(json.dumps(timings, indent=2))
    print(f"inspector first render (click to rows shown): {timings}")


async def test_groups_a_compaction_preview_and_apply_export_and_delete(
    hosted: Hosted, browser: Browser
) -> None:
    sent: list[dict[str, Any]] = []
    for number in range(6):
        sent.append(user(f"question {number}"))
        sent += conversation(await run(hosted.server.url, "work", sent, key=ALICE[0]))
    page = await opened(browser, hosted.server.url, ALICE[0])
    page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))  # hx-confirm asks
    await page.click("tr.session[data-id=work]")
    await page.wait_for_selector("#show-groups")
    await page.click("#show-groups")
    await page.wait_for_selector("#group-list tr.group")
    kinds = await page.eval_on_selector_all("#group-list tr.group", "rows => rows.map(r => r.dataset.kind)")
    assert kinds == ["user", "assistant_text"] * 6
    bars = await page.eval_on_selector_all(
        "#tokens-per-turn g.bar", "gs => gs.map(g => Number(g.dataset.tokens))"
    )
    stored = await hosted.stored("alice::work")
    assert len(bars) == 6  # one bar per turn
    assert sum(bars) == MessageIndex(stored, tokenizer=CharacterEstimatorTokenizer()).token_count
    await shot(page, "6-groups")

    await page.select_option("#compaction-form select[name=strategy]", "turns")
    await page.fill("#compaction-form input[name=keep]", "2")
    await page.click("#preview")
    await page.wait_for_selector("#compaction-report")
    shown = await page.eval_on_selector_all(
        "#after td", "cells => cells.slice(1).map(c => Number(c.textContent))"
    )
    expected = await apply_compaction(
        stored, strategy=plan_compaction([StrategyName.TURNS], keep=2).build(CharacterEstimatorTokenizer())
    )
    index = MessageIndex(expected, tokenizer=CharacterEstimatorTokenizer())
    assert shown == [len(index.groups), len(expected), index.token_count]  # the library's own count
    assert await page.locator("#group-list tr.goes").count() == 8  # the four oldest turns, marked in place
    await shot(page, "7-preview")

    await page.click("#apply")
    await page.wait_for_selector("#compaction-report[data-recorded=true]")
    await page.click("#tab-view")
    await expect(page.locator("#messages .message")).to_have_count(len(expected))
    await shot(page, "8-view-after-compaction")
    await page.click("#tab-raw")
    await page.wait_for_selector("#tab-raw.current")
    assert await page.locator("#messages .message").count() == 12  # every original kept
    assert await page.locator("#messages .message.excluded").count() == 12 - len(expected)
    await shot(page, "9-raw-after-compaction")

    async with page.expect_download() as downloading:
        await page.click("button.export[data-format=json]")
    saved = Path(await (await downloading.value).path())
    exported = json.loads(await asyncio.to_thread(saved.read_text))
    assert exported["conversation_id"] == "work"

    await page.click("#delete")
    await page.wait_for_selector("#deleted")
    await expect(page.locator("tr.session[data-id=work]")).to_have_count(0)
    await shot(page, "10-deleted")
    assert await hosted.stored("alice::work") == []


async def test_the_session_list_appends_pages_with_more_and_restarts_with_newest(
    hosted: Hosted, browser: Browser
) -> None:
    store = SQLiteMessageStore(hosted.path)
    try:
        for i in range(120):  # the newest last: s-119 lists first
            await store.append(f"alice::s-{i:03}", [Message("user", [f"m{i}"])])
        await store.append("bob::s-999", [Message("user", ["bob's"])])
    finally:
        await store.aclose()
    page = await opened(browser, hosted.server.url, ALICE[0])
    listed = "rows => rows.map(r => r.dataset.id)"
    expected = [f"s-{i:03}" for i in reversed(range(120))]
    assert await page.eval_on_selector_all("tr.session", listed) == expected[:50]
    await page.click("#sessions-more")
    await expect(page.locator("tr.session")).to_have_count(100)
    await page.click("#sessions-more")
    await expect(page.locator("tr.session")).to_have_count(120)
    assert await page.eval_on_selector_all("tr.session", listed) == expected  # bob's is never there
    await expect(page.locator("#sessions-more")).to_have_count(0)  # the end
    await shot(page, "11-sessions-paged")

    await page.click("tr.session[data-id=s-007]")  # a row of an appended page opens its session
    await expect(page.locator("#session h2")).to_have_text("s-007")
    await page.click("#sessions-newest")
    await expect(page.locator("tr.session")).to_have_count(50)
    assert (await page.eval_on_selector_all("tr.session", listed))[0] == "s-119"

    await page.fill("#q", "-0")  # s-000 to s-099: 100 matches, two pages of the search
    await expect(page.locator("tr.session").first).to_have_attribute("data-id", "s-099")
    await expect(page.locator("tr.session")).to_have_count(50)
    await page.fill("#q", "nothing-like-it")  # the search box changes while the list is paged
    await expect(page.locator("#session-list")).to_contain_text("No sessions matching")
    await page.fill("#q", "-0")
    await expect(page.locator("tr.session").first).to_have_attribute("data-id", "s-099")
    await page.click("#sessions-more")
    await expect(page.locator("tr.session")).to_have_count(100)
    assert await page.eval_on_selector_all("tr.session", listed) == expected[20:]
    # the search read on past its 100th match to the end of the listing: no "more" to offer
    await expect(page.locator("#sessions-more")).to_have_count(0)
    assert await page.locator("#status").text_content() == ""
