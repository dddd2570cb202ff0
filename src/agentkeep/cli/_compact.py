"""``agentkeep sessions compact``: run compaction strategies on a stored session's view.

The command reads the compacted view (what ``sessions show`` prints and ``chat`` loads), builds a
:class:`~agentkeep.compaction.MessageIndex` over it, runs the chosen strategies (several run as a
pipeline, in the order given) and records what they did with
:meth:`~agentkeep.message_stores.base.MessageStore.record_compaction`: the excluded message ids and the
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

:func:`plan_compaction` checks the options and :func:`compact_conversation` does the work, both
through :mod:`agentkeep.compaction.plans` (usable without the command line); :func:`render_report`
prints the outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Final

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..compaction import MessageGroupKind, Tokenizer, plans
from ..compaction.plans import (
    CompactionPlan,
    CompactionPlanError,
    CompactionReport,
    StrategyName,
    ViewCounts,
    plural,
)
from ..errors import ConflictError
from ..message_stores.base import MessageStore
from ._stores import CLIError, describe_store, missing_session

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


TOKENIZER_HELP: Final = "estimate (about 4 characters per token) or openai:ENCODING (o200k_base, cl100k_base)"
"""The accepted ``--tokenizer`` values, for help texts and errors."""


def _usage_error(option: str, text: str) -> typer.BadParameter:
    # Raised inside a command, typer attaches the context: the usage line is printed, exit status 2.
    return typer.BadParameter(text, param_hint=f"'{option}'")


def plan_compaction(
    strategies: Sequence[StrategyName],
    *,
    keep: int | None = None,
    max_tokens: int | None = None,
    target_tokens: int | None = None,
) -> CompactionPlan:
    """:func:`agentkeep.compaction.plans.plan_compaction` for the command's options.

    Raises:
        typer.BadParameter: The options do not fit together (exit status 2).
    """
    try:
        return plans.plan_compaction(
            strategies, keep=keep, max_tokens=max_tokens, target_tokens=target_tokens
        )
    except CompactionPlanError as exc:
        raise _usage_error(f"--{exc.option.replace('_', '-')}", str(exc)) from exc


def make_tokenizer(spec: str) -> Tokenizer:
    """The tokenizer a checked ``--tokenizer`` value names.

    Raises:
        ImportError: ``openai:...`` without the optional ``bpe-openai`` package.
        CLIError: An encoding ``bpe-openai`` does not know.
    """
    try:
        return plans.make_tokenizer(spec)
    except ValueError as exc:
        raise CLIError(str(exc)) from exc


async def compact_conversation(
    store: MessageStore,
    conversation_id: str,
    plan: CompactionPlan,
    *,
    tokenizer: Tokenizer | None = None,
    dry_run: bool = False,
) -> CompactionReport:
    """:func:`agentkeep.compaction.plans.compact_conversation` with the command's errors.

    Raises:
        CLIError: No such session, or another compaction was recorded on it meanwhile.
    """
    try:
        return await plans.compact_conversation(
            store, conversation_id, plan, tokenizer=tokenizer, dry_run=dry_run, where=describe_store(store)
        )
    except LookupError as exc:
        raise missing_session(store, conversation_id) from exc
    except ConflictError as exc:
        raise CLIError(str(exc)) from exc


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


# -- the command's options (the command is in ._app, with the others) ---------------------------------

_STRATEGY_NAMES: Final = ", ".join(name.value for name in StrategyName)

StrategiesOption = Annotated[
    list[StrategyName],
    typer.Option(
        "--strategy",
        metavar="NAME",
        help=f"{_STRATEGY_NAMES}; given several times, they run in order (a pipeline).",
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


# -- output -------------------------------------------------------------------------------------------


def render_report(report: CompactionReport) -> RenderableType:
    """The outcome for people: a header, the before/after table and what was stored."""
    header = Text(f"session {report.conversation_id} · {report.where}", style="bold")
    header.append(f"\nstrategy: {report.plan.describe()} · tokens {report.tokenizer}", style="not bold")
    before, after = report.before, report.after
    if not report.changed:
        shape = f"{plural(before.group_count, 'group')}, {plural(before.messages, 'message')}"
        return Group(
            header,
            Text(f"nothing to compact ({shape}, {plural(before.tokens, 'token')}): nothing stored"),
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
