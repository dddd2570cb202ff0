"""Compaction strategies that need no model: they exclude or collapse old message groups.

A :class:`CompactionStrategy` works on a :class:`~agentkeep.compaction.MessageIndex` in place and
returns whether it changed anything. Every strategy here has

* a **trigger** (:data:`~agentkeep.compaction.CompactionTrigger`): when it is false the strategy
  does nothing;
* a **target**: checked before each step; the strategy stops as soon as it holds. By default it
  is the trigger's inverse;
* a **minimum_preserved** floor: the newest ``minimum_preserved`` non-system groups are never
  touched (at least one: the newest non-system group is always kept).

System groups are never excluded (except by :class:`TruncationStrategy` with
``preserve_system=False``), and a tool-call group is always excluded or collapsed as a whole.

**Summaries in place.** :class:`ToolResultCompactionStrategy` replaces a tool-call group with a
summary message through :meth:`~agentkeep.compaction.MessageIndex.replace`: the summary (marked
with :data:`~agentkeep.compaction.SUMMARY_PROPERTY`, listing the ``message_id`` of every message
it replaces) takes the place of the group, so it counts as old as what it replaced and
:func:`project` puts it there.

**Incremental.** Strategies walk groups lazily from the index's cursors (past the groups earlier
calls excluded) and stop as soon as the target holds; triggers and targets read O(1) totals. So
compacting again after a turn was appended costs about what that turn added, not the history.

**Cold.** On a long history never compacted, the work is per group, so it is done in batches:
a strategy whose target cannot stop it early (the default with an ``always`` trigger) hands all
its candidates to :meth:`~agentkeep.compaction.MessageIndex.exclude_many` or
:meth:`~agentkeep.compaction.MessageIndex.replace_each`; one that stops on a running measure
(truncation, the token budget's fallback) collects the groups that go and excludes them at once.

Names and defaults follow the Python edition of the reference (seed 002):
:class:`TruncationStrategy`, :class:`SlidingWindowStrategy`, :class:`ToolResultCompactionStrategy`,
:class:`SelectiveToolCallCompactionStrategy`, :class:`PipelineCompactionStrategy`,
:class:`TokenBudgetComposedStrategy`; plus the turn-based .NET-style
:class:`SlidingWindowCompactionStrategy`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any, Protocol, runtime_checkable

from ..contents import FunctionCallContent, FunctionResultContent
from ..messages import Message
from .groups import MessageGroup, MessageGroupKind, MessageIndex
from .tokenizers import CharacterEstimatorTokenizer, Tokenizer, count_message_tokens
from .triggers import CompactionTrigger, CompactionTriggers, non_negative

__all__ = [
    "CompactionStrategy",
    "PipelineCompactionStrategy",
    "SelectiveToolCallCompactionStrategy",
    "SlidingWindowCompactionStrategy",
    "SlidingWindowStrategy",
    "TokenBudgetComposedStrategy",
    "ToolResultCompactionStrategy",
    "TruncationStrategy",
    "apply_compaction",
    "project",
    "tool_group_summary_text",
]

_TOOL_CALL = MessageGroupKind.TOOL_CALL

_RESULT_PREVIEW_CHARS = 80
"""How many characters of each tool result a collapsed tool-call summary keeps."""


@runtime_checkable
class CompactionStrategy(Protocol):
    """Anything that compacts a :class:`MessageIndex` in place.

    Implementations exclude groups (:meth:`MessageIndex.exclude`) and may append summary messages;
    they never remove or reorder messages.
    """

    async def compact(self, index: MessageIndex) -> bool:
        """Compact ``index`` in place.

        Args:
            index: The history to compact.

        Returns:
            Whether anything changed (a group excluded or a summary added).
        """
        ...


# -- projection and shared machinery -------------------------------------------------------------


def project(index: MessageIndex) -> list[Message]:
    """The messages to send: original order minus excluded groups, each summary in place.

    Same as :meth:`MessageIndex.included_messages`.

    Args:
        index: A compacted index.

    Returns:
        The included messages; a summary stands where the first message it replaces was.
    """
    return index.included_messages()


class _Inverse:
    """A strategy's default target: its trigger no longer fires."""

    __slots__ = ("trigger",)

    def __init__(self, trigger: CompactionTrigger) -> None:
        self.trigger = trigger

    def __call__(self, index: MessageIndex) -> bool:
        return not self.trigger(index)

    def __repr__(self) -> str:
        return f"not {self.trigger!r}"


def _never_holds(target: CompactionTrigger) -> bool:
    """Whether ``target`` is known never to hold, so a strategy need not check it between steps."""
    return target is CompactionTriggers.never or (
        isinstance(target, _Inverse) and target.trigger is CompactionTriggers.always
    )


def _boundary(index: MessageIndex, keep: int) -> MessageGroup | None:
    """The oldest of the newest ``max(1, keep)`` included non-system groups; ``None`` if there are
    no more groups than that (nothing may go)."""
    keep = max(1, keep)
    newest = index.newest_included(keep + 1)
    return newest[keep - 1] if len(newest) > keep else None


def _unprotected(
    index: MessageIndex, minimum_preserved: int, *, include_system: bool = False
) -> Iterator[MessageGroup]:
    """Included non-system groups oldest first, up to the newest ``minimum_preserved`` (at least 1).

    Lazy: a strategy that stops early pays only for the groups it looked at.
    """
    boundary = _boundary(index, minimum_preserved)
    if boundary is None:
        return iter(())
    return index.oldest_included(include_system=include_system, before=boundary.order)


def counts_like(tokenizer: Tokenizer | None, index_tokenizer: Tokenizer) -> bool:
    """Whether ``tokenizer`` counts as the index's own does, so the index's totals can be used.

    ``None``, the same object, or an equally configured default estimator (two agents' separate
    ``CharacterEstimatorTokenizer()`` instances count alike).
    """
    if tokenizer is None or tokenizer is index_tokenizer:
        return True
    return (
        type(tokenizer) is CharacterEstimatorTokenizer
        and type(index_tokenizer) is CharacterEstimatorTokenizer
        and tokenizer.chars_per_token == index_tokenizer.chars_per_token
    )


class TokenMeter:
    """Included tokens as ``tokenizer`` counts them: the index's running totals (O(1)) when it
    counts as the index's own does, else a recount of the included messages, each counted once
    per meter."""

    __slots__ = ("_counts", "_index", "_tokenizer")

    def __init__(self, index: MessageIndex, tokenizer: Tokenizer | None) -> None:
        self._index = index
        self._tokenizer = None if counts_like(tokenizer, index.tokenizer) else tokenizer
        self._counts: dict[int, int] = {}  # by id(): the index holds the messages meanwhile

    def _count(self, messages: Iterable[Message], tokenizer: Tokenizer) -> int:
        counts, total = self._counts, 0
        for message in messages:
            count = counts.get(id(message))
            if count is None:
                count = counts[id(message)] = count_message_tokens(message, tokenizer=tokenizer)
            total += count
        return total

    def __call__(self) -> int:
        """Tokens of the included messages now."""
        if self._tokenizer is None:
            return self._index.included_token_count
        # The projection skips the excluded history before it, where a walk of positions would not.
        return self._count(self._index.included_messages(), self._tokenizer)

    def group(self, group: MessageGroup) -> int:
        """Tokens of ``group``."""
        if self._tokenizer is None:
            return group.token_count
        return self._count(group.messages, self._tokenizer)


_message_count: Callable[[MessageGroup], int] = attrgetter("message_count")


def _exclude_oldest(
    index: MessageIndex,
    candidates: Iterable[MessageGroup],
    total: int,
    limit: int,
    cost: Callable[[MessageGroup], int],
) -> bool:
    """Exclude ``candidates`` in order while ``total``, less each excluded group's ``cost``, is
    above ``limit``: a running measure instead of re-measuring, and one exclusion for the lot.

    Returns:
        Whether any group was excluded.
    """
    doomed: list[MessageGroup] = []
    for group in candidates:
        if total <= limit:
            break
        total -= cost(group)
        doomed.append(group)
    return index.exclude_many(doomed) > 0


class _StepStrategy:
    """Base of strategies that walk candidate groups oldest first, checking the target before each step."""

    def __init__(
        self,
        *,
        trigger: CompactionTrigger,
        target: CompactionTrigger | None,
        minimum_preserved: int,
    ) -> None:
        self.trigger: CompactionTrigger = trigger
        self.target: CompactionTrigger = target if target is not None else _Inverse(trigger)
        self.minimum_preserved: int = non_negative("minimum_preserved", minimum_preserved)

    def _candidates(self, index: MessageIndex) -> Iterable[MessageGroup]:
        return _unprotected(index, self.minimum_preserved)

    def _step(self, index: MessageIndex, group: MessageGroup) -> None:
        index.exclude(group)

    def _done(self, index: MessageIndex) -> bool:
        return self.target(index)

    async def compact(self, index: MessageIndex) -> bool:
        """Compact ``index`` in place if the trigger fires; stop once the target holds.

        Args:
            index: The history to compact.

        Returns:
            Whether anything changed.
        """
        if not self.trigger(index):
            return False
        if _never_holds(self.target):  # every candidate goes: no check between steps
            return self._step_all(index, self._candidates(index))
        changed = False
        for group in self._candidates(index):
            if self._done(index):
                break
            self._step(index, group)
            changed = True
        return changed

    def _step_all(self, index: MessageIndex, groups: Iterable[MessageGroup]) -> bool:
        return index.exclude_many(groups) > 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(trigger={self.trigger!r}, minimum_preserved={self.minimum_preserved})"


# -- truncation and sliding windows --------------------------------------------------------------


class TruncationStrategy(_StepStrategy):
    """Exclude the oldest groups once history exceeds ``max_n``, until it is at most ``compact_to``.

    The measure is tokens when a ``tokenizer`` is given, messages otherwise. Tool-call groups go
    as a whole, so the result may be a little under ``compact_to``.

    Args:
        max_n: Compaction starts when the measure exceeds this.
        compact_to: Compaction stops once the measure is at most this.
        tokenizer: Count tokens with it (measure = tokens); ``None`` measures messages.
        preserve_system: Keep system messages (default); ``False`` lets them go oldest-first too.
        trigger: Replaces the ``max_n`` trigger.
        target: Replaces the ``compact_to`` target.
        minimum_preserved: The newest non-system groups that are always kept (at least 1).

    Raises:
        ValueError: ``compact_to`` is greater than ``max_n``, or a count is negative.

    Example:
        >>> truncation = TruncationStrategy(
        ...     max_n=32_000, compact_to=16_000, tokenizer=CharacterEstimatorTokenizer()
        ... )
    """

    def __init__(
        self,
        max_n: int,
        compact_to: int,
        tokenizer: Tokenizer | None = None,
        preserve_system: bool = True,
        *,
        trigger: CompactionTrigger | None = None,
        target: CompactionTrigger | None = None,
        minimum_preserved: int = 1,
    ) -> None:
        non_negative("max_n", max_n)
        non_negative("compact_to", compact_to)
        if compact_to > max_n:
            raise ValueError(f"compact_to ({compact_to}) must not exceed max_n ({max_n})")
        self.max_n = max_n
        self.compact_to = compact_to
        self.tokenizer = tokenizer
        self.preserve_system = preserve_system
        super().__init__(
            trigger=trigger if trigger is not None else self._over_max,
            target=target if target is not None else self._at_most_compact_to,
            minimum_preserved=minimum_preserved,
        )

    def _measure(self, index: MessageIndex) -> int:
        if self.tokenizer is None:
            return index.included_message_count
        return TokenMeter(index, self.tokenizer)()

    def _over_max(self, index: MessageIndex) -> bool:
        return self._measure(index) > self.max_n

    def _at_most_compact_to(self, index: MessageIndex) -> bool:
        return self._measure(index) <= self.compact_to

    def _candidates(self, index: MessageIndex) -> Iterable[MessageGroup]:
        # Without preserve_system, system groups older than the protected tail may go too.
        return _unprotected(index, self.minimum_preserved, include_system=not self.preserve_system)

    async def compact(self, index: MessageIndex) -> bool:
        """Exclude the oldest groups while the measure is above ``compact_to`` (see the class).

        Args:
            index: The history to compact.

        Returns:
            Whether anything changed.
        """
        if self.target != self._at_most_compact_to:  # a target of the caller's: check it each step
            return await super().compact(index)
        # The default target: keep a running measure instead of re-measuring after each group, and
        # exclude the groups that go at once.
        meter = TokenMeter(index, self.tokenizer) if self.tokenizer is not None else None
        total = meter() if meter is not None else index.included_message_count
        if not self.trigger(index):
            return False
        cost = meter.group if meter is not None else _message_count
        return _exclude_oldest(index, self._candidates(index), total, self.compact_to, cost)

    def __repr__(self) -> str:
        return (
            f"TruncationStrategy(max_n={self.max_n}, compact_to={self.compact_to}, "
            f"tokenizer={self.tokenizer!r}, preserve_system={self.preserve_system})"
        )


class SlidingWindowStrategy(_StepStrategy):
    """Keep only the newest ``keep_last_groups`` non-system groups; exclude every older one.

    Args:
        keep_last_groups: How many of the newest non-system groups to keep (at least 1 is kept).
        preserve_system: Keep system messages; only ``True`` is supported.
        trigger: When to run (default: always).
        target: When to stop early (default: the trigger's inverse, i.e. never with ``always``).
        minimum_preserved: A floor on the kept groups (default 1).

    Raises:
        ValueError: A count is negative, or ``preserve_system`` is false.

    Example:
        >>> sliding_window = SlidingWindowStrategy(keep_last_groups=20)
    """

    def __init__(
        self,
        *,
        keep_last_groups: int,
        preserve_system: bool = True,
        trigger: CompactionTrigger | None = None,
        target: CompactionTrigger | None = None,
        minimum_preserved: int = 1,
    ) -> None:
        if not preserve_system:
            raise ValueError("SlidingWindowStrategy always preserves system messages")
        self.keep_last_groups = non_negative("keep_last_groups", keep_last_groups)
        self.preserve_system = preserve_system
        super().__init__(
            trigger=trigger if trigger is not None else CompactionTriggers.always,
            target=target,
            minimum_preserved=minimum_preserved,
        )

    def _candidates(self, index: MessageIndex) -> Iterable[MessageGroup]:
        return _unprotected(index, max(self.keep_last_groups, self.minimum_preserved))

    def __repr__(self) -> str:
        return f"SlidingWindowStrategy(keep_last_groups={self.keep_last_groups}, trigger={self.trigger!r})"


class SlidingWindowCompactionStrategy(_StepStrategy):
    """Drop the oldest whole turns (a user message and what follows it) until the target holds.

    Groups before the first user message go first; the target is re-checked only at turn
    boundaries, so a turn is never left half excluded.

    Args:
        trigger: When to run (default ``CompactionTriggers.turns_exceed(4)``: keep the last 4 turns).
        target: When to stop (default: the trigger's inverse).
        minimum_preserved: The newest non-system groups that are always kept (default 1).

    Example:
        >>> sliding_window = SlidingWindowCompactionStrategy(trigger=CompactionTriggers.turns_exceed(4))
    """

    def __init__(
        self,
        trigger: CompactionTrigger | None = None,
        *,
        target: CompactionTrigger | None = None,
        minimum_preserved: int = 1,
    ) -> None:
        super().__init__(
            trigger=trigger if trigger is not None else CompactionTriggers.turns_exceed(4),
            target=target,
            minimum_preserved=minimum_preserved,
        )

    async def compact(self, index: MessageIndex) -> bool:
        """Exclude the oldest turns while the target does not hold.

        Args:
            index: The history to compact.

        Returns:
            Whether anything changed.
        """
        if not self.trigger(index):
            return False
        changed = False
        current: object = object()  # no turn matches it
        doomed: list[MessageGroup] = []  # the current turn's groups, excluded before the next check
        for group in self._candidates(index):
            turn = group.turn  # a summary has the turn of the first group it replaced
            if turn != current:
                index.exclude_many(doomed)
                doomed = []
                if self.target(index):
                    break
                current = turn
            doomed.append(group)
            changed = True
        index.exclude_many(doomed)
        return changed


# -- tool-call strategies ------------------------------------------------------------------------


def _tool_candidates(
    index: MessageIndex, keep_last_tool_call_groups: int, minimum_preserved: int
) -> Iterator[MessageGroup]:
    """Included tool-call groups oldest first, short of the newest kept ones and the protected tail."""
    boundary = _boundary(index, minimum_preserved)
    if boundary is None:
        return iter(())
    stop = boundary.order
    if keep_last_tool_call_groups:
        kept = index.newest_included(keep_last_tool_call_groups, tool_calls_only=True)
        if len(kept) < keep_last_tool_call_groups:
            return iter(())  # no more tool-call groups than are kept
        stop = min(stop, kept[-1].order)
    return index.oldest_included(tool_calls_only=True, before=stop)


def one_line(value: Any, limit: int = _RESULT_PREVIEW_CHARS) -> str:
    """``value`` as one line of at most ``limit`` characters (JSON for non-strings, whitespace
    collapsed, ``…`` where it is cut); cheap for long values."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError):
            text = str(value)
    # Whitespace is collapsed before shortening. A prefix is collapsed, longer ones until it is
    # long enough: a collapsed prefix begins the collapsed whole, so then the cut is the same.
    scan = limit + 16
    line = " ".join(text[:scan].split())
    while len(line) <= limit and scan < len(text):
        scan *= 4
        line = " ".join(text[:scan].split())
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return line


def tool_group_summary_text(messages: Sequence[Message]) -> str:
    """The short text a collapsed tool-call group becomes, e.g. ``[Tool results: get_weather: sunny]``.

    Args:
        messages: The group's messages.

    Returns:
        ``[Tool results: name: result; ...]`` with each result shortened, or ``[Tool calls: ...]``
        when no result is present.
    """
    names: dict[str, str] = {}
    called: list[str] = []
    results: list[FunctionResultContent] = []
    for message in messages:
        for content in message.contents:
            if isinstance(content, FunctionCallContent):
                names[content.call_id] = content.name
                called.append(content.name)
            elif isinstance(content, FunctionResultContent):
                results.append(content)
    if results:
        parts = [
            f"{names.get(result.call_id, result.call_id)}: "
            + (one_line(f"error: {result.exception}") if result.exception else one_line(result.result))
            for result in results
        ]
        return f"[Tool results: {'; '.join(parts)}]"
    return f"[Tool calls: {', '.join(called) or 'unknown'}]"


def tool_group_summary(group: MessageGroup) -> Message:
    """The summary message a collapsed tool-call ``group`` becomes (see :func:`tool_group_summary_text`)."""
    return Message("assistant", tool_group_summary_text(group.messages))


class _ToolGroupStrategy(_StepStrategy):
    """Shared set-up of the strategies that work on older tool-call groups."""

    def __init__(
        self,
        *,
        keep_last_tool_call_groups: int = 1,
        trigger: CompactionTrigger | None = None,
        target: CompactionTrigger | None = None,
        minimum_preserved: int = 1,
    ) -> None:
        self.keep_last_tool_call_groups = non_negative(
            "keep_last_tool_call_groups", keep_last_tool_call_groups
        )
        super().__init__(
            trigger=trigger if trigger is not None else CompactionTriggers.always,
            target=target,
            minimum_preserved=minimum_preserved,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(keep_last_tool_call_groups={self.keep_last_tool_call_groups}, "
            f"trigger={self.trigger!r})"
        )


class ToolResultCompactionStrategy(_ToolGroupStrategy):
    """Collapse older tool-call groups into one short summary message each.

    ``[Tool results: get_weather: sunny, 18°C]`` replaces an assistant call and its results; user
    messages and plain assistant replies are untouched. The newest ``keep_last_tool_call_groups``
    tool-call groups stay as they are. Replaced messages without a ``message_id`` get one (as they
    would on entering a session), because the summary lists the ids it replaces.

    Args:
        keep_last_tool_call_groups: How many of the newest tool-call groups to leave intact.
        trigger: When to run (default: always).
        target: When to stop early (default: the trigger's inverse).
        minimum_preserved: The newest non-system groups that are always kept (default 1).

    Raises:
        ValueError: A count is negative.

    Example:
        >>> tool_result = ToolResultCompactionStrategy(keep_last_tool_call_groups=1)
    """

    def _candidates(self, index: MessageIndex) -> Iterable[MessageGroup]:
        groups = _tool_candidates(index, self.keep_last_tool_call_groups, self.minimum_preserved)
        return (g for g in groups if g.is_complete)

    def _step(self, index: MessageIndex, group: MessageGroup) -> None:
        index.replace([group], tool_group_summary(group))

    def _step_all(self, index: MessageIndex, groups: Iterable[MessageGroup]) -> bool:
        return bool(index.replace_each(groups, tool_group_summary))


class SelectiveToolCallCompactionStrategy(_ToolGroupStrategy):
    """Exclude older tool-call groups entirely, keeping the newest ``keep_last_tool_call_groups``.

    User messages and plain assistant replies are untouched.

    Args:
        keep_last_tool_call_groups: How many of the newest tool-call groups to keep.
        trigger: When to run (default: always).
        target: When to stop early (default: the trigger's inverse).
        minimum_preserved: The newest non-system groups that are always kept (default 1).

    Raises:
        ValueError: A count is negative.

    Example:
        >>> selective_tool = SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=1)
    """

    def _candidates(self, index: MessageIndex) -> Iterable[MessageGroup]:
        return _tool_candidates(index, self.keep_last_tool_call_groups, self.minimum_preserved)


# -- composition ---------------------------------------------------------------------------------


class PipelineCompactionStrategy:
    """Run strategies in order, each on the result of the previous one; put the gentlest first.

    Each child evaluates its own trigger; the pipeline's own trigger defaults to always.

    Args:
        *strategies: The children, gentlest first.
        trigger: When to run the pipeline at all (default: always).

    Example:
        >>> pipeline = PipelineCompactionStrategy(
        ...     ToolResultCompactionStrategy(trigger=CompactionTriggers.tokens_exceed(0x200)),
        ...     SlidingWindowCompactionStrategy(trigger=CompactionTriggers.turns_exceed(4)),
        ... )
    """

    def __init__(self, *strategies: CompactionStrategy, trigger: CompactionTrigger | None = None) -> None:
        self.strategies: tuple[CompactionStrategy, ...] = strategies
        self.trigger: CompactionTrigger = trigger if trigger is not None else CompactionTriggers.always

    async def compact(self, index: MessageIndex) -> bool:
        """Run every child in order.

        Args:
            index: The history to compact.

        Returns:
            Whether any child changed anything.
        """
        if not self.trigger(index):
            return False
        changed = False
        for strategy in self.strategies:
            changed = await strategy.compact(index) or changed
        return changed

    def __repr__(self) -> str:
        return f"PipelineCompactionStrategy({', '.join(map(repr, self.strategies))})"


class TokenBudgetComposedStrategy:
    """Run strategies in order until history fits ``token_budget``, then drop oldest groups if needed.

    Nothing runs while the included tokens are within the budget. With ``early_stop`` (default)
    the remaining children are skipped as soon as the budget holds. If the children are not
    enough, the oldest non-system groups are excluded (never the newest ``minimum_preserved``).

    Args:
        token_budget: The most tokens the compacted history may hold.
        tokenizer: Counts tokens (the index's own counts are used when it is the index's tokenizer).
        strategies: The children, gentlest first.
        early_stop: Stop after the first child that brings history within the budget.
        minimum_preserved: The newest non-system groups the fallback always keeps (default 1).

    Raises:
        ValueError: A count is negative.
    """

    def __init__(
        self,
        token_budget: int,
        tokenizer: Tokenizer,
        strategies: Sequence[CompactionStrategy],
        early_stop: bool = True,
        *,
        minimum_preserved: int = 1,
    ) -> None:
        self.token_budget = non_negative("token_budget", token_budget)
        self.tokenizer = tokenizer
        self.strategies: tuple[CompactionStrategy, ...] = tuple(strategies)
        self.early_stop = early_stop
        self.minimum_preserved = non_negative("minimum_preserved", minimum_preserved)

    def trigger(self, index: MessageIndex) -> bool:
        """Whether the included tokens exceed the budget."""
        return TokenMeter(index, self.tokenizer)() > self.token_budget

    async def compact(self, index: MessageIndex) -> bool:
        """Run the children, then the oldest-first fallback, until within the budget.

        Args:
            index: The history to compact.

        Returns:
            Whether anything changed.
        """
        if not self.trigger(index):
            return False
        changed = False
        for strategy in self.strategies:
            changed = await strategy.compact(index) or changed
            if self.early_stop and not self.trigger(index):
                return changed
        meter = TokenMeter(index, self.tokenizer)
        candidates = _unprotected(index, self.minimum_preserved)
        return _exclude_oldest(index, candidates, meter(), self.token_budget, meter.group) or changed

    def __repr__(self) -> str:
        return (
            f"TokenBudgetComposedStrategy(token_budget={self.token_budget}, tokenizer={self.tokenizer!r}, "
            f"strategies={list(self.strategies)!r}, early_stop={self.early_stop})"
        )


# -- ad hoc use ----------------------------------------------------------------------------------


async def apply_compaction(
    messages: Iterable[Message],
    *,
    strategy: CompactionStrategy,
    tokenizer: Tokenizer | None = None,
) -> list[Message]:
    """Compact a message list outside any session and return the result.

    Args:
        messages: The history (not modified, except that messages a summary replaces get a
            ``message_id`` if they had none).
        strategy: The strategy to apply.
        tokenizer: Counts tokens for the index; default the strategy's ``tokenizer`` attribute if it
            has one, else :class:`~agentkeep.compaction.CharacterEstimatorTokenizer`.

    Returns:
        The compacted history: original order minus excluded groups, with summaries in place.

    Example:
        >>> compacted = await apply_compaction(  # doctest: +SKIP
        ...     messages, strategy=TruncationStrategy(max_n=8_000, compact_to=4_000)
        ... )
    """
    index = MessageIndex(messages, tokenizer=resolve_tokenizer(strategy, tokenizer))
    await strategy.compact(index)
    return project(index)


def resolve_tokenizer(strategy: object, tokenizer: Tokenizer | None) -> Tokenizer:
    """The tokenizer an index for ``strategy`` counts with: the given one, else the strategy's own
    ``tokenizer`` attribute, else :class:`~agentkeep.compaction.CharacterEstimatorTokenizer`."""
    if tokenizer is not None:
        return tokenizer
    found: object = getattr(strategy, "tokenizer", None)
    return found if isinstance(found, Tokenizer) else CharacterEstimatorTokenizer()
