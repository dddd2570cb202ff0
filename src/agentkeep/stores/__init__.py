"""Session stores (the hosting layer): save and restore whole sessions by conversation id."""

from .base import AgentSessionStore, DelegatingSessionStore, agent_key, session_version, set_session_version

__all__ = [
    "AgentSessionStore",
    "DelegatingSessionStore",
    "agent_key",
    "session_version",
    "set_session_version",
]
