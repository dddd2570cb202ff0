"""The strategy contract, the measures strategies share, and ad hoc compaction.

* :class:`CompactionStrategy`: anything that compacts a
  :class:`~agentkeep.compaction.MessageIndex` in place and says whether it changed anything.
* :func:`apply_compaction`: compact a plain message list once, outside any session.
* :func:`project`: what an index sends to the model.
* :class:`TokenMeter` and :func:`counts_like`: included tokens as a strategy's tokenizer counts
  them, read from the index's running totals whenever that tokenizer counts alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeAlias, runtime_checkable

from ...messages import Message
from ..annotations import AnnotatedCompactionStrategy, index_strategy
from ..groups import MessageGroup, token_count_of
from ..index import MessageIndex
from ..tokenizers import CharacterEstimatorTokenizer, Tokenizer, count_message_tokens

__all__ = [
    "CompactionStrategy",
    "StrategyLike",
    "TokenMeter",
    "apply_compaction",
    "counts_like",
    "project",
    "resolve_tokenizer",
]


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


StrategyLike: TypeAlias = "CompactionStrategy | AnnotatedCompactionStrategy"
"""What agentkeep takes as a strategy: its own (``compact(index)``), or one written for the
reference (``async __call__(messages)``, see :mod:`agentkeep.compaction.annotations`)."""


def project(index: MessageIndex) -> list[Message]:
    """The messages to send: original order minus excluded groups, each summary in place.

    Same as :meth:`MessageIndex.included_messages`.

    Args:
        index: A compacted index.

    Returns:
        The included messages; a summary stands where the first message it replaces was.
    """
    return index.included_messages()


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

    @property
    def group_cost(self) -> Callable[[MessageGroup], int]:
        """:meth:`group` as a function to call once per group of a long run: the C-level read of
        the group's kept count when the meter uses the index's counts."""
        return token_count_of if self._tokenizer is None else self.group


async def apply_compaction(
    messages: Iterable[Message],
    *,
    strategy: StrategyLike | None,
    tokenizer: Tokenizer | None = None,
) -> list[Message]:
    """Compact a message list outside any session and return the result.

    Args:
        messages: The history (not modified, except that messages a summary replaces get a
            ``message_id`` if they had none).
        strategy: The strategy to apply: agentkeep's, or one written for the reference
            (``async __call__(messages)``, see :mod:`agentkeep.compaction.annotations`);
            ``None`` returns the messages as they are.
        tokenizer: Counts tokens for the index; default the strategy's ``tokenizer`` attribute if it
            has one, else :class:`~agentkeep.compaction.CharacterEstimatorTokenizer`.

    Returns:
        The compacted history: original order minus excluded groups, with summaries in place.

    Example:
        >>> compacted = await apply_compaction(  # doctest: +SKIP
        ...     messages, strategy=TruncationStrategy(max_n=8_000, compact_to=4_000)
        ... )
    """
    if strategy is None:
        return list(messages)
    index = MessageIndex(messages, tokenizer=resolve_tokenizer(strategy, tokenizer))
    await index_strategy(strategy).compact(index)
    return project(index)


def resolve_tokenizer(strategy: object, tokenizer: Tokenizer | None) -> Tokenizer:
    """The tokenizer an index for ``strategy`` counts with: the given one, else the strategy's own
    ``tokenizer`` attribute, else :class:`~agentkeep.compaction.CharacterEstimatorTokenizer`."""
    if tokenizer is not None:
        return tokenizer
    found: object = getattr(strategy, "tokenizer", None)
    return found if isinstance(found, Tokenizer) else CharacterEstimatorTokenizer()
