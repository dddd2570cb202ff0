"""``agent_framework_redis._history_provider``: agentkeep's Redis history provider."""

from _absent import absent_names

from agentkeep.message_stores.redis import RedisHistoryProvider

__all__ = ["RedisHistoryProvider"]

__getattr__ = absent_names("agent_framework_redis._history_provider")
