"""The inspector's memory panel in a real headless browser (Debian's chromium through Playwright),
against a host whose agent keeps long-term memory: the tenant's users, one user's memories with a
hostile text shown as text, search, a key's history, deleting a memory and forgetting a user.
Screenshots go to ``tests/.artifacts/inspector/``."""

from __future__ import annotations

import asyncio

from playwright.async_api import Browser, expect

from agentkeep.memory import MemoryBlocksProvider, MemoryScope
from tests.host.conftest import ALICE, BOB, run, user
from tests.host.memory_host import MemoryHost
from tests.host.test_inspector import PAYLOAD, browser, opened, pytestmark, shot

__all__ = ["browser", "pytestmark"]  # the fixture and the skip without chromium, shared


async def test_the_memory_panel_shows_searches_edits_and_forgets_a_tenants_users(
    served: MemoryHost, browser: Browser
) -> None:
    url = served.url
    await run(url, "monday", [user("My dog is called Pixel.")], key=ALICE[0], as_user="maren")
    await run(url, "tuesday", [user(PAYLOAD)], key=ALICE[0], as_user="maren")
    await run(url, "wed", [user("I like jazz.")], key=ALICE[0], as_user="jonas")
    await run(url, "bobs", [user("Bob's secret.")], key=BOB[0], as_user="bobby")
    maren = MemoryScope("maren", tenant_id="alice")
    blocks = MemoryBlocksProvider(served.memories)
    await blocks.append(maren, "human", "Prefers short answers.")
    await blocks.replace(maren, "human", "short", "very short")

    page = await opened(browser, url, ALICE[0])
    page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))  # hx-confirm asks
    await page.click("#show-memory")
    await page.wait_for_selector("#memory-user-list tr.memory-user")
    users = await page.eval_on_selector_all("tr.memory-user", "rows => rows.map(r => r.dataset.user)")
    assert users == ["maren", "jonas"]  # bob's user is not alice's to see
    await expect(page.locator("#sessions-view")).to_be_hidden()
    await shot(page, "11-memory-users")

    await page.click("tr.memory-user[data-user=maren]")
    await page.wait_for_selector("#memory-list tr.memory")
    kinds = await page.eval_on_selector_all("#memory-list tr.memory", "rows => rows.map(r => r.dataset.kind)")
    assert kinds == ["block", "chunk", "chunk"]
    texts = await page.eval_on_selector_all("#memory-list pre.text", "ps => ps.map(p => p.textContent)")
    assert texts == ["Prefers very short answers.", PAYLOAD, "My dog is called Pixel."]  # shown literally
    assert await page.evaluate("window.__pwned") is None  # and nothing of it ran
    assert await page.locator("#memory img, #memory script").count() == 0
    await shot(page, "12-memory-of-a-user")

    await page.fill("#memory-search input[name=q]", "what is my dog called")
    await page.click("#memory-search button")
    await page.wait_for_selector("#memory-hit-list li.memory-hit")
    first = await page.locator("#memory-hit-list li.memory-hit pre.text").first.text_content()
    assert first == "My dog is called Pixel."
    await shot(page, "13-memory-search")

    await page.click("#memory-list a.history")
    await page.wait_for_selector("#memory-versions li")
    versions = await page.eval_on_selector_all(
        "#memory-versions pre.text", "ps => ps.map(p => p.textContent)"
    )
    assert versions == ["Prefers short answers.", "Prefers very short answers."]
    assert await page.locator("#memory-versions li.current").count() == 1
    await shot(page, "14-memory-history")

    hostile = page.locator("#memory-list tr.memory", has_text="window.__pwned")
    await hostile.locator("button.delete-memory").click()
    await expect(page.locator("#memory-list tr.memory")).to_have_count(2)
    assert [m.text for m in await served.memories.list_memories(maren)] == [
        "Prefers very short answers.",
        "My dog is called Pixel.",
    ]

    await page.click("#forget")
    await page.wait_for_selector("#forgotten")
    await expect(page.locator("#forgotten")).to_contain_text("3 memories removed")
    await expect(page.locator("tr.memory-user")).to_have_count(1)  # the list loaded again: jonas
    await shot(page, "15-memory-forgotten")
    assert await served.memories.list_memories(maren) == []
    assert await served.memories.history(maren, "block.human") == []
    assert len(await served.memories.list_memories(MemoryScope("bobby", tenant_id="bob"))) == 1
