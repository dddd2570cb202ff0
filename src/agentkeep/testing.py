"""Test doubles users can import to test their own agents offline.

:class:`ScriptedChatClient` answers from a script (or echoes), records every call, can ask for
tool calls, stream, report usage, and act as a service that keeps conversations itself.
"""

from .clients.scripted import Reply, Responder, ScriptedChatClient

__all__ = ["Reply", "Responder", "ScriptedChatClient"]
