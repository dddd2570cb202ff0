"""A PostgreSQL server of a test's own, for tests that pause it (``SIGSTOP``): the machine's shared
server is never touched.

The cluster is made by ``initdb`` in a folder of its own and run by the ``postgres`` binary;
:meth:`PostgresServer.pause` stops the postmaster and then each of its processes (every backend
puts itself in a session of its own, so no one signal reaches them all), as a paused virtual
machine or container would. Both run as the ``postgres`` user when
the tests run as root (``initdb`` refuses root). Trust authentication, loopback only, no fsync.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

__all__ = ["PostgresServer", "postgres_binaries"]

_START_SECONDS = 30.0
_DATABASE = "test"


def postgres_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``postgres`` (Debian's layout first), or ``None``."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    found = shutil.which("initdb")
    if found is not None:
        candidates.append(Path(found).parent)
    return next((folder for folder in candidates if (folder / "initdb").exists()), None)


class PostgresServer:
    """A private server on a free loopback port; :attr:`url` reaches its database ``test``."""

    def __init__(self) -> None:
        binaries = postgres_binaries()
        if binaries is None:
            pytest.skip("the PostgreSQL server binaries (initdb, postgres) are not installed")
        self.binaries = binaries
        self.folder = Path(tempfile.mkdtemp(prefix="agentkeep-postgres-"))
        self.data = self.folder / "data"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/{_DATABASE}"
        self.process: subprocess.Popen[bytes] | None = None
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user is not None:
            shutil.chown(self.folder, self._user)

    def start(self) -> None:
        """Make the cluster (the first time) and start the server; returns once it answers."""
        if not self.data.exists():
            subprocess.run(
                [str(self.binaries / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                 "--no-sync", "-E", "UTF8", "--locale", "C"],
                check=True,
                capture_output=True,
                user=self._user,
            )  # fmt: skip
        log = (self.folder / "server.log").open("ab")
        self.process = subprocess.Popen(
            [str(self.binaries / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
             "-c", "fsync=off", "-c", "max_connections=50", "-c", "shared_buffers=16MB"],
            stdout=log,
            stderr=log,
            user=self._user,
        )  # fmt: skip
        log.close()
        admin = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        deadline = time.monotonic() + _START_SECONDS
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited at start: {self.log()[-2000:]}")
            try:
                with psycopg.connect(admin, autocommit=True, connect_timeout=2) as conn:
                    if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (_DATABASE,)).fetchone():
                        return
                    conn.execute(f"CREATE DATABASE {_DATABASE}")
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"postgres did not start: {self.log()[-2000:]}") from None
                time.sleep(0.1)

    def log(self) -> str:
        """What the server wrote to its log so far."""
        path = self.folder / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def processes(self) -> list[int]:
        """The postmaster's process id, then those of its children (backends, writers, ...)."""
        assert self.process is not None
        children: list[int] = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rpartition(")")[2].split()
            except OSError:
                continue  # ended meanwhile
            if int(fields[1]) == self.process.pid:
                children.append(int(stat.parent.name))
        return [self.process.pid, *children]

    def pause(self) -> None:
        """Stop every process of the server (``SIGSTOP``), the postmaster first: no new ones start."""
        for pid in self.processes():
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Let every process of the server run again (``SIGCONT``)."""
        for pid in reversed(self.processes()):
            os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server (immediate shutdown) and remove its folder."""
        if self.process is not None:
            self.resume()  # a paused server cannot shut down
            self.process.send_signal(signal.SIGQUIT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            self.process = None
        shutil.rmtree(self.folder, ignore_errors=True)
