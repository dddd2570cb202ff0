"""What users need to test their own agents and backends offline.

* :class:`ScriptedChatClient` answers from a script (or echoes), records every call, can ask for
  tool calls, stream, report usage, and act as a service that keeps conversations itself.
* :class:`HashingEmbedder` turns texts into vectors by hashing their words: deterministic,
  instant, no model, for testing memory recall offline.
* :mod:`agentkeep.testing.conformance`: the storage contracts as runnable checks, for a message
  store or session store of your own (the suites agentkeep's own backends pass).
"""

from ..clients.scripted import Reply, Responder, ScriptedChatClient
from .embedders import HashingEmbedder

__all__ = ["HashingEmbedder", "Reply", "Responder", "ScriptedChatClient"]
