"""The frame of one hosted turn (:class:`HostedTurn`): what AG-UI and the Responses API share.

A turn of a hosted conversation is run from here: the span, the time limit and the conversation's
lock (:class:`~agentkeep.host._turns.ConversationLocks`) for the whole turn; the session loaded
(warm when :class:`~agentkeep.host._turns.SessionCache` holds it), bound to the caller's user and
stored first when new; after the run the session stored and kept warm. The protocol modules parse
their wire format, run the agent inside the frame and render what it does.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from .. import telemetry
from ..session_stores import session_version
from ..turn_writes import release_appends
from ._http import HTTPProblem, spanned
from ._memory import bind_user
from ._turns import SessionTurn

if TYPE_CHECKING:
    from types import TracebackType

    from ._app import AgentHost, HostedAgent

__all__ = ["HostedTurn"]


class HostedTurn:
    """The frame of one turn of a hosted conversation, the one place a turn is run from: its span,
    its time limit and the conversation's lock for the whole turn; on the way in the session
    (warm when cached, bound to the caller's user, stored before the run when it is new or was just
    bound: of two turns naming two users at once, one owns it before anything is written); on the
    way out the session stored and kept warm. The protocol endpoints (AG-UI, Responses) run inside
    it and only parse their wire format and render the run as events.

    Use as ``async with HostedTurn(...) as frame:``; an exception inside fails the span and
    propagates (the endpoint maps it to its protocol's error with ``run_error``).
    """

    def __init__(
        self, host: AgentHost, hosted: HostedAgent, tenant: str, conversation_id: str, parent: telemetry.Span
    ) -> None:
        self.host, self.hosted, self.tenant = host, hosted, tenant
        self.conversation_id = conversation_id
        self.span = parent.start_child(
            "agentkeep.host.turn",
            **{
                "agentkeep.agent": hosted.name,
                "agentkeep.conversation": conversation_id,
                "agentkeep.tenant": tenant,
            },
        )
        self._stack = contextlib.AsyncExitStack()

    def key(self, conversation_id: str | None = None) -> tuple[str, str, str]:
        """The host-wide key of this turn's conversation (or of ``conversation_id``)."""
        return (self.tenant, self.hosted.name, conversation_id or self.conversation_id)

    async def __aenter__(self) -> HostedTurn:
        stack = self._stack
        await stack.__aenter__()
        try:
            await stack.enter_async_context(asyncio.timeout(self.host.run_timeout))
            await stack.enter_async_context(self.host.locks.hold(self.key()))
            await stack.enter_async_context(spanned(self.span))
        except BaseException:
            await stack.aclose()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if isinstance(exc, Exception):
            self.span.fail(exc)
        return await self._stack.__aexit__(kind, exc, tb)

    async def session(self, *, user: str | None, existing: bool = False) -> SessionTurn:
        """The conversation's session for this turn (warm when the cache holds its stored
        version), bound to ``user``, and stored first when it is new or was just bound.

        Args:
            user: The caller's user (``X-Agentkeep-User``), if any.
            existing: Refuse a conversation that is not stored (HTTP 404) instead of making it.
        """
        turn = await SessionTurn.load(
            self.hosted.agent,
            self.hosted.session_store,
            self.tenant,
            self.conversation_id,
            cache=(self.host.sessions, self.key()),
            attempts=self.host.save_attempts,
        )
        turn.hold_appends()  # the turn ends with store() or fails: its appends go with the save
        new = session_version(turn.session) is None
        if new and existing:
            raise HTTPProblem(404, "not_found", f"no conversation {self.conversation_id!r}")
        if bind_user(turn.session, user, conversation_id=self.conversation_id) or new:
            await turn.save()
        return turn

    async def store(self, turn: SessionTurn, *, conversation_id: str | None = None) -> None:
        """Store ``turn``'s session after its run and keep it warm for the next turn (under
        ``conversation_id`` when the run went on to another conversation: a branch)."""
        turn.discard_kept()  # what the run's history provider did not take (it loads nothing)
        await turn.save()  # with the appends the run held: one step where the stores share a database
        release_appends(turn.session)
        self.host.sessions.keep(self.key(conversation_id), turn.session)
