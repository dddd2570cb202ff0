"""Summarization: a model condenses the oldest message groups into one summary message.

:class:`SummarizationStrategy` is the one compaction strategy that needs a model. When history
holds too many non-system messages it renders the oldest whole groups as a plain transcript, asks
a chat client (ideally a small, cheap model) for a summary in **one** call, and puts the summary
in the place of the groups it stands for (:meth:`~agentkeep.compaction.MessageIndex.replace`):
the summary lists the ``message_id`` of every message it replaces, and the originals stay in the
index, excluded.

Compaction must never break the user's run, so a summarizer that fails (any exception from the
client, an empty reply) or a budget too small for even one group leaves the history as it was: the
failure is logged on the ``agentkeep.compaction`` logger at ``WARNING`` and kept as
:attr:`SummarizationStrategy.last_error` (a :class:`SummarizationError`), and ``compact`` returns
``False``.

Names and defaults follow the Python edition of the reference (seed 002).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

from ...clients.base import ChatClient
from ...contents import ErrorContent, FunctionCallContent, FunctionResultContent, TextContent
from ...errors import SummarizationError
from ...messages import Message
from ..annotations import AnnotatingStrategy
from ..groups import MessageGroup, is_summary_message
from ..index import MessageIndex
from ..tokenizers import Tokenizer
from ..triggers import CompactionTrigger, non_negative
from .tool_calls import one_line

__all__ = ["DEFAULT_SUMMARIZATION_PROMPT", "SummarizationError", "SummarizationStrategy"]

_log = logging.getLogger("agentkeep.compaction")

DEFAULT_SUMMARIZATION_PROMPT: Final[str] = (
    "You condense conversations for an AI assistant that will carry on without seeing the original "
    "messages. Read the transcript and write a compact summary that lets the assistant continue "
    "seamlessly. Keep every fact the user gave, their goals, preferences and constraints, the "
    "decisions taken and their reasons, promises and open questions, and what each tool call "
    "returned (tool names, key values, errors). If the transcript contains an earlier summary, fold "
    "it in. Leave out greetings, filler and repetition. Use short sentences or bullet points in the "
    "language of the conversation, and reply with the summary only."
)
"""The instructions the summarizer gets unless ``prompt=`` is given."""

_SUMMARY_HEADING: Final[str] = "[Summary of the earlier conversation]"
"""The first line of every summary message, so the main model reads it as a summary, not a reply."""

_TRANSCRIPT_HEADING: Final[str] = "Transcript to summarize, oldest first:"

_PREVIEW_CHARS: Final[int] = 400
"""How many characters of each tool-call argument list or tool result the transcript keeps."""


def _preview(value: Any) -> str:
    return one_line(value, _PREVIEW_CHARS)


def _transcript_lines(messages: Sequence[Message]) -> list[str]:
    """Render ``messages`` as transcript lines for a summarizer, one line per message.

    A line is ``role: text``; tool calls and results appear shortened in brackets
    (``[called get_weather {"city":"Paris"}]``, ``[get_weather returned: sunny]``), an earlier
    summary as ``earlier summary: ...``. Reasoning and media are left out; a message with nothing
    left gives no line.

    Args:
        messages: The messages of whole groups (calls and their results together, so results can
            be named after their call).

    Returns:
        The lines, in message order.
    """
    names = {call.call_id: call.name for message in messages for call in message.function_calls}
    lines: list[str] = []
    for message in messages:
        if is_summary_message(message):
            text = message.text.removeprefix(_SUMMARY_HEADING).strip()
            if text:
                lines.append(f"earlier summary: {' '.join(text.split())}")
            continue
        parts: list[str] = []
        for content in message.contents:
            if isinstance(content, TextContent):
                if content.text.strip():
                    parts.append(content.text.strip())
            elif isinstance(content, FunctionCallContent):
                args = "" if content.arguments is None else f" {_preview(content.arguments)}"
                parts.append(f"[called {content.name}{args}]")
            elif isinstance(content, FunctionResultContent):
                name = names.get(content.call_id, content.call_id)
                if content.exception is not None:
                    parts.append(f"[{name} failed: {_preview(content.exception)}]")
                else:
                    parts.append(f"[{name} returned: {_preview(content.result)}]")
            elif isinstance(content, ErrorContent):
                parts.append(f"[error: {_preview(content.message)}]")
        if parts:
            lines.append(f"{message.role}: {' '.join(parts)}")
    return lines


class SummarizationStrategy(AnnotatingStrategy):
    """Summarize the oldest whole message groups with a model, keeping the newest messages as they are.

    By default it starts when the included non-system messages exceed ``target_count + threshold``
    and keeps the newest ``target_count`` of them, widened to whole groups (a tool call and its
    results are never split). Older groups are summarized oldest first, as many as fit the
    summarizer's input budget, with one model call; the summary stands where they stood. System
    messages are never summarized, and the newest non-system group is always kept. Earlier
    summaries in that range are summarized again (their text goes into the transcript).

    When the call fails, or no group fits the budget, history stays unchanged, the failure is
    logged (``agentkeep.compaction``, ``WARNING``; after :attr:`FAILURE_ERROR_THRESHOLD` failures
    in a row once at ``ERROR``) and kept in :attr:`last_error`, and :meth:`compact` returns
    ``False``; nothing is raised into the run.

    Args:
        client: The summarizer (any :class:`~agentkeep.clients.base.ChatClient`; a small, fast
            model is a good choice). It is called with ``store=False``.
        target_count: How many of the newest non-system messages to keep (widened to whole groups).
        threshold: How many messages beyond ``target_count`` may accumulate before summarizing.
        prompt: The summarizer's instructions; default :data:`DEFAULT_SUMMARIZATION_PROMPT`.
        max_summary_input_tokens: The most tokens the summarizer request (prompt plus transcript)
            may hold; only whole groups that fit are summarized. ``None`` means no limit.
        tokenizer: Counts the budget; default the index's tokenizer.
        trigger: Replaces the ``target_count + threshold`` trigger.
        target: Stop adding groups to the summary once this holds (checked with the groups chosen
            so far left out, before each group; the summary's own size is not known yet). Default:
            no such check, everything older than the kept messages is summarized.
        minimum_preserved: The newest non-system groups that are always kept (at least 1).

    Attributes:
        last_error: Why the most recent summarization attempt was skipped; ``None`` after a
            summary was made (and before any failure).
        consecutive_failures: Attempts skipped since the last summary was made.

    Raises:
        ValueError: A count or the budget is negative.

    Example:
        >>> summarization = SummarizationStrategy(  # doctest: +SKIP
        ...     client=summarizer_client, target_count=4, threshold=2
        ... )
    """

    summary_reason = "summarized"
    FAILURE_ERROR_THRESHOLD: int = 3
    """After this many failed attempts in a row the failure is logged once at ``ERROR``."""

    def __init__(
        self,
        client: ChatClient,
        target_count: int = 4,
        threshold: int = 2,
        prompt: str | None = None,
        max_summary_input_tokens: int | None = 8000,
        tokenizer: Tokenizer | None = None,
        *,
        trigger: CompactionTrigger | None = None,
        target: CompactionTrigger | None = None,
        minimum_preserved: int = 1,
    ) -> None:
        self.client = client
        self.target_count = non_negative("target_count", target_count)
        self.threshold = non_negative("threshold", threshold)
        self.prompt: str = prompt if prompt is not None else DEFAULT_SUMMARIZATION_PROMPT
        if max_summary_input_tokens is not None:
            non_negative("max_summary_input_tokens", max_summary_input_tokens)
        self.max_summary_input_tokens = max_summary_input_tokens
        self.tokenizer = tokenizer
        self._custom_trigger = trigger
        self.trigger: CompactionTrigger = trigger if trigger is not None else self._too_many_messages
        self.target: CompactionTrigger | None = target
        self.minimum_preserved = non_negative("minimum_preserved", minimum_preserved)
        self.last_error: SummarizationError | None = None
        self.consecutive_failures = 0

    # -- what to keep ---------------------------------------------------------------------------
    def _too_many_messages(self, index: MessageIndex) -> bool:
        """The default trigger: more than ``target_count + threshold`` included non-system messages.

        O(1) while few messages are included; otherwise it walks at most ``limit + 1`` of the newest
        groups (each holds at least one message).
        """
        limit = self.target_count + self.threshold
        if index.included_message_count <= limit:
            return False
        return sum(g.message_count for g in index.newest_included(limit + 1)) > limit

    def _oldest_kept(self, index: MessageIndex) -> MessageGroup | None:
        """The oldest group of the kept tail, or ``None`` when nothing older may be summarized."""
        floor = max(1, self.minimum_preserved)
        newest = index.newest_included(max(self.target_count, floor) + 1)
        kept_messages = 0
        for position, group in enumerate(newest):
            if position >= floor and kept_messages >= self.target_count:
                return newest[position - 1]
            kept_messages += group.message_count
        return None

    # -- the request ----------------------------------------------------------------------------
    def _request(self, chunks: Sequence[str]) -> list[Message]:
        transcript = "\n".join([_TRANSCRIPT_HEADING, *chunks])
        return [Message("system", self.prompt), Message("user", transcript)]

    def _request_tokens(self, chunks: Sequence[str], tokenizer: Tokenizer) -> int:
        """The request's size as the budget counts it: the prompt and the transcript text."""
        transcript = "\n".join([_TRANSCRIPT_HEADING, *chunks])
        return tokenizer.count_tokens(self.prompt) + tokenizer.count_tokens(transcript)

    def _select(
        self, index: MessageIndex, boundary: MessageGroup, tokenizer: Tokenizer
    ) -> tuple[list[MessageGroup], list[str], bool]:
        """The oldest groups to summarize, their transcript chunks, and whether the budget left out
        every group.

        Groups are taken oldest first while they fit the budget; leading groups too large for it
        on their own are passed over (they stay as they are), as in the reference.
        """
        budget = self.max_summary_input_tokens
        target = self.target
        # The prompt and each chunk are counted on their own (plus one for the newline joining a
        # chunk): for the estimator that is never less than counting the joined text.
        used = self._request_tokens((), tokenizer)
        chosen: list[MessageGroup] = []
        chunks: list[str] = []
        blocked = False
        try:
            for group in index.oldest_included():
                if group is boundary or group.order >= boundary.order:
                    break
                if target is not None and target(index):
                    break
                chunk = "\n".join(_transcript_lines(group.messages)) or f"({group.kind.value})"
                cost = tokenizer.count_tokens(chunk) + 1
                if budget is not None and used + cost > budget:
                    if not chosen:
                        blocked = True
                        continue  # too large on its own: the later groups may still fit
                    break
                used += cost
                chosen.append(group)
                chunks.append(chunk)
                if target is not None:
                    index.exclude(group)  # so the target sees the history without it
        finally:
            if target is not None:
                for group in chosen:
                    index.include(group)
        # Safety net for tokenizers that count a joined text higher than its parts.
        while chosen and budget is not None:
            if self._request_tokens(chunks, tokenizer) <= budget:
                break
            chosen.pop()
            chunks.pop()
        return chosen, chunks, blocked and not chosen

    # -- compacting -----------------------------------------------------------------------------
    async def compact(self, index: MessageIndex) -> bool:
        """Summarize the oldest groups of ``index`` in place if the trigger fires.

        Args:
            index: The history to compact.

        Returns:
            Whether a summary replaced groups. ``False`` also when the attempt failed (see
            :attr:`last_error`).
        """
        if not self.trigger(index):
            return False
        boundary = self._oldest_kept(index)
        if boundary is None:
            return False
        tokenizer = self.tokenizer if self.tokenizer is not None else index.tokenizer
        chosen, chunks, blocked = self._select(index, boundary, tokenizer)
        if not chosen:
            if blocked:
                self._fail(
                    SummarizationError(
                        f"no message group fits max_summary_input_tokens="
                        f"{self.max_summary_input_tokens} together with the prompt",
                        reason="budget",
                    )
                )
            return False
        try:
            response = await self.client.get_response(self._request(chunks), options={"store": False})
        except Exception as exc:  # a failing summarizer must not fail the user's run
            error = SummarizationError(
                f"summary generation failed: {type(exc).__name__}: {exc}", reason="call"
            )
            error.__cause__ = exc
            self._fail(error)
            return False
        text = (response.text or "").strip()
        if not text:
            self._fail(SummarizationError("the summarizer returned no text", reason="empty"))
            return False
        index.replace(chosen, Message("assistant", f"{_SUMMARY_HEADING}\n{text}"))
        self.last_error = None
        self.consecutive_failures = 0
        return True

    def _fail(self, error: SummarizationError) -> None:
        self.last_error = error
        self.consecutive_failures += 1
        _log.warning("Summarization skipped, history left unchanged: %s", error)
        if self.consecutive_failures == self.FAILURE_ERROR_THRESHOLD:  # once per run of failures
            _log.error(
                "Summarization has failed %d consecutive times (last: %s): history is no longer "
                "being summarized; check the summarizer",
                self.consecutive_failures,
                error,
            )

    def __repr__(self) -> str:
        # The default trigger is a bound method whose repr would include this one.
        trigger = "" if self._custom_trigger is None else f", trigger={self._custom_trigger!r}"
        return (
            f"SummarizationStrategy(target_count={self.target_count}, threshold={self.threshold}, "
            f"max_summary_input_tokens={self.max_summary_input_tokens}, tokenizer={self.tokenizer!r}"
            f"{trigger}, minimum_preserved={self.minimum_preserved})"
        )
