"""The agentkeep error tree.

Every error agentkeep raises on purpose derives from :class:`AgentkeepError`, so callers can catch
the whole family in one clause and the specific kinds where they can act on them::

    AgentkeepError
    ├── MessageFormatError          a message / content dict or JSON that is not valid
    ├── SessionFormatError          a session payload that is corrupt or of an unknown version
    ├── StateTypeError              a state-bag value that cannot be read as the requested type
    ├── ProviderConfigurationError  providers that clash (same source id or state key)
    ├── SessionModeError            local and service-managed history mixed on one run
    ├── ToolError                   a tool definition or invocation that cannot work
    │   └── ToolArgumentError       arguments that do not match the tool's parameters
    └── ChatClientError             a chat client that failed or answered nonsense
        └── ScriptExhaustedError    a ScriptedChatClient asked for more replies than it has

Errors carry the context needed to act on them (the key, the session, the tool) in their
message and as attributes, and are raised ``from`` their cause.
"""

from __future__ import annotations

__all__ = [
    "AgentkeepError",
    "ChatClientError",
    "MessageFormatError",
    "ProviderConfigurationError",
    "ScriptExhaustedError",
    "SessionFormatError",
    "SessionModeError",
    "StateTypeError",
    "ToolArgumentError",
    "ToolError",
]


class AgentkeepError(Exception):
    """Root of every error agentkeep raises on purpose."""


class MessageFormatError(AgentkeepError, ValueError):
    """A message or content in dict / JSON form is not valid.

    Attributes:
        path: Where in the input the problem is, e.g. ``"contents[1].call_id"`` (may be empty).
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        self.path = path
        super().__init__(f"{message} (at {path})" if path else message)


class SessionFormatError(AgentkeepError, ValueError):
    """A serialized session payload is corrupt, has the wrong shape or an unknown version."""


class StateTypeError(AgentkeepError, TypeError):
    """A state-bag value cannot be read (or written) as the requested type.

    Attributes:
        key: The state key.
    """

    def __init__(self, message: str, *, key: str) -> None:
        self.key = key
        super().__init__(message)


class ProviderConfigurationError(AgentkeepError, ValueError):
    """The context providers of an agent cannot work together (duplicate source id or state key)."""


class SessionModeError(AgentkeepError, RuntimeError):
    """A run would mix local history persistence with a service-managed conversation."""


class ToolError(AgentkeepError):
    """A tool cannot be built from a callable, or cannot be invoked.

    Attributes:
        tool_name: The tool's name.
    """

    def __init__(self, message: str, *, tool_name: str) -> None:
        self.tool_name = tool_name
        super().__init__(message)


class ToolArgumentError(ToolError, ValueError):
    """The arguments given to a tool do not match its parameters."""


class ChatClientError(AgentkeepError):
    """A chat client failed, or returned something agentkeep cannot use."""


class ScriptExhaustedError(ChatClientError):
    """A :class:`~agentkeep.testing.ScriptedChatClient` was called more often than it has replies."""
