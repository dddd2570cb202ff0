"""A Redis Cluster of a test's own: 3 masters with a replica each, ``redis-server`` processes on
free loopback ports, for the cluster conformance runs and the failover test (the machine's shared
server is never touched)."""

from __future__ import annotations

import atexit
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

__all__ = ["RedisClusterProcesses", "shared_redis_cluster", "stop_shared_redis_cluster"]

_START_SECONDS = 30.0


def _free_ports(count: int) -> list[int]:
    """``count`` ports below 55536 that are free, each with its cluster bus port (+10000) free."""
    chosen: list[int] = []
    candidates = random.Random().sample(range(20000, 45000), 2000)
    for port in candidates:
        if len(chosen) == count:
            break
        if all(_is_free(p) for p in (port, port + 10000)) and not {port, port + 10000} & {
            q + d for q in chosen for d in (0, 10000)
        }:
            chosen.append(port)
    return chosen


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _ask(port: int, *command: str, timeout: float = 0.5) -> str:
    """One command to a node in the inline protocol; its raw reply (empty if it did not answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as probe:
            probe.sendall((" ".join(command) + "\r\n").encode())
            return probe.recv(65536).decode(errors="replace")
    except OSError:
        return ""


def cluster_support() -> str | None:
    """Why no cluster can be started here (``None``: it can)."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        return "redis-server and redis-cli are not installed"
    version = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True, check=False
    ).stdout
    if "v=" not in version or int(version.split("v=")[1].split(".")[0]) < 5:
        return f"redis-server is too old for redis-cli --cluster: {version.strip()}"
    return None


class RedisClusterProcesses:
    """Six ``redis-server --cluster-enabled yes`` processes joined as 3 masters + 3 replicas."""

    def __init__(self, folder: Path, *, node_timeout_ms: int = 1000) -> None:
        self.folder = folder
        self.node_timeout_ms = node_timeout_ms
        self.ports = _free_ports(6)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports[:3])

    def _start_node(self, port: int) -> None:
        folder = self.folder / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        self.processes[port] = subprocess.Popen(
            [
                "redis-server",
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(folder / "nodes.conf"),
                "--cluster-node-timeout", str(self.node_timeout_ms),
                "--cluster-replica-validity-factor", "0",  # a replica always takes over
                "--dir", str(folder),
                "--save", "",
                "--appendonly", "no",
                "--enable-debug-command", "yes",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def start(self) -> None:
        for port in self.ports:
            self._start_node(port)
        deadline = time.monotonic() + _START_SECONDS
        for port in self.ports:
            while not _ask(port, "PING").startswith("+PONG"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {port} did not start")
                time.sleep(0.05)
        created = subprocess.run(
            [
                "redis-cli", "--cluster", "create",
                *(f"127.0.0.1:{port}" for port in self.ports),
                "--cluster-replicas", "1", "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=_START_SECONDS,
            check=False,
        )  # fmt: skip
        if created.returncode != 0:
            raise RuntimeError(
                f"redis-cli --cluster create failed: {created.stdout[-500:]} {created.stderr[-500:]}"
            )
        self.wait_until_ok()

    def wait_until_ok(self, *, seconds: float = _START_SECONDS) -> None:
        """Wait until every running node reports ``cluster_state:ok`` and sees 3 masters, and every
        replica's link to its master is up (its first sync is done)."""
        deadline = time.monotonic() + seconds
        while True:
            states = [_ask(port, "CLUSTER", "INFO") for port in self.running()]
            links = [_ask(port, "INFO", "replication", timeout=0.5) for port in self.running()]
            if (
                states
                and all("cluster_state:ok" in s and "cluster_size:3" in s for s in states)
                and all("role:master" in r or "master_link_status:up" in r for r in links)
            ):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not reach cluster_state:ok")
            time.sleep(0.1)

    def running(self) -> list[int]:
        return [port for port, process in self.processes.items() if process.poll() is None]

    def masters(self) -> list[int]:
        """The ports of the running masters (as the first running node sees them)."""
        for port in self.running():
            reply = _ask(port, "CLUSTER", "NODES")
            found = [
                int(fields[1].split("@")[0].rsplit(":", 1)[1])
                for fields in (line.split() for line in reply.splitlines())
                if len(fields) > 2 and "master" in fields[2] and "fail" not in fields[2]
            ]
            if found:
                return [port for port in found if port in self.running()]
        return []

    def wait_until_replicated(self, port: int, *, seconds: float = _START_SECONDS) -> None:
        """Wait until every replica of the master on ``port`` holds all it was sent so far (its
        offset reached the master's): Redis replicates asynchronously, so only then does a
        failover keep every write the master acknowledged."""
        target: int | None = None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            fields = dict(
                line.split(":", 1) for line in _ask(port, "INFO", "replication").splitlines() if ":" in line
            )
            if target is None and "master_repl_offset" in fields:
                target = int(fields["master_repl_offset"].strip())
            offsets = [
                int(part.split("=", 1)[1])
                for name, value in fields.items()
                if name.startswith("slave") and name[5:].isdigit()
                for part in value.strip().split(",")
                if part.startswith("offset=")
            ]
            if target is not None and offsets and min(offsets) >= target:
                return
            time.sleep(0.02)
        raise RuntimeError(f"the replicas of {port} did not catch up within {seconds:g} s")

    def kill(self, port: int) -> None:
        """``kill -9`` one node."""
        process = self.processes[port]
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        self.processes.clear()


_shared: list[RedisClusterProcesses] = []


def shared_redis_cluster() -> RedisClusterProcesses:
    """The test session's cluster, started on first use (stopped at exit); skips the test when
    ``redis-server`` cannot run one."""
    if not _shared:
        reason = cluster_support()
        if reason is not None:
            pytest.skip(f"no Redis Cluster: {reason}")
        own = RedisClusterProcesses(Path(tempfile.mkdtemp(prefix="agentkeep-redis-cluster-")))
        try:
            own.start()
        except Exception:
            own.stop()
            shutil.rmtree(own.folder, ignore_errors=True)
            raise
        _shared.append(own)
        atexit.register(stop_shared_redis_cluster)
    return _shared[0]


def stop_shared_redis_cluster() -> None:
    """Stop the session's cluster if one was started, and remove its folder."""
    while _shared:
        own = _shared.pop()
        own.stop()
        shutil.rmtree(own.folder, ignore_errors=True)
