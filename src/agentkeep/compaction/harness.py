"""The harness agent: an :class:`~agentkeep.agent.Agent` set up for long tool loops, its compaction
wired in before every model call and after every run.

:func:`create_harness_agent` wires compaction into the tool loop the way seed 002 describes:

* **before** phase: compacts what is sent before every model call of the tool loop (stored
  history untouched), so a long chain of tool calls stays inside the context window;
* **after** phase: compacts the stored history after each run and records it (originals kept by
  storage-backed providers), so the next run starts small;
* history is stored after every model call (``require_per_service_call_history_persistence``).

Compaction is off unless both ``max_context_window_tokens`` and ``max_output_tokens`` are given
(one :class:`~agentkeep.compaction.ContextWindowCompactionStrategy` then serves both phases) or
a phase strategy is given; ``disable_compaction=True`` turns both phases off. ``max_output_tokens``
also becomes the default ``max_tokens`` chat option, with or without compaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..clients.base import ChatClient
from ..providers.context import ContextProvider
from ..providers.history import HistoryProvider
from ..providers.in_memory import InMemoryHistoryProvider
from ..tools import ToolLike
from .provider import CompactionProvider
from .strategies import CompactionStrategy, ContextWindowCompactionStrategy, StrategyLike
from .tokenizers import Tokenizer

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["AFTER_COMPACTION_SOURCE_ID", "BEFORE_COMPACTION_SOURCE_ID", "create_harness_agent"]

BEFORE_COMPACTION_SOURCE_ID = "harness.before_compaction"
"""The ``source_id`` of the harness's per-model-call compaction provider."""
AFTER_COMPACTION_SOURCE_ID = "harness.after_compaction"
"""The ``source_id`` of the harness's after-run compaction provider."""


def create_harness_agent(
    client: ChatClient,
    instructions: str | None = None,
    *,
    max_context_window_tokens: int | None = None,
    max_output_tokens: int | None = None,
    before_compaction_strategy: StrategyLike | None = None,
    after_compaction_strategy: StrategyLike | None = None,
    history_provider: HistoryProvider | None = None,
    tokenizer: Tokenizer | None = None,
    disable_compaction: bool = False,
    name: str | None = None,
    description: str | None = None,
    tools: ToolLike | Sequence[ToolLike] | None = None,
    context_providers: Sequence[ContextProvider] = (),
    default_options: Mapping[str, Any] | None = None,
    max_tool_iterations: int = 10,
) -> Agent:
    """An agent that compacts before every model call of its tool loop and after every run.

    Args:
        client: The chat client.
        instructions: System instructions.
        max_context_window_tokens: The model's context window; with ``max_output_tokens`` it
            turns on the default :class:`~agentkeep.compaction.ContextWindowCompactionStrategy`
            (which never drops the first user message: the task of the run).
        max_output_tokens: Tokens reserved for each reply; also the default ``max_tokens``.
        before_compaction_strategy: Replaces the default strategy of the per-model-call phase.
        after_compaction_strategy: Replaces the default strategy of the after-run phase.
        history_provider: Where history lives (default a new
            :class:`~agentkeep.providers.InMemoryHistoryProvider`).
        tokenizer: Counts tokens for the default strategy and both phases.
        disable_compaction: Turn both phases off (``max_output_tokens`` still sets ``max_tokens``).
        name: The agent's name.
        description: What the agent does.
        tools: Tools for every run.
        context_providers: More providers, run after the history provider.
        default_options: Chat options for every run (``max_tokens`` here wins).
        max_tool_iterations: Model calls that may request tools per run.

    Returns:
        The configured :class:`~agentkeep.agent.Agent`.

    Raises:
        ValueError: A token limit is not positive, or ``max_output_tokens`` does not leave room
            for input in ``max_context_window_tokens``.

    Example:
        >>> agent = create_harness_agent(  # doctest: +SKIP
        ...     client, max_context_window_tokens=128_000, max_output_tokens=16_384
        ... )
    """
    for label, value in (
        ("max_context_window_tokens", max_context_window_tokens),
        ("max_output_tokens", max_output_tokens),
    ):
        if value is not None and value <= 0:
            raise ValueError(f"{label} must be positive, not {value}")
    default: CompactionStrategy | None = None
    if max_context_window_tokens is not None and max_output_tokens is not None:
        default = ContextWindowCompactionStrategy(
            max_context_window_tokens, max_output_tokens, tokenizer=tokenizer, preserve_first_user_group=True
        )
    before = before_compaction_strategy or default
    after = after_compaction_strategy or default
    providers: list[ContextProvider] = [
        history_provider if history_provider is not None else InMemoryHistoryProvider()
    ]
    providers.extend(context_providers)
    if not disable_compaction:
        if before is not None:
            providers.append(
                CompactionProvider(
                    before, tokenizer=tokenizer, phase="model_call", source_id=BEFORE_COMPACTION_SOURCE_ID
                )
            )
        if after is not None:
            providers.append(
                CompactionProvider(
                    after, tokenizer=tokenizer, phase="after_run", source_id=AFTER_COMPACTION_SOURCE_ID
                )
            )
    options: dict[str, Any] = dict(default_options or {})
    if max_output_tokens is not None:
        options.setdefault("max_tokens", max_output_tokens)
    from ..agent import Agent  # the agent imports this package: import it when it is first needed

    return Agent(
        client,
        instructions,
        name=name,
        description=description,
        tools=tools,
        context_providers=providers,
        require_per_service_call_history_persistence=True,
        default_options=options,
        max_tool_iterations=max_tool_iterations,
    )
