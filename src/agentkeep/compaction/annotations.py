"""The reference's annotation view of compaction: groups, exclusions and summaries written on the
messages of a plain list, for code written for the reference Python edition.

The reference compacts a ``list[Message]`` in place: every message carries its group in
``additional_properties["_group"]`` (``id``, ``kind``, ``index``, ``has_reasoning``, and a cached
``token_count``), an excluded one ``"_excluded": True`` (and ``"_exclude_reason"``), and a strategy
is ``async def __call__(messages) -> bool`` that annotates and inserts summaries (each summary's
annotation lists ``_summary_of_message_ids`` and ``_summary_of_group_ids``; each replaced message
names its ``_summarized_by_summary_id``). The sent history is :func:`included_messages`.

Here that view is computed from agentkeep's one pipeline, not made a second time:

* :func:`annotate_message_groups` groups the list with a :class:`~agentkeep.compaction.MessageIndex`
  (the grouping rules are the reference's) and writes the annotations: a group's id is
  ``group_<id of its first message>``, so ids are stable as the list grows; a message without an
  id gets the reference's ``msg_<position>`` (unique within the list only: messages that enter a
  session get agentkeep's ids before any of agentkeep's own compaction sees them); a cached token
  count is kept; a group whose messages are not contiguous is included as a whole once any of
  its messages is.
* Every agentkeep strategy is also callable the reference's way (:class:`AnnotatingStrategy`):
  it runs its ``compact(index)`` on an index of the included messages and writes back what it
  did: exclusions, and each summary inserted before the first message of the groups it replaces,
  linked both ways.
* A strategy written for the reference (only ``__call__(messages)``) runs wherever agentkeep takes
  a strategy — :func:`~agentkeep.compaction.apply_compaction`, a
  :class:`~agentkeep.compaction.CompactionProvider`, an agent's ``compaction_strategy``, inside a
  pipeline — through :func:`index_strategy`: it gets copies of the included messages, annotated,
  and what it excluded or inserted is applied to the index (groups it excluded entirely leave;
  a message with ``_summary_of_message_ids`` replaces the groups of those ids).

Costs: this view is O(messages) per call, as the reference's strategies themselves are; agentkeep's
own path (``compact(index)`` on a session's incremental index) stays O(new messages) per turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, cast, runtime_checkable

from ..contents import TextReasoningContent
from ..messages import Message, new_message_id
from .groups import SUMMARY_PROPERTY, MessageGroup
from .index import MessageIndex
from .tokenizers import CharacterEstimatorTokenizer, Tokenizer, count_message_tokens

if TYPE_CHECKING:
    from .strategies.base import CompactionStrategy

__all__ = [
    "EXCLUDED_KEY",
    "EXCLUDE_REASON_KEY",
    "GROUP_ANNOTATION_KEY",
    "GROUP_HAS_REASONING_KEY",
    "GROUP_ID_KEY",
    "GROUP_INDEX_KEY",
    "GROUP_KIND_KEY",
    "GROUP_TOKEN_COUNT_KEY",
    "SUMMARIZED_BY_SUMMARY_ID_KEY",
    "SUMMARY_OF_GROUP_IDS_KEY",
    "SUMMARY_OF_MESSAGE_IDS_KEY",
    "AnnotatedCompactionStrategy",
    "AnnotatingStrategy",
    "annotate_message_groups",
    "annotate_token_counts",
    "append_compaction_message",
    "compact_annotated",
    "extend_compaction_messages",
    "included_messages",
    "included_token_count",
    "index_strategy",
]

GROUP_ANNOTATION_KEY: Final = "_group"
"""The ``additional_properties`` key of a message's group annotation (a dict)."""
GROUP_ID_KEY: Final = "id"
GROUP_KIND_KEY: Final = "kind"
GROUP_INDEX_KEY: Final = "index"
GROUP_HAS_REASONING_KEY: Final = "has_reasoning"
GROUP_TOKEN_COUNT_KEY: Final = "token_count"
EXCLUDED_KEY: Final = "_excluded"
"""The ``additional_properties`` key that marks a message left out of what is sent (a bool)."""
EXCLUDE_REASON_KEY: Final = "_exclude_reason"
SUMMARY_OF_MESSAGE_IDS_KEY: Final = "_summary_of_message_ids"
"""In a summary's group annotation: the ids of the messages it replaces."""
SUMMARY_OF_GROUP_IDS_KEY: Final = "_summary_of_group_ids"
"""In a summary's group annotation: the ids of the groups it replaces."""
SUMMARIZED_BY_SUMMARY_ID_KEY: Final = "_summarized_by_summary_id"
"""In a replaced message's group annotation: the id of the summary that replaced it."""

_OWN_KEYS: Final = frozenset({GROUP_ID_KEY, GROUP_KIND_KEY, GROUP_INDEX_KEY, GROUP_HAS_REASONING_KEY})


@runtime_checkable
class AnnotatedCompactionStrategy(Protocol):
    """The reference's strategy contract: annotate ``messages`` in place, say whether anything changed."""

    async def __call__(self, messages: list[Message]) -> bool: ...


# -- reading and writing annotations ----------------------------------------------------------------


def _annotation(message: Message) -> dict[str, Any] | None:
    found: Any = message.additional_properties.get(GROUP_ANNOTATION_KEY)
    return cast("dict[str, Any]", found) if isinstance(found, dict) else None


def _is_excluded(message: Message) -> bool:
    return bool(message.additional_properties.get(EXCLUDED_KEY, False))


def _token_count(message: Message) -> int | None:
    annotation = _annotation(message)
    count = annotation.get(GROUP_TOKEN_COUNT_KEY) if annotation is not None else None
    return count if type(count) is int else None


def _group_id(message: Message) -> str | None:
    annotation = _annotation(message)
    found = annotation.get(GROUP_ID_KEY) if annotation is not None else None
    return found if isinstance(found, str) else None


def _group_key(first: Message) -> str:
    return f"group_{first.message_id}"


def _write(message: Message, group_id: str, kind: str, ordinal: int, has_reasoning: bool) -> None:
    props = message.additional_properties
    existing = _annotation(message)
    annotation: dict[str, Any] = (
        {k: v for k, v in existing.items() if k not in _OWN_KEYS} if existing is not None else {}
    )
    props[GROUP_ANNOTATION_KEY] = {
        GROUP_ID_KEY: group_id,
        GROUP_KIND_KEY: kind,
        GROUP_INDEX_KEY: ordinal,
        GROUP_HAS_REASONING_KEY: has_reasoning,
        **annotation,
    }
    props.setdefault(EXCLUDED_KEY, False)


def _reasoning(messages: Sequence[Message]) -> bool:
    return any(isinstance(c, TextReasoningContent) for m in messages for c in m.contents)


def annotate_message_groups(
    messages: list[Message],
    *,
    from_index: int | None = None,
    force_reannotate: bool = False,
    tokenizer: Tokenizer | None = None,
) -> list[str]:
    """Write each message's group annotation (and, with ``tokenizer``, its token count).

    The annotations always describe the whole list consistently (regrouping is one pass over the
    list); ``from_index`` and ``force_reannotate`` are accepted for the reference's callers.
    A token count already cached on a message is kept unless ``force_reannotate``.

    Args:
        messages: The list (changed in place: annotations, and ids for messages without one).
        from_index: Where the reference would start re-annotating.
        force_reannotate: Count tokens again even where a count is cached.
        tokenizer: Count each message's tokens (see
            :func:`~agentkeep.compaction.count_message_tokens`) into its annotation.

    Returns:
        The group ids in order.
    """
    del from_index  # the whole list is regrouped: nothing to resume from
    if not messages:
        return []
    _name_messages(messages)
    index = MessageIndex(messages)
    ordered: list[str] = []
    for ordinal, group in enumerate(_groups_in_order(index)):
        members = group.messages
        group_id = _group_key(members[0])
        ordered.append(group_id)
        has_reasoning = _reasoning(members)
        for message in members:
            _write(message, group_id, group.kind.value, ordinal, has_reasoning)
        later = group.later_indices
        if (
            later
            and later[-1] - group.first_index + 1 != len(members)
            and not all(map(_is_excluded, members))
        ):
            for message in members:  # a group split by other messages is kept or left whole
                message.additional_properties[EXCLUDED_KEY] = False
    if tokenizer is not None:
        annotate_token_counts(messages, tokenizer=tokenizer, force_retokenize=force_reannotate)
    return ordered


def _name_messages(messages: list[Message]) -> None:
    """Give each message without an id the reference's ``msg_<position>`` (the next free
    ``msg_<n>`` past the list when that is taken): ids unique within the list, and a history
    measured as the reference measures it (its token figures count the id)."""
    if all(m.message_id is not None for m in messages):
        return
    taken = {m.message_id for m in messages if m.message_id is not None}
    spare = len(messages)
    for position, message in enumerate(messages):
        if message.message_id is not None:
            continue
        candidate = f"msg_{position}"
        while candidate in taken:
            candidate = f"msg_{spare}"
            spare += 1
        message.message_id = candidate
        taken.add(candidate)


def _groups_in_order(index: MessageIndex) -> list[MessageGroup]:
    """Every group once, by first message (groups merged away are found through their messages)."""
    seen: dict[int, MessageGroup] = {}
    for position in range(index.message_count):
        group = index.group_of(position)
        seen.setdefault(id(group), group)
    return list(seen.values())


def annotate_token_counts(
    messages: list[Message],
    *,
    tokenizer: Tokenizer,
    from_index: int | None = None,
    force_retokenize: bool = False,
) -> None:
    """Write each message's token count into its group annotation (where none is cached).

    Args:
        messages: The list; messages without a group annotation are annotated first.
        tokenizer: Counts each message (see :func:`~agentkeep.compaction.count_message_tokens`).
        from_index: Count from here on only (earlier messages keep what they have).
        force_retokenize: Count again even where a count is cached.
    """
    if any(_annotation(m) is None for m in messages):
        annotate_message_groups(messages)
    start = 0 if from_index is None else max(0, from_index)
    for message in messages[start:]:
        if force_retokenize or _token_count(message) is None:
            annotation = _annotation(message)
            assert annotation is not None  # annotated above
            annotation[GROUP_TOKEN_COUNT_KEY] = count_message_tokens(message, tokenizer=tokenizer)


def extend_compaction_messages(
    messages: list[Message], new_messages: Sequence[Message], *, tokenizer: Tokenizer | None = None
) -> None:
    """Append ``new_messages`` and annotate (the earlier messages keep their cached counts)."""
    if not new_messages:
        return
    start = len(messages)
    messages.extend(new_messages)
    annotate_message_groups(messages, from_index=start, tokenizer=tokenizer)


def append_compaction_message(
    messages: list[Message], message: Message, *, tokenizer: Tokenizer | None = None
) -> None:
    """Append one message and annotate it (see :func:`extend_compaction_messages`)."""
    extend_compaction_messages(messages, [message], tokenizer=tokenizer)


def included_messages(messages: Sequence[Message]) -> list[Message]:
    """The messages not marked excluded, in order: what is sent."""
    return [m for m in messages if not _is_excluded(m)]


def included_token_count(messages: Sequence[Message]) -> int:
    """The cached token counts of the included messages, summed (uncounted messages add 0)."""
    return sum(_token_count(m) or 0 for m in messages if not _is_excluded(m))


# -- agentkeep strategies, called the reference's way ---------------------------------------------------


class AnnotatingStrategy:
    """What makes an agentkeep strategy callable as the reference's: ``await strategy(messages)``.

    Subclasses implement ``compact(index)``; :attr:`exclude_reason` and :attr:`summary_reason`
    name what they did in the annotations.
    """

    exclude_reason: str = "compaction"
    """``_exclude_reason`` of messages this strategy excluded."""
    summary_reason: str = "summarized"
    """``_exclude_reason`` of messages a summary of this strategy replaced."""

    async def __call__(self, messages: list[Message]) -> bool:
        """Compact ``messages`` in place the reference's way (see :func:`compact_annotated`)."""
        return await compact_annotated(cast("CompactionStrategy", self), messages)


def _tokenizer_of(strategy: object) -> Tokenizer:
    found: object = getattr(strategy, "tokenizer", None)
    return found if isinstance(found, Tokenizer) else CharacterEstimatorTokenizer()


async def compact_annotated(strategy: CompactionStrategy, messages: list[Message]) -> bool:
    """Run ``strategy.compact`` on the included messages of ``messages`` and annotate the result.

    Excluded messages get ``_excluded`` and ``_exclude_reason``; each summary is inserted before
    the first message of the groups it replaces, annotated with the message and group ids it
    replaces, and those messages (all of each replaced group) name it and are excluded.

    Returns:
        Whether anything changed.
    """
    tokenizer = _tokenizer_of(strategy)
    annotate_message_groups(messages, tokenizer=tokenizer)
    index = MessageIndex(included_messages(messages), tokenizer=tokenizer)
    index.track_changes()
    if not await strategy.compact(index):
        return False
    excluded, summaries = index.changes()
    if not excluded and not summaries:
        return False
    by_id = {m.message_id: m for m in messages}
    exclude_reason = str(getattr(strategy, "exclude_reason", "compaction"))
    summary_reason = str(getattr(strategy, "summary_reason", "summarized"))
    replaced_ids = {message_id for _, ids in summaries for message_id in ids}
    for message_id in excluded:
        message = by_id.get(message_id)
        if message is not None and message_id not in replaced_ids:
            _exclude(message, exclude_reason)
    for summary, ids in summaries:
        _insert_summary(messages, summary, ids, summary_reason)
    annotate_message_groups(messages, tokenizer=tokenizer)
    return True


def _exclude(message: Message, reason: str) -> None:
    message.additional_properties[EXCLUDED_KEY] = True
    message.additional_properties[EXCLUDE_REASON_KEY] = reason


def _insert_summary(messages: list[Message], summary: Message, replaced: Sequence[str], reason: str) -> None:
    wanted = set(replaced)
    group_ids = list(dict.fromkeys(g for m in messages if m.message_id in wanted and (g := _group_id(m))))
    covered = [m for m in messages if _group_id(m) in group_ids] or [
        m for m in messages if m.message_id in wanted
    ]
    if summary.message_id is None:
        summary.message_id = new_message_id()
    for message in covered:
        annotation = _annotation(message)
        if annotation is not None:
            annotation[SUMMARIZED_BY_SUMMARY_ID_KEY] = summary.message_id
        _exclude(message, reason)
    summary.additional_properties[GROUP_ANNOTATION_KEY] = {
        SUMMARY_OF_MESSAGE_IDS_KEY: [m.message_id for m in covered],
        SUMMARY_OF_GROUP_IDS_KEY: group_ids,
    }
    summary.additional_properties[EXCLUDED_KEY] = False
    first = min((at for at, m in enumerate(messages) if m in covered), default=len(messages))
    messages.insert(first, summary)


# -- strategies written for the reference, run on an index ------------------------------------------


def index_strategy(strategy: object) -> CompactionStrategy:
    """``strategy`` as agentkeep runs strategies (``compact(index)``): itself when it has
    ``compact``, else (a reference-style ``__call__(messages)``) a :class:`_ReferenceStrategy`.

    Raises:
        TypeError: It is neither.
    """
    if callable(getattr(strategy, "compact", None)):
        return cast("CompactionStrategy", strategy)
    if callable(strategy):
        return _ReferenceStrategy(cast(AnnotatedCompactionStrategy, strategy))
    raise TypeError(
        "a compaction strategy needs compact(index) or an async __call__(messages), "
        f"not {type(strategy).__name__}"
    )


class _ReferenceStrategy:
    """A reference-style strategy run on an index: on annotated copies of the included messages,
    its exclusions and summaries applied back (see the module docstring)."""

    __slots__ = ("strategy", "tokenizer")

    def __init__(self, strategy: AnnotatedCompactionStrategy) -> None:
        self.strategy = strategy
        found: object = getattr(strategy, "tokenizer", None)
        self.tokenizer = found if isinstance(found, Tokenizer) else None

    async def compact(self, index: MessageIndex) -> bool:
        originals = index.included_messages()
        copies = [m.ensure_identity().copy() for m in originals]
        for copy in copies:  # annotations are the strategy's scratch space, not the history's
            copy.additional_properties.pop(GROUP_ANNOTATION_KEY, None)
            copy.additional_properties.pop(EXCLUDED_KEY, None)
        annotate_message_groups(copies, tokenizer=self.tokenizer)
        working = list(copies)
        if not await self.strategy(working):
            return False
        positions = {id(m): at for at, m in enumerate(index.messages)}
        group_of = {id(c): index.group_of(positions[id(o)]) for c, o in zip(copies, originals, strict=True)}
        by_id = {o.message_id: group_of[id(c)] for c, o in zip(copies, originals, strict=True)}
        known = {id(c) for c in copies}
        changed = False
        for message in working:  # summaries it inserted replace the groups they name
            if id(message) in known or _is_excluded(message):
                continue
            annotation = _annotation(message)
            ids: Any = annotation.get(SUMMARY_OF_MESSAGE_IDS_KEY) if annotation is not None else None
            if not isinstance(ids, list):
                continue
            named = {i for i in cast("list[Any]", ids) if isinstance(i, str)}
            groups = {id(g): g for i in named if (g := by_id.get(i)) is not None and not g.excluded}
            if groups:
                summary = message.copy()
                for key in (EXCLUDED_KEY, GROUP_ANNOTATION_KEY, SUMMARY_PROPERTY):
                    summary.additional_properties.pop(key, None)
                index.replace(list(groups.values()), summary)
                changed = True
        members: dict[int, list[Message]] = {}
        for copy in copies:
            members.setdefault(id(group_of[id(copy)]), []).append(copy)
        for copy in copies:  # a group leaves only when all of it was excluded
            group = group_of[id(copy)]
            if not group.excluded and all(map(_is_excluded, members[id(group)])):
                index.exclude(group)
                changed = True
        return changed

    def __repr__(self) -> str:
        return f"{type(self.strategy).__name__}()"
