"""``agent_framework.observability``: agentkeep's telemetry layer of a chat client."""

from _absent import absent_names

from agentkeep.clients.layers import ChatTelemetryLayer

__all__ = ["ChatTelemetryLayer"]

__getattr__ = absent_names("agent_framework.observability")
