"""The ``agentkeep`` CLI: chat with persistent sessions, the ``sessions`` commands, clean errors.

Most tests run the CLI as a real subprocess (``python -m agentkeep.cli``) on a temporary SQLite
store, with ``XDG_DATA_HOME`` pointing into the test's temp folder so the user's data dir is
never touched. The chat tests use the real offline model (SmolLM2-135M) with few tokens; they
check structure (stored roles and turns, exit codes), never the model's wording. One chat runs
under a pseudo-terminal, as a person would use it. The helpers behind the commands (store URLs,
export / import) are also tested in process, and the ``sessions`` commands against the real
Redis and PostgreSQL servers.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentkeep import Content, Message
from agentkeep.cli import (
    EXPORT_FORMAT,
    ChatSession,
    CLIError,
    export_conversation,
    import_conversation,
    open_store,
    parse_export,
    parse_store_url,
    redact_url,
    render_markdown,
)
from agentkeep.message_stores import InMemoryMessageStore, Summary
from agentkeep.message_stores.base import close_store, setup_store
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.testing import ScriptedChatClient
from tests.clients.servers import LlamaServer, closed_port_url

CLI = [sys.executable, "-m", "agentkeep.cli"]
MAX_TOKENS = "12"
TIMEOUT = 120


# -- helpers ------------------------------------------------------------------------------------------


def run(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        encoding="utf-8",
        env=env,
        timeout=TIMEOUT,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Assert exit status 1 and a single ``error: ...`` line on stderr (no traceback)."""
    assert result.returncode == 1, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def shown_roles(output: str) -> list[str]:
    """The roles of the entries ``sessions show`` printed (``[seq] role: text`` lines)."""
    return re.findall(r"^\[\d+\] (\w+)(?: \(excluded\))?: ", output, flags=re.MULTILINE)


def seed_messages() -> list[Message]:
    return [
        Message("user", ["My name is Ada and my favourite colour is teal."]),
        Message("assistant", ["Nice to meet you, Ada."]),
        Message("user", ["What's the weather in Paris?"]),
        Message(
            "assistant", [Content.from_function_call("call-1", "get_weather", arguments={"city": "Paris"})]
        ),
        Message("tool", [Content.from_function_result("call-1", result={"sky": "sunny"})]),
        Message("assistant", ["It is sunny in Paris.\nEnjoy it."]),
    ]


async def seed(path: Path, conversation_id: str, *, compact: bool = False) -> list[Message]:
    """Store the seed conversation in a SQLite file (optionally with a compaction)."""
    messages = seed_messages()
    store = SQLiteMessageStore(path)
    try:
        await store.append(conversation_id, messages)
        if compact:
            replaced = [m.message_id or "" for m in messages[2:5]]
            summary = Summary(Message("system", ["The user asked about the weather; it is sunny."]), replaced)
            await store.record_compaction(conversation_id, excluded=replaced, summaries=[summary])
    finally:
        await close_store(store)
    return messages


# -- chat with the real model ---------------------------------------------------------------------------


@pytest.mark.model
def test_chat_session_persists_across_processes(env: dict[str, str], store_url: str) -> None:
    first = run(env, "chat", "--store", store_url, "--max-tokens", MAX_TOKENS, "-m", "My name is Ada.")
    ok(first)
    assert first.stdout.strip(), "the reply is printed on stdout"
    assert "continue it: agentkeep" not in first.stdout, "status lines go to stderr"
    found = re.search(r"new session (\S+)", first.stderr)
    assert found, first.stderr
    session_id = found.group(1)

    second = run(
        env, "chat", "--session", session_id, "--store", store_url, "--max-tokens", MAX_TOKENS, "-m", "-",
        stdin="What is my name?\n",
    )  # fmt: skip
    ok(second)
    assert "new session" not in second.stderr

    shown = ok(run(env, "sessions", "show", session_id, "--store", store_url))
    assert shown_roles(shown) == ["user", "assistant", "user", "assistant"]
    assert "user: My name is Ada." in shown
    assert "user: What is my name?" in shown
    listed = ok(run(env, "sessions", "list", "--store", store_url))
    assert session_id in listed


def _read_until(fd: int, marker: bytes, buffer: bytearray, *, count: int, timeout: float = 90.0) -> None:
    """Read the pseudo-terminal into ``buffer`` until ``marker`` occurs ``count`` times."""
    deadline = time.monotonic() + timeout
    while buffer.count(marker) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no {marker!r} x{count} in time; got:\n{buffer.decode(errors='replace')}")
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            chunk = b""
        if not chunk:
            raise AssertionError(f"the terminal closed early; got:\n{buffer.decode(errors='replace')}")
        buffer.extend(chunk)


def _drain(fd: int, buffer: bytearray, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return
        if not chunk:
            return
        buffer.extend(chunk)


def _chat_in_a_terminal(arguments: list[str], env: dict[str, str], line: bytes, leave: bytes) -> str:
    """Run ``agentkeep chat`` under a pseudo-terminal: type ``line``, then ``leave``; the screen."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [*CLI, "chat", *arguments], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True
    )
    os.close(slave)
    screen = bytearray()
    try:
        _read_until(master, b"you> ", screen, count=1)
        os.write(master, line)
        _read_until(master, b"you> ", screen, count=2)
        os.write(master, leave)
        _drain(master, screen)
        assert process.wait(timeout=30) == 0, screen.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        os.close(master)
    return screen.decode(errors="replace")


@pytest.mark.model
def test_interactive_chat_in_a_terminal_then_again(env: dict[str, str], store_url: str) -> None:
    session_id = "pty-session"
    text = _chat_in_a_terminal(
        ["--session", session_id, "--store", store_url, "--max-tokens", MAX_TOKENS],
        {**env, "TERM": "xterm"},
        b"My favourite colour is teal.\n",
        b"/quit\n",
    )
    assert "assistant> " in text
    assert "Traceback" not in text
    assert f"session {session_id} saved" in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)

    # chat again on the same session, in a new process, then look at what is stored
    ok(run(env, "chat", "-s", session_id, "--store", store_url, "--max-tokens", MAX_TOKENS, "-m", "And?"))
    shown = ok(run(env, "sessions", "show", session_id, "--store", store_url))
    assert shown_roles(shown) == ["user", "assistant", "user", "assistant"]
    assert "user: My favourite colour is teal." in shown


def test_interactive_chat_survives_a_failed_turn(env: dict[str, str], store_url: str) -> None:
    text = _chat_in_a_terminal(
        ["-s", "down", "--store", store_url, "--base-url", closed_port_url(), "--api-model", "m"],
        {**env, "TERM": "dumb"},
        b"hello?\n",
        b"\x04",  # Ctrl-D leaves
    )
    assert "error: cannot reach" in text
    assert "this turn was not stored" in text
    assert "Traceback" not in text
    assert "no sessions" in ok(run(env, "sessions", "list", "--store", store_url))


def test_chat_through_an_openai_compatible_server(
    env: dict[str, str], store_url: str, llama_server: LlamaServer
) -> None:
    common = ["--store", store_url, "--base-url", llama_server.base_url, "--api-model", "smollm2"]
    ok(run(env, "chat", "-s", "remote", *common, "--max-tokens", MAX_TOKENS, "-m", "Hello, I am Ada."))
    ok(run(env, "chat", "-s", "remote", *common, "--max-tokens", MAX_TOKENS, "-m", "Who am I?"))
    shown = ok(run(env, "sessions", "show", "remote", "--store", store_url))
    assert shown_roles(shown) == ["user", "assistant", "user", "assistant"]


def test_chat_errors_are_one_line(env: dict[str, str], store_url: str, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model.gguf"
    one_line_error(run(env, "chat", "--store", store_url, "--model", str(missing), "-m", "hi"), str(missing))
    one_line_error(run(env, "chat", "--store", "mongodb://localhost", "-m", "hi"), "unsupported store URL")
    one_line_error(
        run(
            env, "chat", "--store", store_url, "--base-url", closed_port_url(), "--api-model", "m", "-m", "hi"
        )
    )
    one_line_error(
        run(
            env,
            "chat",
            "--store",
            store_url,
            "--model",
            str(missing),
            "--base-url",
            "http://x/v1",
            "-m",
            "hi",
        ),
        "exclude each other",
    )
    one_line_error(run(env, "chat", "--store", store_url, "-m", "   "), "empty")
    # nothing was stored by the failed attempts
    assert "no sessions" in ok(run(env, "sessions", "list", "--store", store_url))


# -- sessions commands (no model) -------------------------------------------------------------------------


async def test_sessions_list_pages_by_cursor_within_a_tenant(env: dict[str, str], tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    url = f"sqlite://{db}"
    store = SQLiteMessageStore(db)
    try:
        for i in range(52):  # the newest last: alice::c-51 lists first
            await store.append(f"alice::c-{i:02}", [Message("user", [f"m{i}"])])
        await store.append("bob::theirs", [Message("user", ["bob's"])])
    finally:
        await store.aclose()

    everything = ok(run(env, "sessions", "list", "--store", url))  # 50 by default
    assert "bob::theirs" in everything
    assert len(re.findall(r"alice::c-\d\d", everything)) == 49
    assert re.search(r"^more: --after \S+$", everything, flags=re.MULTILINE)

    seen: list[str] = []
    after: list[str] = []
    for _ in range(10):
        page = ok(run(env, "sessions", "list", "--store", url, "--tenant", "alice", "--limit", "20", *after))
        assert "bob" not in page
        assert "sessions of tenant alice in" in page
        seen += re.findall(r"alice::c-\d\d", page)
        more = re.search(r"^more: --after (\S+)$", page, flags=re.MULTILINE)
        if more is None:
            break
        after = ["--after", more.group(1)]
    assert seen == [f"alice::c-{i:02}" for i in reversed(range(52))]

    last = ok(run(env, "sessions", "list", "--store", url, "--tenant", "alice", "--limit", "52"))
    assert "more:" in last  # a full page says where the next would start
    cursor = re.findall(r"^more: --after (\S+)$", last, flags=re.MULTILINE)[0]
    empty = ok(run(env, "sessions", "list", "--store", url, "--tenant", "alice", "--after", cursor))
    assert "no more sessions of tenant alice in" in empty
    assert "no sessions of tenant nobody in" in ok(
        run(env, "sessions", "list", "--store", url, "--tenant", "nobody")
    )

    one_line_error(
        run(env, "sessions", "list", "--store", url, "--after", "not a cursor!"), "--after", "cursor"
    )
    one_line_error(run(env, "sessions", "list", "--store", url, "--tenant", "a::b"), "--tenant")


async def test_sessions_list_show_export_import_delete(env: dict[str, str], tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    url = f"sqlite://{db}"
    await seed(db, "weather", compact=True)
    await seed(db, "plain")

    listed = ok(run(env, "sessions", "list", "--store", url))
    assert "weather" in listed
    assert "plain" in listed

    shown = ok(run(env, "sessions", "show", "weather", "--store", url))
    assert shown_roles(shown) == ["user", "assistant", "assistant"]  # the compacted view
    assert "summary of 3 messages (system): The user asked about the weather" in shown
    assert "    Enjoy it." in shown  # continuation lines are indented
    raw = ok(run(env, "sessions", "show", "weather", "--store", url, "--raw"))
    assert shown_roles(raw) == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    assert raw.count("(excluded)") == 3
    assert '-> call get_weather({"city":"Paris"}) [call-1]' in raw
    last = ok(run(env, "sessions", "show", "weather", "--store", url, "--raw", "--last", "2"))
    assert shown_roles(last) == ["tool", "assistant"]
    assert "the last 2 messages" in last

    # JSON export -> import under a new id -> export again: the same conversation
    exported = tmp_path / "weather.json"
    ok(run(env, "sessions", "export", "weather", "--store", url, "-o", str(exported)))
    document = msgspec.json.decode(exported.read_bytes())
    assert document["format"] == EXPORT_FORMAT
    assert document["conversation_id"] == "weather"
    assert [m["role"] for m in document["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert len(document["excluded"]) == 3
    assert len(document["summaries"]) == 1

    imported = ok(run(env, "sessions", "import", str(exported), "--store", url, "--session", "copy"))
    assert "imported 6 messages as session copy" in imported
    again = msgspec.json.decode(ok(run(env, "sessions", "export", "copy", "--store", url)))
    assert again["messages"] == document["messages"]
    assert again["excluded"] == document["excluded"]
    assert again["summaries"] == document["summaries"]
    assert ok(run(env, "sessions", "show", "copy", "--store", url)).splitlines()[1:] == shown.splitlines()[1:]

    # an existing session is refused unless --force (which replaces it); stdin works as FILE
    one_line_error(run(env, "sessions", "import", str(exported), "--store", url), "already exists", "--force")
    ok(run(env, "sessions", "import", "-", "--store", url, "--force", stdin=exported.read_text()))
    assert shown_roles(ok(run(env, "sessions", "show", "weather", "--store", url))) == [
        "user",
        "assistant",
        "assistant",
    ]

    markdown = ok(run(env, "sessions", "export", "plain", "--store", url, "--format", "markdown"))
    assert markdown.startswith("# Session `plain`")
    assert markdown.count("\n### user") == 2
    assert markdown.count("\n### assistant") == 3
    assert markdown.count("\n### tool") == 1

    assert "deleted session plain" in ok(run(env, "sessions", "delete", "plain", "--store", url))
    listed = ok(run(env, "sessions", "list", "--store", url))
    assert "plain" not in listed
    assert "weather" in listed
    one_line_error(run(env, "sessions", "show", "plain", "--store", url), "no session 'plain'")


def test_default_store_is_in_the_data_dir(env: dict[str, str], tmp_path: Path) -> None:
    data = tmp_path / "data" / "agentkeep" / "agentkeep.db"
    exported = tmp_path / "one.json"
    exported.write_text(
        msgspec.json.encode(
            {"conversation_id": "one", "messages": [{"role": "user", "contents": []}]}
        ).decode()
    )
    ok(run(env, "sessions", "import", str(exported)))
    assert data.is_file()
    assert "one" in ok(run(env, "sessions", "list"))
    assert "one" in ok(run(env, "sessions", "list", "--store", f"sqlite://{data}"))


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["sessions", "list", "--store", "foo://bar"], ["unsupported store URL 'foo://bar'"]),
        (["sessions", "list", "--store", "just-a-path.db"], ["unsupported store URL"]),
        (["sessions", "list", "--store", "redis://127.0.0.1:notaport/0"], ["invalid store URL"]),
        (["sessions", "list", "--store", "redis://:secret@127.0.0.1:1/0"], ["redis", "127.0.0.1:1"]),
        (["sessions", "show", "nope", "--store", "{db}"], ["no session 'nope'"]),
        (["sessions", "export", "nope", "--store", "{db}"], ["no session 'nope'"]),
        (["sessions", "export", "nope", "--store", "{db}", "--format", "markdown"], ["no session 'nope'"]),
        (["sessions", "delete", "nope", "--store", "{db}"], ["no session 'nope'"]),
        (["sessions", "import", "{tmp}/missing.json", "--store", "{db}"], ["cannot read", "missing.json"]),
        (["sessions", "import", "{tmp}", "--store", "{db}"], ["cannot read"]),
        (["sessions", "import", "{tmp}/garbage.json", "--store", "{db}"], ["not valid JSON"]),
        (["sessions", "import", "{tmp}/list.json", "--store", "{db}"], ["expected a JSON object"]),
        (["sessions", "import", "{tmp}/badrole.json", "--store", "{db}"], ["messages[1].role"]),
        (["sessions", "import", "{tmp}/newer.json", "--store", "{db}"], ["version 99"]),
        (["sessions", "import", "{tmp}/noid.json", "--store", "{db}"], ["--session"]),
        (["sessions", "list", "--store", "sqlite://{tmp}"], ["sqlite at"]),
        (["sessions", "list", "--store", "sqlite://{tmp}/not-a-db.txt"], ["not a database"]),
    ],
)
def test_bad_inputs_give_one_line_errors(
    env: dict[str, str], tmp_path: Path, args: list[str], fragments: list[str]
) -> None:
    message = {"role": "user", "contents": [{"type": "text", "text": "hi"}]}
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "badrole.json").write_text(
        msgspec.json.encode({"conversation_id": "x", "messages": [message, {"role": "robot"}]}).decode()
    )
    (tmp_path / "newer.json").write_text(
        msgspec.json.encode({"format": EXPORT_FORMAT, "version": 99, "messages": []}).decode()
    )
    (tmp_path / "noid.json").write_text(msgspec.json.encode({"messages": [message]}).decode())
    (tmp_path / "not-a-db.txt").write_text("this is not a database " * 100)
    values = {"db": f"sqlite://{tmp_path / 'sessions.db'}", "tmp": str(tmp_path)}
    error = one_line_error(run(env, *(arg.format(**values) for arg in args)), *fragments)
    assert "secret" not in error


def test_usage_errors_exit_with_status_2(env: dict[str, str]) -> None:
    assert run(env, "sessions", "show").returncode == 2
    assert run(env, "chat", "--max-tokens", "0", "-m", "x").returncode == 2
    assert run(env, "sessions", "export", "x", "--format", "pdf").returncode == 2
    assert run(env, "bogus").returncode == 2
    assert "sessions" in ok(run(env, "--help"))


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "agentkeep"
    result = subprocess.run(
        [str(script), "sessions", "--help"], capture_output=True, encoding="utf-8", check=False
    )
    assert result.returncode == 0, result.stderr
    for command in ("list", "show", "export", "import", "delete"):
        assert command in result.stdout


# -- the same commands on the servers ------------------------------------------------------------------


@pytest.mark.parametrize("server_store", ["redis", "postgres"], indirect=True)
def test_sessions_commands_on_servers(env: dict[str, str], tmp_path: Path, server_store: str) -> None:
    document = {
        "conversation_id": "srv",
        "messages": [m.ensure_identity().to_dict() for m in seed_messages()],
    }
    exported = tmp_path / "srv.json"
    exported.write_bytes(msgspec.json.encode(document))
    ok(run(env, "sessions", "import", str(exported), "--store", server_store))
    assert "srv" in ok(run(env, "sessions", "list", "--store", server_store))
    shown = ok(run(env, "sessions", "show", "srv", "--store", server_store))
    assert shown_roles(shown) == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    again = msgspec.json.decode(ok(run(env, "sessions", "export", "srv", "--store", server_store)))
    assert again["messages"] == document["messages"]
    ok(run(env, "sessions", "delete", "srv", "--store", server_store))
    one_line_error(run(env, "sessions", "show", "srv", "--store", server_store), "no session 'srv'")


# -- the helpers behind the commands, in process ----------------------------------------------------------


def test_parse_store_url() -> None:
    default = parse_store_url(None)
    assert default.backend == "sqlite"
    assert default.path is not None
    assert default.path.parts[-2:] == ("agentkeep", "agentkeep.db")
    assert parse_store_url("sqlite://").path == default.path
    assert parse_store_url("sqlite:///tmp/a b.db").path == Path("/tmp/a b.db")
    assert parse_store_url("sqlite://rel/x.db").path == Path("rel/x.db")
    assert parse_store_url("sqlite://~/x.db").path == Path("~/x.db").expanduser()
    redis = parse_store_url("redis://localhost:6379/0?key_prefix=app&health_check_interval=5")
    assert (redis.backend, redis.url, redis.options) == (
        "redis",
        "redis://localhost:6379/0?health_check_interval=5",
        {"key_prefix": "app"},
    )
    postgres = parse_store_url("postgres://me@db/app?schema=chat")
    assert (postgres.backend, postgres.url, postgres.options) == (
        "postgres",
        "postgres://me@db/app",
        {"schema": "chat"},
    )
    for bad in (
        "mysql://x",
        "sqlite:relative.db",
        "/tmp/x.db",
        "sqlite:///x.db?mode=ro",
        "redis://h/0?key_prefix=",
    ):
        with pytest.raises(CLIError):
            parse_store_url(bad)
    assert redact_url("redis://:hunter2@host:6379/0") == "redis://:***@host:6379/0"
    assert redact_url("postgresql://me:pw@db/app") == "postgresql://me:***@db/app"


async def test_open_store_owns_what_it_opens(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'x.db'}")
    try:
        await setup_store(store)
        assert store.backend == "sqlite"
    finally:
        await close_store(store)
    with pytest.raises(CLIError, match="unsupported"):
        open_store("ftp://nowhere")


async def test_export_import_round_trip_in_memory() -> None:
    source, target = InMemoryMessageStore(), InMemoryMessageStore()
    messages = seed_messages()
    await source.append("a", messages)
    replaced = [m.message_id or "" for m in messages[2:5]]
    await source.record_compaction(
        "a", excluded=replaced, summaries=[Summary(Message("system", ["weather talk"]), replaced)]
    )
    export = await export_conversation(source, "a")
    parsed = parse_export(export.to_json())
    assert parsed.to_dict() == export.to_dict()
    assert await import_conversation(target, parsed, conversation_id="b") == "b"
    original, copy = await source.read("a"), await target.read("b")
    assert [e.message.to_dict() for e in copy.entries] == [e.message.to_dict() for e in original.entries]
    assert [e.excluded for e in (await target.read("b", raw=True)).entries] == [
        e.excluded for e in (await source.read("a", raw=True)).entries
    ]
    with pytest.raises(CLIError, match="already exists"):
        await import_conversation(target, parsed, conversation_id="b")
    with pytest.raises(CLIError, match="no session 'missing'"):
        await export_conversation(source, "missing")
    markdown = render_markdown("a", original.entries)
    assert "### summary of 3 earlier messages (system)" in markdown
    for source_store in (source, target):
        await source_store.aclose()


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        (b"", "not valid JSON"),
        (b'"text"', "expected a JSON object"),
        (b'{"format": "other", "messages": []}', "format 'other'"),
        (b'{"messages": {}}', "no 'messages' list"),
        (b'{"conversation_id": 5, "messages": []}', "conversation_id"),
        (b'{"messages": [], "excluded": [1]}', "excluded"),
        (b'{"messages": [], "summaries": [{"message": {"role": "system"}, "replaces": "x"}]}', "replaces"),
        (
            b'{"messages": [{"role": "user", "contents": [{"type": "function_call"}]}]}',
            "messages[0].contents[0]",
        ),
    ],
)
def test_parse_export_rejects_what_is_not_an_export(document: bytes, fragment: str) -> None:
    with pytest.raises(CLIError, match=re.escape(fragment)):
        parse_export(document, source="f.json")


async def test_chat_session_stores_turns_under_the_session_id() -> None:
    store = InMemoryMessageStore()
    sent: list[int] = []

    def reply(messages: Any) -> str:
        sent.append(len(list(messages)))
        return "noted"

    client = ScriptedChatClient(reply)
    chunks: list[str] = []
    first = await ChatSession(client, store, "s-1", max_tokens=8).send("hello", on_text=chunks.append)
    assert "".join(chunks) == "noted"
    assert first.response.text == "noted"
    second = ChatSession(client, store, "s-1")  # a new process would build a new one
    await second.send("again")
    assert sent == [1, 3]  # the second turn saw the stored history
    view = await store.read("s-1")
    assert [e.message.role for e in view.entries] == ["user", "assistant", "user", "assistant"]
    await close_store(store)


# -- the main job ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.model
def test_local_chat_demo(env: dict[str, str], tmp_path: Path) -> None:
    """``make demo``'s script, short (CI=true), on a private data dir: persistence holds."""
    demo = Path(__file__).resolve().parent.parent / "examples" / "local_chat_demo.py"
    result = subprocess.run(
        [sys.executable, str(demo)],
        capture_output=True,
        encoding="utf-8",
        env={**env, "CI": "true"},
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "model loaded in" in out
    assert out.count("--- turn ") == 2
    assert 'contains "Ada": yes, "teal": yes' in out
    assert "persistence: ok" in out
    assert "compaction: ok - the view holds the last 2 turns; the raw log still holds all 3 user" in out
    assert (tmp_path / "data" / "agentkeep" / "agentkeep.db").is_file()
