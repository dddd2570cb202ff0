"""``agent_framework._tools``: agentkeep's tools (and the tool loop's default bound)."""

from _absent import absent_names

from agentkeep.clients.layers import DEFAULT_MAX_ITERATIONS
from agentkeep.tools import *  # noqa: F403

__all__ = ["DEFAULT_MAX_ITERATIONS"]

__getattr__ = absent_names("agent_framework._tools")
