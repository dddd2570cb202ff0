"""SessionStore and FileSessionStore: the reference's stores keyed by a session id alone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentkeep import AgentSession, FileSessionStore, Message, SessionFormatError, SessionStore


def _session() -> AgentSession:
    session = AgentSession(session_id="framework-session", service_session_id={"response_id": "resp-1"})
    session.state["nested"] = {"messages": [Message("user", "hello")], "values": ["original"]}
    return session


@pytest.fixture(params=["memory", "json", "msgpack"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SessionStore | FileSessionStore:
    if request.param == "memory":
        return SessionStore()
    return FileSessionStore(tmp_path, serialization_format=request.param)


async def test_set_get_delete_round_trip_independent_snapshots(
    store: SessionStore | FileSessionStore,
) -> None:
    assert await store.get("user/1") is None
    session = _session()
    await store.set("user/1", session)
    session.state["nested"]["values"].append("changed after set")
    restored = await store.get("user/1")
    assert restored is not None
    assert restored is not session
    assert restored.session_id == "framework-session"
    assert restored.service_session_id == {"response_id": "resp-1"}
    assert restored.state["nested"]["values"] == ["original"]
    message = restored.state["nested"]["messages"][0]
    assert isinstance(message, Message)
    assert message.text == "hello"
    await store.set("user/1", AgentSession(session_id="second"))
    replaced = await store.get("user/1")
    assert replaced is not None
    assert replaced.session_id == "second"
    await store.delete("user/1")
    assert await store.get("user/1") is None
    await store.delete("user/1")  # deleting twice is fine


@pytest.mark.parametrize("session_id", ["", "x" * 256])
async def test_bad_session_ids_are_refused(store: SessionStore | FileSessionStore, session_id: str) -> None:
    with pytest.raises(ValueError, match="session_id"):
        await store.get(session_id)
    with pytest.raises(ValueError, match="session_id"):
        await store.set(session_id, AgentSession())
    with pytest.raises(ValueError, match="session_id"):
        await store.delete(session_id)


async def test_what_json_cannot_carry_is_refused_with_the_key(store: SessionStore | FileSessionStore) -> None:
    session = AgentSession()
    session.state["value"] = float("nan")
    with pytest.raises(ValueError, match=r"'value'.*finite float"):
        await store.set("s", session)
    assert await store.get("s") is None

    class Opaque:
        pass

    other = AgentSession()
    other.state["nested"] = [{"value": Opaque()}]
    with pytest.raises(TypeError, match=r"state\.nested\[0\]\.value.*Opaque"):
        await store.set("s", other)


async def test_subclasses_are_refused(store: SessionStore | FileSessionStore) -> None:
    class Custom(AgentSession):
        pass

    with pytest.raises(TypeError, match="AgentSession instances only"):
        await store.set("s", Custom())


async def test_files_are_the_references_snapshots(tmp_path: Path) -> None:
    await FileSessionStore(tmp_path).set("tenant_user-conversation", _session())
    await FileSessionStore(tmp_path, serialization_format="msgpack").set("binary", AgentSession())
    names = sorted(p.name for p in await asyncio.to_thread(lambda: list(tmp_path.iterdir())))
    assert names == ["binary.msgpack", "tenant_user-conversation.json"]  # no lock or temp files left
    snapshot = json.loads((tmp_path / "tenant_user-conversation.json").read_bytes())
    assert snapshot["version"] == "1.0"
    assert snapshot["type"] == "session"
    assert snapshot["state"]["nested"]["messages"][0]["type"] == "message"
    binary = (tmp_path / "binary.msgpack").read_bytes()
    assert not binary.startswith(b"{")
    assert msgspec.msgpack.decode(binary)["version"] == "1.0"


@pytest.mark.parametrize(
    ("session_id", "plain"),
    [
        ("session.id", True),
        ("x" * 128, True),
        ("two words", False),
        ("café", False),
        ("CON", False),
        ("con", False),
    ],
)
async def test_ids_that_are_not_plain_file_names_are_encoded(
    tmp_path: Path, session_id: str, plain: bool
) -> None:
    store = FileSessionStore(tmp_path)
    await store.set(session_id, AgentSession(session_id="x"))
    path = store.session_file(session_id)
    assert path.parent == tmp_path
    assert path.is_file()
    assert path.name.startswith("~session-") is not plain
    assert await store.get(session_id) is not None


async def test_a_corrupt_file_is_quarantined_and_a_retry_finds_nothing(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.set("s", AgentSession())
    store.session_file("s").write_text("{not-json", encoding="utf-8")
    with pytest.raises(SessionFormatError, match=r"quarantined.*retry"):
        await store.get("s")
    assert await asyncio.to_thread(lambda: list(tmp_path.glob(".*.corrupt")))
    assert await store.get("s") is None


@pytest.mark.parametrize(
    ("snapshot", "message"),
    [
        (
            {"type": "session", "version": "1.1", "session_id": "s", "state": {}},
            "Unsupported session snapshot",
        ),
        ({"type": "session", "version": "1.0", "session_id": 123, "state": {}}, "invalid schema"),
        (
            {
                "type": "session",
                "version": "1.0",
                "session_id": "s",
                "state": {"m": {"type": "message", "role": "user", "contents": [123]}},
            },
            "Failed to restore session state",
        ),
    ],
)
async def test_a_file_that_decodes_but_holds_no_valid_session_is_kept(
    tmp_path: Path, snapshot: dict[str, Any], message: str
) -> None:
    store = FileSessionStore(tmp_path)
    path = store.session_file("s")
    path.write_text(json.dumps(snapshot), encoding="utf-8")
    with pytest.raises(SessionFormatError, match=message):
        await store.get("s")
    assert path.exists()
    assert not await asyncio.to_thread(lambda: list(tmp_path.glob(".*.corrupt")))


async def test_a_linked_session_file_is_refused(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    (tmp_path / "elsewhere.json").write_text("{}", encoding="utf-8")
    (tmp_path / "s.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ValueError, match="escaped storage directory"):
        await store.get("s")


async def test_concurrent_writers_each_write_a_whole_file(tmp_path: Path) -> None:
    stores = [FileSessionStore(tmp_path) for _ in range(4)]
    async with asyncio.timeout(30):
        await asyncio.gather(
            *(s.set("shared", AgentSession(session_id=f"w{i}")) for i, s in enumerate(stores))
        )
    restored = await stores[0].get("shared")
    assert restored is not None
    assert restored.session_id in {"w0", "w1", "w2", "w3"}


async def test_a_tenants_session_keeps_its_tenant(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.set("s", AgentSession(session_id="c", isolation_key="alice"))
    restored = await store.get("s")
    assert restored is not None
    assert restored.isolation_key == "alice"
