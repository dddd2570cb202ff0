"""``agent_framework._telemetry``: outside agentkeep (every name absent)."""

from _absent import absent_names

__getattr__ = absent_names("agent_framework._telemetry")
