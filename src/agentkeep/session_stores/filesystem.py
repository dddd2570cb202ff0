"""A session store on the local file system: one JSON file per session, written atomically.

Layout under ``root_dir`` (default ``$XDG_DATA_HOME/agentkeep/sessions``, or
``~/.local/share/agentkeep/sessions``)::

    <root_dir>/<agent>/<conversation>.json   {"format": 1, "version": n, "agent": ...,
                                              "conversation_id": ..., "session": {...}}
    <root_dir>/<agent>/<conversation>.lock   empty; locked (flock) while a save or delete runs

``<agent>`` and ``<conversation>`` are the agent key and conversation id encoded by
:func:`encode_file_name`: ``a``-``z``, ``0``-``9``, ``-`` and ``_`` stay as they are, every other
byte of the UTF-8 text becomes ``%XX``, and a name longer than 120 characters becomes a prefix plus
its SHA-256. Any id is therefore a single, plain, ASCII file name: no ``/``, no ``..``, no leading
dot, no NUL, never two ids that differ only in case on a case-insensitive file system.

**Atomic and safe against other processes.** A save writes a temporary file in the same folder,
fsyncs it, renames it over the session file (``os.replace``) and fsyncs the folder, so a reader
sees the old or the new session, never half of one. The compare-and-set of the optimistic version
(read the stored version, check it, write) runs under an exclusive lock on the session's lock file,
which works between threads and processes on one machine (not across network file systems
without working ``flock``). All file I/O runs in worker threads (``asyncio.to_thread``).

**Links are never followed.** The agent folders and every file in them are opened relative to
their folder with ``O_NOFOLLOW`` (on systems with ``dir_fd``): a symbolic link planted as an agent
folder, a session file or a lock file makes the operation fail with
:class:`~agentkeep.errors.StorageUnavailableError`, instead of writing or creating the link's
target. The root folder itself may be a link (the operator's choice), but one that other users can
write to is tightened to owner-only when it is ours and refused when it is not.

A file that is not valid JSON, has the wrong shape, or holds another conversation raises
:class:`~agentkeep.errors.SessionFormatError` naming the file; it is never replaced silently
(``delete_session`` removes it).

**Encryption at rest.** Given a :class:`~agentkeep.encryption.KeyRing`, the store keeps the
``"session"`` of each file in its encrypted envelope (JSON too), bound to the agent, the
conversation id and the version it is stored as; :meth:`FileSystemSessionStore.stored_payloads`
and :meth:`FileSystemSessionStore.replace_payload`
(:class:`~agentkeep.session_stores.base.SupportsPayloadRewrite`) let ``agentkeep keys rotate`` re-encrypt
them in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import stat
import sys
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote_to_bytes

import msgspec

from .._files import Folder, LockError, path_from_url
from ..errors import (
    SchemaVersionError,
    SessionFormatError,
    StorageClosedError,
    StorageUnavailableError,
    StoreURLError,
)
from ..sessions import AgentSession
from .base import (
    AgentSessionStore,
    StoredPayload,
    agent_key,
    check_conversation_id,
    conflict_error,
    encode_session,
    restore_session,
    session_version,
    set_session_version,
)

if TYPE_CHECKING:
    from ..agent import Agent
    from ..encryption import KeyRing

__all__ = ["FILE_FORMAT_VERSION", "FileSystemSessionStore", "default_session_dir", "encode_file_name"]

FILE_FORMAT_VERSION: Final = 1
"""The layout version written into every session file; files of newer versions are refused."""

_SAFE_BYTES: Final = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-_")
_MAX_NAME: Final = 120
_HASHED_PREFIX: Final = 64


class _SessionFile(msgspec.Struct):
    """The content of one session file (``session`` is kept as raw JSON until restored)."""

    format: int
    version: int
    agent: str
    conversation_id: str
    session: msgspec.Raw


def default_session_dir() -> Path:
    """``$XDG_DATA_HOME/agentkeep/sessions``, or ``~/.local/share/agentkeep/sessions``."""
    data_home = os.environ.get("XDG_DATA_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "agentkeep" / "sessions"


def encode_file_name(text: str) -> str:
    """``text`` as a safe, case-insensitively unique file name (see the module docs).

    Example:
        ```python
        encode_file_name("user-42")  # "user-42"
        encode_file_name("../Etc")  # "%2E%2E%2F%45tc"
        ```
    """
    raw = text.encode("utf-8", "surrogatepass")
    encoded = "".join(chr(byte) if byte in _SAFE_BYTES else f"%{byte:02X}" for byte in raw)
    if len(encoded) <= _MAX_NAME:
        return encoded
    # "~" never occurs in an encoded name (it would be "%7E"), so hashed names cannot collide
    # with plain ones.
    return f"{encoded[:_HASHED_PREFIX]}~{hashlib.sha256(raw).hexdigest()}"


def _decode_file_name(name: str) -> str | None:
    """The text :func:`encode_file_name` made ``name`` of, or ``None`` for a hashed name (or one
    it never makes)."""
    try:
        text = unquote_to_bytes(name).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if encode_file_name(text) == name else None


class FileSystemSessionStore(AgentSessionStore):
    """Sessions as JSON files under ``root_dir``, safe for several processes on one machine.

    Args:
        root_dir: The folder holding the sessions (created on the first save, mode 0700);
            ``~`` is expanded. Default: :func:`default_session_dir`.
        lock_timeout: Seconds a save or delete waits for another writer's lock on the same
            session before raising :class:`~agentkeep.errors.StorageUnavailableError`.
        key_ring: Encrypt session payloads with its current key (decrypt with any of its keys);
            see :mod:`agentkeep.encryption`.

    Example:
        ```python
        store = FileSystemSessionStore("~/.myapp/sessions")
        session = await store.get_session(agent, "conversation-1")
        await agent.run("Hello", session=session)
        await store.save_session(agent, "conversation-1", session)
        ```
    """

    backend = "filesystem"

    def __init__(
        self,
        root_dir: str | os.PathLike[str] | None = None,
        *,
        lock_timeout: float = 30.0,
        key_ring: KeyRing | None = None,
    ) -> None:
        if lock_timeout <= 0:
            raise ValueError("lock_timeout must be > 0")
        root = Path(root_dir).expanduser() if root_dir is not None else default_session_dir()
        self.root_dir = root.absolute()
        self.lock_timeout = lock_timeout
        self.key_ring = key_ring
        self._closed = False

    @classmethod
    def from_url(
        cls, url: str, *, lock_timeout: float = 30.0, key_ring: KeyRing | None = None
    ) -> FileSystemSessionStore:
        """A store in the folder ``url`` names (``file:///abs/folder``, ``~`` expanded).

        Raises:
            StoreURLError: Not a ``file://`` URL, one with a query, or one naming no folder.
        """
        root = path_from_url(url, scheme="file")
        if root is None:
            raise StoreURLError(f"store URL {url!r}: name the folder (file:///path/to/sessions)")
        return cls(root, lock_timeout=lock_timeout, key_ring=key_ring)

    def session_path(self, agent: Agent, conversation_id: str) -> Path:
        """The file that holds (or would hold) the session of ``agent`` under ``conversation_id``."""
        check_conversation_id(conversation_id)
        return self._file_path(agent_key(agent), conversation_id)

    def _file_path(self, agent: str, conversation_id: str) -> Path:
        return self.root_dir / encode_file_name(agent) / f"{encode_file_name(conversation_id)}.json"

    # -- the contract ---------------------------------------------------------------------------
    async def save_session(self, agent: Agent, conversation_id: str, session: AgentSession) -> None:
        """Write ``session`` to its file, atomically, if its version is still the stored one.

        Raises:
            ConflictError: The stored version is not the one ``session`` was read at (the file is
                left untouched).
            SessionFormatError: A state value cannot be serialized, or the stored file is corrupt.
            StorageUnavailableError: The folder cannot be written, or the lock was not obtained in
                ``lock_timeout`` seconds.
            StorageClosedError: The store is closed.
        """
        path = self.session_path(agent, conversation_id)
        self._check_open()
        # Bound to session_version + 1: the version _save_sync writes (it refuses any other).
        payload = encode_session(agent, session, conversation_id=conversation_id, key_ring=self.key_ring)
        version = await asyncio.to_thread(
            self._save_sync, path, agent_key(agent), conversation_id, payload, session_version(session)
        )
        set_session_version(session, version)

    async def get_session(self, agent: Agent, conversation_id: str) -> AgentSession:
        """The stored session, or a new empty one (``session_id=conversation_id``).

        Raises:
            SessionFormatError: The file is corrupt, holds another conversation, or its session
                cannot be restored by ``agent``.
            SchemaVersionError: The file was written by a newer agentkeep.
            DecryptionError: The payload is encrypted under a key the ring does not hold, or does
                not decrypt with it (nothing is changed).
            StorageUnavailableError: The file exists but cannot be read.
            StorageClosedError: The store is closed.
        """
        path = self.session_path(agent, conversation_id)
        self._check_open()
        record = await asyncio.to_thread(self._read, path, agent_key(agent), conversation_id)
        if record is None:
            return agent.create_session(session_id=conversation_id)
        where = f"{self.backend}: session file {path}"
        return restore_session(
            agent,
            bytes(record.session),
            version=record.version,
            where=where,
            backend=self.backend,
            conversation_id=conversation_id,
            key_ring=self.key_ring,
        )

    async def delete_session(self, agent: Agent, conversation_id: str) -> bool:
        """Remove the session's file (even a corrupt one); ``False`` if there was none.

        Raises:
            StorageUnavailableError: The file cannot be removed, or the lock was not obtained.
            StorageClosedError: The store is closed.
        """
        path = self.session_path(agent, conversation_id)
        self._check_open()
        return await asyncio.to_thread(self._delete_sync, path)

    # -- payloads as stored (SupportsPayloadRewrite, for key rotation) ---------------------------
    async def stored_payloads(
        self, *, after: tuple[str, str] | None = None, limit: int = 100
    ) -> list[StoredPayload]:
        """Up to ``limit`` stored sessions ordered by (agent, conversation id) (code-point order),
        strictly after ``after``.

        The folders keep no order: every call lists all agent folders (opened as everywhere
        else, never through a link) and sorts here. Only the files returned are read, plus those
        whose name is a hash (a long id: only the file says whose it is). Skipped: links, files
        that are not session files or do not decode, and files holding another conversation than
        their name says (as :meth:`get_session` refuses them).

        Raises:
            ValueError: ``limit`` is less than 1.
            SchemaVersionError: A file was written by a newer agentkeep.
            StorageUnavailableError: A folder or file cannot be read.
            StorageClosedError: The store is closed.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._check_open()
        return await asyncio.to_thread(self._stored_payloads_sync, after, limit)

    async def replace_payload(self, stored: StoredPayload, payload: bytes) -> bool:
        """Write ``payload`` as the session of ``stored``'s file if the file still holds the same
        version and payload bytes, keeping its version; ``False`` if it changed (or was deleted)
        meanwhile. Checked and written under the session's lock, atomically, as a save is.

        Raises:
            ValueError: ``payload`` is not JSON (a file embeds it as JSON).
            StorageUnavailableError: The file cannot be written, or the lock was not obtained.
            StorageClosedError: The store is closed.
        """
        check_conversation_id(stored.conversation_id)
        self._check_open()
        try:
            msgspec.json.decode(payload)
        except msgspec.DecodeError as exc:
            raise ValueError(f"a session payload must be JSON: {exc}") from exc
        return await asyncio.to_thread(self._replace_sync, stored, payload)

    async def aclose(self) -> None:
        """Mark the store closed (it holds no open files between calls)."""
        self._closed = True

    def __repr__(self) -> str:
        return f"FileSystemSessionStore({str(self.root_dir)!r})"

    # -- blocking helpers (run in worker threads) ------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosedError("the session store is closed", backend=self.backend)

    def _unavailable(self, what: str, path: Path, exc: OSError) -> StorageUnavailableError:
        message = f"cannot {what} {path}: {exc}"
        return StorageUnavailableError(message, backend=self.backend, address=str(path))

    def _check_root(self) -> None:
        """Create the root folder (mode 0700), and tighten or refuse one others can write to."""
        root = self.root_dir
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.stat(root)
        except OSError as exc:
            raise self._unavailable("create folder", root, exc) from exc
        if not stat.S_ISDIR(info.st_mode):
            raise StorageUnavailableError(f"{root} is not a folder", backend=self.backend, address=str(root))
        if info.st_mode & 0o022 and sys.platform != "win32":
            if info.st_uid != os.getuid():
                raise StorageUnavailableError(
                    f"refusing the session folder {root}: other users can write to it and it is "
                    "not ours to tighten",
                    backend=self.backend,
                    address=str(root),
                )
            try:
                os.chmod(root, stat.S_IMODE(info.st_mode) & 0o700)
            except OSError as exc:
                raise self._unavailable("tighten the permissions of", root, exc) from exc

    @contextlib.contextmanager
    def _folder(self, path: Path, *, create: bool) -> Generator[Folder | None]:
        """The agent folder of ``path``, opened without following a link (``None`` if missing and
        not ``create``)."""
        if create:
            self._check_root()
        yield from self._opened(path.parent, create=create, missing=() if create else (errno.ENOENT,))

    def _opened(self, folder: Path, *, create: bool, missing: tuple[int, ...]) -> Generator[Folder | None]:
        try:
            opened = Folder.opened(folder, create=create)
        except OSError as exc:
            if exc.errno in missing:
                yield None
                return
            raise self._unavailable("open folder", folder, exc) from exc
        try:
            yield opened
        finally:
            opened.close()

    def _save_sync(
        self, path: Path, agent: str, conversation_id: str, payload: bytes, expected: int | None
    ) -> int:
        with self._folder(path, create=True) as folder:
            assert folder is not None
            with self._locked(folder, path.with_suffix(".lock")):
                record = self._read_in(folder, path, agent, conversation_id)
                current = record.version if record is not None else None
                if current != expected:
                    raise conflict_error(
                        self.backend, agent, conversation_id, expected=expected, current=current
                    )
                version = (current or 0) + 1
                data = msgspec.json.encode(
                    _SessionFile(FILE_FORMAT_VERSION, version, agent, conversation_id, msgspec.Raw(payload))
                )
                self._write_atomic(folder, path, data)
        return version

    def _read(self, path: Path, agent: str, conversation_id: str) -> _SessionFile | None:
        with self._folder(path, create=False) as folder:
            return None if folder is None else self._read_in(folder, path, agent, conversation_id)

    def _read_in(self, folder: Folder, path: Path, agent: str, conversation_id: str) -> _SessionFile | None:
        record = self._read_record(folder, path)
        if record is not None and (record.agent, record.conversation_id) != (agent, conversation_id):
            raise SessionFormatError(
                f"{self.backend}: session file {path} holds conversation {record.conversation_id!r} "
                f"of agent {record.agent!r}, not {conversation_id!r} of {agent!r}"
            )
        return record

    def _read_record(self, folder: Folder, path: Path) -> _SessionFile | None:
        """The session file ``path`` in ``folder``, whoever's it is (``None`` if missing).

        Raises:
            SessionFormatError: It does not decode, or has an unknown format or invalid version.
            SchemaVersionError: It was written by a newer agentkeep.
            StorageUnavailableError: It cannot be read.
        """
        try:
            data = folder.read(path.name)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._unavailable("read", path, exc) from exc
        try:
            record = msgspec.json.decode(data, type=_SessionFile)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise SessionFormatError(f"{self.backend}: session file {path} is corrupt: {exc}") from exc
        where = f"{self.backend}: session file {path}"
        if record.format != FILE_FORMAT_VERSION:
            if record.format > FILE_FORMAT_VERSION:
                raise SchemaVersionError(
                    f"{where} has format {record.format}, written by a newer agentkeep "
                    f"(this one reads format {FILE_FORMAT_VERSION})",
                    backend=self.backend,
                )
            raise SessionFormatError(f"{where} has unknown format {record.format}")
        if record.version < 1:
            raise SessionFormatError(f"{where} has invalid version {record.version}")
        return record

    def _stored_payloads_sync(self, after: tuple[str, str] | None, limit: int) -> list[StoredPayload]:
        try:
            folder_names = os.listdir(self.root_dir)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._unavailable("list folder", self.root_dir, exc) from exc
        # (agent, conversation id) -> the file's path, and its content if already read
        found: dict[tuple[str, str], tuple[Path, _SessionFile | None]] = {}
        for folder_name in folder_names:
            if folder_name.startswith("."):
                continue  # never an agent folder (encoded names start with no dot)
            agent = _decode_file_name(folder_name)
            with self._listed_folder(self.root_dir / folder_name) as folder:
                if folder is None:
                    continue
                for name in folder.names():
                    if name.startswith(".") or not name.endswith(".json"):
                        continue  # a lock or temporary file
                    path = folder.path / name
                    conversation_id = _decode_file_name(name.removesuffix(".json"))
                    if agent is not None and conversation_id is not None:
                        found[(agent, conversation_id)] = (path, None)
                        continue
                    # A hashed name: only the file says whose it is (if it is where that one's is).
                    record = self._listed_record(folder, path)
                    if record is not None and path == self._file_path(record.agent, record.conversation_id):
                        found[(record.agent, record.conversation_id)] = (path, record)
        stored: list[StoredPayload] = []
        for key in sorted(k for k in found if after is None or k > after):
            path, record = found[key]
            if record is None:
                with self._listed_folder(path.parent) as folder:
                    record = None if folder is None else self._listed_record(folder, path, key)
            if record is not None:
                stored.append(StoredPayload(key[0], key[1], record.version, bytes(record.session)))
                if len(stored) == limit:
                    break
        return stored

    @contextlib.contextmanager
    def _listed_folder(self, path: Path) -> Generator[Folder | None]:
        """The folder ``path`` opened as :meth:`_folder` does, or ``None`` if it is gone, a link
        or no folder."""
        yield from self._opened(path, create=False, missing=(errno.ENOENT, errno.ELOOP, errno.ENOTDIR))

    def _listed_record(
        self, folder: Folder, path: Path, key: tuple[str, str] | None = None
    ) -> _SessionFile | None:
        """The session file ``path`` (``key``'s), or ``None`` if it is gone, a link, not a
        session file, or (with ``key``) another conversation's."""
        try:
            if key is None:
                return self._read_record(folder, path)
            return self._read_in(folder, path, *key)
        except SessionFormatError:
            return None
        except StorageUnavailableError as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno in (errno.ELOOP, errno.EISDIR):
                return None  # a link planted as a session file (never followed), or a folder
            raise

    def _replace_sync(self, stored: StoredPayload, payload: bytes) -> bool:
        agent, conversation_id = stored.agent, stored.conversation_id
        path = self._file_path(agent, conversation_id)
        with self._folder(path, create=False) as folder:
            if folder is None or not folder.exists(path.name):
                return False
            with self._locked(folder, path.with_suffix(".lock")):
                try:
                    record = self._read_in(folder, path, agent, conversation_id)
                except SessionFormatError:
                    return False  # not what was listed any more
                if (
                    record is None
                    or record.version != stored.version
                    or bytes(record.session) != stored.payload
                ):
                    return False
                data = msgspec.json.encode(
                    _SessionFile(
                        FILE_FORMAT_VERSION, record.version, agent, conversation_id, msgspec.Raw(payload)
                    )
                )
                self._write_atomic(folder, path, data)
        return True

    def _write_atomic(self, folder: Folder, path: Path, data: bytes) -> None:
        try:
            folder.write_atomic(path.name, data)
        except OSError as exc:
            raise self._unavailable("write", path, exc) from exc

    def _delete_sync(self, path: Path) -> bool:
        with self._folder(path, create=False) as folder:
            if folder is None or not folder.exists(path.name):
                return False
            lock_path = path.with_suffix(".lock")
            with self._locked(folder, lock_path):
                try:
                    folder.unlink(path.name)
                except FileNotFoundError:
                    return False
                except OSError as exc:
                    raise self._unavailable("delete", path, exc) from exc
                # Safe while we hold it: a writer that opened this lock file before the unlink
                # sees, once it gets the lock, that the name no longer is its file, and starts over.
                with contextlib.suppress(OSError):
                    folder.unlink(lock_path.name)
            folder.fsync()
        return True

    @contextlib.contextmanager
    def _locked(self, folder: Folder, lock_path: Path) -> Generator[None]:
        """Hold an exclusive lock on ``lock_path`` (created if missing, never through a link)."""
        try:
            with folder.locked(lock_path.name, timeout=self.lock_timeout):
                yield
        except TimeoutError as exc:
            raise StorageUnavailableError(
                f"timed out after {self.lock_timeout}s waiting for the lock {lock_path}",
                backend=self.backend,
                address=str(lock_path),
            ) from exc
        except LockError as exc:
            raise self._unavailable(exc.what, lock_path, exc.os_error) from exc.os_error
