"""``agent_framework._clients``: agentkeep's chat client contract and layers."""

from _absent import absent_names

from agentkeep.clients.base import *  # noqa: F403
from agentkeep.clients.layers import *  # noqa: F403

__getattr__ = absent_names("agent_framework._clients")
