"""FileHistoryProvider: one append-only file per session in the reference's layout."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest

from agentkeep import Agent, AgentSession, FileHistoryProvider, Message
from agentkeep.testing import ScriptedChatClient


def test_the_folder_is_made_at_once_off_an_event_loop(tmp_path: Path) -> None:
    assert FileHistoryProvider(tmp_path / "made" / "now").storage_path.is_dir()


async def test_saves_append_and_loads_read_in_order(tmp_path: Path) -> None:
    provider = FileHistoryProvider(tmp_path / "nested")
    await provider.save_messages("s1", [Message("user", "hello"), Message("assistant", "hi there")])
    await provider.save_messages("s1", [Message("user", "again")])
    assert [m.text for m in await provider.get_messages("s1")] == ["hello", "hi there", "again"]
    assert await provider.get_messages("other") == []
    lines = (tmp_path / "nested" / "s1.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["message"] * 3
    await provider.save_messages(None, [Message("user", "no id")])
    assert (tmp_path / "nested" / "default.jsonl").exists()


async def test_an_agent_keeps_its_history_in_the_file_and_reads_only_what_is_new(tmp_path: Path) -> None:
    provider = FileHistoryProvider(tmp_path)
    client = ScriptedChatClient(lambda messages: f"re: {messages[-1].text}")
    agent = Agent(client, context_providers=[provider])
    session = agent.create_session(session_id="chat")
    for text in ("one", "two", "three"):
        await agent.run(text, session=session)
    assert [m.text for m in client.calls[-1]] == ["one", "re: one", "two", "re: two", "three"]
    # Another writer appends: the next load reads it; a new session object reads the file whole.
    await FileHistoryProvider(tmp_path).save_messages("chat", [Message("user", "from elsewhere")])
    assert [m.text for m in await provider.get_messages("chat", session=session)][-1] == "from elsewhere"
    fresh = AgentSession(session_id="chat")
    assert len(await provider.get_messages("chat", session=fresh)) == 7


async def test_msgpack_records_are_length_prefixed(tmp_path: Path) -> None:
    provider = FileHistoryProvider(tmp_path, serialization_format="msgpack")
    await provider.save_messages("b", [Message("user", "hello"), Message("assistant", "hi")])
    raw = (tmp_path / "b.msgpack").read_bytes()
    first = int.from_bytes(raw[:4], "big")
    assert msgspec.msgpack.decode(raw[4 : 4 + first])["type"] == "message"
    assert [m.text for m in await provider.get_messages("b")] == ["hello", "hi"]
    (tmp_path / "t.msgpack").write_bytes((10).to_bytes(4, "big") + b"short")
    with pytest.raises(ValueError, match=r"record 1.*truncated"):
        await provider.get_messages("t")


async def test_bad_lines_are_errors_naming_them(tmp_path: Path) -> None:
    provider = FileHistoryProvider(tmp_path)
    (tmp_path / "broken.jsonl").write_text("{not-json}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="Failed to deserialize history line 1"):
        await provider.get_messages("broken")
    (tmp_path / "list.jsonl").write_text("[1, 2, 3]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="did not deserialize to a mapping"):
        await provider.get_messages("list")


def test_custom_codecs_are_deprecated_and_json_only(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match=r"dumps.*loads.*deprecated"):
        FileHistoryProvider(tmp_path, dumps=json.dumps)
    with pytest.raises(ValueError, match="Custom dumps and loads"):
        FileHistoryProvider(tmp_path, serialization_format="msgpack", loads=json.loads)
    provider = FileHistoryProvider(tmp_path)
    assert provider.loads(provider.dumps({"text": "héllo"})) == {"text": "héllo"}


async def test_a_custom_dumps_must_write_one_line(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="deprecated"):
        provider = FileHistoryProvider(tmp_path, dumps=lambda payload: json.dumps(payload, indent=2))
    with pytest.raises(ValueError, match="single-line JSON"):
        await provider.save_messages("s", [Message("user", "hi")])


async def test_skip_excluded_leaves_excluded_messages_out(tmp_path: Path) -> None:
    provider = FileHistoryProvider(tmp_path, skip_excluded=True)
    await provider.save_messages(
        "s",
        [Message("user", "keep"), Message("assistant", "skip", additional_properties={"_excluded": True})],
    )
    assert [m.text for m in await provider.get_messages("s")] == ["keep"]


async def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    providers = [FileHistoryProvider(tmp_path) for _ in range(4)]
    async with asyncio.timeout(30):
        await asyncio.gather(
            *(
                p.save_messages("shared", [Message("user", f"{i}-{n}") for n in range(20)])
                for i, p in enumerate(providers)
            )
        )
    texts = [m.text for m in await providers[0].get_messages("shared")]
    assert sorted(texts) == sorted(f"{i}-{n}" for i in range(4) for n in range(20))
    for i in range(4):  # each save's messages stay together and in order
        mine = [t for t in texts if t.startswith(f"{i}-")]
        start = texts.index(mine[0])
        assert texts[start : start + 20] == mine == [f"{i}-{n}" for n in range(20)]


async def test_a_linked_history_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "target.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "s.jsonl").symlink_to(tmp_path / "target.jsonl")
    with pytest.raises(ValueError, match="link"):
        await FileHistoryProvider(tmp_path).get_messages("s")
