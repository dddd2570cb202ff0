"""A host process killed with ``kill -9`` under load, and clients that retry what failed on
another process: every conversation converges on what its client saw, one answer per user
message (two ``tests.host.instant_host`` processes on one PostgreSQL schema).

A turn the killed process had committed before it died is answered again from the store when
retried (AG-UI replays the stored answer); one it had not committed runs anew. Either way the
client ends with exactly what is stored."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from agentkeep.message_stores.base import close_store
from agentkeep.message_stores.postgres import PostgresMessageStore
from tests.clients.servers import free_port
from tests.host.conftest import user
from tests.message_stores.backend_postgres import URL as POSTGRES_URL
from tests.message_stores.backend_postgres import drop_schema, new_schema

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 16
TURNS = 6
ATTEMPTS = 6  # per turn: the first, then retries on the process that lives


@contextmanager
def host_process(url: str, log: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.host.instant_host",
                "--port",
                str(port),
                "--url",
                url,
                "--delay",
                "0.02",
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield base, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def one_turn(
    client: httpx.AsyncClient, base: str, thread: str, messages: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """The assistant messages of a finished turn, or ``None`` when it did not finish (refused,
    failed, or the connection died)."""
    body = {"threadId": thread, "runId": uuid.uuid4().hex, "messages": messages}
    answers: dict[str, dict[str, Any]] = {}
    try:
        async with client.stream("POST", f"{base}/agents/chat", json=body) as response:
            if response.status_code != 200:
                return None
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = msgspec.json.decode(line[6:])
                if event["type"] == "TEXT_MESSAGE_START":
                    answers[event["messageId"]] = {
                        "id": event["messageId"],
                        "role": "assistant",
                        "content": "",
                    }
                elif event["type"] == "TEXT_MESSAGE_CONTENT":
                    answers[event["messageId"]]["content"] += event["delta"]
                elif event["type"] == "RUN_FINISHED":
                    return list(answers.values())
                elif event["type"] == "RUN_ERROR":
                    return None
    except httpx.HTTPError:
        return None
    return None


@pytest.mark.postgres
async def test_after_kill_9_of_one_process_retries_converge_on_one_answer_per_user_message(
    tmp_path: Path,
) -> None:
    schema = new_schema("akcrash")
    url = f"{POSTGRES_URL}?schema={schema}"
    seen: dict[str, list[dict[str, Any]]] = {f"crash-{k}": [] for k in range(CLIENTS)}
    third_done = asyncio.Event()
    done_turns = [0]
    retried = [0]
    try:
        with (
            host_process(url, tmp_path / "a.log") as (first, victim),
            host_process(url, tmp_path / "b.log") as (
                second,
                _,
            ),
        ):
            bases = [first, second]

            async def killer() -> None:
                await third_done.wait()
                victim.send_signal(signal.SIGKILL)  # mid-load: turns are in flight on it
                await asyncio.to_thread(victim.wait)
                bases.remove(first)

            async def client_of(thread: str, client: httpx.AsyncClient, number: int) -> None:
                messages = seen[thread]
                for turn in range(TURNS):
                    asked = user(f"turn {turn} of {thread}")
                    for attempt in range(ATTEMPTS):
                        base = bases[(number + turn + attempt) % len(bases)]
                        answer = await one_turn(client, base, thread, [*messages, asked])
                        if answer is not None:
                            messages.extend([asked, *answer])
                            done_turns[0] += 1
                            if done_turns[0] >= CLIENTS * TURNS // 3:
                                third_done.set()
                            break
                        retried[0] += 1
                        await asyncio.sleep(0.05 * (attempt + 1))
                    else:
                        raise AssertionError(f"{thread}: turn {turn} never finished")

            async with asyncio.timeout(180), httpx.AsyncClient(timeout=30) as client:
                kill = asyncio.create_task(killer())
                try:
                    await asyncio.gather(*(client_of(t, client, n) for n, t in enumerate(seen)))
                finally:
                    third_done.set()
                    await kill
        assert retried[0] > 0  # the kill interrupted turns that were then retried
        store = PostgresMessageStore.from_url(POSTGRES_URL, schema=schema)
        try:
            for thread, messages in seen.items():
                stored = (await store.read(f"local::{thread}", raw=True)).messages
                assert [(m.role, m.text) for m in stored] == [(m["role"], m["content"]) for m in messages], (
                    thread
                )
                assert [m.message_id for m in stored] == [m["id"] for m in messages], thread
                assert [m.role for m in stored] == ["user", "assistant"] * TURNS, thread
        finally:
            await close_store(store)
    finally:
        await drop_schema(schema)
