"""File history: each session's messages appended to a file of their own, the reference's layout.

:class:`FileHistoryProvider` keeps ``<storage_path>/<name>.jsonl``: one message per line, in the
reference Python edition's message shape (``{"type": "message", "role", "contents", ...}``, see
:mod:`agentkeep.maf.sessions`), so the reference reads these files and agentkeep reads the
reference's. With ``serialization_format="msgpack"`` the file is ``<name>.msgpack``: each record
a 4-byte big-endian length and a MessagePack map. ``<name>`` is the session id, or (for ids that
are not a plain file name) ``~session-`` and an encoding of it, as
:class:`~agentkeep.session_stores.FileSessionStore` names files; a call without a session id uses
``default``.

**Appends.** A save writes the new records in one ``write`` to a file opened for appending,
fsynced, while holding a lock on the folder (writers of one folder, in any thread or process of
the machine, take turns; no lock file is left behind). Links are never followed.

**Per-turn cost O(new messages).** A session keeps (in its runtime space, never serialized) what
it read: the file's identity, how far it read and the messages. The next load reads only what
was appended since; a file that shrank or was replaced is read again whole.

**Bad records** raise ``ValueError`` naming the line or record (a line that is not JSON, one that
is not an object, a truncated MessagePack record); nothing is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, Unpack, cast

import msgspec

from .._files import Folder
from ..maf.sessions import message_from_maf, message_to_maf
from ..message_log import MessageLog
from ..messages import Message
from ..session_stores.by_session_id import SerializationFormat, session_file_name
from ..sessions import AgentSession
from .history import HistoryOptions, HistoryProvider, without_excluded

__all__ = ["FileHistoryProvider"]

_LENGTH: Final = 4
_json_encoder: Final = msgspec.json.Encoder()
_msgpack_encoder: Final = msgspec.msgpack.Encoder()


class _Read:
    """What a session read of its file: identity, the bytes read so far, the messages (a log
    stamped as this provider's history, so a load hands the run a view of it, not copies)."""

    __slots__ = ("file", "inode", "log", "offset")

    def __init__(self, file: str, inode: tuple[int, int], offset: int, log: MessageLog) -> None:
        self.file = file
        self.inode = inode
        self.offset = offset
        self.log = log


class FileHistoryProvider(HistoryProvider):
    """History kept in one append-only file per session (see the module docs).

    Args:
        storage_path: The folder (created if missing, mode 0700: now, or on an event loop by the
            first save or load).
        source_id: Provider id (default ``"file_history"``).
        serialization_format: ``"json"`` (JSON Lines, default) or ``"msgpack"``.
        dumps: Deprecated: serializes a message dict to one line of JSON (text or bytes).
        loads: Deprecated: the inverse of ``dumps``.
        skip_excluded: Leave messages a compaction marked excluded out of what is loaded.
        lock_timeout: Seconds a save waits for another writer of the folder.
        **options: The :class:`~agentkeep.providers.HistoryProvider` options.

    Raises:
        ValueError: ``serialization_format`` is neither, or ``dumps``/``loads`` are given with
            MessagePack.
    """

    DEFAULT_SOURCE_ID: ClassVar[str] = "file_history"

    def __init__(
        self,
        storage_path: str | os.PathLike[str],
        *,
        source_id: str | None = None,
        serialization_format: SerializationFormat = "json",
        dumps: Callable[[Any], str | bytes] | None = None,
        loads: Callable[[str | bytes], Any] | None = None,
        skip_excluded: bool = False,
        lock_timeout: float = 30.0,
        **options: Unpack[HistoryOptions],
    ) -> None:
        if serialization_format not in ("json", "msgpack"):
            raise ValueError(
                f"serialization_format must be 'json' or 'msgpack', not {serialization_format!r}"
            )
        if serialization_format == "msgpack" and (dumps is not None or loads is not None):
            raise ValueError(
                "Custom dumps and loads are for JSON Lines; MessagePack files use their own codec"
            )
        if dumps is not None or loads is not None:
            warnings.warn(
                "FileHistoryProvider's dumps= and loads= are deprecated: the built-in codec writes "
                "and reads the same JSON Lines",
                DeprecationWarning,
                stacklevel=2,
            )
        super().__init__(source_id or self.DEFAULT_SOURCE_ID, **options)
        self.storage_path = Path(storage_path).expanduser()  # relative: to the working folder of each call
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not on an event loop: the folder is made now, as the reference does
            self.storage_path.mkdir(mode=0o700, parents=True, exist_ok=True)
        # On a loop, the first save or load makes it (in a worker thread: the loop never blocks).
        self.serialization_format: SerializationFormat = serialization_format
        self.skip_excluded = skip_excluded
        self.lock_timeout = lock_timeout
        self._custom_dumps = dumps
        self._custom_loads = loads
        self._suffix = ".jsonl" if serialization_format == "json" else ".msgpack"

    # -- the codec --------------------------------------------------------------------------------
    def dumps(self, payload: Any) -> bytes:
        """One record's bytes (a JSON line without its newline, or a MessagePack map)."""
        if self.serialization_format == "msgpack":
            return _msgpack_encoder.encode(payload)
        if self._custom_dumps is None:
            return _json_encoder.encode(payload)
        made = self._custom_dumps(payload)
        data = made.encode("utf-8") if isinstance(made, str) else made
        if b"\n" in data or b"\r" in data:
            raise ValueError("dumps must return single-line JSON (JSON Lines keep one record per line)")
        return data

    def loads(self, data: bytes) -> Any:
        """The value of one record's bytes."""
        if self.serialization_format == "msgpack":
            return msgspec.msgpack.decode(data)
        if self._custom_loads is not None:
            return self._custom_loads(data)
        return msgspec.json.decode(data)

    def file_of(self, session_id: str | None) -> Path:
        """The file ``session_id``'s messages are (or would be) kept in."""
        return self.storage_path / session_file_name(session_id, self._suffix)

    # -- HistoryProvider ---------------------------------------------------------------------------
    async def get_messages(
        self, session_id: str | None, *, state: Any = None, session: AgentSession | None = None, **kwargs: Any
    ) -> Sequence[Message]:
        name = self.file_of(session_id).name
        cache_key = f"file-history:{self.source_id}"
        cached = session.runtime.get(cache_key) if session is not None else None
        known = cached if isinstance(cached, _Read) and cached.file == name else None
        start = known.offset if known is not None else 0
        inode, resumed_at, end, new = await asyncio.to_thread(
            self._read, name, known.inode if known is not None else None, start
        )
        current = session.runtime.get(cache_key) if session is not None else None
        if known is not None and resumed_at == start and current is known and known.offset == start:
            known.log.extend(new)  # what was appended since the last read
            known.offset = end
            read = known
        elif known is not None and current is known and known.offset > start:
            read = known  # another run of this session read further meanwhile: its view is newer
        else:
            read = _Read(name, inode, end, MessageLog.from_owned(new, self.source_id))
            if session is not None:
                session.runtime[cache_key] = read
        view = read.log.view()
        return without_excluded(view) if self.skip_excluded else view

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: Any = None,
        session: AgentSession | None = None,
        **kwargs: Any,
    ) -> None:
        if not messages:
            return
        records = [self.dumps(message_to_maf(m.ensure_identity())) for m in messages]
        if self.serialization_format == "msgpack":
            data = b"".join(len(r).to_bytes(_LENGTH, "big") + r for r in records)
        else:
            data = b"".join(r + b"\n" for r in records)
        await asyncio.to_thread(self._append, self.file_of(session_id).name, data)

    def __repr__(self) -> str:
        return f"FileHistoryProvider({str(self.storage_path)!r}, source_id={self.source_id!r})"

    # -- blocking helpers (in worker threads) -------------------------------------------------------
    @contextlib.contextmanager
    def _folder(self) -> Any:
        self.storage_path.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder = Folder.opened(self.storage_path, create=False)
        try:
            yield folder
        finally:
            folder.close()

    def _append(self, name: str, data: bytes) -> None:
        with self._folder() as folder, folder.locked_itself(timeout=self.lock_timeout):
            fd = folder.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            with open(fd, "ab") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())

    def _read(
        self, name: str, inode: tuple[int, int] | None, offset: int
    ) -> tuple[tuple[int, int], int, int, list[Message]]:
        """Read the file from ``offset`` when it is still the file ``inode`` and not shorter,
        else from the start: ``(its inode, where reading started, where it ended, the messages)``."""
        with self._folder() as folder:
            try:
                fd = folder.open(name, os.O_RDONLY)
            except FileNotFoundError:
                return (0, 0), 0, 0, []
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise ValueError(f"history file {folder.path / name} is a link: refused") from exc
                raise
            with open(fd, "rb") as file:
                info = os.fstat(file.fileno())
                current = (info.st_dev, info.st_ino)
                start = offset if current == inode and offset <= info.st_size else 0
                file.seek(start)
                data = file.read()
        messages: list[Message] = []
        used = self._decode_into(messages, data, name)
        return current, start, start + used, messages

    def _decode_into(self, messages: list[Message], data: bytes, name: str) -> int:
        """Decode the whole records in ``data`` onto ``messages``; how many bytes they took (a last
        record still being written by another process is left for the next read). Records are
        numbered from 1 in what was read (from the start of the file, or from where a session's
        read resumed)."""
        number = 0
        at = 0
        if self.serialization_format == "msgpack":
            while at < len(data):
                number += 1
                if len(data) - at < _LENGTH:
                    raise ValueError(f"history file {name}: record {number} is truncated (its length)")
                size = int.from_bytes(data[at : at + _LENGTH], "big")
                body = data[at + _LENGTH : at + _LENGTH + size]
                if len(body) < size:
                    raise ValueError(
                        f"history file {name}: record {number} is truncated ({len(body)} of {size} bytes)"
                    )
                messages.append(self._message(body, f"record {number}", name))
                at += _LENGTH + size
            return at
        for line in data.splitlines(keepends=True):
            number += 1
            if not line.endswith(b"\n"):
                break  # a line being appended right now: read it next time
            at += len(line)
            if line.strip():
                messages.append(self._message(line.strip(), f"line {number}", name))
        return at

    def _message(self, data: bytes, where: str, name: str) -> Message:
        try:
            payload = self.loads(data)
        except (msgspec.DecodeError, ValueError) as exc:
            raise ValueError(f"Failed to deserialize history {where} of {name}: {exc}") from exc
        if not isinstance(payload, dict):
            raise ValueError(f"history {where} of {name} did not deserialize to a mapping")
        return message_from_maf(cast("dict[str, Any]", payload), path=f"{name} {where}")
