"""Agent Framework interop: sessions serialized by ``agent-framework-core`` in and out
(:mod:`.sessions`), and chat history stored by ``agent-framework-redis`` copied in
(:mod:`.redis_history`). The guide is ``docs/interop.md``."""

from .sessions import (
    CREATED_AT_PROPERTY,
    MAF_HISTORY_SOURCE_ID,
    ROLE_PROPERTY,
    MafSession,
    message_from_maf,
    message_to_maf,
    session_from_maf,
    session_to_maf,
)

__all__ = [
    "CREATED_AT_PROPERTY",
    "MAF_HISTORY_SOURCE_ID",
    "ROLE_PROPERTY",
    "MafSession",
    "message_from_maf",
    "message_to_maf",
    "session_from_maf",
    "session_to_maf",
]
