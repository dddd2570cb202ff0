"""Session stores shared between processes: a session saved in one process resumes in another, and
processes saving one version let exactly one win (for the backends with ``CROSS_PROCESS``)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentkeep import Agent, ConflictError, Message
from agentkeep.session_stores import AgentSessionStore, session_version, set_session_version
from agentkeep.testing import ScriptedChatClient

ROOT = Path(__file__).resolve().parents[2]


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages]


async def saved(store: AgentSessionStore, agent: Agent, conversation_id: str, **state: Any) -> None:
    """Get (or create) the session, set ``state`` in it and save it."""
    session = await store.get_session(agent, conversation_id)
    for key, value in state.items():
        session.state[key] = value
    await store.save_session(agent, conversation_id, session)


# -- several processes --------------------------------------------------------------------------


async def _in_child(
    backend: ModuleType,
    store: AgentSessionStore,
    action: str,
    *,
    barrier: asyncio.Barrier | None = None,
    **args: Any,
) -> Any:
    """Run :func:`_child_main` in a new interpreter; its printed JSON result.

    With a ``barrier``, the child gets ready (interpreter started, store open), then waits until
    every child sharing the barrier is ready too, so that their saves really overlap.
    """
    request = {
        "module": backend.__name__,
        "spec": backend.session_store_spec(store),
        "action": action,
        **args,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from tests.session_stores.test_multiprocess import _child_main; _child_main()",
        json.dumps(request),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    ready = await asyncio.wait_for(process.stdout.readline(), timeout=120)
    assert ready == b"ready\n", ready
    if barrier is not None:
        await asyncio.wait_for(barrier.wait(), timeout=120)
    process.stdin.write(b"go\n")
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, stderr.decode()
    return json.loads(stdout.decode().strip().splitlines()[-1])


def _child_main() -> None:
    """Entry point of the child interpreter (see :func:`_in_child`)."""
    import importlib

    request = json.loads(sys.argv[1])
    backend = importlib.import_module(request["module"])

    async def main() -> Any:
        store: AgentSessionStore = backend.session_store_from_spec(request["spec"])
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # "go" (see _in_child)
        try:
            if request["action"] == "resume":
                client = ScriptedChatClient(["r3"])
                agent = Agent(client, name="proc-agent")
                session = await store.get_session(agent, request["conversation_id"])
                version = session_version(session)
                await agent.run("q3", session=session)
                await store.save_session(agent, request["conversation_id"], session)
                return {"read_version": version, "request": texts(client.calls[-1])}
            # "save_at": save a copy as if it had been read at request["version"]
            agent = Agent(ScriptedChatClient(), name="proc-agent")
            session = agent.create_session(session_id=request["conversation_id"])
            session.state["writer"] = request["writer"]
            set_session_version(session, request["version"])
            try:
                await store.save_session(agent, request["conversation_id"], session)
            except ConflictError:
                return "conflict"
            return "saved"
        finally:
            await store.aclose()

    print(json.dumps(asyncio.run(main())))


async def test_a_session_saved_in_one_process_resumes_in_another(session_backend: ModuleType) -> None:
    if not getattr(session_backend, "CROSS_PROCESS", False):
        pytest.skip(f"{session_backend.NAME} lives in one process")
    agent = Agent(ScriptedChatClient(["r1", "r2"]), name="proc-agent")
    async with session_backend.open_session_store() as store:
        session = await store.get_session(agent, "across/processes")
        await agent.run("q1", session=session)
        await agent.run("q2", session=session)
        await store.save_session(agent, "across/processes", session)

        result = await _in_child(session_backend, store, "resume", conversation_id="across/processes")
        assert result == {"read_version": 1, "request": ["q1", "r1", "q2", "r2", "q3"]}

        with pytest.raises(ConflictError):  # the child saved version 2
            await store.save_session(agent, "across/processes", session)
        latest = await store.get_session(agent, "across/processes")
        assert session_version(latest) == 2
        client = ScriptedChatClient(["r4"])
        await Agent(client, name="proc-agent").run("q4", session=latest)
        assert texts(client.calls[-1]) == ["q1", "r1", "q2", "r2", "q3", "r3", "q4"]


async def test_processes_saving_one_version_let_exactly_one_win(session_backend: ModuleType) -> None:
    if not getattr(session_backend, "CROSS_PROCESS", False):
        pytest.skip(f"{session_backend.NAME} lives in one process")
    agent = Agent(ScriptedChatClient(), name="proc-agent")
    async with session_backend.open_session_store() as store:
        await saved(store, agent, "contested", writer=-1)
        barrier = asyncio.Barrier(4)
        results = await asyncio.gather(
            *(
                _in_child(
                    session_backend,
                    store,
                    "save_at",
                    barrier=barrier,
                    conversation_id="contested",
                    version=1,
                    writer=w,
                )
                for w in range(4)
            )
        )
        assert sorted(results) == ["conflict", "conflict", "conflict", "saved"]
        stored = await store.get_session(agent, "contested")
        assert session_version(stored) == 2
        assert stored.state["writer"] == results.index("saved")
