"""A ``redis-server`` process of a test's own, for tests that stop, kill or pause a server (the
machine's shared server is never touched)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

__all__ = ["RedisServer"]


class RedisServer:
    """A ``redis-server`` process of the test's own, restartable on the same port and folder."""

    def __init__(self, folder: Path, *, persistent: bool = False) -> None:
        self.folder = folder
        self.persistent = persistent  # an append-only file synced on every write: survives kill -9
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "yes" if self.persistent else "no",
                "--appendfsync", "always",
                "--dir", str(self.folder),
                "--dbfilename", "dump.rdb",
                "--enable-debug-command", "yes",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as probe:
                    probe.sendall(b"PING\r\n")
                    if probe.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
