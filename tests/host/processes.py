"""An ``agentkeep`` server command run as a real process for a test: on a free loopback port,
waited for until it answers, stopped with Ctrl-C (SIGINT) afterwards."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.clients.servers import free_port
from tests.test_cli import CLI


@contextmanager
def running(
    env: dict[str, str], command: str, *arguments: str, ready: str = "/healthz", wait: float = 60
) -> Iterator[str]:
    """``agentkeep COMMAND --port N ARGUMENTS`` until the block ends; yields its URL once ``ready``
    answers 200 (within ``wait`` seconds). Its output must hold no traceback."""
    port = free_port()
    log = Path(env["XDG_DATA_HOME"]).parent / f"{command}-{port}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*CLI, command, "--port", str(port), *arguments],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + wait
        while True:
            if process.poll() is not None:
                raise AssertionError(f"agentkeep {command} exited {process.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(f"{url}{ready}", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"agentkeep {command} did not get ready:\n{log.read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert "Traceback" not in log.read_text(), log.read_text()
