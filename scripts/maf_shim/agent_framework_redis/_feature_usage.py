"""``agent_framework_redis._feature_usage``: outside agentkeep (every name absent)."""

from _absent import absent_names

__getattr__ = absent_names("agent_framework_redis._feature_usage")
