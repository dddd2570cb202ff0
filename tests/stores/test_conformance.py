"""The session-store conformance suite: every store behaves the same (see tests/stores/conftest.py).

Covers new sessions for unknown ids, round trips (history and state), optimistic versions and
conflicts (sequential and concurrent), deletion, keys scoped by agent, odd conversation ids,
corrupt payloads, closed stores and, for stores shared between processes, a session saved in one
process and resumed in another plus a cross-process compare-and-set.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentkeep import Agent, AgentSession, ConflictError, Message, SessionFormatError, StorageClosedError
from agentkeep.stores import AgentSessionStore, session_version, set_session_version
from agentkeep.testing import ScriptedChatClient

ROOT = Path(__file__).resolve().parents[2]

ODD_IDS = [
    "a/b",
    "a%2Fb",
    "a%2fb",
    "../x",
    "..",
    ".",
    "/abs/path",
    "\\windows\\path",
    "C:",
    "with space",
    "tab\there",
    "A",
    "a",
    "ünïcødé 会话 🎉",
    "x::y",
    "x" * 500,
    "x" * 499 + "y",
    "%",
    "~",
]


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages]


def make_agent(name: str | None = "helper", replies: list[str] | None = None) -> Agent:
    return Agent(ScriptedChatClient(replies), name=name)


async def saved(store: AgentSessionStore, agent: Agent, conversation_id: str, **state: Any) -> AgentSession:
    """Get (or create) the session, set ``state`` in it and save it."""
    session = await store.get_session(agent, conversation_id)
    for key, value in state.items():
        session.state[key] = value
    await store.save_session(agent, conversation_id, session)
    return session


# -- unknown ids --------------------------------------------------------------------------------


async def test_unknown_id_gives_a_new_empty_session(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        session = await store.get_session(agent, "never-saved")
        assert session.session_id == "never-saved"
        assert session_version(session) is None
        assert session.service_session_id is None
        assert len(session.state) == 0
        other = await store.get_session(agent, "never-saved")
        assert other is not session
        assert await store.delete_session(agent, "never-saved") is False  # reading stored nothing


# -- round trips --------------------------------------------------------------------------------


async def test_history_survives_a_round_trip_to_another_agent_instance(session_backend: ModuleType) -> None:
    first = make_agent(replies=["r1", "r2"])
    async with session_backend.open_session_store() as store:
        session = await store.get_session(first, "chat")
        await first.run("q1", session=session)
        await first.run("q2", session=session)
        await store.save_session(first, "chat", session)

        second = make_agent(replies=["r3"])  # same name: same sessions
        restored = await store.get_session(second, "chat")
        assert restored is not session
        assert restored.session_id == "chat"
        response = await second.run("q3", session=restored)
        assert response.text == "r3"
        client = second.client
        assert isinstance(client, ScriptedChatClient)
        assert texts(client.calls[-1]) == ["q1", "r1", "q2", "r2", "q3"]


async def test_state_ids_and_unknown_fields_round_trip(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        session = AgentSession(session_id="its-own-id", service_session_id="svc-1")
        session.state["notes"] = {"items": ["ä", "b"], "n": 3, "ok": True, "none": None}
        session.extra_fields = {"x_custom": {"kept": 1}}
        await store.save_session(agent, "conv", session)
        restored = await store.get_session(agent, "conv")
        assert restored.session_id == "its-own-id"
        assert restored.service_session_id == "svc-1"
        assert restored.state["notes"] == {"items": ["ä", "b"], "n": 3, "ok": True, "none": None}
        assert restored.to_dict() == session.to_dict()


async def test_the_store_keeps_a_snapshot_not_the_live_session(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        session = await saved(store, agent, "snap", value="saved")
        session.state["value"] = "changed after the save"
        session.state["extra"] = 1
        restored = await store.get_session(agent, "snap")
        assert restored.state["value"] == "saved"
        assert "extra" not in restored.state


# -- versions and conflicts ---------------------------------------------------------------------


async def test_versions_count_saves(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        session = await store.get_session(agent, "v")
        assert session_version(session) is None
        await store.save_session(agent, "v", session)
        assert session_version(session) == 1
        await store.save_session(agent, "v", session)  # the same object: it carries version 1
        assert session_version(session) == 2
        restored = await store.get_session(agent, "v")
        assert session_version(restored) == 2
        await store.save_session(agent, "v", restored)
        assert session_version(restored) == 3


async def test_a_stale_save_conflicts_and_changes_nothing(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        await saved(store, agent, "conv-1", value="v1")
        mine = await store.get_session(agent, "conv-1")
        theirs = await store.get_session(agent, "conv-1")
        theirs.state["value"] = "theirs"
        await store.save_session(agent, "conv-1", theirs)
        mine.state["value"] = "mine"
        with pytest.raises(ConflictError) as caught:
            await store.save_session(agent, "conv-1", mine)
        assert caught.value.conversation_id == "conv-1"
        assert "conv-1" in str(caught.value)
        assert session_version(mine) == 1  # a failed save leaves the session's version alone
        stored = await store.get_session(agent, "conv-1")
        assert stored.state["value"] == "theirs"
        assert session_version(stored) == 2


async def test_a_new_session_cannot_overwrite_a_stored_one(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        await saved(store, agent, "taken", value="first")
        newcomer = agent.create_session(session_id="taken")
        newcomer.state["value"] = "second"
        with pytest.raises(ConflictError):
            await store.save_session(agent, "taken", newcomer)
        assert session_version(newcomer) is None
        stored = await store.get_session(agent, "taken")
        assert stored.state["value"] == "first"
        assert session_version(stored) == 1


async def test_a_version_that_was_never_stored_conflicts(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        ghost = agent.create_session()
        set_session_version(ghost, 5)
        with pytest.raises(ConflictError):
            await store.save_session(agent, "empty", ghost)
        assert session_version(await store.get_session(agent, "empty")) is None


async def test_concurrent_saves_of_one_version_let_exactly_one_win(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        await saved(store, agent, "race", writer=-1)
        copies = await asyncio.gather(*(store.get_session(agent, "race") for _ in range(6)))
        assert {session_version(copy) for copy in copies} == {1}
        for writer, copy in enumerate(copies):
            copy.state["writer"] = writer
        results = await asyncio.gather(
            *(store.save_session(agent, "race", copy) for copy in copies), return_exceptions=True
        )
        winners = [i for i, result in enumerate(results) if result is None]
        assert len(winners) == 1, results
        assert all(isinstance(r, ConflictError) for i, r in enumerate(results) if i != winners[0])
        stored = await store.get_session(agent, "race")
        assert stored.state["writer"] == winners[0]
        assert session_version(stored) == 2


async def test_concurrent_creation_lets_exactly_one_win(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        fresh = [agent.create_session(session_id="born") for _ in range(4)]
        results = await asyncio.gather(
            *(store.save_session(agent, "born", s) for s in fresh), return_exceptions=True
        )
        assert sum(result is None for result in results) == 1, results
        assert sum(isinstance(result, ConflictError) for result in results) == 3


# -- deletion -----------------------------------------------------------------------------------


async def test_delete_forgets_the_session(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        old = await saved(store, agent, "gone", value=1)
        await saved(store, agent, "kept", value=2)
        assert await store.delete_session(agent, "gone") is True
        assert await store.delete_session(agent, "gone") is False
        fresh = await store.get_session(agent, "gone")
        assert session_version(fresh) is None
        assert "value" not in fresh.state
        with pytest.raises(ConflictError):  # its version no longer exists
            await store.save_session(agent, "gone", old)
        await store.save_session(agent, "gone", fresh)
        assert session_version(fresh) == 1
        assert (await store.get_session(agent, "kept")).state["value"] == 2


# -- keys ---------------------------------------------------------------------------------------


async def test_sessions_are_scoped_by_agent_name(session_backend: ModuleType) -> None:
    alpha, beta = make_agent("alpha"), make_agent("beta")
    async with session_backend.open_session_store() as store:
        await saved(store, alpha, "shared-id", owner="alpha")
        seen_by_beta = await store.get_session(beta, "shared-id")
        assert "owner" not in seen_by_beta.state
        assert session_version(seen_by_beta) is None
        seen_by_beta.state["owner"] = "beta"
        await store.save_session(beta, "shared-id", seen_by_beta)  # no conflict: another key
        assert (await store.get_session(alpha, "shared-id")).state["owner"] == "alpha"
        assert (await store.get_session(make_agent("alpha"), "shared-id")).state["owner"] == "alpha"
        assert await store.delete_session(alpha, "shared-id") is True
        assert (await store.get_session(beta, "shared-id")).state["owner"] == "beta"


async def test_unnamed_agents_are_keyed_by_id(session_backend: ModuleType) -> None:
    one, two = make_agent(None), make_agent(None)
    async with session_backend.open_session_store() as store:
        await saved(store, one, "c", owner="one")
        assert "owner" not in (await store.get_session(two, "c")).state
        same = Agent(ScriptedChatClient(), id=one.id)
        assert (await store.get_session(same, "c")).state["owner"] == "one"


async def test_odd_conversation_ids_work_and_stay_apart(session_backend: ModuleType) -> None:
    agent = make_agent()
    odd_agent = make_agent("../Odd/agent 名")
    async with session_backend.open_session_store() as store:
        for index, conversation_id in enumerate(ODD_IDS):
            await saved(store, agent, conversation_id, index=index)
        await saved(store, odd_agent, "a/b", index=-1)
        for index, conversation_id in enumerate(ODD_IDS):
            session = await store.get_session(agent, conversation_id)
            assert session.session_id == conversation_id
            assert session.state["index"] == index, conversation_id
            assert session_version(session) == 1
        assert (await store.get_session(odd_agent, "a/b")).state["index"] == -1
        for conversation_id in ODD_IDS:
            assert await store.delete_session(agent, conversation_id) is True
        assert (await store.get_session(odd_agent, "a/b")).state["index"] == -1


async def test_an_empty_conversation_id_is_refused(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        with pytest.raises(ValueError):
            await store.get_session(agent, "")
        with pytest.raises(ValueError):
            await store.save_session(agent, "", agent.create_session())


# -- faults -------------------------------------------------------------------------------------


async def test_a_corrupt_payload_is_reported(session_backend: ModuleType) -> None:
    corrupt = getattr(session_backend, "corrupt_session", None)
    if corrupt is None:
        pytest.skip(f"{session_backend.NAME} cannot corrupt a stored session")
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        await saved(store, agent, "broken", value=1)
        await saved(store, agent, "fine", value=2)
        outcome = corrupt(store, agent, "broken")
        if inspect.isawaitable(outcome):
            await outcome
        with pytest.raises(SessionFormatError):
            await store.get_session(agent, "broken")
        assert (await store.get_session(agent, "fine")).state["value"] == 2
        assert await store.delete_session(agent, "broken") is True  # the way out
        assert session_version(await store.get_session(agent, "broken")) is None


async def test_a_closed_store_refuses_work(session_backend: ModuleType) -> None:
    agent = make_agent()
    async with session_backend.open_session_store() as store:
        session = await saved(store, agent, "c", value=1)
        await store.aclose()
        await store.aclose()  # idempotent
        with pytest.raises(StorageClosedError):
            await store.get_session(agent, "c")
        with pytest.raises(StorageClosedError):
            await store.save_session(agent, "c", session)
        with pytest.raises(StorageClosedError):
            await store.delete_session(agent, "c")


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
        "from tests.stores.test_conformance import _child_main; _child_main()",
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
