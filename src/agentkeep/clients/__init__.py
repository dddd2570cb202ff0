"""Chat clients: the contract (:mod:`.base`) and the implementations that ship with agentkeep."""

from .base import BaseChatClient, ChatClient, ChatOptions, ChatResponse, ChatResponseUpdate, merge_updates
from .layers import (
    ChatMiddlewareLayer,
    ChatTelemetryLayer,
    FunctionInvocationLayer,
    OptionsCoT,
    ResponseStream,
)
from .scripted import ScriptedChatClient

__all__ = [
    "BaseChatClient",
    "ChatClient",
    "ChatMiddlewareLayer",
    "ChatOptions",
    "ChatResponse",
    "ChatResponseUpdate",
    "ChatTelemetryLayer",
    "FunctionInvocationLayer",
    "OptionsCoT",
    "ResponseStream",
    "ScriptedChatClient",
    "merge_updates",
]
