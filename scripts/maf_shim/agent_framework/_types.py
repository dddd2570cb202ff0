"""``agent_framework._types``: agentkeep's messages and contents."""

from _absent import absent_names

from agentkeep.contents import *  # noqa: F403
from agentkeep.messages import *  # noqa: F403

__getattr__ = absent_names("agent_framework._types")
