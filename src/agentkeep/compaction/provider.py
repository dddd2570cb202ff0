"""Where compaction runs in an agent: :class:`CompactionProvider` and its per-session index cache.

A :class:`CompactionProvider` runs a strategy in one of three phases:

* ``"model_call"``: before every model call of the tool loop, on what is about to be sent (history,
  the run's input and what the loop produced so far). Only the request changes; stored history
  stays as it is. ``Agent(compaction_strategy=...)`` is this phase.
* ``"before_run"`` (default): once per run, on the history just loaded. The request gets the
  result, and when the run succeeds it becomes the stored history: the history provider records
  it (:meth:`HistoryProvider.record_compaction`): storage-backed providers keep the originals,
  mark them excluded and add each summary with the ids it replaces, so the compacted view is what
  loads next time. A failed run records nothing.
* ``"after_run"``: once per run, after the run's messages were stored; recorded the same way.

Compaction never runs on a service-managed conversation (the service holds that history).

**The reference's form.** ``CompactionProvider(before_strategy=..., after_strategy=...,
history_source_id=...)`` runs two strategies as the reference Python edition does: the
``before_strategy`` on the messages earlier providers added to the run (the loaded history),
changing only what is sent; the ``after_strategy`` once the history providers stored the run, on
the stored history of ``history_source_id``: a history kept in the reference's shape
(``session.state[history_source_id]["messages"]``) is annotated in place (its excluded messages
stay, marked ``_excluded``; an ``InMemoryHistoryProvider(skip_excluded=True)`` leaves them out of
what it loads), any other history provider records the compaction as in phase ``"after_run"``.
Either strategy may be agentkeep's or one written for the reference
(:mod:`agentkeep.compaction.annotations`).

**Incremental.** Each session keeps (in memory, never serialized) one :class:`MessageIndex` per
provider, in step with the history it was built from: a history view that continues the previous
one adds only its new messages, and messages this provider already added for a run (input, tool
loop) are matched by id instead of being added again. So a turn costs what it adds. Anything else
(a reload, another writer's compaction, a failed run) rebuilds the index from the history once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from ..message_log import MessageChain, MessageView
from ..messages import Message
from ..providers.context import AIContext, ContextProvider, SessionContext
from ..providers.history import HistoryProvider
from ..sessions import AgentSession
from .annotations import AnnotatedCompactionStrategy, included_messages, index_strategy
from .index import MessageIndex
from .strategies.base import CompactionStrategy, apply_compaction, counts_like, resolve_tokenizer
from .tokenizers import Tokenizer

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["CompactionPhase", "CompactionProvider"]

logger = logging.getLogger("agentkeep.compaction")

CompactionPhase = Literal["before_run", "model_call", "after_run"]
_PHASES: tuple[CompactionPhase, ...] = ("before_run", "model_call", "after_run")


class _IndexCache:
    """One session's index for one provider, in step with a history view (see the module docs)."""

    __slots__ = ("busy", "index", "owner", "pending", "strategy", "tokenizer", "view")

    def __init__(self, strategy: object, tokenizer: Tokenizer) -> None:
        self.strategy = strategy
        self.tokenizer = tokenizer
        self.index: MessageIndex | None = None
        self.view: MessageView | None = None  # the history the index holds (a prefix of later views)
        self.pending: list[str | None] = []  # ids of run messages added after `view`, not yet stored
        self.busy = False  # a compaction is in progress (it may await a model): others go cold
        self.owner: object = None  # the run whose messages the index holds

    def sync(self, history: Sequence[Message]) -> MessageIndex:
        """The index for ``history``: the cached one plus what is new, or a fresh one."""
        index, view = self.index, self.view
        if index is not None and view is not None and isinstance(history, MessageView):
            new = history.extension_of(view)
            fresh = _past_pending(self.pending, new) if new is not None else None
            if fresh is not None:
                index.append(fresh)
                self.view, self.pending = history, []
                return index
        index = self.index = MessageIndex(history, tokenizer=self.tokenizer)
        self.view = history if isinstance(history, MessageView) else None
        self.pending = []
        return index


def _past_pending(pending: list[str | None], new: Iterable[Message]) -> list[Message] | None:
    """The messages of ``new`` after the run messages with the ``pending`` ids, or ``None`` if
    ``new`` does not start with them (the index holds those already)."""
    messages = list(new)
    if [m.message_id for m in messages[: len(pending)]] != pending:
        return None
    return messages[len(pending) :]


@dataclass(frozen=True, slots=True)
class _Outcome:
    """A compaction of stored history, to record: what went, what came, and the view it gives."""

    excluded: list[str]
    summaries: list[tuple[Message, list[str]]]
    view: list[Message]
    based_on: Sequence[Message]
    shared: bool  # made on the session's cached index


class CompactionProvider(ContextProvider):
    """Runs a compaction strategy around an agent's runs (see the module docs for the phases).

    Args:
        strategy: The strategy (or a :class:`~agentkeep.compaction.PipelineCompactionStrategy`).
        before_strategy: The reference's form (instead of ``strategy``): compacts what the run
            sends, before the model call (see the module docs).
        after_strategy: The reference's form: compacts the stored history after the run.
        history_source_id: With ``after_strategy``: the history provider whose history it
            compacts (default ``"in_memory"``).
        tokenizer: Counts tokens for the index; default the strategy's ``tokenizer``, else
            :class:`~agentkeep.compaction.CharacterEstimatorTokenizer`.
        phase: ``"before_run"`` (default), ``"model_call"`` or ``"after_run"`` (for ``strategy``).
        source_id: Provider id (default ``"compaction"``; give each provider of an agent its own).

    Raises:
        ValueError: ``phase`` is not one of the three, or ``strategy`` is given with
            ``before_strategy`` / ``after_strategy``.

    Example:
        >>> provider = CompactionProvider(SlidingWindowStrategy(keep_last_groups=20))  # doctest: +SKIP
        >>> agent = Agent(client, context_providers=[provider])  # doctest: +SKIP
    """

    DEFAULT_SOURCE_ID = "compaction"

    def __init__(
        self,
        strategy: CompactionStrategy | AnnotatedCompactionStrategy | None = None,
        *,
        before_strategy: CompactionStrategy | AnnotatedCompactionStrategy | None = None,
        after_strategy: CompactionStrategy | AnnotatedCompactionStrategy | None = None,
        history_source_id: str = "in_memory",
        tokenizer: Tokenizer | None = None,
        phase: CompactionPhase = "before_run",
        source_id: str | None = None,
    ) -> None:
        if phase not in _PHASES:
            raise ValueError(f"phase must be one of {', '.join(_PHASES)}, not {phase!r}")
        if strategy is not None and (before_strategy is not None or after_strategy is not None):
            raise ValueError(
                "give CompactionProvider a strategy (and a phase), or before_strategy / after_strategy, "
                "not both"
            )
        super().__init__(source_id or self.DEFAULT_SOURCE_ID)
        self.before_strategy = before_strategy
        self.after_strategy = after_strategy
        self.history_source_id = history_source_id
        self.reference_form = strategy is None
        chosen = strategy if strategy is not None else after_strategy or before_strategy
        self.strategy = chosen
        self.tokenizer = resolve_tokenizer(chosen, tokenizer)
        self.phase: CompactionPhase = phase

    @property
    def defers_after_run(self) -> bool:
        """Whether :meth:`after_run` must run after the history providers stored the run."""
        return self.phase == "after_run" if not self.reference_form else self.after_strategy is not None

    @staticmethod
    async def compact(
        strategy: CompactionStrategy, messages: Iterable[Message], *, tokenizer: Tokenizer | None = None
    ) -> list[Message]:
        """Apply ``strategy`` to a message list outside any session (see :func:`apply_compaction`)."""
        return await apply_compaction(messages, strategy=strategy, tokenizer=tokenizer)

    # -- the session's cache ------------------------------------------------------------------------
    def _cache(self, session: AgentSession) -> _IndexCache:
        key = f"compaction:{self.source_id}"
        cache = session.runtime.get(key)
        if (
            not isinstance(cache, _IndexCache)
            or cache.strategy is not self.strategy
            or not counts_like(self.tokenizer, cache.tokenizer)  # its counts would be wrong
        ):
            assert self.strategy is not None  # a provider without strategies compacts nothing
            cache = _IndexCache(self.strategy, self.tokenizer)
            session.runtime[key] = cache
        return cache

    # -- before_run / after_run: compact stored history ---------------------------------------------
    async def before_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> AIContext | None:
        """Phase ``"before_run"``: compact the loaded history and send the result; it is recorded
        in stored history when the run succeeds (:meth:`after_run`). The reference's form: compact
        what earlier providers added, for this run only."""
        if self.reference_form:
            if self.before_strategy is not None and not getattr(context, "service_session_id", None):
                await _compact_context_messages(self.before_strategy, context)
            return None
        if self.phase != "before_run" or context.service_session_id:
            return None
        sources = [s for s in context.context_messages if s in context.history_sources]
        if len(sources) != 1:
            return None  # no loaded history (or several: not ours to merge)
        source_id = sources[0]
        history = _history_of(context, [source_id])
        outcome = await self._compact(session, history)
        if outcome is not None:
            context.replace_messages(source_id, outcome.view)
            context.metadata[self._outcome_key] = (agent.history_provider(source_id), outcome)
        return None

    async def after_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> None:
        """Record what phase ``"before_run"`` compacted, once the run succeeded (a failed run
        stores nothing); phase ``"after_run"``: compact the stored history (run included) and
        record it. The agent calls the ``"after_run"`` phase after every history provider stored
        the run.
        """
        if self.reference_form:
            if self.after_strategy is not None and getattr(context, "exception", None) is None:
                await self._compact_stored(agent, session, context, self.after_strategy)
            return
        if self.phase == "before_run":
            pending = context.metadata.pop(self._outcome_key, None)
            if isinstance(pending, tuple):
                provider, outcome = cast("tuple[HistoryProvider | None, _Outcome]", pending)
                if context.exception is None:
                    await self._record(session, provider, outcome)
                elif outcome.shared:
                    self._cache(session).index = None  # its exclusions were never stored: rebuild
            return
        if self.phase != "after_run" or context.exception is not None or context.service_session_id:
            return
        await self._compact_history_of(session, agent.history_provider())

    async def _compact_stored(
        self,
        agent: Agent | None,
        session: AgentSession | None,
        context: SessionContext,
        strategy: CompactionStrategy | AnnotatedCompactionStrategy,
    ) -> None:
        """The reference's after-run compaction: of a history in its shape, in place; of any
        other history provider's, recorded (as phase ``"after_run"`` does)."""
        if session is None or getattr(context, "service_session_id", None):
            return
        held: Any = session.state.get(self.history_source_id)
        if isinstance(held, dict):
            messages: Any = cast("dict[str, Any]", held).get("messages")
            if isinstance(messages, list) and messages:
                await _annotated(strategy)(cast("list[Message]", messages))
            return
        provider = agent.history_provider(self.history_source_id) if agent is not None else None
        await self._compact_history_of(session, provider)

    async def _compact_history_of(self, session: AgentSession, provider: HistoryProvider | None) -> None:
        """Compact what ``provider`` stores for ``session`` and have it record the outcome."""
        if provider is None:
            return
        outcome = await self._compact(session, await provider.get_session_messages(session))
        if outcome is not None:
            await self._record(session, provider, outcome)

    @property
    def _outcome_key(self) -> str:
        return f"compaction:{self.source_id}:outcome"

    async def _compact(self, session: AgentSession, history: Sequence[Message]) -> _Outcome | None:
        """Compact ``history`` (on the session's cached index when free); ``None`` if unchanged."""
        cache = self._cache(session)
        if cache.busy:  # another run of this session is compacting: work on a private index
            index = MessageIndex(history, tokenizer=self.tokenizer)
            shared = False
        else:
            index = cache.sync(history)
            shared = True
        index.track_changes()
        if not await self._run_strategy(index, cache if shared else None):
            return None
        excluded, summaries = index.changes()
        return _Outcome(excluded, summaries, index.included_messages(), history, shared)

    async def _record(
        self, session: AgentSession, provider: HistoryProvider | None, outcome: _Outcome
    ) -> None:
        """Have ``provider`` record ``outcome`` and keep the session's cache in step with it."""
        stored = None
        if provider is not None:
            stored = await provider.record_compaction(
                session,
                excluded=outcome.excluded,
                summaries=outcome.summaries,
                view=outcome.view,
                based_on=outcome.based_on,
            )
        if outcome.shared and stored is not None:
            self._cache(session).view = stored  # the log now holds the compacted view: continue it

    async def _run_strategy(self, index: MessageIndex, cache: _IndexCache | None) -> bool:
        """Run the strategy on ``index``; with the ``cache`` that holds it, keep other runs off the
        index meanwhile and have it rebuilt if the strategy fails half-way."""
        strategy = index_strategy(self.strategy)
        if cache is None:
            return await strategy.compact(index)
        cache.busy = True
        try:
            return await strategy.compact(index)
        except BaseException:
            cache.index = None  # half-compacted: rebuild next time
            raise
        finally:
            cache.busy = False

    # -- model_call: compact what is sent ------------------------------------------------------------
    async def compact_request(
        self, session: AgentSession | None, context: SessionContext, produced: Sequence[Message]
    ) -> Sequence[Message]:
        """Phase ``"model_call"``: the compacted request for the next model call.

        History, the run's input and what the tool loop produced are compacted; messages other
        (non-history) providers added are sent as they are, between history and input.

        Args:
            session: The run's session (its cache makes this incremental); ``None`` compacts cold.
            context: The run's context.
            produced: What the tool loop produced so far this run.

        Returns:
            The messages to send.
        """
        history_sources = context.history_sources
        history = _history_of(context, history_sources)
        others = context.get_messages(exclude_sources=history_sources)
        run_messages = [*context.input_messages, *produced]
        cache = self._cache(session) if session is not None else None
        run_key = f"compaction:{self.source_id}:run"
        if cache is None or cache.busy:  # no session, or another run is compacting: a private index
            index, shared = MessageIndex(history, tokenizer=self.tokenizer), False
            added, run_start = 0, index.message_count
        elif cache.owner is context and cache.index is not None:
            index, shared = cache.index, True  # a later call of this run: add what the loop produced
            added, run_start = context.metadata[run_key]
        else:
            index, shared = cache.sync(history), True
            cache.owner = context
            added, run_start = 0, index.message_count
        new = run_messages[added:]
        index.append(new)
        if shared:
            assert cache is not None
            cache.pending.extend(m.message_id for m in new)
            context.metadata[run_key] = (len(run_messages), run_start)
        await self._run_strategy(index, cache if shared else None)
        projected = index.included_messages()
        split = len(projected) - _run_region_count(index, run_start)
        if not others:
            return projected
        return MessageChain(projected[:split], others, projected[split:])

    def __repr__(self) -> str:
        if self.reference_form:
            return (
                f"CompactionProvider(before_strategy={self.before_strategy!r}, "
                f"after_strategy={self.after_strategy!r}, history_source_id={self.history_source_id!r}, "
                f"source_id={self.source_id!r})"
            )
        return f"CompactionProvider({self.strategy!r}, phase={self.phase!r}, source_id={self.source_id!r})"


def _annotated(strategy: object) -> AnnotatedCompactionStrategy:
    """``strategy`` called the reference's way: on a message list, annotating it."""
    if callable(strategy):
        return cast(AnnotatedCompactionStrategy, strategy)
    raise TypeError(f"{type(strategy).__name__} is not a compaction strategy")


async def _compact_context_messages(strategy: object, context: Any) -> None:
    """Compact the messages earlier providers added to ``context`` (each source keeps its own),
    for this run only: the strategy works on copies, so stored history keeps no annotations."""
    sources: dict[str, Sequence[Message]] = dict(context.context_messages)
    source_of: dict[int, str] = {}
    working: list[Message] = []
    for source_id, messages in sources.items():
        for message in messages:
            copy = message.copy()
            source_of[id(copy)] = source_id
            working.append(copy)
    if not working or not await _annotated(strategy)(working):
        return
    rebuilt: dict[str, list[Message]] = {source_id: [] for source_id in sources}
    last = next(iter(rebuilt))
    for message in included_messages(working):
        last = source_of.get(id(message), last)  # a summary joins the source of what precedes it
        rebuilt[last].append(message)
    if isinstance(context, SessionContext):
        for source_id, messages in rebuilt.items():
            context.replace_messages(source_id, messages)
    else:  # a context shaped as the reference's: a dict of lists
        context.context_messages.clear()
        context.context_messages.update(rebuilt)


def _history_of(context: SessionContext, sources: Iterable[str]) -> Sequence[Message]:
    """The history ``sources`` added: the one view a history provider added as it is (so the cache
    can tell it continues the last one, even while empty), else the messages joined in a list."""
    chosen = list(sources)
    if len(chosen) == 1:
        parts = context.message_parts(chosen[0])
        if len(parts) == 1:
            return parts[0]
    return list(context.get_messages(sources=chosen)) if chosen else []


def _run_region_count(index: MessageIndex, run_start: int) -> int:
    """How many included messages stand at or after position ``run_start`` in the projection.

    Messages appended from ``run_start`` on count, and summaries put in since then count when
    their anchor is there too. Cost: the messages from ``run_start`` on.
    """
    count = 0
    for position in range(run_start, index.message_count):
        group = index.group_of(position)
        if group.excluded:
            continue
        if not index.is_inserted(position) or group.order >= run_start:
            count += 1
    return count
