"""The session-store contract as checks: what every
:class:`~agentkeep.session_stores.base.AgentSessionStore` does.

Describe your store with a :class:`SessionStoreBackend` and run
:func:`~agentkeep.testing.conformance.session_store_checks` against it. Covered: new sessions for
unknown ids, round trips (history and state), optimistic versions and conflicts (sequential and
concurrent), asking whether a session changed since a version, deletion, keys scoped by agent,
odd conversation ids, corrupt payloads and closed stores.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from ...agent import Agent
from ...clients.scripted import ScriptedChatClient
from ...errors import ConflictError, SessionFormatError, StorageClosedError
from ...messages import Message
from ...session_stores.base import AgentSessionStore, session_version, set_session_version
from ...sessions import AgentSession
from ._checks import ConformanceCheck, NotApplicable, check_list, expect, expect_equal, expect_raises

__all__ = ["ODD_CONVERSATION_IDS", "SESSION_STORE_CHECKS", "SessionStoreBackend"]


@dataclass(frozen=True, slots=True)
class SessionStoreBackend:
    """How the suite gets the stores of one session-store backend.

    Attributes:
        name: The backend's name.
        open: ``open()``: an async context manager giving a fresh, isolated store with no
            sessions in it (its own folder, file, key prefix or schema), closed and removed
            afterwards.
        corrupt_session: ``corrupt_session(store, agent, conversation_id)`` (sync or async)
            overwrites that stored session with data that does not decode (``None``: the suite
            cannot corrupt one, and skips that check).
    """

    name: str
    open: Callable[[], AbstractAsyncContextManager[AgentSessionStore]]
    corrupt_session: Callable[[AgentSessionStore, Agent, str], Awaitable[None] | None] | None = None


SESSION_STORE_CHECKS: list[ConformanceCheck[SessionStoreBackend]] = []
"""The checks, in the order they run."""

_check = check_list(SESSION_STORE_CHECKS)

ODD_CONVERSATION_IDS = [
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
"""Conversation ids that trip naive key, file-name or URL encodings."""


def _texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages]


def _agent(name: str | None = "helper", replies: list[str] | None = None) -> Agent:
    return Agent(ScriptedChatClient(replies), name=name)


async def _saved(store: AgentSessionStore, agent: Agent, conversation_id: str, **state: Any) -> AgentSession:
    """Get (or create) the session, set ``state`` in it and save it."""
    session = await store.get_session(agent, conversation_id)
    for key, value in state.items():
        session.state[key] = value
    await store.save_session(agent, conversation_id, session)
    return session


@_check
async def an_unknown_id_gives_a_new_empty_session(backend: SessionStoreBackend) -> None:
    """``get_session`` of an unknown id is a new empty session named after it; nothing is stored."""
    agent = _agent()
    async with backend.open() as store:
        session = await store.get_session(agent, "never-saved")
        expect_equal(session.session_id, "never-saved", "the new session's id")
        expect_equal(session_version(session), None, "its version")
        expect_equal((session.service_session_id, len(session.state)), (None, 0), "its service id and state")
        expect(await store.get_session(agent, "never-saved") is not session, "two reads give one object")
        expect_equal(
            await store.delete_session(agent, "never-saved"), False, "deleting it (reading stored nothing)"
        )


@_check
async def history_survives_a_round_trip_to_another_agent_instance(backend: SessionStoreBackend) -> None:
    """A saved session continues, history included, with another agent object of the same name."""
    first = _agent(replies=["r1", "r2"])
    async with backend.open() as store:
        session = await store.get_session(first, "chat")
        await first.run("q1", session=session)
        await first.run("q2", session=session)
        await store.save_session(first, "chat", session)
        client = ScriptedChatClient(["r3"])
        second = Agent(client, name="helper")
        restored = await store.get_session(second, "chat")
        expect(restored is not session, "the store hands back the live session")
        expect_equal(restored.session_id, "chat", "the restored id")
        expect_equal((await second.run("q3", session=restored)).text, "r3", "the reply")
        expect_equal(_texts(client.calls[-1]), ["q1", "r1", "q2", "r2", "q3"], "the request")


@_check
async def state_ids_and_unknown_fields_round_trip(backend: SessionStoreBackend) -> None:
    """Session id, service id, state values and unknown payload fields come back as saved."""
    agent = _agent()
    async with backend.open() as store:
        session = AgentSession(session_id="its-own-id", service_session_id="svc-1")
        session.state["notes"] = {"items": ["ä", "b"], "n": 3, "ok": True, "none": None}
        session.extra_fields = {"x_custom": {"kept": 1}}
        await store.save_session(agent, "conv", session)
        restored = await store.get_session(agent, "conv")
        expect_equal((restored.session_id, restored.service_session_id), ("its-own-id", "svc-1"), "the ids")
        expect_equal(restored.to_dict(), session.to_dict(), "the payload")


@_check
async def the_store_keeps_a_snapshot_not_the_live_session(backend: SessionStoreBackend) -> None:
    """Changes after a save do not reach the store until the next save."""
    agent = _agent()
    async with backend.open() as store:
        session = await _saved(store, agent, "snap", value="saved")
        session.state["value"] = "changed after the save"
        session.state["extra"] = 1
        restored = await store.get_session(agent, "snap")
        expect_equal(
            (restored.state["value"], "extra" in restored.state), ("saved", False), "the stored state"
        )


@_check
async def versions_count_saves(backend: SessionStoreBackend) -> None:
    """Each save writes the next version and records it on the session."""
    agent = _agent()
    async with backend.open() as store:
        session = await store.get_session(agent, "v")
        await store.save_session(agent, "v", session)
        expect_equal(session_version(session), 1, "after the first save")
        await store.save_session(agent, "v", session)
        expect_equal(session_version(session), 2, "after saving the same object again")
        restored = await store.get_session(agent, "v")
        expect_equal(session_version(restored), 2, "a fresh read")
        await store.save_session(agent, "v", restored)
        expect_equal(session_version(restored), 3, "after saving the fresh read")


@_check
async def get_session_if_changed_reads_only_a_changed_session(backend: SessionStoreBackend) -> None:
    """``get_session_if_changed`` gives ``None`` while the stored version is the one named, the
    stored session once another save moved it on, and a new session once it is deleted."""
    agent = _agent()
    async with backend.open() as store:
        mine = await _saved(store, agent, "probe", step=1)
        expect_equal(
            await store.get_session_if_changed(agent, "probe", version=session_version(mine)),
            None,
            "at the stored version",
        )
        unversioned = await store.get_session_if_changed(agent, "probe", version=None)
        expect(unversioned is not None, "with no version: the stored session")
        assert unversioned is not None
        expect_equal(session_version(unversioned), session_version(mine), "its version")
        await _saved(store, agent, "probe", step=2)  # another writer
        moved = await store.get_session_if_changed(agent, "probe", version=session_version(mine))
        expect(moved is not None, "after another save: the stored session")
        assert moved is not None
        expect_equal((moved.state["step"], session_version(moved)), (2, 2), "its state and version")
        await store.delete_session(agent, "probe")
        gone = await store.get_session_if_changed(agent, "probe", version=2)
        expect(gone is not None, "after a delete: a new session")
        assert gone is not None
        expect_equal(
            (session_version(gone), len(gone.state)), (None, 0), "the new session's version and state"
        )
        expect_equal(
            await store.get_session_if_changed(agent, "never-saved", version=None) is not None,
            True,
            "an unknown id with no version: a new session",
        )


@_check
async def a_stale_save_conflicts_and_changes_nothing(backend: SessionStoreBackend) -> None:
    """Saving a session read before someone else's save raises ConflictError and stores nothing."""
    agent = _agent()
    async with backend.open() as store:
        await _saved(store, agent, "conv-1", value="v1")
        mine = await store.get_session(agent, "conv-1")
        theirs = await store.get_session(agent, "conv-1")
        theirs.state["value"] = "theirs"
        await store.save_session(agent, "conv-1", theirs)
        mine.state["value"] = "mine"
        with expect_raises(ConflictError, "a stale save") as raised:
            await store.save_session(agent, "conv-1", mine)
        error = raised.error
        assert isinstance(error, ConflictError)
        expect_equal(error.conversation_id, "conv-1", "the conflict's conversation")
        expect_equal(session_version(mine), 1, "the loser's version")
        stored = await store.get_session(agent, "conv-1")
        expect_equal((stored.state["value"], session_version(stored)), ("theirs", 2), "what is stored")


@_check
async def a_new_session_cannot_overwrite_a_stored_one(backend: SessionStoreBackend) -> None:
    """A never-stored session saved under a taken id conflicts."""
    agent = _agent()
    async with backend.open() as store:
        await _saved(store, agent, "taken", value="first")
        newcomer = agent.create_session(session_id="taken")
        newcomer.state["value"] = "second"
        with expect_raises(ConflictError, "saving a new session over a stored one"):
            await store.save_session(agent, "taken", newcomer)
        expect_equal(session_version(newcomer), None, "the newcomer's version")
        stored = await store.get_session(agent, "taken")
        expect_equal((stored.state["value"], session_version(stored)), ("first", 1), "what is stored")


@_check
async def a_version_that_was_never_stored_conflicts(backend: SessionStoreBackend) -> None:
    """A session claiming a version the store never had conflicts."""
    agent = _agent()
    async with backend.open() as store:
        ghost = agent.create_session()
        set_session_version(ghost, 5)
        with expect_raises(ConflictError, "saving at a version never stored"):
            await store.save_session(agent, "empty", ghost)
        expect_equal(session_version(await store.get_session(agent, "empty")), None, "what is stored")


@_check
async def concurrent_saves_of_one_version_let_exactly_one_win(backend: SessionStoreBackend) -> None:
    """Six saves of copies read at one version: one wins, five conflict."""
    agent = _agent()
    async with backend.open() as store:
        await _saved(store, agent, "race", writer=-1)
        copies = await asyncio.gather(*(store.get_session(agent, "race") for _ in range(6)))
        for writer, copy in enumerate(copies):
            copy.state["writer"] = writer
        results = await asyncio.gather(
            *(store.save_session(agent, "race", c) for c in copies), return_exceptions=True
        )
        winners = [i for i, result in enumerate(results) if result is None]
        expect_equal(len(winners), 1, f"saves that won ({results})")
        expect(
            all(isinstance(r, ConflictError) for i, r in enumerate(results) if i != winners[0]), f"{results}"
        )
        stored = await store.get_session(agent, "race")
        expect_equal((stored.state["writer"], session_version(stored)), (winners[0], 2), "what is stored")


@_check
async def concurrent_creation_lets_exactly_one_win(backend: SessionStoreBackend) -> None:
    """Four new sessions saved under one id at once: one wins, three conflict."""
    agent = _agent()
    async with backend.open() as store:
        fresh = [agent.create_session(session_id="born") for _ in range(4)]
        results = await asyncio.gather(
            *(store.save_session(agent, "born", s) for s in fresh), return_exceptions=True
        )
        expect_equal(sum(result is None for result in results), 1, f"saves that won ({results})")
        expect_equal(sum(isinstance(result, ConflictError) for result in results), 3, "saves that conflicted")


@_check
async def delete_forgets_the_session(backend: SessionStoreBackend) -> None:
    """A deleted session reads as new; its old version no longer saves; others are untouched."""
    agent = _agent()
    async with backend.open() as store:
        old = await _saved(store, agent, "gone", value=1)
        await _saved(store, agent, "kept", value=2)
        expect_equal(await store.delete_session(agent, "gone"), True, "deleting a stored session")
        expect_equal(await store.delete_session(agent, "gone"), False, "deleting it again")
        fresh = await store.get_session(agent, "gone")
        expect_equal((session_version(fresh), "value" in fresh.state), (None, False), "reading it afterwards")
        with expect_raises(ConflictError, "saving the deleted version"):
            await store.save_session(agent, "gone", old)
        await store.save_session(agent, "gone", fresh)
        expect_equal(session_version(fresh), 1, "a new session under the id")
        expect_equal((await store.get_session(agent, "kept")).state["value"], 2, "another session")


@_check
async def sessions_are_scoped_by_agent_name(backend: SessionStoreBackend) -> None:
    """Two agents' sessions under one conversation id are separate sessions."""
    alpha, beta = _agent("alpha"), _agent("beta")
    async with backend.open() as store:
        await _saved(store, alpha, "shared-id", owner="alpha")
        seen_by_beta = await store.get_session(beta, "shared-id")
        expect_equal(
            ("owner" in seen_by_beta.state, session_version(seen_by_beta)), (False, None), "beta's view"
        )
        seen_by_beta.state["owner"] = "beta"
        await store.save_session(beta, "shared-id", seen_by_beta)
        expect_equal((await store.get_session(alpha, "shared-id")).state["owner"], "alpha", "alpha's session")
        expect_equal(
            (await store.get_session(_agent("alpha"), "shared-id")).state["owner"], "alpha", "by name"
        )
        expect_equal(await store.delete_session(alpha, "shared-id"), True, "deleting alpha's")
        expect_equal((await store.get_session(beta, "shared-id")).state["owner"], "beta", "beta's session")


@_check
async def unnamed_agents_are_keyed_by_id(backend: SessionStoreBackend) -> None:
    """Agents without a name are told apart by their id."""
    one, two = _agent(None), _agent(None)
    async with backend.open() as store:
        await _saved(store, one, "c", owner="one")
        expect("owner" not in (await store.get_session(two, "c")).state, "another unnamed agent sees it")
        same = Agent(ScriptedChatClient(), id=one.id)
        expect_equal((await store.get_session(same, "c")).state["owner"], "one", "the same id")


@_check
async def odd_conversation_ids_work_and_stay_apart(backend: SessionStoreBackend) -> None:
    """Ids with slashes, dots, percent signs, Unicode or great length each keep their own session."""
    agent = _agent()
    odd_agent = _agent("../Odd/agent 名")
    async with backend.open() as store:
        for index, conversation_id in enumerate(ODD_CONVERSATION_IDS):
            await _saved(store, agent, conversation_id, index=index)
        await _saved(store, odd_agent, "a/b", index=-1)
        for index, conversation_id in enumerate(ODD_CONVERSATION_IDS):
            session = await store.get_session(agent, conversation_id)
            expect_equal(
                (session.session_id, session.state["index"], session_version(session)),
                (conversation_id, index, 1),
                f"the session of {conversation_id!r}",
            )
        expect_equal((await store.get_session(odd_agent, "a/b")).state["index"], -1, "an odd agent's session")
        for conversation_id in ODD_CONVERSATION_IDS:
            expect_equal(
                await store.delete_session(agent, conversation_id), True, f"deleting {conversation_id!r}"
            )
        expect_equal((await store.get_session(odd_agent, "a/b")).state["index"], -1, "the odd agent's, after")


@_check
async def an_empty_conversation_id_is_refused(backend: SessionStoreBackend) -> None:
    """An empty conversation id raises ValueError."""
    agent = _agent()
    async with backend.open() as store:
        with expect_raises(ValueError, "reading an empty id"):
            await store.get_session(agent, "")
        with expect_raises(ValueError, "saving under an empty id"):
            await store.save_session(agent, "", agent.create_session())


@_check
async def a_corrupt_payload_is_reported(backend: SessionStoreBackend) -> None:
    """A stored session that does not decode raises SessionFormatError; it can still be deleted."""
    if backend.corrupt_session is None:
        raise NotApplicable(f"{backend.name} gives the suite no way to corrupt a stored session")
    agent = _agent()
    async with backend.open() as store:
        await _saved(store, agent, "broken", value=1)
        await _saved(store, agent, "fine", value=2)
        outcome = backend.corrupt_session(store, agent, "broken")
        if inspect.isawaitable(outcome):
            await outcome
        with expect_raises(SessionFormatError, "reading the corrupt session"):
            await store.get_session(agent, "broken")
        expect_equal((await store.get_session(agent, "fine")).state["value"], 2, "another session")
        expect_equal(await store.delete_session(agent, "broken"), True, "deleting the corrupt session")
        expect_equal(session_version(await store.get_session(agent, "broken")), None, "reading it afterwards")


@_check
async def a_closed_store_refuses_work(backend: SessionStoreBackend) -> None:
    """After ``aclose()`` (idempotent) every operation raises StorageClosedError."""
    agent = _agent()
    async with backend.open() as store:
        session = await _saved(store, agent, "c", value=1)
        await store.aclose()
        await store.aclose()
        with expect_raises(StorageClosedError, "reading from a closed store"):
            await store.get_session(agent, "c")
        with expect_raises(StorageClosedError, "saving to a closed store"):
            await store.save_session(agent, "c", session)
        with expect_raises(StorageClosedError, "deleting from a closed store"):
            await store.delete_session(agent, "c")
