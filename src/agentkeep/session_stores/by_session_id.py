"""Session stores keyed by a session id alone, the reference Python edition's: :class:`SessionStore`
(in memory) and :class:`FileSessionStore` (one file per session).

Their contract is three async methods: ``get(session_id)`` (``None`` when nothing is stored),
``set(session_id, session)`` and ``delete(session_id)``. The id is opaque (any non-empty text up
to :attr:`FileSessionStore.MAX_SESSION_ID_LENGTH` characters). A stored session is a snapshot:
what ``get`` returns is a new session, never the object that was ``set``, and later changes to
either do not reach the other.

The snapshot is the reference's file format, so the reference reads these files and agentkeep
reads the reference's: ``{"type": "session", "version": "1.0", "session_id", "service_session_id",
"state"}`` (plus ``"isolation_key"`` for a session of a tenant), the state written by
:func:`~agentkeep.state_types.encode_state_value` (registered types and messages tagged, restored
on read). Values JSON cannot carry (NaN, an infinity, a lone surrogate) are refused when a
session is stored, with a ``ValueError`` naming the state key.

:class:`FileSessionStore` keeps each session in ``<storage_path>/<name>.json`` (or ``.msgpack``):
an id of letters, digits, ``.``, ``_`` and ``-`` (not starting with a dot, not a reserved
Windows name, at most 128 characters) is its own name; any other id is ``~session-`` and its
UTF-8 in base 32 (or its SHA-256, when that is too long). Files are written atomically (a
temporary file renamed over the name) and opened without following links (a link is refused). A
file that does not decode is moved aside to ``.<name>.<random>.corrupt`` and the read raises (a
retry then finds no session); a file that decodes but holds no valid session (an unknown
version, wrong field types, a state value a registered type refuses) raises and is left as it is.

These sit next to the hosting layer's :class:`~agentkeep.session_stores.AgentSessionStore` family (keyed
by agent and conversation, versioned for optimistic concurrency); the file mechanics are shared
with :class:`~agentkeep.session_stores.FileSystemSessionStore` (:mod:`agentkeep._files`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import hashlib
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, cast

import msgspec

from .._files import Folder
from .._json_values import json_problem
from ..errors import SessionFormatError, StateTypeError
from ..sessions import AgentSession
from ..state_types import StateRestoreError, encode_state_value, revive_state_value

__all__ = ["FileSessionStore", "SerializationFormat", "SessionStore", "session_file_name"]

SerializationFormat = Literal["json", "msgpack"]

SNAPSHOT_VERSION: Final = "1.0"
"""The version of the reference's session snapshot, written into every snapshot."""

_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9._\-]{0,127}")
_RESERVED: Final = frozenset(
    {"CON", "PRN", "AUX", "NUL", *(f"COM{n}" for n in range(10)), *(f"LPT{n}" for n in range(10))}
)
_RESERVED_DIGITS: Final = "0123456789¹²³"
_ENCODED_PREFIX: Final = "~session-"
_MAX_ENCODED: Final = 200


def _check_session_id(session_id: object, limit: int) -> str:
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"session_id must be a non-empty string, not {session_id!r}")
    if len(session_id) > limit:
        raise ValueError(f"session_id is longer than {limit} characters ({len(session_id)})")
    return session_id


def _reserved(stem: str) -> bool:
    base = stem.split(".", 1)[0].upper()
    return base in _RESERVED or (
        len(base) == 4 and base[:3] in ("COM", "LPT") and base[3] in _RESERVED_DIGITS
    )


def session_file_name(session_id: str | None, suffix: str) -> str:
    """The file name a session id is kept under (see the module docs); ``None`` is ``default``."""
    if session_id is None:
        return f"default{suffix}"
    # Lowercase only: one spelling per name on case-insensitive file systems.
    if _SAFE_NAME.fullmatch(session_id) and session_id == session_id.lower() and not _reserved(session_id):
        return f"{session_id}{suffix}"
    raw = session_id.encode("utf-8", "surrogatepass")
    encoded = base64.b32encode(raw).decode("ascii").rstrip("=").lower()
    if len(encoded) > _MAX_ENCODED:
        encoded = "sha256-" + hashlib.sha256(raw).hexdigest()
    return f"{_ENCODED_PREFIX}{encoded}{suffix}"


# -- the snapshot ---------------------------------------------------------------------------------


def _snapshot(session: AgentSession) -> dict[str, Any]:
    """The reference's snapshot of ``session`` (builtins), state values checked for JSON.

    Raises:
        TypeError: ``session`` is not an :class:`AgentSession` itself, or a state value has no
            JSON form (the message names where).
        ValueError: A state value holds what JSON cannot carry (NaN, an infinity, ...).
    """
    if type(session) is not AgentSession:
        raise TypeError(
            f"this store keeps AgentSession instances only, not {type(session).__name__}: a subclass "
            "would come back as an AgentSession"
        )
    state: dict[str, Any] = {}
    for key in session.state:
        value = session.state.get(key)
        encoded = encode_state_value(value, f"state.{key}")
        problem = json_problem(encoded)
        if problem is not None:
            detail = "; a stored session needs a finite float" if "NaN" in problem else ""
            raise ValueError(f"state value {key!r} cannot be stored: {problem}{detail}")
        state[key] = encoded
    snapshot: dict[str, Any] = {
        "type": "session",
        "version": SNAPSHOT_VERSION,
        "session_id": session.session_id,
        "service_session_id": session.service_session_id,
        "state": state,
    }
    if session.isolation_key is not None:
        snapshot["isolation_key"] = session.isolation_key
    return snapshot


def _restore(data: Any, where: str) -> AgentSession:
    """The session of a decoded snapshot, every state value restored now.

    Raises:
        SessionFormatError: Not a snapshot of a known version, fields of the wrong type, or a
            state value that cannot be restored.
    """
    if not isinstance(data, dict):
        raise SessionFormatError(f"{where}: the snapshot has an invalid schema: not an object")
    snapshot = cast("dict[str, Any]", data)
    version = snapshot.get("version")
    if version != SNAPSHOT_VERSION:
        raise SessionFormatError(f"{where}: Unsupported session snapshot version {version!r}")
    if snapshot.get("type", "session") != "session" or not isinstance(snapshot.get("session_id"), str):
        raise SessionFormatError(f"{where}: the snapshot has an invalid schema (type, session_id)")
    try:
        session = AgentSession.from_dict(snapshot, checked=True)
    except SessionFormatError as exc:
        raise SessionFormatError(f"{where}: the snapshot has an invalid schema: {exc}") from exc
    for key in list(session.state):
        try:
            session.state[key] = revive_state_value(session.state.get(key), f"state.{key}")
        except (StateRestoreError, StateTypeError) as exc:
            raise SessionFormatError(f"{where}: Failed to restore session state: {exc}") from exc
    return session


_json_encode = msgspec.json.Encoder().encode
_msgpack_encode = msgspec.msgpack.Encoder().encode


class SessionStore:
    """Session snapshots in memory, keyed by session id (the reference's ``SessionStore``).

    Example:
        ```python
        store = SessionStore()
        await store.set("user-1", session)
        restored = await store.get("user-1")  # a new session with the same id, state and history
        ```
    """

    MAX_SESSION_ID_LENGTH: ClassVar[int] = 255
    """The longest session id accepted."""

    def __init__(self) -> None:
        self._snapshots: dict[str, bytes] = {}

    async def get(self, session_id: str) -> AgentSession | None:
        """A new session restored from the snapshot under ``session_id``, or ``None``.

        Raises:
            ValueError: ``session_id`` is empty or too long.
        """
        data = self._snapshots.get(_check_session_id(session_id, self.MAX_SESSION_ID_LENGTH))
        return None if data is None else _restore(msgspec.json.decode(data), f"session {session_id!r}")

    async def set(self, session_id: str, session: AgentSession) -> None:
        """Keep a snapshot of ``session`` under ``session_id`` (replacing one stored before).

        Raises:
            ValueError: ``session_id`` is empty or too long, or a state value holds what JSON
                cannot carry.
            TypeError: ``session`` is a subclass of :class:`AgentSession`, or a state value has
                no JSON form.
        """
        _check_session_id(session_id, self.MAX_SESSION_ID_LENGTH)
        self._snapshots[session_id] = _json_encode(_snapshot(session))

    async def delete(self, session_id: str) -> None:
        """Forget the snapshot under ``session_id`` (nothing happens if there is none).

        Raises:
            ValueError: ``session_id`` is empty or too long.
        """
        self._snapshots.pop(_check_session_id(session_id, self.MAX_SESSION_ID_LENGTH), None)

    def __repr__(self) -> str:
        return f"SessionStore(sessions={len(self._snapshots)})"


class FileSessionStore:
    """Session snapshots as files in a folder, keyed by session id (the reference's
    ``FileSessionStore``); see the module docs for the layout and what happens to bad files.

    Args:
        storage_path: The folder (created if missing, mode 0700).
        serialization_format: ``"json"`` (default) or ``"msgpack"``.
        lock_timeout: Seconds a write waits for another writer of the same folder.

    Raises:
        ValueError: ``serialization_format`` is neither.
    """

    MAX_SESSION_ID_LENGTH: ClassVar[int] = 255
    """The longest session id accepted."""

    def __init__(
        self,
        storage_path: str | os.PathLike[str],
        *,
        serialization_format: SerializationFormat = "json",
        lock_timeout: float = 30.0,
    ) -> None:
        if serialization_format not in ("json", "msgpack"):
            raise ValueError(
                f"serialization_format must be 'json' or 'msgpack', not {serialization_format!r}"
            )
        self.storage_path = Path(storage_path).expanduser()  # relative: to the working folder of each call
        self.serialization_format: SerializationFormat = serialization_format
        self.lock_timeout = lock_timeout
        self._suffix = ".json" if serialization_format == "json" else ".msgpack"
        self._encode: Callable[[Any], bytes] = (
            _json_encode if serialization_format == "json" else _msgpack_encode
        )
        self._decode: Callable[[bytes], Any] = (
            msgspec.json.decode if serialization_format == "json" else msgspec.msgpack.decode
        )

    def session_file(self, session_id: str) -> Path:
        """The file ``session_id``'s snapshot is (or would be) kept in.

        Raises:
            ValueError: ``session_id`` is empty or too long.
        """
        _check_session_id(session_id, self.MAX_SESSION_ID_LENGTH)
        return self.storage_path / session_file_name(session_id, self._suffix)

    async def get(self, session_id: str) -> AgentSession | None:
        """The session stored under ``session_id``, or ``None``.

        Raises:
            ValueError: ``session_id`` is empty or too long; the file is a link (it escaped the
                storage directory); or it holds no valid snapshot (a
                :class:`~agentkeep.errors.SessionFormatError`: one that does not decode is
                quarantined first, and a retry finds no session).
        """
        path = self.session_file(session_id)
        data = await asyncio.to_thread(self._read, path)
        if data is None:
            return None
        where = f"session file {path}"
        try:
            decoded = self._decode(data)
        except (msgspec.DecodeError, RecursionError) as exc:
            moved = await asyncio.to_thread(self._quarantine, path, data)
            kept = f"quarantined as {moved.name}" if moved is not None else "replaced meanwhile"
            raise SessionFormatError(
                f"{where} does not decode ({exc}): {kept}; retry to read what is stored now"
            ) from exc
        return _restore(decoded, where)

    async def set(self, session_id: str, session: AgentSession) -> None:
        """Write ``session``'s snapshot to its file, atomically.

        Raises:
            ValueError: ``session_id`` is empty or too long, or a state value holds what JSON
                cannot carry.
            TypeError: ``session`` is a subclass of :class:`AgentSession`, or a state value has
                no JSON form.
            OSError: The folder cannot be written.
        """
        path = self.session_file(session_id)
        data = self._encode(_snapshot(session))
        await asyncio.to_thread(self._write, path, data)

    async def delete(self, session_id: str) -> None:
        """Remove ``session_id``'s file (nothing happens if there is none).

        Raises:
            ValueError: ``session_id`` is empty or too long.
        """
        path = self.session_file(session_id)
        await asyncio.to_thread(self._delete, path)

    def __repr__(self) -> str:
        path, kind = str(self.storage_path), self.serialization_format
        return f"FileSessionStore({path!r}, serialization_format={kind!r})"

    # -- blocking helpers (in worker threads) -------------------------------------------------------
    @contextlib.contextmanager
    def _folder(self, *, create: bool) -> Any:
        if create:
            self.storage_path.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            folder = Folder.opened(self.storage_path, create=False)
        except FileNotFoundError:
            yield None
            return
        try:
            yield folder
        finally:
            folder.close()

    def _read(self, path: Path) -> bytes | None:
        with self._folder(create=False) as folder:
            if folder is None:
                return None
            try:
                return folder.read(path.name)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise ValueError(f"session file {path} is a link: it escaped storage directory") from exc
                raise

    def _write(self, path: Path, data: bytes) -> None:
        with self._folder(create=True) as folder:
            assert folder is not None
            with folder.locked_itself(timeout=self.lock_timeout):
                folder.write_atomic(path.name, data)

    def _delete(self, path: Path) -> None:
        with self._folder(create=False) as folder:
            if folder is None:
                return
            with folder.locked_itself(timeout=self.lock_timeout), contextlib.suppress(FileNotFoundError):
                folder.unlink(path.name)
                folder.fsync()

    @staticmethod
    def _quarantine_file(folder: Folder, name: str, data: bytes) -> Path | None:
        try:
            current = folder.read(name)
        except FileNotFoundError:
            return None
        if current != data:
            return None  # a writer replaced it meanwhile: that file is not the corrupt one
        moved = f".{name}.{secrets.token_hex(4)}.corrupt"
        folder.replace(name, moved)
        folder.fsync()
        return folder.path / moved

    def _quarantine(self, path: Path, data: bytes) -> Path | None:
        with self._folder(create=False) as folder:
            if folder is None:
                return None
            with folder.locked_itself(timeout=self.lock_timeout):
                return self._quarantine_file(folder, path.name, data)
