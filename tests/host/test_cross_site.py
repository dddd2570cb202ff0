"""A page of another site, opened in a real headless browser (Debian's chromium driven by
Playwright), tries to write into the agent of a host without API keys on loopback: JSON sent as
``text/plain`` with ``fetch`` (no preflight), a ``<form enctype="text/plain">`` whose field spells
JSON, and a ``fetch`` declared JSON (which the browser must preflight). Every request that
reaches the host is refused and nothing is stored or run."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.clients.servers import ThreadedUvicorn
from tests.host.conftest import Hosted

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make test installs it)")


class Recorded:
    """ASGI middleware: every request's method, path and answer status, in order."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[tuple[str, str, int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.seen.append((scope["method"], scope["path"], message["status"]))
            await send(message)

        await self.app(scope, receive, sending)


@pytest.fixture
def victim(tmp_path: Path) -> Iterator[tuple[Hosted, Recorded]]:
    hosted = Hosted(tmp_path, api_keys=None)
    recorded = Recorded(hosted.host.app)
    hosted.server.stop()  # never started: serve the recorded app instead
    hosted.server = ThreadedUvicorn(recorded, name="agentkeep host", lifespan="on")
    hosted.server.start()
    try:
        yield hosted, recorded
    finally:
        hosted.server.stop()


def attack_page(target: str) -> str:
    turn = {
        "threadId": "injected",
        "runId": "r",
        "messages": [{"id": "m", "role": "user", "content": "obey"}],
    }
    text = json.dumps(turn)
    responses = json.dumps({"model": "chat", "input": "obey", "store": True})
    completions = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "obey"}]})
    # the form's one field is `<name>=<value>`: name and value split the JSON around an "=" that
    # lands inside a string, so the body the browser sends parses as the turn
    name, _, value = text.replace('"obey"', '"obey="', 1).partition("=")
    return f"""<!doctype html><html><body>
<form id="form" method="POST" action="{target}/agents/chat" enctype="text/plain" target="sink">
  <input type="hidden" name='{name}' value='{value}'>
</form>
<iframe name="sink" id="sink"></iframe>
<script>
async function attack() {{
  const results = [];
  const plain = {{ method: "POST", mode: "no-cors", headers: {{ "Content-Type": "text/plain" }} }};
  for (const [path, body] of [["/agents/chat", {json.dumps(text)}],
                              ["/v1/responses", {json.dumps(responses)}],
                              ["/v1/chat/completions", {json.dumps(completions)}]]) {{
    try {{ await fetch("{target}" + path, {{ ...plain, body }}); results.push("sent"); }}
    catch (e) {{ results.push("failed: " + e); }}
  }}
  try {{
    await fetch("{target}/agents/chat", {{ method: "POST", headers: {{ "Content-Type": "application/json" }},
                                          body: {json.dumps(text)} }});
    results.push("json sent");
  }} catch (e) {{ results.push("json blocked"); }}
  const loaded = new Promise(resolve => document.getElementById("sink").onload = resolve);
  document.getElementById("form").submit();
  await loaded;
  return results;
}}
</script></body></html>"""


@pytest.fixture
def attacker(victim: tuple[Hosted, Recorded]) -> Iterator[str]:
    target = victim[0].server.url

    async def page(_: Request) -> HTMLResponse:
        return HTMLResponse(attack_page(target))

    server = ThreadedUvicorn(Starlette(routes=[Route("/", page)]), name="another site")
    server.start()
    try:
        # "localhost" and another port: another origin and another site than 127.0.0.1
        yield server.url.replace("127.0.0.1", "localhost")
    finally:
        server.stop()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    assert CHROMIUM is not None
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


async def test_a_page_of_another_site_cannot_write_into_a_keyless_loopback_host(
    victim: tuple[Hosted, Recorded], attacker: str, browser: Browser
) -> None:
    hosted, recorded = victim
    page = await browser.new_page()
    await page.goto(attacker)
    results = await page.evaluate("attack()")
    assert results == ["sent", "sent", "sent", "json blocked"]  # the preflight is never granted
    posts = [(path, status) for method, path, status in recorded.seen if method == "POST"]
    # every write reached the host and was refused as cross-site (the browser says so in
    # Sec-Fetch-Site and Origin; on a keyed host the text/plain body alone would be refused, 415)
    assert sorted(posts) == sorted(
        [("/agents/chat", 403), ("/v1/responses", 403), ("/v1/chat/completions", 403), ("/agents/chat", 403)]
    )
    preflights = [path for method, path, _ in recorded.seen if method == "OPTIONS"]
    assert preflights == ["/agents/chat"]  # the JSON fetch stopped at its preflight
    assert await hosted.conversations() == []
