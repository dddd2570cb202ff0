"""A ``pgbouncer`` process of the tests' own in transaction pooling mode, in front of the test
PostgreSQL server (the machine's server is reached; no shared pooler is started or touched)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

__all__ = ["PGBOUNCER", "PgBouncer", "pgbouncer_binary", "shared_pgbouncer", "stop_shared_pgbouncer"]

PGBOUNCER = "pgbouncer"
"""The binary's name (Debian's package ``pgbouncer``; ``make test`` installs it)."""
_START_SECONDS = 10.0


def pgbouncer_binary() -> str | None:
    """The ``pgbouncer`` binary's path, or ``None`` if it is not installed."""
    return shutil.which(PGBOUNCER) or next(
        (path for path in ("/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer") if os.access(path, os.X_OK)),
        None,
    )


class PgBouncer:
    """``pgbouncer`` on a free loopback port with its configuration in ``folder``, pooling
    transactions to the server of ``server_url`` (trust authentication, one database)."""

    def __init__(
        self, folder: Path, server_url: str, *, pool_size: int = 4, application_name: str | None = None
    ) -> None:
        binary = pgbouncer_binary()
        if binary is None:
            raise FileNotFoundError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        self.binary = binary
        self.folder = folder
        server = urlsplit(server_url)
        self.user = server.username or "postgres"
        self.database = server.path.lstrip("/") or "postgres"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self.url = f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"
        folder.chmod(0o777)  # pgbouncer refuses to run as root: it runs as nobody, writing here
        (folder / "users.txt").write_text(f'"{self.user}" ""\n')
        (folder / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    f"{self.database} = host={server.hostname or '127.0.0.1'} port={server.port or 5432} "
                    f"dbname={self.database}"
                    + ("" if application_name is None else f" application_name={application_name}"),
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {folder / 'users.txt'}",
                    "pool_mode = transaction",
                    f"default_pool_size = {pool_size}",
                    "max_client_conn = 200",
                    f"logfile = {folder / 'pgbouncer.log'}",
                    "",
                ]
            )
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [self.binary, str(self.folder / "pgbouncer.ini")]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "nobody"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + _START_SECONDS
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at start: {self.log()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("pgbouncer did not start listening")
            time.sleep(0.05)

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
            self.process = None


_shared: list[PgBouncer] = []  # the test process's pooler, started on first use


def shared_pgbouncer(server_url: str) -> PgBouncer:
    """The test session's pooler in front of ``server_url``, started on first use (the session
    fixture ``pgbouncer`` stops it at the end); skips the test if pgbouncer is not installed."""
    if not _shared:
        if pgbouncer_binary() is None:
            pytest.skip("pgbouncer is not installed (make test installs Debian's package pgbouncer)")
        own = PgBouncer(Path(tempfile.mkdtemp(prefix="agentkeep-pgbouncer-")), server_url)
        own.start()
        _shared.append(own)
    return _shared[0]


def stop_shared_pgbouncer() -> None:
    """Stop the session's pooler if one was started, and remove its folder."""
    while _shared:
        own = _shared.pop()
        own.stop()
        shutil.rmtree(own.folder, ignore_errors=True)
