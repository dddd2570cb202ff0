"""``agent_framework_redis._context_provider``: outside agentkeep (every name absent)."""

from _absent import absent_names

__getattr__ = absent_names("agent_framework_redis._context_provider")
