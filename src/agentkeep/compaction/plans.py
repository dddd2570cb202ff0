"""Named compaction plans over a stored conversation's view: which strategies, with which
settings, and running them with the result recorded non-destructively.

This is what ``agentkeep sessions compact`` and the host's compaction preview run.

========================  ====================================================  ================
strategy                  what it does                                          settings
========================  ====================================================  ================
``tool-result``           collapses older tool-call groups into one summary     ``keep`` (1)
``selective-tool-calls``  excludes older tool-call groups                       ``keep`` (1)
``sliding-window``        keeps the newest N non-system groups                  ``keep`` (20)
``turns``                 keeps the newest N turns (whole turns go)             ``keep`` (4)
``truncation``            over ``max_tokens``: drops oldest groups to target    ``max_tokens``,
                                                                                ``target_tokens``
``token-budget``          over ``max_tokens``: collapses tool results, then     ``max_tokens``,
                          drops oldest groups, until within target              ``target_tokens``
========================  ====================================================  ================

``target_tokens`` defaults to ``max_tokens``. A setting applies to every chosen strategy that takes
it; a setting none of them takes is an error, so is a token strategy without ``max_tokens``.
Several strategies run as a pipeline, in the order given. System messages and the newest
non-system group are always kept, and a tool call never loses its results.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from ..errors import CompactionError, ConflictError
from ..message_stores.base import HistoryView, MessageStore, StoredMessage, Summary
from ..messages import Message
from .groups import SUMMARY_PROPERTY, is_summary_message
from .index import MessageIndex
from .strategies import (
    CompactionStrategy,
    PipelineCompactionStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowCompactionStrategy,
    SlidingWindowStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
)
from .tokenizers import CharacterEstimatorTokenizer, OpenAITokenizer, Tokenizer
from .triggers import CompactionTriggers

__all__ = [
    "CompactionPlan",
    "CompactionPlanError",
    "CompactionReport",
    "StrategyName",
    "ViewCounts",
    "compact_conversation",
    "make_tokenizer",
    "plan_compaction",
    "plural",
    "tokenizer_label",
]


class CompactionPlanError(CompactionError, ValueError):
    """Strategies and settings that do not fit together.

    Attributes:
        option: The setting at fault (``"strategy"``, ``"keep"``, ``"max_tokens"``, ...).
    """

    def __init__(self, message: str, *, option: str) -> None:
        self.option = option
        super().__init__(message)

    @classmethod
    def about(cls, option: str, text: str) -> CompactionPlanError:
        return cls(text, option=option.lstrip("-").replace("-", "_"))


class StrategyName(StrEnum):
    """The strategies a plan can name."""

    TOOL_RESULT = "tool-result"
    SELECTIVE_TOOL_CALLS = "selective-tool-calls"
    SLIDING_WINDOW = "sliding-window"
    TURNS = "turns"
    TRUNCATION = "truncation"
    TOKEN_BUDGET = "token-budget"


_KEEP_DEFAULTS: Final[dict[StrategyName, tuple[int, str]]] = {
    StrategyName.TOOL_RESULT: (1, "tool-call group"),
    StrategyName.SELECTIVE_TOOL_CALLS: (1, "tool-call group"),
    StrategyName.SLIDING_WINDOW: (20, "group"),
    StrategyName.TURNS: (4, "turn"),
}
"""The strategies that take ``--keep``: its default and what it counts."""

_TOKEN_STRATEGIES: Final = (StrategyName.TRUNCATION, StrategyName.TOKEN_BUDGET)
"""The strategies that take ``--max-tokens`` (required) and ``--target-tokens``."""


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``"1 group"``, ``"2 groups"`` (``nouns``: an irregular plural)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def _names(names: Sequence[StrategyName]) -> str:
    return ", ".join(dict.fromkeys(name.value for name in names))


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """Checked ``sessions compact`` options: which strategies to run, with which settings.

    Attributes:
        strategies: The strategies, in the order they run.
        keep: ``--keep`` as given (``None``: each strategy's default).
        max_tokens: ``--max-tokens`` (set when a token strategy is chosen).
        target_tokens: ``--target-tokens``, defaulted to ``max_tokens``.
    """

    strategies: tuple[StrategyName, ...]
    keep: int | None = None
    max_tokens: int | None = None
    target_tokens: int | None = None

    def _keep(self, name: StrategyName) -> int:
        return self.keep if self.keep is not None else _KEEP_DEFAULTS[name][0]

    def describe(self) -> str:
        """The plan for people: ``"tool-result (keep 1 tool-call group) → turns (keep 4 turns)"``."""
        parts: list[str] = []
        for name in self.strategies:
            if name in _KEEP_DEFAULTS:
                parts.append(f"{name.value} (keep {plural(self._keep(name), _KEEP_DEFAULTS[name][1])})")
            elif self.target_tokens == self.max_tokens:
                parts.append(f"{name.value} (to at most {self.max_tokens} tokens)")
            else:
                parts.append(f"{name.value} (over {self.max_tokens} tokens: down to {self.target_tokens})")
        return " → ".join(parts)

    def build(self, tokenizer: Tokenizer) -> CompactionStrategy:
        """The strategy to run (a pipeline for several); ``tokenizer`` must be the index's."""
        built = [self._build_one(name, tokenizer) for name in self.strategies]
        return built[0] if len(built) == 1 else PipelineCompactionStrategy(*built)

    def _build_one(self, name: StrategyName, tokenizer: Tokenizer) -> CompactionStrategy:
        if name is StrategyName.TOOL_RESULT:
            return ToolResultCompactionStrategy(keep_last_tool_call_groups=self._keep(name))
        if name is StrategyName.SELECTIVE_TOOL_CALLS:
            return SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=self._keep(name))
        if name is StrategyName.SLIDING_WINDOW:
            return SlidingWindowStrategy(keep_last_groups=self._keep(name))
        if name is StrategyName.TURNS:
            return SlidingWindowCompactionStrategy(CompactionTriggers.turns_exceed(self._keep(name)))
        maximum, target = self.max_tokens, self.target_tokens
        if maximum is None or target is None:
            raise ValueError(f"{name.value} needs max_tokens and target_tokens (see plan_compaction)")
        if name is StrategyName.TRUNCATION:
            return TruncationStrategy(maximum, target, tokenizer)
        budget = TokenBudgetComposedStrategy(target, tokenizer, [ToolResultCompactionStrategy()])
        if target == maximum:
            return budget
        # The budget is the target; the maximum triggers it (the index counts with ``tokenizer``).
        return PipelineCompactionStrategy(budget, trigger=CompactionTriggers.tokens_exceed(maximum))


def plan_compaction(
    strategies: Sequence[StrategyName],
    *,
    keep: int | None = None,
    max_tokens: int | None = None,
    target_tokens: int | None = None,
) -> CompactionPlan:
    """Check a choice of strategies and their settings (see the module docs).

    Raises:
        CompactionPlanError: No strategy, an option no chosen strategy takes, a token strategy
            without ``max_tokens``, or ``target_tokens`` above ``max_tokens`` (names the option).
    """
    if not strategies:
        raise CompactionPlanError.about("--strategy", "give at least one")
    chosen = _names(strategies)
    if keep is not None and not any(name in _KEEP_DEFAULTS for name in strategies):
        raise CompactionPlanError.about(
            "--keep", f"not used by {chosen}; it is for {_names(list(_KEEP_DEFAULTS))}"
        )
    token_strategies = [name for name in strategies if name in _TOKEN_STRATEGIES]
    if not token_strategies:
        for option, value in (("--max-tokens", max_tokens), ("--target-tokens", target_tokens)):
            if value is not None:
                raise CompactionPlanError.about(
                    option, f"not used by {chosen}; it is for {_names(_TOKEN_STRATEGIES)}"
                )
        return CompactionPlan(tuple(strategies), keep)
    if max_tokens is None:
        raise CompactionPlanError.about("--max-tokens", f"required by --strategy {token_strategies[0].value}")
    target = max_tokens if target_tokens is None else target_tokens
    if target > max_tokens:
        raise CompactionPlanError.about(
            "--target-tokens", f"{target} is more than --max-tokens ({max_tokens})"
        )
    return CompactionPlan(tuple(strategies), keep, max_tokens, target)


def make_tokenizer(spec: str) -> Tokenizer:
    """The tokenizer ``spec`` names: ``estimate`` or ``openai:<encoding>``.

    Raises:
        ValueError: Another form, or an encoding ``bpe-openai`` does not know.
        ImportError: ``openai:...`` without the optional ``bpe-openai`` package.
    """
    spec = spec.strip()
    if spec == "estimate":
        return CharacterEstimatorTokenizer()
    kind, _, encoding = spec.partition(":")
    if kind != "openai" or not encoding:
        raise ValueError(f"{spec!r}: expected estimate or openai:<encoding> (o200k_base, cl100k_base)")
    try:
        return OpenAITokenizer(encoding)
    except (ValueError, KeyError) as exc:
        raise ValueError(f"unknown OpenAI encoding {encoding!r} (try o200k_base or cl100k_base)") from exc


def tokenizer_label(tokenizer: Tokenizer) -> str:
    """How ``tokenizer`` counts, for people: ``"counted with o200k_base"``."""
    if isinstance(tokenizer, OpenAITokenizer):
        return f"counted with {tokenizer.encoding_name}"
    if isinstance(tokenizer, CharacterEstimatorTokenizer):
        return f"estimated at {tokenizer.chars_per_token} characters each"
    return f"counted with {type(tokenizer).__name__}"


@dataclass(frozen=True, slots=True)
class ViewCounts:
    """What a view holds: included groups by kind, messages and tokens.

    Attributes:
        groups: Included groups per :class:`~agentkeep.compaction.MessageGroupKind` value.
        messages: Included messages.
        tokens: Tokens of the included messages.
    """

    groups: dict[str, int] = field(default_factory=dict[str, int])
    messages: int = 0
    tokens: int = 0

    @classmethod
    def of(cls, index: MessageIndex) -> ViewCounts:
        """The included counts of ``index`` now."""
        kinds = Counter(group.kind.value for group in index.groups if not group.excluded)
        return cls(dict(kinds), index.included_message_count, index.included_token_count)

    @property
    def group_count(self) -> int:
        """All included groups."""
        return sum(self.groups.values())


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What a compaction did (or, on a dry run, would do) to one stored conversation.

    Attributes:
        conversation_id: The session.
        where: The store, for messages (see :func:`~agentkeep.store_urls.describe_store`).
        plan: The strategies run.
        tokenizer: How tokens were counted, for messages.
        before: The view before compaction.
        after: The view after it.
        excluded: Ids of the messages and earlier summaries newly excluded from the view.
        excluded_summaries: How many of ``excluded`` are earlier summaries.
        summaries: The summaries added.
        dry_run: Whether recording was skipped on purpose.
        epoch: The store's compaction epoch after recording (``None``: nothing was recorded).
    """

    conversation_id: str
    where: str
    plan: CompactionPlan
    tokenizer: str
    before: ViewCounts
    after: ViewCounts
    excluded: list[str]
    excluded_summaries: int
    summaries: list[Summary]
    dry_run: bool
    epoch: int | None = None

    @property
    def changed(self) -> bool:
        """Whether the strategies changed the view."""
        return bool(self.excluded or self.summaries)

    def describe_change(self, *, done: bool = True) -> str:
        """The change for people: ``"excluded 2 messages, added 1 summary"`` (or "exclude", "add")."""
        messages = len(self.excluded) - self.excluded_summaries
        dropped = [plural(messages, "message")] if messages else []
        if self.excluded_summaries:
            dropped.append(plural(self.excluded_summaries, "earlier summary", "earlier summaries"))
        exclude, add = ("excluded", "added") if done else ("exclude", "add")
        parts = [f"{exclude} {' and '.join(dropped)}"] if dropped else []
        if self.summaries:
            parts.append(f"{add} {plural(len(self.summaries), 'summary', 'summaries')}")
        return ", ".join(parts)


def _index_entry(entry: StoredMessage) -> Message:
    """A view entry as the index should see it: a stored summary keeps its summary mark.

    A summary recorded by other means (an import, a hand-made compaction) may lack the mark; a
    marked copy makes it a ``summary`` group rather than a system or assistant message.
    """
    message = entry.message
    if not entry.is_summary or is_summary_message(message):
        return message
    marked = message.copy()
    marked.additional_properties = {
        **(message.additional_properties or {}),
        SUMMARY_PROPERTY: list(entry.replaces),
    }
    return marked


def _compacted(
    view: HistoryView, plan: CompactionPlan, counter: Tokenizer
) -> tuple[MessageIndex, ViewCounts]:
    """The view's index compacted by ``plan`` (changes tracked), and its counts before."""
    index = MessageIndex([_index_entry(entry) for entry in view.entries], tokenizer=counter)
    before = ViewCounts.of(index)
    index.track_changes()
    asyncio.run(plan.build(counter).compact(index))  # its own loop, on this thread
    return index, before


async def compact_conversation(
    store: MessageStore,
    conversation_id: str,
    plan: CompactionPlan,
    *,
    tokenizer: Tokenizer | None = None,
    dry_run: bool = False,
    where: str | None = None,
) -> CompactionReport:
    """Compact the stored view of ``conversation_id`` by ``plan`` and record it (unless ``dry_run``).

    Recording is non-destructive: excluded messages stay in the raw log, and nothing is recorded
    when the strategies change nothing.

    Args:
        store: Where the session lives.
        conversation_id: The session.
        plan: What :func:`plan_compaction` made.
        tokenizer: Counts tokens (default: :class:`~agentkeep.compaction.CharacterEstimatorTokenizer`).
        dry_run: Compute and report, store nothing.
        where: The store, for the report's messages (default: its backend's name).

    Raises:
        LookupError: No such conversation in ``store``.
        ConflictError: Another compaction was recorded on it meanwhile (nothing is recorded).
    """
    counter = tokenizer if tokenizer is not None else CharacterEstimatorTokenizer()
    view = await store.read(conversation_id)
    if not view.entries and view.last_seq == 0:
        raise LookupError(conversation_id)
    # CPU only (a plan names no model-backed strategy) and as long as the conversation: on a
    # worker thread, so a host compacting a long conversation goes on answering its other requests
    index, before = await asyncio.to_thread(_compacted, view, plan, counter)
    excluded, made = index.changes()
    summaries = [Summary(message, replaces) for message, replaces in made]
    earlier = {entry.message.message_id for entry in view.entries if entry.is_summary}
    epoch: int | None = None
    if (excluded or summaries) and not dry_run:
        # Appends since the read are harmless (they are simply kept); another compaction is not:
        # this one was computed on the view it replaced.
        if (await store.read(conversation_id, last=1)).epoch != view.epoch:
            raise ConflictError(
                f"session {conversation_id!r} was compacted by someone else meanwhile; nothing stored, "
                "run the compaction again",
                backend=store.backend,
                conversation_id=conversation_id,
            )
        epoch = await store.record_compaction(conversation_id, excluded=excluded, summaries=summaries)
    return CompactionReport(
        conversation_id,
        store.backend if where is None else where,
        plan,
        tokenizer_label(counter),
        before,
        ViewCounts.of(index),
        excluded,
        sum(message_id in earlier for message_id in excluded),
        summaries,
        dry_run,
        epoch,
    )
