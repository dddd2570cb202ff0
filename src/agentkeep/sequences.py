"""Old home of the message log and its views; they live in :mod:`agentkeep.message_log` now.

Kept so that existing imports (``from agentkeep.sequences import MessageLog``) work.
"""

from .message_log import MessageChain, MessageLog, MessageView

__all__ = ["MessageChain", "MessageLog", "MessageView"]
