"""Compaction triggers: predicates over a :class:`~agentkeep.compaction.MessageIndex`.

A :data:`CompactionTrigger` decides from the index's *included* (non-excluded) counts whether
compaction should start; a strategy's target (when to stop) is a trigger too. Every trigger made
by :class:`CompactionTriggers` reads counts the index keeps up to date, so evaluating it is O(1)
(``all_`` / ``any_`` are O(number of triggers)). Thresholds are exclusive: ``tokens_exceed(100)``
fires at 101 tokens, not at 100.

The .NET names map as: ``Always`` → ``always``, ``Never`` → ``never``, ``TokensExceed`` →
``tokens_exceed``, ``MessagesExceed`` → ``messages_exceed``, ``TurnsExceed`` → ``turns_exceed``,
``GroupsExceed`` → ``groups_exceed``, ``HasToolCalls`` → ``has_tool_calls``, ``All`` → ``all_``,
``Any`` → ``any_``.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TypeAlias

from .index import MessageIndex

__all__ = ["CompactionTrigger", "CompactionTriggers"]

CompactionTrigger: TypeAlias = Callable[[MessageIndex], bool]
"""Whether compaction should run (or, used as a target, whether it may stop) for an index."""


class _Trigger:
    """A trigger with a readable repr, so a strategy's configuration prints as written."""

    __slots__ = ("_predicate", "_text")

    def __init__(self, text: str, predicate: CompactionTrigger) -> None:
        self._text = text
        self._predicate = predicate

    def __call__(self, index: MessageIndex) -> bool:
        return self._predicate(index)

    def __repr__(self) -> str:
        return f"CompactionTriggers.{self._text}"


def non_negative(name: str, value: int) -> int:
    """``value``, checked for the compaction settings that count something (tokens, groups, ...).

    Raises:
        ValueError: ``value`` is negative (the message names the setting ``name``).
    """
    if value < 0:
        raise ValueError(f"{name} must be greater than or equal to 0, not {value}")
    return value


def _exceeds(factory: str, name: str, value: int, included: str) -> CompactionTrigger:
    """The trigger ``factory(value)``: the index's ``included`` count is above ``value``."""
    limit = non_negative(name, value)
    count: Callable[[MessageIndex], int] = attrgetter(included)
    return _Trigger(f"{factory}({limit})", lambda index: count(index) > limit)


class CompactionTriggers:
    """Factories for common triggers (a namespace; not instantiated).

    Example:
        >>> trigger = CompactionTriggers.all_(
        ...     CompactionTriggers.has_tool_calls(), CompactionTriggers.tokens_exceed(2000)
        ... )
    """

    always: CompactionTrigger = _Trigger("always", lambda _index: True)
    """Fires every time."""

    never: CompactionTrigger = _Trigger("never", lambda _index: False)
    """Never fires (compaction off)."""

    @staticmethod
    def tokens_exceed(max_tokens: int) -> CompactionTrigger:
        """Fires when the included messages hold more than ``max_tokens`` tokens.

        Raises:
            ValueError: ``max_tokens`` is negative.
        """
        return _exceeds("tokens_exceed", "max_tokens", max_tokens, "included_token_count")

    @staticmethod
    def messages_exceed(max_messages: int) -> CompactionTrigger:
        """Fires when more than ``max_messages`` messages are included.

        Raises:
            ValueError: ``max_messages`` is negative.
        """
        return _exceeds("messages_exceed", "max_messages", max_messages, "included_message_count")

    @staticmethod
    def turns_exceed(max_turns: int) -> CompactionTrigger:
        """Fires when more than ``max_turns`` user turns are included.

        A turn counts while any of its groups other than system messages is included (see
        :attr:`MessageIndex.included_turn_count`).

        Raises:
            ValueError: ``max_turns`` is negative.
        """
        return _exceeds("turns_exceed", "max_turns", max_turns, "included_turn_count")

    @staticmethod
    def groups_exceed(max_groups: int) -> CompactionTrigger:
        """Fires when more than ``max_groups`` groups are included.

        Raises:
            ValueError: ``max_groups`` is negative.
        """
        return _exceeds("groups_exceed", "max_groups", max_groups, "included_group_count")

    @staticmethod
    def has_tool_calls() -> CompactionTrigger:
        """Fires when at least one ``tool_call`` group is included."""
        return _HAS_TOOL_CALLS

    @staticmethod
    def all_(*triggers: CompactionTrigger) -> CompactionTrigger:
        """Fires when every one of ``triggers`` fires (logical AND; true when given none)."""
        parts = tuple(triggers)
        return _Trigger(f"all_({', '.join(map(repr, parts))})", lambda index: all(t(index) for t in parts))

    @staticmethod
    def any_(*triggers: CompactionTrigger) -> CompactionTrigger:
        """Fires when at least one of ``triggers`` fires (logical OR; false when given none)."""
        parts = tuple(triggers)
        return _Trigger(f"any_({', '.join(map(repr, parts))})", lambda index: any(t(index) for t in parts))


_HAS_TOOL_CALLS: CompactionTrigger = _Trigger(
    "has_tool_calls()", lambda index: index.included_tool_call_group_count > 0
)
