"""Tool-call strategies: collapse older tool-call groups into one-line summaries, or drop them.

:class:`ToolResultCompactionStrategy` replaces an assistant call and its results with a short
summary message (``[Tool results: get_weather: sunny, 18°C]``) through
:meth:`~agentkeep.compaction.MessageIndex.replace`: the summary lists the ``message_id`` of every
message it replaces and stands where the group stood. :class:`SelectiveToolCallCompactionStrategy`
excludes them entirely. Both keep the newest ``keep_last_tool_call_groups`` as they are and leave
user messages and plain replies untouched.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import filterfalse
from operator import attrgetter
from typing import Any, Final

from ...contents import FunctionCallContent, FunctionResultContent
from ...messages import Message
from ..groups import MessageGroup
from ..index import MessageIndex
from ..triggers import CompactionTrigger, CompactionTriggers, non_negative
from ._stepping import StepStrategy, protected_boundary

__all__ = [
    "SelectiveToolCallCompactionStrategy",
    "ToolResultCompactionStrategy",
    "one_line",
    "tool_group_summary",
    "tool_group_summary_text",
]

_RESULT_PREVIEW_CHARS: Final = 80
"""How many characters of each tool result a collapsed tool-call summary keeps."""

_UNANSWERED_OF: Final[Callable[[MessageGroup], set[str] | None]] = attrgetter("unanswered")


def _tool_candidates(
    index: MessageIndex, keep_last_tool_call_groups: int, minimum_preserved: int
) -> Iterator[MessageGroup]:
    """Included tool-call groups oldest first, short of the newest kept ones and the protected tail."""
    edge = protected_boundary(index, minimum_preserved)
    if edge is None:
        return iter(())
    stop = edge.order
    if keep_last_tool_call_groups:
        kept = index.newest_included(keep_last_tool_call_groups, tool_calls_only=True)
        if len(kept) < keep_last_tool_call_groups:
            return iter(())  # no more tool-call groups than are kept
        stop = min(stop, kept[-1].order)
    return index.oldest_included(tool_calls_only=True, before=stop)


def one_line(value: Any, limit: int = _RESULT_PREVIEW_CHARS) -> str:
    """``value`` as one line of at most ``limit`` characters (JSON for non-strings, whitespace
    collapsed, ``…`` where it is cut); cheap for long values."""
    if type(value) is str:
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError):
            text = str(value)
    head = text[: limit + 1]
    if head.isprintable() and "  " not in head and head[:1] != " ":
        # The common case, told apart by two C-level scans: no whitespace but single spaces (a
        # printable string has no other whitespace) and none at the start: nothing to collapse.
        if head[-1:] != " ":
            return head if len(head) <= limit else head[: limit - 1] + "…"
        after = text[limit + 1 : limit + 2]
        if after and not after.isspace():  # a word follows the cut space: the line goes on
            return head[: limit - 1] + "…"
    # Whitespace is collapsed before shortening. A prefix is collapsed, longer ones until it is
    # long enough: a collapsed prefix begins the collapsed whole, so then the cut is the same.
    scan = limit + 16
    line = " ".join(text[:scan].split())
    while len(line) <= limit and scan < len(text):
        scan *= 4
        line = " ".join(text[:scan].split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def tool_group_summary_text(messages: Sequence[Message]) -> str:
    """The short text a collapsed tool-call group becomes, e.g. ``[Tool results: get_weather: sunny]``.

    Args:
        messages: The group's messages.

    Returns:
        ``[Tool results: name: result; ...]`` with each result shortened, or ``[Tool calls: ...]``
        when no result is present.
    """
    if len(messages) == 2:  # the common group: one call and the result that answers it
        calls, results = messages[0].contents, messages[1].contents
        if len(calls) == 1 and len(results) == 1:
            call, result = calls[0], results[0]
            if (
                type(call) is FunctionCallContent
                and type(result) is FunctionResultContent
                and result.call_id == call.call_id
            ):
                exception = result.exception
                preview = one_line(f"error: {exception}") if exception else one_line(result.result)
                return f"[Tool results: {call.name}: {preview}]"
    # One pass: in a group every call comes before the results that answer it.
    names: dict[str, str] = {}
    parts: list[str] = []
    for message in messages:
        for content in message.contents:
            if isinstance(content, FunctionCallContent):
                names[content.call_id] = content.name
            elif isinstance(content, FunctionResultContent):
                exception = content.exception
                preview = one_line(f"error: {exception}") if exception else one_line(content.result)
                parts.append(f"{names.get(content.call_id, content.call_id)}: {preview}")
    if parts:
        return f"[Tool results: {'; '.join(parts)}]"
    return f"[Tool calls: {', '.join(names.values()) or 'unknown'}]"


def tool_group_summary(group: MessageGroup) -> Message:
    """The summary message a collapsed tool-call ``group`` becomes (see :func:`tool_group_summary_text`)."""
    return Message("assistant", tool_group_summary_text(group.messages))


class _ToolGroupStrategy(StepStrategy):
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

    summary_reason = "tool_result_compaction"

    def _candidates(self, index: MessageIndex) -> Iterable[MessageGroup]:
        groups = _tool_candidates(index, self.keep_last_tool_call_groups, self.minimum_preserved)
        return filterfalse(_UNANSWERED_OF, groups)  # complete groups only, told apart in C

    def _step(self, index: MessageIndex, group: MessageGroup) -> None:
        index.replace([group], tool_group_summary(group))

    def _step_all(self, index: MessageIndex) -> bool:
        return bool(index.collapse_each(self._candidates(index), tool_group_summary_text))


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

    exclude_reason = "selective_tool_call"

    def _candidates(self, index: MessageIndex) -> Iterable[MessageGroup]:
        return _tool_candidates(index, self.keep_last_tool_call_groups, self.minimum_preserved)
