"""FileSystemSessionStore beyond the conformance suite: file names, layout, atomicity, locks, faults."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkeep import Agent, ConflictError, SchemaVersionError, SessionFormatError, StorageUnavailableError
from agentkeep.session_stores import FileSystemSessionStore, session_version
from agentkeep.session_stores.filesystem import FILE_FORMAT_VERSION, default_session_dir, encode_file_name
from agentkeep.testing import ScriptedChatClient

HOSTILE_IDS = [
    "../../../etc/passwd",
    "/abs/olute",
    "..",
    ".",
    ".hidden",
    "nul\x00byte",
    "new\nline",
    "C:\\Windows\\system32",
    "CON",
    "Chat",
    "chat",
    "x" * 5000,
    "ü" * 300,
]


def make_agent(name: str = "helper") -> Agent:
    return Agent(ScriptedChatClient(), name=name)


def names_in(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


@contextlib.contextmanager
def holding_lock(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        yield


async def save_new(store: FileSystemSessionStore, agent: Agent, conversation_id: str, **state: Any) -> None:
    session = await store.get_session(agent, conversation_id)
    for key, value in state.items():
        session.state[key] = value
    await store.save_session(agent, conversation_id, session)


# -- file names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("chat-1", "chat-1"),
        ("snake_case", "snake_case"),
        ("3f2a9c", "3f2a9c"),
        ("Chat", "%43hat"),
        ("../x", "%2E%2E%2Fx"),
        ("a b", "a%20b"),
        ("nul\x00", "nul%00"),
        ("%", "%25"),
        ("~", "%7E"),
        ("é", "%C3%A9"),
    ],
)
def test_file_names_keep_safe_characters_and_encode_the_rest(text: str, name: str) -> None:
    assert encode_file_name(text) == name


def test_long_names_are_hashed_and_stay_distinct() -> None:
    first, second = encode_file_name("x" * 500), encode_file_name("x" * 499 + "y")
    assert first != second
    assert first.startswith("x" * 64 + "~")
    assert len(first) <= 129
    assert encode_file_name("x" * 120) == "x" * 120  # at the limit: still readable


def test_encoded_names_are_single_safe_components() -> None:
    names = [encode_file_name(text) for text in HOSTILE_IDS]
    assert len({name.lower() for name in names}) == len(names)  # unique even ignoring case
    for name in names:
        assert name.isascii()
        assert not {"/", "\\", "\x00"} & set(name)
        assert not name.startswith(".")
        assert 0 < len(name) <= 129


# -- layout -------------------------------------------------------------------------------------


async def test_hostile_ids_stay_inside_the_root_folder(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = FileSystemSessionStore(root)
    agents = [make_agent(), make_agent("../../escape"), make_agent("/etc")]
    for agent in agents:
        for index, conversation_id in enumerate(HOSTILE_IDS):
            await save_new(store, agent, conversation_id, index=index)
    for agent in agents:
        for index, conversation_id in enumerate(HOSTILE_IDS):
            session = await store.get_session(agent, conversation_id)
            assert session.state["index"] == index
    assert names_in(tmp_path) == ["sessions"]  # nothing escaped
    files = files_under(root)
    assert len(files) == 2 * len(agents) * len(HOSTILE_IDS)  # a .json and a .lock per session
    for path in files:
        assert path.resolve().parent.parent == root.resolve()
        assert path.suffix in {".json", ".lock"}


async def test_files_are_readable_json_with_version_and_session(tmp_path: Path) -> None:
    store = FileSystemSessionStore(tmp_path)
    agent = make_agent()
    await save_new(store, agent, "chat-1", note="hi")
    session = await store.get_session(agent, "chat-1")
    await store.save_session(agent, "chat-1", session)
    path = tmp_path / "helper" / "chat-1.json"
    assert store.session_path(agent, "chat-1") == path
    content = json.loads(path.read_bytes())
    assert content["format"] == FILE_FORMAT_VERSION
    assert content["version"] == 2
    assert (content["agent"], content["conversation_id"]) == ("helper", "chat-1")
    assert content["session"]["session_id"] == "chat-1"
    assert content["session"]["state"] == {"note": "hi"}
    assert names_in(path.parent) == ["chat-1.json", "chat-1.lock"]  # no temp files
    if os.name == "posix":
        assert path.stat().st_mode & 0o777 == 0o600


async def test_delete_removes_the_session_and_its_lock_file(tmp_path: Path) -> None:
    store = FileSystemSessionStore(tmp_path)
    agent = make_agent()
    await save_new(store, agent, "c", n=1)
    assert await store.delete_session(agent, "c") is True
    assert names_in(tmp_path / "helper") == []
    await save_new(store, agent, "c", n=2)  # the lock file comes back
    assert (await store.get_session(agent, "c")).state["n"] == 2


def test_the_default_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_session_dir() == tmp_path / "data" / "agentkeep" / "sessions"
    assert FileSystemSessionStore().root_dir == tmp_path / "data" / "agentkeep" / "sessions"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    assert default_session_dir() == tmp_path / "home" / ".local" / "share" / "agentkeep" / "sessions"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_session_dir() == tmp_path / "home" / ".local" / "share" / "agentkeep" / "sessions"
    assert FileSystemSessionStore("~/mine").root_dir == tmp_path / "home" / "mine"


async def test_ids_that_are_not_valid_unicode_are_refused(tmp_path: Path) -> None:
    store = FileSystemSessionStore(tmp_path)
    agent = make_agent()
    with pytest.raises(ValueError, match="not valid Unicode"):
        await store.get_session(agent, "lone surrogate \udcff")
    with pytest.raises(ValueError, match="not valid Unicode"):
        await store.save_session(agent, "lone surrogate \udcff", agent.create_session())
    assert encode_file_name("\udcff") == "%ED%B3%BF"  # names never fail, even so


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="lock_timeout"):
        FileSystemSessionStore("x", lock_timeout=0)


# -- corrupt and foreign files ------------------------------------------------------------------


async def test_a_corrupt_file_is_named_and_never_replaced(tmp_path: Path) -> None:
    store = FileSystemSessionStore(tmp_path)
    agent = make_agent()
    await save_new(store, agent, "c")
    stale = await store.get_session(agent, "c")
    path = store.session_path(agent, "c")
    path.write_bytes(b"{ this is not json")
    with pytest.raises(SessionFormatError, match=str(path)):
        await store.get_session(agent, "c")
    with pytest.raises(SessionFormatError, match=str(path)):
        await store.save_session(agent, "c", stale)
    assert path.read_bytes() == b"{ this is not json"


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda c: c.pop("version"), SessionFormatError),
        (lambda c: c.update(version="1"), SessionFormatError),
        (lambda c: c.update(version=0), SessionFormatError),
        (lambda c: c.update(format=0), SessionFormatError),
        (lambda c: c.update(format=FILE_FORMAT_VERSION + 1), SchemaVersionError),
        (lambda c: c.update(conversation_id="someone-else"), SessionFormatError),
        (lambda c: c.update(agent="other-agent"), SessionFormatError),
        (lambda c: c["session"].update(version=99), SessionFormatError),
        (lambda c: c.update(session=[1, 2]), SessionFormatError),
    ],
)
async def test_files_of_the_wrong_shape_are_refused(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], Any], error: type[Exception]
) -> None:
    store = FileSystemSessionStore(tmp_path)
    agent = make_agent()
    await save_new(store, agent, "c")
    path = store.session_path(agent, "c")
    content = json.loads(path.read_bytes())
    mutate(content)
    path.write_text(json.dumps(content))
    with pytest.raises(error, match=str(path)):
        await store.get_session(agent, "c")


async def test_a_file_that_cannot_be_read_is_reported(tmp_path: Path) -> None:
    store = FileSystemSessionStore(tmp_path)
    agent = make_agent()
    store.session_path(agent, "c").mkdir(parents=True)  # a folder where the file should be
    with pytest.raises(StorageUnavailableError) as caught:
        await store.get_session(agent, "c")
    assert caught.value.address == str(store.session_path(agent, "c"))


async def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileSystemSessionStore(tmp_path)
    agent = make_agent()
    await save_new(store, agent, "c", value="old")
    session = await store.get_session(agent, "c")
    session.state["value"] = "new"

    def broken_replace(src: Any, dst: Any, **_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(StorageUnavailableError, match="No space left"):
        await store.save_session(agent, "c", session)
    monkeypatch.undo()
    assert session_version(session) == 1
    assert (await store.get_session(agent, "c")).state["value"] == "old"
    assert names_in(tmp_path / "helper") == ["c.json", "c.lock"]
    await store.save_session(agent, "c", session)  # and the store still works
    assert (await store.get_session(agent, "c")).state["value"] == "new"


# -- locks and threads --------------------------------------------------------------------------


async def test_a_held_lock_times_out_instead_of_hanging(tmp_path: Path) -> None:
    store = FileSystemSessionStore(tmp_path, lock_timeout=0.2)
    agent = make_agent()
    await save_new(store, agent, "c")
    session = await store.get_session(agent, "c")
    lock_path = store.session_path(agent, "c").with_suffix(".lock")
    with holding_lock(lock_path):  # another writer, stuck
        async with asyncio.timeout(30):  # a hang guard: the store's own lock timeout fires first
            with pytest.raises(StorageUnavailableError, match="timed out"):
                await store.save_session(agent, "c", session)
        assert list((await store.get_session(agent, "c")).state.keys()) == []  # reads need no lock
    await store.save_session(agent, "c", session)
    assert session_version(session) == 2


async def test_saves_and_deletes_racing_keep_the_store_consistent(tmp_path: Path) -> None:
    store = FileSystemSessionStore(tmp_path)
    agent = make_agent()

    async def churn(worker: int) -> None:
        for round_ in range(15):
            session = await store.get_session(agent, "hot")
            session.state["last"] = [worker, round_]
            with contextlib.suppress(ConflictError):  # losing a race is fine; anything else is not
                await store.save_session(agent, "hot", session)
            if round_ % 5 == worker % 5:
                await store.delete_session(agent, "hot")

    await asyncio.gather(*(churn(worker) for worker in range(6)))
    final = await store.get_session(agent, "hot")
    names = names_in(tmp_path / "helper")
    assert names in ([], ["hot.lock"], ["hot.json", "hot.lock"])
    if "hot.json" in names:
        assert session_version(final) is not None


async def test_file_io_stays_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_loop: list[str] = []

    def spy(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass  # a worker thread: fine
            else:
                on_loop.append(name)
            return function(*args, **kwargs)

        return wrapper

    for name in ("open", "replace", "fsync", "unlink", "stat", "mkdir"):
        monkeypatch.setattr(os, name, spy(name, getattr(os, name)))
    monkeypatch.setattr(Path, "read_bytes", spy("read_bytes", Path.read_bytes))
    store = FileSystemSessionStore(tmp_path)
    agent = make_agent()
    await save_new(store, agent, "c", n=1)
    session = await store.get_session(agent, "c")
    await store.save_session(agent, "c", session)
    assert await store.delete_session(agent, "c") is True
    monkeypatch.undo()
    assert on_loop == []


# -- links and permissions ----------------------------------------------------------------------


async def test_a_link_planted_as_the_agent_folder_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "sessions", tmp_path / "outside"
    root.mkdir(mode=0o700)
    outside.mkdir()
    (root / "helper").symlink_to(outside, target_is_directory=True)
    store = FileSystemSessionStore(root)
    agent = make_agent()
    with pytest.raises(StorageUnavailableError, match="open folder"):
        await save_new(store, agent, "c", value="secret")
    with pytest.raises(StorageUnavailableError):
        await store.get_session(agent, "c")
    with pytest.raises(StorageUnavailableError):
        await store.delete_session(agent, "c")
    assert list(outside.iterdir()) == []  # nothing written through the link


async def test_a_link_planted_as_the_lock_file_is_refused_and_its_target_not_created(tmp_path: Path) -> None:
    store = FileSystemSessionStore(tmp_path / "sessions")
    agent = make_agent()
    await save_new(store, agent, "c", value="old")
    lock = store.session_path(agent, "c").with_suffix(".lock")
    lock.unlink()
    target = tmp_path / "created-through-the-link"
    lock.symlink_to(target)
    session = await store.get_session(agent, "c")
    session.state["value"] = "new"
    with pytest.raises(StorageUnavailableError, match="lock file"):
        await store.save_session(agent, "c", session)
    assert not target.exists()
    assert (await store.get_session(agent, "c")).state["value"] == "old"


async def test_a_link_planted_as_a_session_file_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    store = FileSystemSessionStore(tmp_path / "sessions")
    agent = make_agent()
    await save_new(store, agent, "other", value="x")  # creates the agent folder
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    path = store.session_path(agent, "c")
    path.symlink_to(victim)
    with pytest.raises(StorageUnavailableError, match="read"):
        await store.get_session(agent, "c")
    assert victim.read_text() == "precious"


async def test_a_root_others_can_write_to_is_tightened_when_ours(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    store = FileSystemSessionStore(root)
    await save_new(store, make_agent(), "c", value=1)
    assert root.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
async def test_a_root_others_can_write_to_is_refused_when_not_ours(tmp_path: Path) -> None:
    root = tmp_path / "theirs"
    root.mkdir()
    root.chmod(0o777)
    os.chown(root, 65534, 65534)  # nobody
    with pytest.raises(StorageUnavailableError, match="other users can write"):
        await save_new(FileSystemSessionStore(root), make_agent(), "c", value=1)
    assert list(root.iterdir()) == []
