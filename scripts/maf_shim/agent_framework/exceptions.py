"""``agent_framework.exceptions``: agentkeep's error tree."""

from _absent import absent_names

from agentkeep.errors import *  # noqa: F403

__getattr__ = absent_names("agent_framework.exceptions")
