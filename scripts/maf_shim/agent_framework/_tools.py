"""``agent_framework._tools``: agentkeep's tools."""

from _absent import absent_names

from agentkeep.tools import *  # noqa: F403

__getattr__ = absent_names("agent_framework._tools")
