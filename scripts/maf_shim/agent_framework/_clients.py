"""``agent_framework._clients``: agentkeep's chat client contract."""

from _absent import absent_names

from agentkeep.clients.base import *  # noqa: F403

__getattr__ = absent_names("agent_framework._clients")
