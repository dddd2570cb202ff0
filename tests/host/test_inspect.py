"""``agentkeep inspect`` as a real process over a SQLite store: without keys (loopback only) the
store's operator sees every conversation under its stored id, what ``agentkeep chat`` stored
included; no agent runs there; a non-loopback bind without keys is refused."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from agentkeep import Message
from agentkeep.storage.sqlite import SQLiteMessageStore
from tests.clients.servers import free_port
from tests.test_cli import CLI, one_line_error
from tests.test_cli import run as run_cli


@contextmanager
def inspecting(env: dict[str, str], *arguments: str) -> Iterator[str]:
    """``agentkeep inspect`` on a free port until the block ends; yields its URL."""
    port = free_port()
    log = Path(env["XDG_DATA_HOME"]).parent / f"inspect-{port}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*CLI, "inspect", "--port", str(port), *arguments],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise AssertionError(f"agentkeep inspect exited {process.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"agentkeep inspect did not start:\n{log.read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def test_inspect_shows_the_whole_store_to_its_operator_and_runs_nothing(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = tmp_path / "store.db"
    store = SQLiteMessageStore(path)
    try:
        await store.append("demo-1", [Message("user", ["from agentkeep chat"])])  # no tenant
        await store.append("alice::chat-1", [Message("user", ["from a keyed host"])])
    finally:
        await store.aclose()
    with inspecting(env, "--store", f"sqlite:///{path}") as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            listed = (await client.get("/api/agents/chat/sessions")).json()
            assert sorted(s["id"] for s in listed["sessions"]) == ["alice::chat-1", "demo-1"]
            page = await client.get("/api/agents/chat/sessions/demo-1/messages")
            assert [m["text"] for m in page.json()["messages"]] == ["from agentkeep chat"]
            assert (await client.get("/inspector/")).status_code == 200
            fragment = await client.get("/inspector/sessions", params={"agent": "chat"})
            assert "demo-1" in fragment.text
            assert (await client.post("/agents/chat", json={})).status_code == 404  # no agent runs
            assert (await client.post("/v1/responses", json={})).status_code == 404


def test_inspect_refuses_a_public_address_without_keys(env: dict[str, str]) -> None:
    one_line_error(run_cli(env, "inspect", "--host", "0.0.0.0"), "refusing to listen on 0.0.0.0")
