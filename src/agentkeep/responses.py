"""Old home of what an agent run returns; it lives in :mod:`agentkeep.agent.response` now.

Kept so that existing imports (``from agentkeep.responses import AgentResponse``) work.
"""

from .agent.response import AgentResponse, AgentResponseUpdate

__all__ = ["AgentResponse", "AgentResponseUpdate"]
