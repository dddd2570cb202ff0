"""The agent and what a run returns.

* :mod:`.agent`: :class:`Agent`, its configuration, sessions and ``run``.
* :mod:`.response`: :class:`AgentResponse`, :class:`AgentResponseUpdate` and
  :class:`AgentRunStream` (a streamed run).
* :mod:`._run`: one run: the plan, the provider pipeline and the tool loop.
"""

from .agent import Agent, SupportsAgentRun
from .response import AgentResponse, AgentResponseUpdate, AgentRunStream

__all__ = ["Agent", "AgentResponse", "AgentResponseUpdate", "AgentRunStream", "SupportsAgentRun"]
