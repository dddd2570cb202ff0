"""``agent_framework._compaction``: agentkeep's compaction."""

from _absent import absent_names

from agentkeep.compaction import *  # noqa: F403

__getattr__ = absent_names("agent_framework._compaction")
