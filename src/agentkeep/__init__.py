"""agentkeep: sessions, durable history, memory (context providers) and compaction for LLM agents.

The public names are re-exported here; each lives in one module (see the package layout in the
README): messages and contents, sessions and state, providers and history, the agent, tools,
chat clients, errors.
"""

from .agent import Agent, AgentRunStream
from .clients.base import BaseChatClient, ChatClient, ChatOptions, ChatResponse, ChatResponseUpdate
from .contents import (
    Content,
    DataContent,
    ErrorContent,
    FunctionCallContent,
    FunctionResultContent,
    TextContent,
    TextReasoningContent,
    UnknownContent,
    UriContent,
    UsageContent,
    UsageDetails,
)
from .errors import (
    AgentkeepError,
    ChatClientError,
    ConflictError,
    CorruptRecordError,
    MessageFormatError,
    ProviderConfigurationError,
    SchemaVersionError,
    ScriptExhaustedError,
    SessionFormatError,
    SessionModeError,
    StateTypeError,
    StorageClosedError,
    StorageError,
    StorageUnavailableError,
    ToolArgumentError,
    ToolError,
)
from .history import (
    ChatReducer,
    HistoryOptions,
    HistoryProvider,
    InMemoryHistoryProvider,
    InMemoryHistoryState,
    MessageCountingChatReducer,
)
from .messages import (
    Message,
    MessageInput,
    MessageSourceType,
    Role,
    get_source_id,
    get_source_type,
    new_message_id,
    normalize_messages,
)
from .providers import AIContext, ContextProvider, MessageAIContextProvider, SessionContext
from .responses import AgentResponse, AgentResponseUpdate
from .sequences import MessageChain, MessageLog, MessageView
from .sessions import SESSION_FORMAT_VERSION, AgentSession, ProviderSessionState, StateBag
from .tools import FunctionTool, tool

__version__ = "0.1.0"

__all__ = [
    "SESSION_FORMAT_VERSION",
    "AIContext",
    "Agent",
    "AgentResponse",
    "AgentResponseUpdate",
    "AgentRunStream",
    "AgentSession",
    "AgentkeepError",
    "BaseChatClient",
    "ChatClient",
    "ChatClientError",
    "ChatOptions",
    "ChatReducer",
    "ChatResponse",
    "ChatResponseUpdate",
    "ConflictError",
    "Content",
    "ContextProvider",
    "CorruptRecordError",
    "DataContent",
    "ErrorContent",
    "FunctionCallContent",
    "FunctionResultContent",
    "FunctionTool",
    "HistoryOptions",
    "HistoryProvider",
    "InMemoryHistoryProvider",
    "InMemoryHistoryState",
    "Message",
    "MessageAIContextProvider",
    "MessageChain",
    "MessageCountingChatReducer",
    "MessageFormatError",
    "MessageInput",
    "MessageLog",
    "MessageSourceType",
    "MessageView",
    "ProviderConfigurationError",
    "ProviderSessionState",
    "Role",
    "SchemaVersionError",
    "ScriptExhaustedError",
    "SessionContext",
    "SessionFormatError",
    "SessionModeError",
    "StateBag",
    "StateTypeError",
    "StorageClosedError",
    "StorageError",
    "StorageUnavailableError",
    "TextContent",
    "TextReasoningContent",
    "ToolArgumentError",
    "ToolError",
    "UnknownContent",
    "UriContent",
    "UsageContent",
    "UsageDetails",
    "__version__",
    "get_source_id",
    "get_source_type",
    "new_message_id",
    "normalize_messages",
    "tool",
]
