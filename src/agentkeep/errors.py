"""The agentkeep error tree.

Every error agentkeep raises on purpose derives from :class:`AgentkeepError`, so callers can catch
the whole family in one clause and the specific kinds where they can act on them::

    AgentkeepError
    ├── MessageFormatError          a message / content dict or JSON that is not valid
    ├── SessionFormatError          a session payload that is corrupt or of an unknown version
    ├── StateTypeError              a state-bag value that cannot be read as the requested type
    ├── ProviderConfigurationError  providers that clash (same source id or state key)
    ├── SessionModeError            local and service-managed history mixed on one run
    ├── KeyRingError                encryption keys that cannot be used (malformed key text, a key
    │                               file others can read); never shows key material
    ├── StoreURLError               a store URL that names no usable store (unknown scheme,
    │                               malformed URL, a store of the wrong kind)
    ├── ListingCursorError          a listing cursor (``after=``) that no listing issued
    ├── CLIError                    a command-line request that cannot be done (bad store URL,
    │                               missing session, unreadable file): one "error:" line, exit 1
    ├── TransferError               an import that cannot be done as asked (two source
    │                               conversations for one id, data of an unknown layout)
    ├── MemoryFormatError           a memory, scope or embedding that cannot be stored (empty or
    │                               oversize text, wrong dimensions, NaN)
    ├── ToolError                   a tool definition or invocation that cannot work
    │   └── ToolArgumentError       arguments that do not match the tool's parameters
    ├── ChatClientError             a chat client that failed or answered nonsense
    │   ├── ModelUnavailableError   the model cannot be reached or loaded (server down, timeout,
    │   │                           missing model file); often worth retrying later
    │   ├── ChatRequestError        the service refused the request (bad model name, bad input)
    │   └── ScriptExhaustedError    a ScriptedChatClient asked for more replies than it has
    ├── CompactionError             compaction could not do what it was asked
    │   └── SummarizationError      a summary was skipped (budget too small, summarizer failed);
    │                               reported, never raised into a run
    └── StorageError                a storage backend or session store failed
        ├── StorageUnavailableError the backend cannot be reached (names backend and address)
        │   └── OutcomeUnknownError a write whose reply was lost: it may have been applied;
        │                           retrying it with the same messages stores them once
        ├── CorruptRecordError      a stored record cannot be decoded (names conversation and seq)
        │   ├── DecryptionError     an encrypted record under a key the ring lacks, or that does
        │   │                       not decrypt with it (names the key id; nothing is changed)
        │   └── CorruptMemoryError  a stored memory (or a memory store's bookkeeping) that cannot
        │                           be decoded (names the store and the memory)
        ├── SchemaVersionError      stored data was written by a newer (or unknown) format version
        ├── ConflictError           a save over a newer version of the same session
        ├── IsolationError          a session of another tenant (isolation key) read or saved
        ├── MessageIdConflictError  an append reuses a stored message id for other content
        └── StorageClosedError      a store used after aclose()

Errors carry the context needed to act on them (the key, the session, the tool) in their
message and as attributes, and are raised ``from`` their cause.
"""

from __future__ import annotations

__all__ = [
    "AgentkeepError",
    "CLIError",
    "ChatClientError",
    "ChatRequestError",
    "CompactionError",
    "ConflictError",
    "CorruptMemoryError",
    "CorruptRecordError",
    "DecryptionError",
    "IsolationError",
    "KeyRingError",
    "ListingCursorError",
    "MemoryFormatError",
    "MessageFormatError",
    "MessageIdConflictError",
    "ModelUnavailableError",
    "OutcomeUnknownError",
    "ProviderConfigurationError",
    "SchemaVersionError",
    "ScriptExhaustedError",
    "SessionFormatError",
    "SessionModeError",
    "StateTypeError",
    "StorageClosedError",
    "StorageError",
    "StorageUnavailableError",
    "StoreURLError",
    "SummarizationError",
    "ToolArgumentError",
    "ToolError",
    "TransferError",
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
    """A chat client failed, or returned something agentkeep cannot use.

    Attributes:
        status_code: The HTTP status the service answered with, when there was one.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message)


class ModelUnavailableError(ChatClientError):
    """The model cannot be reached or loaded: connection refused, timeout, 5xx, missing model file."""


class ChatRequestError(ChatClientError):
    """The service refused the request (4xx): unknown model, invalid parameters, too long input."""


class ScriptExhaustedError(ChatClientError):
    """A :class:`~agentkeep.testing.ScriptedChatClient` was called more often than it has replies."""


class KeyRingError(AgentkeepError, ValueError):
    """Encryption keys that cannot be used: malformed key text or file, a key file others can
    read, a current key the ring does not hold. The message never contains key material."""


class StoreURLError(AgentkeepError, ValueError):
    """A store URL names no store agentkeep can open: an unknown scheme, a malformed URL, or a
    store of the wrong kind (see :mod:`agentkeep.store_urls`)."""


class ListingCursorError(AgentkeepError, ValueError):
    """A listing's ``after`` cursor that no listing issued (malformed or cut short): the page
    cannot be placed, so nothing is listed (see
    :meth:`agentkeep.message_stores.SupportsListing.list_conversations`)."""


class MemoryFormatError(AgentkeepError, ValueError):
    """A memory, scope or embedding that cannot be stored (see :mod:`agentkeep.memory`)."""


class TransferError(AgentkeepError, ValueError):
    """An import of conversations from elsewhere cannot be done as asked (see :mod:`agentkeep.maf`)."""


class CLIError(AgentkeepError):
    """A command of the ``agentkeep`` tool cannot do what it was asked.

    The CLI prints it as one ``error: ...`` line and exits with status 1.
    """


class StorageError(AgentkeepError):
    """A storage backend or session store failed.

    Attributes:
        backend: The backend's name (``"sqlite"``, ``"redis"``, ``"postgres"``, ``"memory"``, ...).
    """

    def __init__(self, message: str, *, backend: str) -> None:
        self.backend = backend
        super().__init__(message)


class StorageUnavailableError(StorageError):
    """The backend cannot be reached or stopped answering (no hang: operations time out).

    Attributes:
        address: Where the backend was expected (a URL without credentials, or a file path).
    """

    def __init__(self, message: str, *, backend: str, address: str) -> None:
        self.address = address
        super().__init__(f"{backend} at {address}: {message}", backend=backend)


class OutcomeUnknownError(StorageUnavailableError):
    """A write (an append, a recorded compaction) failed after its request may have reached the
    backend: the connection dropped or the reply did not come in time, so it may have been applied.

    Retrying the same call with the same messages (the same objects, or the same ids and content)
    is safe and settles it: an append already stored is recognised as a retry and stored once
    (its original sequence numbers returned), and a summary already recorded is recorded once.
    """

    def __init__(self, message: str, *, backend: str, address: str) -> None:
        super().__init__(
            f"{message}; the write may have been applied: retry it with the same messages "
            "(the same ids), which stores them once",
            backend=backend,
            address=address,
        )


class CorruptRecordError(StorageError):
    """A stored record cannot be decoded; it is reported, never skipped.

    Attributes:
        conversation_id: The conversation (or session) the record belongs to.
        seq: The record's sequence number, when it has one.
    """

    def __init__(self, message: str, *, backend: str, conversation_id: str, seq: int | None = None) -> None:
        self.conversation_id = conversation_id
        self.seq = seq
        where = f"conversation {conversation_id!r}" + (f", seq {seq}" if seq is not None else "")
        super().__init__(f"{backend}: corrupt record in {where}: {message}", backend=backend)


class DecryptionError(CorruptRecordError):
    """An encrypted record or session payload cannot be decrypted with the key ring at hand: its
    key is not in the ring (or no ring was given), or it does not decrypt with that key (other
    key material under the same id, or changed bytes). The stored data is left as it is.

    Attributes:
        key_id: The id of the key the data was encrypted with.
    """

    def __init__(
        self, reason: str, *, backend: str, conversation_id: str, key_id: str, seq: int | None = None
    ) -> None:
        self.key_id = key_id
        self.conversation_id = conversation_id
        self.seq = seq
        where = f"conversation {conversation_id!r}" + (f", seq {seq}" if seq is not None else "")
        StorageError.__init__(
            self,
            f"{backend}: cannot decrypt {where}: encrypted with key {key_id!r}, but {reason}",
            backend=backend,
        )


class CorruptMemoryError(CorruptRecordError):
    """A memory store holds a row it cannot read back as it was stored: damaged fields, an
    embedding of the wrong length or with NaN, or damaged bookkeeping (the store's meta rows).

    Attributes:
        store: Where the store is (a file path, or a database address and schema).
        memory_id: The memory's id, when the damage is in one memory.
        row: What else names the damaged row (e.g. ``"meta 'dimensions'"``, ``"row 17"``).
    """

    def __init__(
        self,
        reason: str,
        *,
        backend: str,
        store: str,
        memory_id: str | None = None,
        row: str | None = None,
    ) -> None:
        self.store = store
        self.memory_id = memory_id
        self.row = row
        self.conversation_id = ""
        self.seq = None
        what = f"memory {memory_id!r}" if memory_id is not None else row or "a row"
        StorageError.__init__(
            self, f"{backend} memory store {store}: {what} is damaged: {reason}", backend=backend
        )


class SchemaVersionError(StorageError):
    """Stored data uses a format or schema version this agentkeep does not know (e.g. a newer one)."""


class ConflictError(StorageError):
    """A session save would overwrite a newer version saved by someone else.

    Attributes:
        conversation_id: The session's key in the store.
    """

    def __init__(self, message: str, *, backend: str, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(message, backend=backend)


class IsolationError(StorageError):
    """A tenant's scoped view met a session that belongs to another tenant.

    Raised instead of handing the session over (or saving it): a session records the isolation key
    it was made under, and storage keys derived from it stay that tenant's.

    Attributes:
        conversation_id: The conversation id as the caller named it.
    """

    def __init__(self, message: str, *, backend: str, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(message, backend=backend)


class MessageIdConflictError(StorageError):
    """An append gave a message the id of a stored message with other content (or two messages of
    one batch the same id). Nothing of the batch is stored.

    The same batch appended again (a retry) is not a conflict: it is recognised and stored once.

    Attributes:
        conversation_id: The conversation.
        message_id: The id in conflict.
    """

    def __init__(self, message: str, *, backend: str, conversation_id: str, message_id: str) -> None:
        self.conversation_id = conversation_id
        self.message_id = message_id
        super().__init__(message, backend=backend)


class StorageClosedError(StorageError):
    """A store or provider was used after ``aclose()``."""


class CompactionError(AgentkeepError):
    """Compaction could not do what it was asked."""


class SummarizationError(CompactionError):
    """Summarization was skipped and history left unchanged.

    Not raised into a run: :class:`SummarizationStrategy` logs it and keeps it as
    :attr:`~SummarizationStrategy.last_error`. When the summarizer call failed, ``__cause__`` is the
    client's exception.

    Attributes:
        reason: ``"budget"`` (not even the oldest group fits ``max_summary_input_tokens``),
            ``"call"`` (the client raised) or ``"empty"`` (the reply held no text).
    """

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason
