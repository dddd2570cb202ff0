"""The ``agentkeep`` command-line tool: chat with persistent sessions, inspect and move them.

::

    agentkeep chat [--session ID] [--model PATH | --base-url URL [--api-model NAME]] [--store URL]
                   [-m MESSAGE] [--instructions TEXT] [--max-tokens N] [--history-limit N]
    agentkeep sessions list   [--store URL] [--limit N]
    agentkeep sessions show   ID [--store URL] [--raw] [--last N]
    agentkeep sessions export ID [--store URL] [--format json|markdown] [-o FILE]
    agentkeep sessions import FILE [--store URL] [--session ID] [--force]
    agentkeep sessions delete ID [--store URL]
    agentkeep sessions compact ID --strategy NAME [--strategy NAME ...] [--store URL] [--keep N]
                   [--max-tokens N] [--target-tokens N] [--tokenizer SPEC] [--dry-run]

Where things live: :mod:`._app` (the typer commands, thin), :mod:`._chat` (the model client and
the chat loop), :mod:`._stores` (``--store`` URLs to message stores), :mod:`._transfer`
(reading, exporting and importing conversations) and :mod:`._compact` (``sessions compact``).
The functions re-exported here are the commands' logic, usable (and tested) without a
subprocess. See ``docs/cli.md``. Needs the ``[cli]`` extra (typer and rich); without it,
importing this package raises an ``ImportError`` that names the extra.
"""

try:
    from ._app import app, main
except ImportError as exc:
    if (exc.name or "").partition(".")[0] not in ("typer", "rich"):
        raise
    raise ImportError("the agentkeep command needs typer and rich: pip install 'agentkeep[cli]'") from exc
from ._chat import (
    DEFAULT_INSTRUCTIONS,
    ChatSession,
    ChatSettings,
    TurnResult,
    make_client,
    new_session_id,
    run_chat,
)
from ._compact import CompactionPlan, CompactionReport, StrategyName, compact_conversation, plan_compaction
from ._stores import CLIError, StoreLocation, describe_store, open_store, parse_store_url, redact_url
from ._transfer import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    ConversationExport,
    content_lines,
    conversation_exists,
    export_conversation,
    import_conversation,
    parse_export,
    read_conversation,
    read_entries,
    read_export_file,
    render_markdown,
)

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "CLIError",
    "ChatSession",
    "ChatSettings",
    "CompactionPlan",
    "CompactionReport",
    "ConversationExport",
    "StoreLocation",
    "StrategyName",
    "TurnResult",
    "app",
    "compact_conversation",
    "content_lines",
    "conversation_exists",
    "describe_store",
    "export_conversation",
    "import_conversation",
    "main",
    "make_client",
    "new_session_id",
    "open_store",
    "parse_export",
    "parse_store_url",
    "plan_compaction",
    "read_conversation",
    "read_entries",
    "read_export_file",
    "redact_url",
    "render_markdown",
    "run_chat",
]
