"""``agentkeep chat``: a chat whose history lives in a message store, keyed by the session id.

:func:`make_client` picks the model (the offline local one by default, or an OpenAI-compatible
server); :class:`ChatSession` is the agent with a storage-backed history on one conversation;
:func:`run_chat` is the command: one message (``-m``) or an interactive loop, streamed.

The session is nothing but its id: the history provider uses it as the conversation id, so a
later ``agentkeep chat --session ID`` (another process, another day) continues the same stored
conversation. Each turn appends only its new messages to the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from ..agent import Agent, AgentResponse, AgentRunStream
from ..clients.base import ChatClient
from ..clients.selection import SupportsAclose, SupportsLoad, open_chat_client
from ..compaction.strategies import ContextWindowCompactionStrategy, StrategyLike
from ..compaction.tokenizers import Tokenizer
from ..errors import AgentkeepError
from ..message_stores.base import MessageStore, close_store, setup_store
from ..providers.storage import StorageHistoryProvider
from ._stores import CLIError, describe_store, open_store, redact_url

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "ChatSession",
    "ChatSettings",
    "TurnResult",
    "make_client",
    "new_session_id",
    "run_chat",
]

DEFAULT_INSTRUCTIONS = "You are a helpful assistant. Answer briefly."
"""The instructions ``agentkeep chat`` gives the model unless ``--instructions`` is passed."""

HISTORY_SOURCE_ID = "history"
"""The source id (and session state key) of the chat's history provider."""

QUIT_COMMANDS = frozenset({"/quit", "/exit", "/q"})


def new_session_id() -> str:
    """A fresh session id: 16 random hex digits."""
    return secrets.token_hex(8)


def make_client(
    *,
    model_path: Path | None = None,
    base_url: str | None = None,
    api_model: str | None = None,
    max_tokens: int | None = None,
) -> ChatClient:
    """:func:`agentkeep.clients.selection.open_chat_client` for the ``chat`` options.

    Raises:
        CLIError: A local model and a server were both asked for.
        ImportError: The client's optional dependencies are missing (names the extra).
    """
    try:
        return open_chat_client(
            model_path=model_path, base_url=base_url, api_model=api_model, max_tokens=max_tokens
        )
    except ValueError as exc:
        raise CLIError(str(exc)) from exc


async def close_client(client: ChatClient) -> None:
    """Release the client's resources (model memory, HTTP connections)."""
    if isinstance(client, SupportsAclose):
        await client.aclose()


@dataclass(slots=True)
class TurnResult:
    """One exchange of a chat.

    Attributes:
        response: The agent's response (its messages are stored).
        seconds: Wall time of the turn, history loading and storing included.
    """

    response: AgentResponse
    seconds: float

    @property
    def output_tokens(self) -> int | None:
        """Tokens the model generated, when it reported them."""
        usage = self.response.usage
        return usage.output_token_count if usage is not None else None


class ChatSession:
    """An agent whose history is one stored conversation (the session id is its key).

    The caller owns ``client`` and ``store`` and closes them.

    Args:
        client: The model.
        store: Where the history lives.
        session_id: The session, and the stored conversation's id.
        instructions: System instructions for every turn.
        max_tokens: Upper bound on tokens per reply.
        history_limit: Send at most this many of the newest stored messages to the model.
        compaction_strategy: Compacts what is sent before each model call (stored history is
            kept whole), e.g. to fit the model's context window.
        tokenizer: Counts tokens for ``compaction_strategy``.
    """

    def __init__(
        self,
        client: ChatClient,
        store: MessageStore,
        session_id: str,
        *,
        instructions: str | None = DEFAULT_INSTRUCTIONS,
        max_tokens: int | None = None,
        history_limit: int | None = None,
        compaction_strategy: StrategyLike | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        self.store = store
        self.history = StorageHistoryProvider(store, HISTORY_SOURCE_ID, load_limit=history_limit)
        self.agent = Agent(
            client,
            instructions,
            context_providers=[self.history],
            compaction_strategy=compaction_strategy,
            tokenizer=tokenizer,
        )
        self.session = self.agent.create_session(session_id=session_id)
        self.options: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}

    @property
    def session_id(self) -> str:
        """The session (and conversation) id."""
        return self.session.session_id

    def stream(self, text: str) -> AgentRunStream:
        """Send ``text``; the updates stream the reply, and the turn is stored at the end."""
        return self.agent.run(text, session=self.session, stream=True, options=self.options)

    async def send(self, text: str, *, on_text: Callable[[str], None] | None = None) -> TurnResult:
        """Send ``text`` and wait for the whole reply (``on_text`` receives its text as it streams)."""
        started = time.perf_counter()
        stream = self.stream(text)
        async for update in stream:
            if on_text is not None and update.role == "assistant":
                chunk = update.text
                if chunk:
                    on_text(chunk)
        response = await stream.get_final_response()
        return TurnResult(response, time.perf_counter() - started)


@dataclass(slots=True)
class ChatSettings:
    """The options of ``agentkeep chat`` (see the command's help)."""

    session_id: str | None = None
    store_url: str | None = None
    model_path: Path | None = None
    base_url: str | None = None
    api_model: str | None = None
    message: str | None = None
    instructions: str | None = DEFAULT_INSTRUCTIONS
    max_tokens: int | None = None
    history_limit: int | None = None


def _window_compaction(client: ChatClient, max_tokens: int | None) -> dict[str, Any]:
    """For the local model (whose context window and tokenizer are known): keep each request
    inside its window by compacting what is sent, counted with the model's own tokenizer."""
    from ..clients.local import LocalChatClient

    if not isinstance(client, LocalChatClient):
        return {}
    tokenizer = client.tokenizer
    strategy = ContextWindowCompactionStrategy(
        client.n_ctx, max_tokens or client.max_tokens, tokenizer=tokenizer
    )
    return {"compaction_strategy": strategy, "tokenizer": tokenizer}


def run_chat(settings: ChatSettings, *, err: Console, out: TextIO | None = None) -> None:
    """Run ``agentkeep chat``: one message (``settings.message``) or an interactive loop.

    The reply streams to ``out`` (standard output); status lines, the spinner and the session id
    go to ``err``, so ``reply=$(agentkeep chat -m ...)`` captures only the reply.

    Raises:
        CLIError, AgentkeepError, OSError, ImportError: For the caller to report.
    """
    stream = out if out is not None else sys.stdout
    message = settings.message
    if message == "-":
        message = sys.stdin.read()
    if message is not None and not message.strip():
        raise CLIError("the message is empty")
    session_id = settings.session_id or new_session_id()
    with asyncio.Runner() as runner:
        store = open_store(settings.store_url)
        client: ChatClient | None = None
        try:
            runner.run(setup_store(store))
            client = make_client(
                model_path=settings.model_path,
                base_url=settings.base_url,
                api_model=settings.api_model,
                max_tokens=settings.max_tokens,
            )
            if isinstance(client, SupportsLoad):  # the local model: load it now, behind a spinner
                started = time.perf_counter()
                with err.status("Loading the model ...", spinner="dots"):
                    runner.run(client.load())
                model_note = f"model loaded in {time.perf_counter() - started:.2f} s"
            else:
                model_note = f"model at {getattr(client, 'base_url', 'a server')}"
            chat = ChatSession(
                client,
                store,
                session_id,
                instructions=settings.instructions,
                max_tokens=settings.max_tokens,
                history_limit=settings.history_limit,
                **_window_compaction(client, settings.max_tokens),
            )
            if message is not None:
                runner.run(chat.send(message, on_text=_Printer(stream)))
                stream.write("\n")
                stream.flush()
                if settings.session_id is None:  # stored now: tell how to continue it
                    hint = _continue_hint(session_id, settings.store_url)
                    err.print(f"new session [bold]{escape(session_id)}[/] ({escape(hint)})", soft_wrap=True)
                return
            _interactive(runner, chat, settings.store_url, model_note=model_note, err=err, out=stream)
        finally:
            try:
                if client is not None:
                    runner.run(close_client(client))
            finally:
                runner.run(close_store(store))


class _Printer:
    """Writes streamed text at once, without the whitespace models often start with."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started = False

    def __call__(self, chunk: str) -> None:
        if not self.started:
            chunk = chunk.lstrip()
            if not chunk:
                return
            self.started = True
        self.out.write(chunk)
        self.out.flush()


def _interactive(
    runner: asyncio.Runner,
    chat: ChatSession,
    store_url: str | None,
    *,
    model_note: str,
    err: Console,
    out: TextIO,
) -> None:
    if sys.stdin.isatty():
        with contextlib.suppress(ImportError):  # line editing for input(), where the platform has it
            importlib.import_module("readline")
    view = runner.run(chat.store.read(chat.session_id))
    existed = bool(view.entries) or view.last_seq > 0  # as conversation_exists() tells
    state = f"{len(view.entries)} stored messages" if existed else "new"
    err.print(
        f"session [bold]{escape(chat.session_id)}[/] ({state}) in {escape(describe_store(chat.store))}; "
        f"{escape(model_note)}. Type /quit or press Ctrl-D to leave.",
        soft_wrap=True,
    )
    while True:
        try:
            text = input("you> ")
        except EOFError:
            out.write("\n")
            break
        except KeyboardInterrupt:
            out.write("\n")
            continue
        text = text.strip()
        if not text:
            continue
        if text.lower() in QUIT_COMMANDS:
            break
        out.write("assistant> ")
        out.flush()
        try:
            turn = runner.run(chat.send(text, on_text=_Printer(out)))
        except KeyboardInterrupt:
            out.write("\n")
            err.print("[dim](interrupted: this turn was not stored)[/]")
            continue
        except AgentkeepError as exc:  # e.g. a server hiccup: report it, keep the chat open
            out.write("\n")
            out.flush()
            err.print(Text(f"error: {exc} (this turn was not stored)", style="red"), soft_wrap=True)
            continue
        out.write("\n")
        out.flush()
        tokens = turn.output_tokens
        rate = f", {tokens / turn.seconds:.0f} tokens/s" if tokens and turn.seconds > 0 else ""
        shown = f"{tokens} tokens in " if tokens is not None else ""
        err.print(f"[dim]({shown}{turn.seconds:.2f} s{rate})[/]", soft_wrap=True)
    hint = _continue_hint(chat.session_id, store_url)
    err.print(f"session [bold]{escape(chat.session_id)}[/] saved ({escape(hint)}).", soft_wrap=True)


def _continue_hint(session_id: str, store_url: str | None) -> str:
    store = f" --store {redact_url(store_url)}" if store_url else ""
    return f"continue it: agentkeep chat --session {session_id}{store}"
