"""Chat clients: the contract (:mod:`.base`) and the implementations that ship with agentkeep."""

from .base import BaseChatClient, ChatClient, ChatOptions, ChatResponse, ChatResponseUpdate, merge_updates
from .scripted import ScriptedChatClient

__all__ = [
    "BaseChatClient",
    "ChatClient",
    "ChatOptions",
    "ChatResponse",
    "ChatResponseUpdate",
    "ScriptedChatClient",
    "merge_updates",
]
