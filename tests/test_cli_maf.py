"""``agentkeep sessions import --format maf FILE``, ``import --from-redis URL`` and
``export ID --format maf``, as real subprocesses on a SQLite file of the test's own (the Redis
import against the real server holding what the reference's provider wrote)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import msgspec
import pytest

from agentkeep._db.redis import RedisConnection
from agentkeep.maf import session_from_maf
from tests.maf.fixtures import HERE, REDIS_DUMP, SESSIONS
from tests.message_stores.backend_redis import REDIS_URL
from tests.test_cli import ok, one_line_error, run

TOOL_CALL = HERE / "sessions" / "tool_call.json"


def test_import_a_framework_session_show_it_and_export_it_back(env: dict[str, str], store_url: str) -> None:
    out = ok(run(env, "sessions", "import", "--format", "maf", str(TOOL_CALL), "--store", store_url))
    assert out.strip() == "imported 4 messages as session tool-call-0001"
    shown = ok(run(env, "sessions", "show", "tool-call-0001", "--store", store_url))
    assert "get_weather" in shown
    exported = ok(run(env, "sessions", "export", "tool-call-0001", "--format", "maf", "--store", store_url))
    back = session_from_maf(json.loads(exported))
    original = session_from_maf(SESSIONS["tool_call.json"])
    assert [m.contents for m in back.messages] == [m.contents for m in original.messages]
    assert [m.role for m in back.messages] == [m.role for m in original.messages]
    # A second import of the same session is refused; --force replaces it.
    refused = run(env, "sessions", "import", "--format", "maf", str(TOOL_CALL), "--store", store_url)
    one_line_error(refused, "already exists")
    ok(run(env, "sessions", "import", "--format", "maf", str(TOOL_CALL), "--store", store_url, "--force"))


def test_state_the_history_commands_do_not_keep_is_named(env: dict[str, str], store_url: str) -> None:
    path = HERE / "sessions" / "custom_source_and_state.json"
    result = run(env, "sessions", "import", "--format", "maf", str(path), "--store", store_url)
    ok(result)
    assert "note: state 'app_counter', state 'app_settings'" in result.stderr


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (TOOL_CALL.read_bytes()[:120], "is not valid JSON"),
        (b'{"format": "agentkeep.conversation", "version": 1, "messages": []}', "an agentkeep export"),
        (b'{"type": "session", "session_id": "s", "version": "7.0"}', "version '7.0' is not supported"),
        (b'{"session_id": "s", "state": {"in_memory": {"messages": [{"role": "robot"}]}}}', "robot"),
        (b"[1, 2]", "must be a JSON object"),
    ],
)
def test_bad_files_give_one_line_errors_and_write_nothing(
    env: dict[str, str], store_url: str, tmp_path: Path, content: bytes, fragment: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    one_line_error(
        run(env, "sessions", "import", "--format", "maf", str(path), "--store", store_url), fragment
    )
    listed = ok(run(env, "sessions", "list", "--store", store_url))
    assert listed.startswith("no sessions")


def test_import_and_export_need_what_they_name(env: dict[str, str], store_url: str) -> None:
    one_line_error(run(env, "sessions", "import", "--store", store_url), "give a FILE")
    one_line_error(
        run(env, "sessions", "import", str(TOOL_CALL), "--from-redis", REDIS_URL, "--store", store_url),
        "not both",
    )
    one_line_error(run(env, "sessions", "export", "nope", "--format", "maf", "--store", store_url), "nope")
    with_redis = ["sessions", "import", "--from-redis", REDIS_URL, "--store", store_url]
    one_line_error(run(env, *with_redis, "--session", "x"), "not --from-redis")
    one_line_error(run(env, *with_redis, "--format", "maf"), "not --from-redis")


def _replay(prefix: str, *, delete: bool = False) -> None:
    async def go() -> None:
        connection = RedisConnection(redis_url=REDIS_URL)
        try:
            for entry in REDIS_DUMP["keys"]:
                key = prefix + entry["key"][len(REDIS_DUMP["key_prefix"]) :]
                if delete:
                    await connection.execute("DEL", key)
                else:
                    await connection.execute("RPUSH", key, *(v.encode() for v in entry["values"]))
        finally:
            await connection.aclose()

    asyncio.run(go())


def test_copy_the_frameworks_redis_history_twice(env: dict[str, str], store_url: str) -> None:
    prefix = f"akcli-{uuid.uuid4().hex[:12]}"
    _replay(prefix)
    try:
        args = [
            "sessions",
            "import",
            "--from-redis",
            REDIS_URL,
            "--maf-key-prefix",
            prefix,
            "--store",
            store_url,
        ]
        first = ok(run(env, *args))
        total = sum(len(e["values"]) for e in REDIS_DUMP["keys"])
        assert f"copied {total} messages into 3 sessions from 3 Agent Framework conversations" in first
        second = ok(run(env, *args))
        assert "copied 0 messages into 0 sessions from 3 Agent Framework conversations" in second
        assert f"({total} already present)" in second
        listed = ok(run(env, "sessions", "list", "--store", store_url))
        assert "Tenant-A::Conv-Two/Ünïcode" in listed
        only = ok(run(env, *args, "--maf-agent", "weather-agent"))
        assert "from 1 Agent Framework conversations" in only
    finally:
        _replay(prefix, delete=True)


def test_an_unreachable_redis_is_a_one_line_error(env: dict[str, str], store_url: str) -> None:
    result = run(env, "sessions", "import", "--from-redis", "redis://127.0.0.1:1/0", "--store", store_url)
    one_line_error(result, "127.0.0.1:1")


def test_exported_sessions_are_json_the_framework_reads(env: dict[str, str], store_url: str) -> None:
    ok(run(env, "sessions", "import", "--format", "maf", str(TOOL_CALL), "--store", store_url))
    exported = ok(run(env, "sessions", "export", "tool-call-0001", "-f", "maf", "--store", store_url))
    document = msgspec.json.decode(exported)
    messages = document["state"]["in_memory"]["messages"]
    assert all(m["type"] == "message" and "created_at" not in m for m in messages)
    assert all("agentkeep.created_at" in m["additional_properties"] for m in messages)
