"""Helpers shared by the tests of the agent and the providers."""

from __future__ import annotations

from agentkeep import Agent, InMemoryHistoryProvider

__all__ = ["default_history"]


def default_history(agent: Agent) -> InMemoryHistoryProvider:
    """The built-in in-memory history ``agent`` uses for local sessions (it must have one)."""
    provider = agent.default_history_provider
    assert provider is not None, f"{agent!r} has a history provider of its own"
    return provider
