"""``agentkeep sessions compact``: run compaction strategies on a stored session's view.

The command reads the compacted view (what ``sessions show`` prints and ``chat`` loads), builds a
:class:`~agentkeep.compaction.MessageIndex` over it, runs the chosen strategies (several run as a
pipeline, in the order given) and records what they did with
:meth:`~agentkeep.storage.base.MessageStore.record_compaction`: the excluded message ids and the
new summaries. Nothing is deleted: the raw log keeps every original (``sessions show --raw``).

========================  ====================================================  ================
``--strategy``            what it does                                          options
========================  ====================================================  ================
``tool-result``           collapses older tool-call groups into one summary     ``--keep`` (1)
``selective-tool-calls``  excludes older tool-call groups                       ``--keep`` (1)
``sliding-window``        keeps the newest N non-system groups                  ``--keep`` (20)
``turns``                 keeps the newest N turns (whole turns go)             ``--keep`` (4)
``truncation``            over ``--max-tokens``: drops oldest groups to target  ``--max-tokens``,
                                                                                ``--target-tokens``
``token-budget``          over ``--max-tokens``: collapses tool results, then   ``--max-tokens``,
                          drops oldest groups, until within target              ``--target-tokens``
========================  ====================================================  ================

``--target-tokens`` defaults to ``--max-tokens``. An option applies to every chosen strategy that
takes it; an option none of them takes is a usage error (exit status 2), so is a token strategy
without ``--max-tokens``. System messages and the newest non-system group are always kept, and
a tool call never loses its results (the strategies' guarantees).

:func:`plan_compaction` checks the options, :func:`compact_conversation` does the work (and is
usable without the command line), :func:`render_report` prints the outcome.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Final

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..compaction import (
    SUMMARY_PROPERTY,
    CharacterEstimatorTokenizer,
    CompactionStrategy,
    CompactionTriggers,
    MessageGroupKind,
    MessageIndex,
    OpenAITokenizer,
    PipelineCompactionStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowCompactionStrategy,
    SlidingWindowStrategy,
    TokenBudgetComposedStrategy,
    Tokenizer,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    is_summary_message,
)
from ..messages import Message
from ..storage.base import MessageStore, StoredMessage, Summary
from ._stores import CLIError, describe_store
from ._transfer import read_conversation

__all__ = [
    "TOKENIZER_HELP",
    "CompactionPlan",
    "CompactionReport",
    "DryRunOption",
    "KeepOption",
    "MaxTokensOption",
    "StrategiesOption",
    "StrategyName",
    "TargetTokensOption",
    "TokenizerOption",
    "ViewCounts",
    "compact_conversation",
    "make_tokenizer",
    "parse_tokenizer",
    "plan_compaction",
    "render_report",
]


class StrategyName(StrEnum):
    """The values of ``--strategy``."""

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

TOKENIZER_HELP: Final = "estimate (about 4 characters per token) or openai:ENCODING (o200k_base, cl100k_base)"
"""The accepted ``--tokenizer`` values, for help texts and errors."""


def _plural(count: int, noun: str, nouns: str | None = None) -> str:
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def _usage_error(option: str, text: str) -> typer.BadParameter:
    # Raised inside a command, typer attaches the context: the usage line is printed, exit status 2.
    return typer.BadParameter(text, param_hint=f"'{option}'")


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
                parts.append(f"{name.value} (keep {_plural(self._keep(name), _KEEP_DEFAULTS[name][1])})")
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
    """Check the ``sessions compact`` options (see the module docs).

    Raises:
        typer.BadParameter: No strategy, an option no chosen strategy takes, a token strategy
            without ``max_tokens``, or ``target_tokens`` above ``max_tokens`` (exit status 2).
    """
    if not strategies:
        raise _usage_error("--strategy", "give at least one")
    chosen = _names(strategies)
    if keep is not None and not any(name in _KEEP_DEFAULTS for name in strategies):
        raise _usage_error("--keep", f"not used by {chosen}; it is for {_names(list(_KEEP_DEFAULTS))}")
    token_strategies = [name for name in strategies if name in _TOKEN_STRATEGIES]
    if not token_strategies:
        for option, value in (("--max-tokens", max_tokens), ("--target-tokens", target_tokens)):
            if value is not None:
                raise _usage_error(option, f"not used by {chosen}; it is for {_names(_TOKEN_STRATEGIES)}")
        return CompactionPlan(tuple(strategies), keep)
    if max_tokens is None:
        raise _usage_error("--max-tokens", f"required by --strategy {token_strategies[0].value}")
    target = max_tokens if target_tokens is None else target_tokens
    if target > max_tokens:
        raise _usage_error("--target-tokens", f"{target} is more than --max-tokens ({max_tokens})")
    return CompactionPlan(tuple(strategies), keep, max_tokens, target)


def parse_tokenizer(spec: str) -> str:
    """Check a ``--tokenizer`` value (``estimate`` or ``openai:ENCODING``); returns it normalized.

    Raises:
        typer.BadParameter: Any other form (exit status 2).
    """
    normalized = spec.strip()
    kind, _, encoding = normalized.partition(":")
    if normalized == "estimate" or (kind == "openai" and encoding):
        return normalized
    raise typer.BadParameter(f"{spec!r}: expected {TOKENIZER_HELP}")


def make_tokenizer(spec: str) -> Tokenizer:
    """The tokenizer a checked ``--tokenizer`` value names.

    Raises:
        ImportError: ``openai:...`` without the optional ``bpe-openai`` package.
        CLIError: An encoding ``bpe-openai`` does not know.
    """
    if spec == "estimate":
        return CharacterEstimatorTokenizer()
    encoding = spec.partition(":")[2]
    try:
        return OpenAITokenizer(encoding)
    except (ValueError, KeyError) as exc:
        raise CLIError(f"unknown OpenAI encoding {encoding!r} (try o200k_base or cl100k_base)") from exc


def _tokenizer_label(tokenizer: Tokenizer) -> str:
    if isinstance(tokenizer, OpenAITokenizer):
        return f"counted with {tokenizer.encoding_name}"
    if isinstance(tokenizer, CharacterEstimatorTokenizer):
        return f"estimated at {tokenizer.chars_per_token} characters each"
    return f"counted with {type(tokenizer).__name__}"


# -- the command's options (the command is in ._app, with the others) ---------------------------------

StrategiesOption = Annotated[
    list[StrategyName],
    typer.Option(
        "--strategy",
        metavar="NAME",
        help=f"{_names(list(StrategyName))}; given several times, they run in order (a pipeline).",
        show_default=False,
    ),
]
KeepOption = Annotated[
    int | None,
    typer.Option(
        "--keep",
        min=0,
        metavar="N",
        help="Keep the newest N tool-call groups (tool-result, selective-tool-calls; default 1), "
        "groups (sliding-window; 20) or turns (turns; 4).",
        show_default=False,
    ),
]
MaxTokensOption = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        min=0,
        metavar="N",
        help="truncation, token-budget: compact when the view holds more than N tokens.",
        show_default=False,
    ),
]
TargetTokensOption = Annotated[
    int | None,
    typer.Option(
        "--target-tokens",
        min=0,
        metavar="N",
        help="truncation, token-budget: compact down to N tokens (default: --max-tokens).",
        show_default=False,
    ),
]
TokenizerOption = Annotated[
    str, typer.Option("--tokenizer", metavar="SPEC", callback=parse_tokenizer, help=f"{TOKENIZER_HELP}.")
]
DryRunOption = Annotated[bool, typer.Option("--dry-run", help="Show what would change; store nothing.")]


# -- running ------------------------------------------------------------------------------------------


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
    """What ``sessions compact`` did (or, on a dry run, would do) to one session.

    Attributes:
        conversation_id: The session.
        where: The store, for messages (see :func:`~agentkeep.cli.describe_store`).
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
        dropped = [_plural(messages, "message")] if messages else []
        if self.excluded_summaries:
            dropped.append(_plural(self.excluded_summaries, "earlier summary", "earlier summaries"))
        exclude, add = ("excluded", "added") if done else ("exclude", "add")
        parts = [f"{exclude} {' and '.join(dropped)}"] if dropped else []
        if self.summaries:
            parts.append(f"{add} {_plural(len(self.summaries), 'summary', 'summaries')}")
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


async def compact_conversation(
    store: MessageStore,
    conversation_id: str,
    plan: CompactionPlan,
    *,
    tokenizer: Tokenizer | None = None,
    dry_run: bool = False,
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

    Raises:
        CLIError: No such session, or another compaction was recorded on it meanwhile.
    """
    counter = tokenizer if tokenizer is not None else CharacterEstimatorTokenizer()
    view = await read_conversation(store, conversation_id)
    index = MessageIndex([_index_entry(entry) for entry in view.entries], tokenizer=counter)
    before = ViewCounts.of(index)
    index.track_changes()
    await plan.build(counter).compact(index)
    excluded, made = index.changes()
    summaries = [Summary(message, replaces) for message, replaces in made]
    earlier = {entry.message.message_id for entry in view.entries if entry.is_summary}
    epoch: int | None = None
    if (excluded or summaries) and not dry_run:
        # Appends since the read are harmless (they are simply kept); another compaction is not:
        # this one was computed on the view it replaced.
        if (await store.read(conversation_id, last=1)).epoch != view.epoch:
            raise CLIError(
                f"session {conversation_id!r} was compacted by someone else meanwhile; nothing stored, "
                "run the command again"
            )
        epoch = await store.record_compaction(conversation_id, excluded=excluded, summaries=summaries)
    return CompactionReport(
        conversation_id,
        describe_store(store),
        plan,
        _tokenizer_label(counter),
        before,
        ViewCounts.of(index),
        excluded,
        sum(message_id in earlier for message_id in excluded),
        summaries,
        dry_run,
        epoch,
    )


# -- output -------------------------------------------------------------------------------------------


def render_report(report: CompactionReport) -> RenderableType:
    """The outcome for people: a header, the before/after table and what was stored."""
    header = Text(f"session {report.conversation_id} · {report.where}", style="bold")
    header.append(f"\nstrategy: {report.plan.describe()} · tokens {report.tokenizer}", style="not bold")
    before, after = report.before, report.after
    if not report.changed:
        shape = f"{_plural(before.group_count, 'group')}, {_plural(before.messages, 'message')}"
        return Group(
            header,
            Text(f"nothing to compact ({shape}, {_plural(before.tokens, 'token')}): nothing stored"),
        )
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), show_edge=False)
    table.add_column("view")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for kind in MessageGroupKind:
        count_before, count_after = before.groups.get(kind.value, 0), after.groups.get(kind.value, 0)
        if count_before or count_after:
            table.add_row(f"  {kind.value}", str(count_before), str(count_after))
    table.add_row("groups", str(before.group_count), str(after.group_count))
    table.add_row("messages", str(before.messages), str(after.messages))
    table.add_row("tokens", str(before.tokens), str(after.tokens))
    if report.dry_run:
        outcome = Text(
            f"dry run: nothing stored (would {report.describe_change(done=False)})", style="yellow"
        )
    else:
        outcome = Text(
            f"recorded compaction (epoch {report.epoch}): {report.describe_change()}; "
            "the raw log keeps the originals",
            style="green",
        )
    return Group(header, table, outcome)
