"""The stored parts of a Responses conversation: the session store and history calls the Responses
and Conversations endpoints make, so that their module only parses the wire and renders events.

A conversation is a session of a hosted agent's store, under the caller's tenant (see
:mod:`agentkeep.host._responses`); its history lives in the agent's history provider and the
responses made in it are recorded in its state (the newest :data:`KEPT_RESPONSES`).
:class:`Conversations` opens and creates conversations, reads their messages (all of them, the
newest ones, up to a message) and finds a response's record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..providers.storage import StorageHistoryProvider
from ..session_stores import session_version
from ._http import HTTPProblem
from ._memory import bind_user, readable_by
from ._turns import SessionTurn

if TYPE_CHECKING:
    from ..agent import Agent
    from ..messages import Message
    from ..sessions import AgentSession
    from ._app import AgentHost, HostedAgent

__all__ = [
    "KEPT_RESPONSES",
    "Conversations",
    "all_messages",
    "history_until",
    "keep_record",
    "newest_messages",
    "record_of",
    "response_records",
]

KEPT_RESPONSES: Final = 64
"""How many responses of each conversation ``GET /v1/responses/{id}`` can return."""
_RECORD: Final = "host:response:"


def record_of(session: AgentSession, response_id: str) -> dict[str, Any] | None:
    """The stored record of response ``response_id`` in its conversation's session: ``response``
    (the response object) and ``last_message_id`` (its conversation's newest message then)."""
    record = session.state.get(_RECORD + response_id)
    return record if isinstance(record, dict) else None  # pyright: ignore[reportUnknownVariableType]


def response_records(session: AgentSession) -> dict[str, dict[str, Any]]:
    """The records of the responses kept in a conversation's session, by response id."""
    records: dict[str, dict[str, Any]] = {}
    for key in session.state:
        if key.startswith(_RECORD):
            record = session.state.get(key)
            if isinstance(record, dict):
                records[key[len(_RECORD) :]] = record  # pyright: ignore[reportUnknownArgumentType]
    return records


def keep_record(
    session: AgentSession,
    response: dict[str, Any],
    last_message_id: str | None,
    *,
    idempotency: dict[str, str] | None = None,
) -> None:
    """Record ``response`` in its conversation's session (with the ``Idempotency-Key`` of the
    request that made it, if any), dropping the oldest records past :data:`KEPT_RESPONSES`."""
    record: dict[str, Any] = {"response": response, "last_message_id": last_message_id}
    if idempotency is not None:
        record["idempotency"] = idempotency
    session.state[_RECORD + response["id"]] = record
    records = response_records(session)
    if len(records) > KEPT_RESPONSES:
        oldest = sorted(records, key=lambda rid: records[rid]["response"]["created_at"])
        for rid in oldest[: len(records) - KEPT_RESPONSES]:
            del session.state[_RECORD + rid]


async def all_messages(agent: Agent, session: AgentSession) -> list[Message]:
    """The conversation's whole compacted history."""
    provider = agent.history_provider()
    if isinstance(provider, StorageHistoryProvider):
        return (await provider.store.read(provider.conversation_id(session))).messages
    if provider is None:
        return []
    return list(await provider.get_session_messages(session))


async def newest_messages(agent: Agent, session: AgentSession, count: int) -> tuple[list[Message], bool]:
    """The conversation's newest ``count`` messages (from a message store only those are read)
    and whether they are all it holds."""
    provider = agent.history_provider()
    if isinstance(provider, StorageHistoryProvider):
        messages = (await provider.store.read(provider.conversation_id(session), last=count)).messages
        return messages, len(messages) < count
    return await all_messages(agent, session), True


async def history_until(agent: Agent, session: AgentSession, last_message_id: str) -> list[Message]:
    """The stored history up to and including ``last_message_id`` (where a branch starts; the
    history a turn loads may be only the newest window of it, so the whole view is read).

    Raises:
        HTTPProblem: 400 when compaction removed that message.
    """
    messages = await all_messages(agent, session)
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].message_id == last_message_id:
            return messages[: index + 1]
    raise HTTPProblem(
        400, "invalid_request", "the previous response's messages were compacted away: cannot branch"
    )


class Conversations:
    """The conversations of ``host``'s agents, by tenant: opened, created and searched."""

    def __init__(self, host: AgentHost) -> None:
        self.host = host

    async def _load(self, hosted: HostedAgent, tenant: str, conversation_id: str) -> SessionTurn:
        return await SessionTurn.load(
            hosted.agent, hosted.session_store, tenant, conversation_id, attempts=self.host.save_attempts
        )

    async def open(
        self,
        hosted: HostedAgent,
        tenant: str,
        conversation_id: str,
        *,
        user: str | None = None,
        check_reader: bool = False,
    ) -> SessionTurn:
        """The stored conversation ``conversation_id`` of ``hosted`` in ``tenant``.

        Raises:
            HTTPProblem: 404 when it is not stored (or, with ``check_reader``, when ``user`` may
                not read it).
        """
        turn = await self._load(hosted, tenant, conversation_id)
        if session_version(turn.session) is None or (check_reader and not readable_by(turn.session, user)):
            raise HTTPProblem(404, "not_found", f"no conversation {conversation_id!r}")
        return turn

    async def create(
        self,
        hosted: HostedAgent,
        tenant: str,
        conversation_id: str,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        user: str | None = None,
        save: bool = True,
    ) -> SessionTurn:
        """A new stored conversation with ``state`` in its session and ``messages`` in its
        history (a branch's prefix, a created conversation's items), bound to ``user``.

        With ``save`` false nothing is written yet: the session and ``messages`` are held for the
        save after the turn's run (which sees the held messages as the conversation's history),
        so a run that fails leaves no conversation behind."""
        turn = await self._load(hosted, tenant, conversation_id)
        turn.hold_appends()  # the messages and the session in one step (and a run's that follows)
        for key, value in (state or {}).items():
            turn.session.state[key] = value
        bind_user(turn.session, user, conversation_id=conversation_id)
        provider = hosted.agent.history_provider()
        if provider is not None and messages:
            await provider.save_messages(
                turn.session.storage_key,
                messages,
                state=provider.get_state(turn.session),
                session=turn.session,
            )
        if save:
            await turn.save()
        return turn

    async def readable_records(
        self, hosted: HostedAgent, tenant: str, conversation_id: str, *, user: str | None
    ) -> dict[str, dict[str, Any]] | None:
        """The response records of conversation ``conversation_id`` (empty when it is not
        stored), or ``None`` when it is stored but ``user`` may not read it."""
        turn = await self._load(hosted, tenant, conversation_id)
        if session_version(turn.session) is None:
            return {}
        if not readable_by(turn.session, user):
            return None
        return response_records(turn.session)

    async def response(
        self, tenant: str, conversation_id: str, response_id: str, *, user: str | None
    ) -> dict[str, Any] | None:
        """The response object ``response_id`` of conversation ``conversation_id`` (of any hosted
        agent) in ``tenant``, if ``user`` may read it."""
        for hosted in self.host.agents.values():
            turn = await self._load(hosted, tenant, conversation_id)
            record = record_of(turn.session, response_id)
            if record is not None and readable_by(turn.session, user):
                return record["response"]
        return None
