"""The typer application: ``agentkeep chat`` and ``agentkeep sessions ...``.

Commands are thin: they parse options, call the functions of :mod:`._chat`, :mod:`._stores`,
:mod:`._transfer` and :mod:`._compact`, and print. Every command reports an expected failure (an
agentkeep error, an OS error, a missing optional dependency) as one ``error: ...`` line on
standard error and exits with status 1; usage mistakes exit with status 2 (typer's own handling).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Generator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..errors import AgentkeepError, ListingCursorError
from ..message_stores.base import (
    ConversationInfo,
    MessageStore,
    StoredMessage,
    SupportsListing,
    close_store,
    setup_store,
)
from ..sessions import ISOLATION_SEPARATOR
from ..store_urls import redact_url
from ._chat import DEFAULT_INSTRUCTIONS, ChatSettings, run_chat
from ._compact import (
    CompactionReport,
    DryRunOption,
    KeepOption,
    MaxTokensOption,
    StrategiesOption,
    TargetTokensOption,
    TokenizerOption,
    compact_conversation,
    make_tokenizer,
    plan_compaction,
    render_report,
)
from ._keys import generate_key_entry, rotate, summary
from ._maf import export_maf_session, import_maf_session, import_redis_history, not_imported, read_maf_file
from ._memory import forget_user, list_user, scope_of, search_user
from ._stores import STORE_URL_HELP, CLIError, describe_store, open_store
from ._transfer import (
    content_lines,
    export_conversation,
    import_conversation,
    read_conversation,
    read_entries,
    read_export_file,
    render_markdown,
)

if TYPE_CHECKING:  # the Redis import needs the [redis] extra only when it is used
    from ..host import ConnectionLimits
    from ..maf.redis_history import RedisImportProgress
    from ..memory import MemoryScopeSummary, MemoryStore

__all__ = ["app", "main"]

T = TypeVar("T")
S = TypeVar("S")

app = typer.Typer(
    name="agentkeep",
    help="Chat with persistent sessions, and inspect, export and import stored sessions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
sessions_app = typer.Typer(
    help="List, show, export, import, compact and delete stored sessions.", no_args_is_help=True
)
app.add_typer(sessions_app, name="sessions")
api_keys_app = typer.Typer(help="Make API keys for agentkeep serve.", no_args_is_help=True)
app.add_typer(api_keys_app, name="api-keys")
memory_app = typer.Typer(help="A user's long-term memories: list, search, forget.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")
keys_app = typer.Typer(
    help="Make encryption keys and re-encrypt a store with the current one.", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")

HostOption = Annotated[str, typer.Option("--host", metavar="ADDRESS", help="The address to listen on.")]
PortOption = Annotated[int, typer.Option("--port", min=1, max=65535, metavar="N", help="The port.")]
ApiKeyFileOption = Annotated[
    Path | None,
    typer.Option("--api-key-file", metavar="FILE", help="API keys by tenant (agentkeep api-keys add)."),
]
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        envvar="AGENTKEEP_STORE",
        help=f"Where sessions live: {STORE_URL_HELP} (default: the SQLite file in the user's data folder).",
        show_default=False,
    ),
]


class ExportFormat(StrEnum):
    """The formats of ``sessions export``."""

    JSON = "json"
    MARKDOWN = "markdown"
    MAF = "maf"


class ImportFormat(StrEnum):
    """The formats of ``sessions import FILE``."""

    JSON = "json"
    MAF = "maf"


class MemoryKind(StrEnum):
    """The memory providers of ``serve --memory``."""

    RECALL = "recall"
    FACTS = "facts"
    BLOCKS = "blocks"


MemoryStoreOption = Annotated[
    str | None,
    typer.Option(
        "--memory-store",
        metavar="URL",
        envvar="AGENTKEEP_MEMORY_STORE",
        help="Where memories live: sqlite:///path/to/file.db or postgresql://... (default: the SQLite "
        "file in the user's data folder, shared with history; for serve, its --store).",
        show_default=False,
    ),
]


_ROLE_STYLES = {
    "user": "bold green",
    "assistant": "bold cyan",
    "system": "bold magenta",
    "tool": "bold yellow",
}


def _stdout() -> Console:
    return Console(highlight=False, soft_wrap=True)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        text = f"{exc.strerror}: {exc.filename}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


@contextlib.contextmanager
def _reported() -> Generator[None]:
    """Turn expected failures into one ``error:`` line and exit status 1 (130 for Ctrl-C)."""
    try:
        yield
    except BrokenPipeError:  # the reader left (`agentkeep sessions export ID | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit's flush
        raise typer.Exit(1) from None
    except (AgentkeepError, OSError, ImportError) as exc:
        with contextlib.suppress(OSError):
            sys.stdout.flush()
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        print(file=sys.stderr)
        raise typer.Exit(130) from None


def _in_one_loop(
    open_: Callable[[], S],
    setup: Callable[[S], Awaitable[None]],
    close: Callable[[S], Awaitable[None]],
    job: Callable[[S], Awaitable[T]],
) -> T:
    """Open a store, set it up, run ``job`` on it and close it, all in one event loop."""

    async def run() -> T:
        store = open_()
        try:
            await setup(store)
            return await job(store)
        finally:
            await close(store)

    return asyncio.run(run())


def _with_store(url: str | None, job: Callable[[MessageStore], Awaitable[T]]) -> T:
    """Open the message store, run ``job`` on it and close it, all in one event loop."""
    return _in_one_loop(lambda: open_store(url), setup_store, close_store, job)


# -- chat ---------------------------------------------------------------------------------------------


@app.command()
def chat(
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", metavar="ID", help="Continue this session (default: a new one)."),
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            metavar="PATH",
            help="A local GGUF model file (default: the packaged SmolLM2-135M-Instruct).",
            show_default=False,
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url", metavar="URL", help="Use an OpenAI-compatible server instead of a local model."
        ),
    ] = None,
    api_model: Annotated[
        str | None, typer.Option("--api-model", metavar="NAME", help="The model to ask the server for.")
    ] = None,
    store: StoreOption = None,
    message: Annotated[
        str | None,
        typer.Option(
            "--message", "-m", metavar="TEXT", help="Send one message, print the reply and exit ('-': stdin)."
        ),
    ] = None,
    instructions: Annotated[
        str, typer.Option("--instructions", metavar="TEXT", help="System instructions for the model.")
    ] = DEFAULT_INSTRUCTIONS,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", min=1, metavar="N", help="Upper bound on tokens per reply.")
    ] = None,
    history_limit: Annotated[
        int,
        typer.Option(
            "--history-limit", min=1, metavar="N", help="Send at most the N newest stored messages."
        ),
    ] = 50,
) -> None:
    """Chat with a model; the session's history is stored and a later chat continues it."""
    settings = ChatSettings(
        session_id=session,
        store_url=store,
        model_path=model,
        base_url=base_url,
        api_model=api_model,
        message=message,
        instructions=instructions or None,
        max_tokens=max_tokens,
        history_limit=history_limit,
    )
    with _reported():
        run_chat(settings, err=_stderr())


# -- sessions -----------------------------------------------------------------------------------------


@sessions_app.command("list")
def list_sessions(
    store: StoreOption = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, metavar="N", help="Show at most N sessions (a page).")
    ] = 50,
    after: Annotated[
        str | None,
        typer.Option(
            "--after", metavar="CURSOR", help="The page after this one (the cursor a list printed)."
        ),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", metavar="ID", help="Only this tenant's sessions.")
    ] = None,
) -> None:
    """List stored sessions, most recently active first, a page at a time."""
    with _reported():
        if tenant is not None and (not tenant or ISOLATION_SEPARATOR in tenant):
            raise CLIError(f"--tenant: a tenant is a non-empty id without {ISOLATION_SEPARATOR!r}")

        async def job(message_store: MessageStore) -> tuple[str, list[ConversationInfo]]:
            if not isinstance(message_store, SupportsListing):
                raise CLIError(f"{describe_store(message_store)} cannot list its sessions")
            try:
                infos = await message_store.list_conversations(tenant=tenant, after=after, limit=limit)
            except ListingCursorError as exc:
                raise CLIError(f"--after: {exc} (pass a cursor a previous list printed)") from exc
            return describe_store(message_store), infos

        where, infos = _with_store(store, job)
    console = _stdout()
    scope = f"sessions of tenant {tenant}" if tenant is not None else "sessions"
    if not infos:
        console.print(Text(f"no {'more ' if after else ''}{scope} in {where}"))
        return
    table = Table(title=Text(f"{scope} in {where}"), title_justify="left")
    table.add_column("session", no_wrap=True, min_width=max(len(info.conversation_id) for info in infos))
    table.add_column("messages", justify="right")
    table.add_column("last seq", justify="right")
    table.add_column("last active", no_wrap=True)
    for info in infos:
        updated = info.updated_at.astimezone().strftime("%Y-%m-%d %H:%M:%S") if info.updated_at else "-"
        table.add_row(Text(info.conversation_id), str(info.message_count), str(info.last_seq), updated)
    console.print(table)
    if len(infos) == limit:  # a full page: there may be more
        console.print(Text(f"more: --after {infos[-1].cursor}"))


def _entry_text(entry: StoredMessage, *, raw: bool = False) -> Text:
    message = entry.message
    text = Text(f"[{entry.seq}] ", style="dim")
    if entry.is_summary:
        text.append(f"summary of {len(entry.replaces)} messages", style="bold blue")
        text.append(f" ({message.role})", style="dim")
    else:
        text.append(message.role, style=_ROLE_STYLES.get(message.role, "bold"))
        if message.author_name:
            text.append(f" ({message.author_name})", style="dim")
    if raw and entry.excluded:
        text.append(" (excluded)", style="dim red")
    lines = [line for part in content_lines(message) for line in part.splitlines() or [""]] or [""]
    text.append(": " + lines[0])
    for line in lines[1:]:
        text.append("\n    " + line)
    return text


@sessions_app.command("show")
def show_session(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="The session.")],
    store: StoreOption = None,
    raw: Annotated[
        bool, typer.Option("--raw", help="The raw log (excluded messages too) instead of the compacted view.")
    ] = False,
    last: Annotated[
        int | None, typer.Option("--last", min=1, metavar="N", help="Only the N newest messages.")
    ] = None,
) -> None:
    """Print a session's history (the compacted view the model sees), with roles."""
    with _reported():

        async def job(message_store: MessageStore) -> tuple[str, list[StoredMessage]]:
            entries = await read_entries(message_store, session_id, last=last, raw=raw)
            return describe_store(message_store), entries

        where, entries = _with_store(store, job)
    console = _stdout()
    shown = f"the last {len(entries)}" if last is not None else str(len(entries))
    console.print(Text(f"session {session_id} · {shown} messages · {where}", style="bold"))
    for entry in entries:
        console.print(_entry_text(entry, raw=raw))


@sessions_app.command("export")
def export_session(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="The session.")],
    store: StoreOption = None,
    export_format: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            "-f",
            help="json: lossless, re-importable; markdown: readable; maf: an Agent Framework session.",
        ),
    ] = ExportFormat.JSON,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="Write to FILE (default: standard output)."),
    ] = None,
) -> None:
    """Export a session as JSON (lossless) or as a Markdown transcript."""
    with _reported():

        async def job(message_store: MessageStore) -> str:
            if export_format is ExportFormat.MARKDOWN:
                view = await read_conversation(message_store, session_id)
                return render_markdown(session_id, view.entries)
            if export_format is ExportFormat.MAF:
                return await export_maf_session(message_store, session_id)
            return (await export_conversation(message_store, session_id)).to_json()

        document = _with_store(store, job)
        if output is None or str(output) == "-":
            sys.stdout.write(document)
            sys.stdout.flush()
        else:
            output.write_text(document, encoding="utf-8")
            _stderr().print(Text(f"exported session {session_id} to {output}"))


@sessions_app.command("import")
def import_session(
    file: Annotated[
        Path | None,
        typer.Argument(
            metavar="FILE", help="A JSON export or (--format maf) a session file ('-': standard input)."
        ),
    ] = None,
    store: StoreOption = None,
    import_format: Annotated[
        ImportFormat,
        typer.Option("--format", "-f", help="json: an agentkeep export; maf: an Agent Framework session."),
    ] = ImportFormat.JSON,
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", metavar="ID", help="Import under this id (default: the file's)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing session of that id.")] = False,
    from_redis: Annotated[
        str | None,
        typer.Option(
            "--from-redis",
            metavar="URL",
            help="Copy the history Agent Framework's RedisHistoryProvider keeps at URL (instead of FILE).",
        ),
    ] = None,
    maf_key_prefix: Annotated[
        str, typer.Option("--maf-key-prefix", metavar="P", help="The provider's key_prefix.")
    ] = "chat_messages",
    maf_tenant: Annotated[
        str | None, typer.Option("--maf-tenant", metavar="ID", help="Only this tenant's conversations.")
    ] = None,
    maf_application: Annotated[
        str | None, typer.Option("--maf-application", metavar="ID", help="Only this application's.")
    ] = None,
    maf_agent: Annotated[
        str | None, typer.Option("--maf-agent", metavar="ID", help="Only this agent's.")
    ] = None,
    maf_source: Annotated[
        str | None, typer.Option("--maf-source-id", metavar="ID", help="Only this history provider's.")
    ] = None,
) -> None:
    """Import a session from a file (refuses an existing one unless --force), or copy Agent
    Framework's Redis history (--from-redis; a re-run copies only what is new)."""
    with _reported():
        if from_redis is not None:
            if file is not None:
                raise CLIError("give either FILE or --from-redis URL, not both")
            if session is not None or force or import_format is not ImportFormat.JSON:
                raise CLIError("--session, --force and --format are for a FILE, not --from-redis")
            _import_from_redis(
                from_redis,
                store,
                maf_key_prefix,
                {
                    "tenant_id": maf_tenant,
                    "application_id": maf_application,
                    "agent_id": maf_agent,
                    "source_id": maf_source,
                },
            )
            return
        if file is None:
            raise CLIError("give a FILE to import (or --from-redis URL)")
        if import_format is ImportFormat.MAF:
            imported = read_maf_file(file)

            async def maf_job(message_store: MessageStore) -> str:
                return await import_maf_session(message_store, imported, conversation_id=session, force=force)

            target = _with_store(store, maf_job)
            _stdout().print(Text(f"imported {len(imported.messages)} messages as session {target}"))
            left = not_imported(imported)
            if left:
                _stderr().print(
                    Text(
                        f"note: {', '.join(left)} of the Agent Framework session are not kept by the "
                        "sessions commands (history only); agentkeep.maf.session_from_maf keeps them"
                    )
                )
            return
        export = read_export_file(file)

        async def job(message_store: MessageStore) -> str:
            return await import_conversation(message_store, export, conversation_id=session, force=force)

        target = _with_store(store, job)
        _stdout().print(Text(f"imported {len(export.messages)} messages as session {target}"))


def _import_from_redis(url: str, store: str | None, key_prefix: str, filters: dict[str, str | None]) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("copying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[messages]} messages"),
        console=(console := _stderr()),
        transient=True,
        disable=not console.is_terminal,  # a bar only on a terminal; the count line says it all
    ) as bar:
        task = bar.add_task("copy", total=None, messages=0)

        def advance(step: RedisImportProgress) -> None:
            bar.update(
                task,
                total=step.conversations,
                completed=step.conversations_done,
                messages=step.messages_copied,
            )

        async def job(message_store: MessageStore) -> tuple[int, int, int, int]:
            return await import_redis_history(
                url, message_store, key_prefix=key_prefix, filters=filters, progress=advance
            )

        found, updated, copied, present = _with_store(store, job)
    _stdout().print(
        Text(
            f"copied {copied} messages into {updated} sessions from {found} Agent Framework "
            f"conversations at {redact_url(url)} ({present} already present)"
        )
    )


@sessions_app.command("compact")
def compact_session(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="The session.")],
    strategies: StrategiesOption,
    store: StoreOption = None,
    keep: KeepOption = None,
    max_tokens: MaxTokensOption = None,
    target_tokens: TargetTokensOption = None,
    tokenizer: TokenizerOption = "estimate",
    dry_run: DryRunOption = False,
) -> None:
    """Compact a session's history; the raw log keeps the originals (see docs/cli.md)."""
    plan = plan_compaction(strategies, keep=keep, max_tokens=max_tokens, target_tokens=target_tokens)
    with _reported():
        counter = make_tokenizer(tokenizer)

        async def job(message_store: MessageStore) -> CompactionReport:
            return await compact_conversation(
                message_store, session_id, plan, tokenizer=counter, dry_run=dry_run
            )

        _stdout().print(render_report(_with_store(store, job)))


@sessions_app.command("delete")
def delete_session(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="The session.")],
    store: StoreOption = None,
) -> None:
    """Delete a session and everything stored for it."""
    with _reported():

        async def job(message_store: MessageStore) -> str:
            if not await message_store.delete(session_id):
                raise CLIError(f"no session {session_id!r} in {describe_store(message_store)}")
            return describe_store(message_store)

        where = _with_store(store, job)
        _stdout().print(Text(f"deleted session {session_id} from {where}"))


# -- serve ------------------------------------------------------------------------------------------

HeaderTimeoutOption = Annotated[
    float,
    typer.Option(
        "--header-timeout",
        min=0.001,
        metavar="SECONDS",
        help="Close a connection whose request head is not in whole within this time (idle or trickling).",
    ),
]
KeepAliveTimeoutOption = Annotated[
    float,
    typer.Option(
        "--keep-alive-timeout",
        min=0.001,
        metavar="SECONDS",
        help="Close a connection idle this long after a response.",
    ),
]
BodyTimeoutOption = Annotated[
    float,
    typer.Option(
        "--body-timeout",
        min=0.001,
        metavar="SECONDS",
        help="Close a connection whose request body stalls this long.",
    ),
]
MaxConnectionsOption = Annotated[
    int | None,
    typer.Option(
        "--max-connections",
        min=1,
        metavar="N",
        help="Open connections at most per process; more are answered 503 "
        "(default: from the open-file limit, at most 10,000).",
    ),
]


def _limits(header: float, keep_alive: float, body: float, connections: int | None) -> ConnectionLimits:
    from ..host import ConnectionLimits

    return ConnectionLimits(
        header_timeout=header, keep_alive_timeout=keep_alive, body_timeout=body, max_connections=connections
    )


@app.command()
def serve(
    store: StoreOption = None,
    model: Annotated[
        Path | None,
        typer.Option("--model", metavar="PATH", help="A local GGUF model file (default: the packaged one)."),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", metavar="URL", help="Use an OpenAI-compatible server.")
    ] = None,
    api_model: Annotated[
        str | None, typer.Option("--api-model", metavar="NAME", help="The model to ask the server for.")
    ] = None,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    api_key_file: ApiKeyFileOption = None,
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, metavar="N", help="Processes.")] = 1,
    instructions: Annotated[
        str, typer.Option("--instructions", metavar="TEXT", help="System instructions for the model.")
    ] = DEFAULT_INSTRUCTIONS,
    history_limit: Annotated[
        int, typer.Option("--history-limit", min=1, metavar="N", help="Send at most the N newest messages.")
    ] = 50,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", min=1, metavar="N", help="Upper bound on tokens per reply.")
    ] = None,
    memory: Annotated[
        list[MemoryKind] | None,
        typer.Option(
            "--memory",
            help="Keep long-term memory of each user (X-Agentkeep-User): recall (what they said), "
            "facts (facts the model extracts), blocks (blocks the model edits); repeatable.",
        ),
    ] = None,
    memory_store: MemoryStoreOption = None,
    header_timeout: HeaderTimeoutOption = 10.0,
    keep_alive_timeout: KeepAliveTimeoutOption = 5.0,
    body_timeout: BodyTimeoutOption = 30.0,
    max_connections: MaxConnectionsOption = None,
) -> None:
    """Serve the agent `chat` over HTTP (AG-UI at /agents/chat), its sessions in the store."""
    with _reported():
        from ..host import ServeSettings
        from ..host import serve as run_server

        try:
            settings = ServeSettings(
                store_url=store,
                model_path=None if model is None else str(model),
                base_url=base_url,
                api_model=api_model,
                api_key_file=None if api_key_file is None else str(api_key_file),
                instructions=instructions or None,
                history_limit=history_limit,
                max_tokens=max_tokens,
                memory=tuple(kind.value for kind in memory or ()),
                memory_store_url=memory_store,
            )
            limits = _limits(header_timeout, keep_alive_timeout, body_timeout, max_connections)
            run_server(settings, host=host, port=port, workers=workers, limits=limits)
        except ValueError as exc:
            raise CLIError(str(exc)) from exc


@app.command()
def inspect(
    store: StoreOption = None,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    api_key_file: ApiKeyFileOption = None,
    memory_store: Annotated[
        str | None,
        typer.Option(
            "--memory-store",
            metavar="URL",
            help="Show the users' long-term memories in this store too (sqlite:///file.db, postgresql://...).",
        ),
    ] = None,
    header_timeout: HeaderTimeoutOption = 10.0,
    keep_alive_timeout: KeepAliveTimeoutOption = 5.0,
    body_timeout: BodyTimeoutOption = 30.0,
    max_connections: MaxConnectionsOption = None,
) -> None:
    """Serve the session inspector over the store (a web page at /inspector/; no model runs)."""
    with _reported():
        from ..host import serve_inspector as run_inspector

        print(f"the inspector: http://{host}:{port}/inspector/", flush=True)
        try:
            run_inspector(
                store,
                host=host,
                port=port,
                api_key_file=api_key_file,
                memory_store_url=memory_store,
                limits=_limits(header_timeout, keep_alive_timeout, body_timeout, max_connections),
            )
        except ValueError as exc:
            raise CLIError(str(exc)) from exc


@api_keys_app.command("add")
def add_api_key(
    tenant: Annotated[str, typer.Argument(metavar="TENANT", help="Whose key it is (one word, no '::').")],
    file: Annotated[Path, typer.Option("--file", metavar="FILE", help="The key file to add it to.")],
) -> None:
    """Make an API key for TENANT: print it once, add its SHA-256 digest to FILE."""
    with _reported():
        from ..host import ApiKeys

        key, line = ApiKeys.generate(tenant)
        descriptor = os.open(
            file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600
        )
        with os.fdopen(descriptor, "a", encoding="utf-8") as out:
            out.write(line + "\n")
        print(key)


# -- keys -------------------------------------------------------------------------------------------


@keys_app.command("generate")
def generate_key(
    key_id: Annotated[str, typer.Argument(metavar="ID", help="The new key's id (A-Z a-z 0-9 . _ -).")],
) -> None:
    """Print a new key as an ID=KEY entry: put it first in AGENTKEEP_KEYS (or the key file)."""
    with _reported():
        print(generate_key_entry(key_id))


@keys_app.command("rotate")
def rotate_keys(
    store: StoreOption = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, max=10_000, metavar="N", help="Records per read and write.")
    ] = 500,
) -> None:
    """Re-encrypt every record and session of a store with the ring's current key, online.

    Plain data gets encrypted too. Safe to interrupt: running it again continues.
    """
    with _reported():
        err = _stderr()
        where, done, key_id = rotate(store, batch_size=batch_size, err=err)
        _stdout().print(Text(summary(where, done, key_id)))
        if done.damaged:
            raise typer.Exit(1)


def main() -> None:
    """The ``agentkeep`` console script."""
    app(prog_name="agentkeep")


# -- memory -------------------------------------------------------------------------------------------

UserOption = Annotated[str, typer.Option("--user", "-u", metavar="ID", help="The user.")]
TenantOption = Annotated[str | None, typer.Option("--tenant", metavar="ID", help="The user's tenant.")]
AgentOption = Annotated[
    str | None,
    typer.Option("--agent", metavar="ID", help="The agent (default: memories the user's agents share)."),
]


def _with_memory(url: str | None, job: Callable[[MemoryStore], Awaitable[T]]) -> T:
    """Open the memory store, run ``job`` on it and close it, all in one event loop.

    Raises:
        CLIError: ``memory://`` (a command's own process keeps nothing), or a SQLite file that does
            not exist (a mistyped path must not become a new, empty store).
    """
    from ..store_urls import open_memory_store, parse_store_url

    location = parse_store_url(url)
    if location.backend == "memory":
        raise CLIError("memory:// holds nothing between commands: give a SQLite file (--memory-store)")
    if location.backend == "sqlite" and location.path is not None and not location.path.exists():
        raise CLIError(f"no memory store at {location.path}")

    return _in_one_loop(lambda: open_memory_store(url), lambda s: s.setup(), lambda s: s.aclose(), job)


@memory_app.command("list")
def memory_list(
    user: UserOption,
    tenant: TenantOption = None,
    agent: AgentOption = None,
    kind: Annotated[
        str | None, typer.Option("--kind", metavar="KIND", help="Only fact, chunk, profile, block, ...")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, metavar="N", help="Show at most N.")] = None,
    memory_store: MemoryStoreOption = None,
) -> None:
    """List a user's current memories, newest first."""
    with _reported():
        scope = scope_of(user, tenant, agent)
        records = _with_memory(memory_store, lambda store: list_user(store, scope, kind=kind, limit=limit))
        console = _stdout()
        if not records:
            console.print(Text(f"no memories of {scope}"))
            return
        table = Table(title=f"memories of {scope}", title_justify="left")
        for column in ("kind", "key", "text", "session", "updated"):
            table.add_column(column)
        for record in records:
            updated = (record.updated_at or record.created_at).strftime("%Y-%m-%d %H:%M")
            table.add_row(record.kind, record.key or "", record.text, record.source_session_id or "", updated)
        console.print(table)


@memory_app.command("users")
def memory_users(
    tenant: TenantOption = None,
    q: Annotated[
        str | None, typer.Option("--q", metavar="TEXT", help="Only users whose id has TEXT.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, metavar="N", help="Show at most N.")] = 50,
    after: Annotated[
        str | None,
        typer.Option(
            "--after", metavar="CURSOR", help="The page after this one (the cursor a list printed)."
        ),
    ] = None,
    memory_store: MemoryStoreOption = None,
) -> None:
    """List the users of a tenant that have memories, most recently updated first, a page at a time."""
    with _reported():
        if tenant is not None:
            scope_of("-", tenant, None)  # the tenant is checked before anything is read

        async def job(store: MemoryStore) -> list[MemoryScopeSummary]:
            try:
                return await store.scopes(tenant_id=tenant, q=q, limit=limit, after=after)
            except ListingCursorError as exc:
                raise CLIError(f"--after: {exc} (pass a cursor a previous list printed)") from exc

        found = _with_memory(memory_store, job)
        console = _stdout()
        where = f"tenant {tenant}" if tenant else "no tenant"
        if not found:
            console.print(Text(f"no {'more ' if after else ''}users with memories in {where}"))
            return
        table = Table(title=f"users with memories in {where}", title_justify="left")
        for column in ("user", "agent", "memories", "updated"):
            table.add_column(column)
        for summary in found:
            updated = summary.updated_at.strftime("%Y-%m-%d %H:%M")
            table.add_row(
                summary.scope.user_id, summary.scope.agent_id or "shared", str(summary.memories), updated
            )
        console.print(table)
        if len(found) == limit:  # a full page: there may be more
            console.print(Text(f"more: --after {found[-1].cursor}"))


@memory_app.command("search")
def memory_search(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="What to look for.")],
    user: UserOption,
    tenant: TenantOption = None,
    agent: AgentOption = None,
    k: Annotated[int, typer.Option("-k", min=1, max=100, metavar="N", help="How many.")] = 5,
    memory_store: MemoryStoreOption = None,
) -> None:
    """Find a user's memories most like QUERY (with the packaged embedding model)."""
    with _reported():
        scope = scope_of(user, tenant, agent)
        hits = _with_memory(memory_store, lambda store: search_user(store, scope, query, k=k))
        console = _stdout()
        if not hits:
            console.print(Text(f"no memories of {scope} to search"))
            return
        for hit in hits:
            source = f" [session {hit.record.source_session_id}]" if hit.record.source_session_id else ""
            console.print(Text(f"{hit.score:.3f}  {hit.record.text}{source}"))


@memory_app.command("forget")
def memory_forget(
    user: UserOption,
    tenant: TenantOption = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do it without asking.")] = False,
    memory_store: MemoryStoreOption = None,
) -> None:
    """Remove every memory of a user in a tenant (all agents, history and embeddings)."""
    with _reported():
        who = str(scope_of(user, tenant, None))
        if not yes:
            try:
                confirmed = typer.confirm(f"Remove every memory of {who}?", default=False)
            except typer.Abort:  # no answer (standard input closed)
                confirmed = False
            if not confirmed:
                _stderr().print(Text("nothing removed"))
                raise typer.Exit(1)
        removed = _with_memory(memory_store, lambda store: forget_user(store, user=user, tenant=tenant))
        _stdout().print(Text(f"forgot {removed} memories of {who}"))
