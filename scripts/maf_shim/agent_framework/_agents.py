"""``agent_framework._agents``: agentkeep's agent."""

from _absent import absent_names

from agentkeep.agent import *  # noqa: F403

__getattr__ = absent_names("agent_framework._agents")
