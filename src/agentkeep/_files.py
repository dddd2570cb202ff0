"""Files in a folder, safe against links and other processes: what the file-backed stores share.

:class:`Folder` is a folder opened once without following a link; the files in it are opened,
renamed and removed relative to it (``dir_fd``, ``O_NOFOLLOW``), so no link planted on the way is
followed. :meth:`Folder.write_atomic` writes a file as a whole (a temporary file in the same
folder, fsynced, renamed over the name, the folder fsynced): a reader sees the old or the new
content, never half. :meth:`Folder.locked` holds an exclusive ``flock`` on a lock file, between
threads and processes of one machine. Errors are ``OSError`` (and ``TimeoutError`` for a lock not
obtained in time); each store maps them to its own errors.

Used by :class:`~agentkeep.session_stores.FileSystemSessionStore`,
:class:`~agentkeep.session_stores.FileSessionStore`
and :class:`~agentkeep.providers.FileHistoryProvider`.

:func:`path_from_url` reads the path a local store URL names (``sqlite:///path``,
``file:///folder``) and :func:`check_memory_url` the ``memory://`` URL that names none, for the
stores' ``from_url`` constructors and :mod:`agentkeep.store_urls`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import Final
from urllib.parse import unquote

from .errors import StoreURLError

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt
else:
    import fcntl

__all__ = ["Folder", "LockError", "check_memory_url", "path_from_url"]


def path_from_url(url: str, *, scheme: str) -> Path | None:
    """The path a local store URL names: ``scheme:///abs/path`` or ``scheme://rel/path`` (``~``
    is expanded); ``None`` for ``scheme://`` alone (the store's default place).

    Raises:
        StoreURLError: A URL of another scheme, or one with a query or fragment.
    """
    found, separator, rest = url.partition("://")
    if not separator or found.lower() != scheme:
        raise StoreURLError(f"store URL {url!r}: expected {scheme}:///path")
    if "?" in rest or "#" in rest:
        raise StoreURLError(f"store URL {url!r}: a {scheme} URL takes no query (write {scheme}:///path)")
    return Path(unquote(rest)).expanduser() if rest else None


def check_memory_url(url: str) -> None:
    """Refuse anything but ``memory://`` for a store in process memory.

    Raises:
        StoreURLError: Another scheme, or a URL that names a place.
    """
    if path_from_url(url, scheme="memory") is not None:
        raise StoreURLError(f"store URL {url!r}: write memory:// (it names no place)")


class LockError(OSError):
    """A lock file could not be opened or locked (``what`` says which, ``os_error`` why)."""

    def __init__(self, what: str, os_error: OSError) -> None:
        super().__init__(os_error.errno, str(os_error))
        self.what = what
        self.os_error = os_error


def _try_lock(fd: int) -> bool:
    """Take an exclusive lock on ``fd`` without waiting; ``False`` if someone else holds it."""
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlock(fd: int) -> None:
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)


_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_RELATIVE: Final = os.name == "posix"  # open, rename, unlink and stat relative to a folder (dir_fd)


class Folder:
    """An agent's session folder, opened once without following a link; files in it are opened,
    renamed and removed relative to it (``dir_fd``), so no link on the way is ever followed.

    Where the system has no ``dir_fd`` (Windows), paths are used and a folder that is a link is
    refused by a check before use.
    """

    __slots__ = ("fd", "path")

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def opened(cls, path: Path, *, create: bool) -> Folder:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
        if not _RELATIVE:  # pragma: no cover - exercised on Windows only
            if path.is_symlink() or not path.is_dir():
                raise OSError(errno.ELOOP, "not a plain folder", str(path))
            return cls(path, None)
        return cls(path, os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW))

    def open(self, name: str, flags: int) -> int:
        """A file descriptor for ``name`` in the folder; a link there fails (``ELOOP``)."""
        if self.fd is None:  # pragma: no cover - exercised on Windows only
            return os.open(self.path / name, flags | _NOFOLLOW, 0o600)
        return os.open(name, flags | _NOFOLLOW, 0o600, dir_fd=self.fd)

    def read(self, name: str) -> bytes:
        with open(self.open(name, os.O_RDONLY), "rb") as file:
            return file.read()

    def names(self) -> list[str]:
        """The names of the entries in the folder (listed through its descriptor)."""
        if self.fd is None:  # pragma: no cover - exercised on Windows only
            return os.listdir(self.path)
        return os.listdir(self.fd)

    def stat(self, name: str) -> os.stat_result:
        if self.fd is None:  # pragma: no cover - exercised on Windows only
            return os.stat(self.path / name, follow_symlinks=False)
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def exists(self, name: str) -> bool:
        try:
            self.stat(name)
        except FileNotFoundError:
            return False
        return True

    def replace(self, source: str, target: str) -> None:
        if self.fd is None:  # pragma: no cover - exercised on Windows only
            os.replace(self.path / source, self.path / target)
        else:
            os.replace(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        if self.fd is None:  # pragma: no cover - exercised on Windows only
            os.unlink(self.path / name)
        else:
            os.unlink(name, dir_fd=self.fd)

    def fsync(self) -> None:
        """Make a rename or unlink in the folder durable (where folders can be synced)."""
        if self.fd is None:  # pragma: no cover - exercised on Windows only
            return
        with contextlib.suppress(OSError):  # some file systems refuse; the rename is still atomic
            os.fsync(self.fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def write_atomic(self, name: str, data: bytes) -> None:
        """Write ``data`` as the file ``name``, as a whole (see the module docs)."""
        temp = f".{Path(name).stem}.{secrets.token_hex(8)}.tmp"
        try:
            with open(self.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            self.replace(temp, name)  # replaces a link itself, never its target
        except OSError:
            with contextlib.suppress(OSError):
                self.unlink(temp)
            raise
        self.fsync()

    @contextlib.contextmanager
    def locked_itself(self, *, timeout: float) -> Generator[None]:
        """Hold an exclusive lock on the folder itself (its own descriptor), waiting at most
        ``timeout`` seconds: writers of different files in it take turns, and no lock file is
        left in it. Without ``dir_fd`` (Windows) this does not lock.

        Raises:
            TimeoutError: Another holder kept it that long.
            LockError: The folder cannot be locked.
        """
        if self.fd is None:  # pragma: no cover - exercised on Windows only
            yield
            return
        _acquire(self.fd, time.monotonic() + timeout)
        try:
            yield
        finally:
            _unlock(self.fd)

    @contextlib.contextmanager
    def locked(self, lock_name: str, *, timeout: float) -> Generator[None]:
        """Hold an exclusive lock on the file ``lock_name`` (created if missing, never through a
        link), waiting at most ``timeout`` seconds.

        Raises:
            TimeoutError: Another holder kept it that long.
            LockError: The lock file cannot be opened or locked.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                fd = self.open(lock_name, os.O_RDWR | os.O_CREAT)
            except OSError as exc:
                raise LockError("open lock file", exc) from exc
            try:
                _acquire(fd, deadline)
                try:
                    current = os.path.samestat(os.fstat(fd), self.stat(lock_name))
                except FileNotFoundError:
                    current = False
            except BaseException:
                os.close(fd)
                raise
            if current:
                break
            os.close(fd)  # a delete removed the file we locked: lock the new one
        try:
            yield
        finally:
            os.close(fd)  # closing releases the lock


def _acquire(fd: int, deadline: float) -> None:
    delay = 0.0005
    while True:
        try:
            if _try_lock(fd):
                return
        except OSError as exc:  # e.g. a file system without locks
            raise LockError("lock", exc) from exc
        if time.monotonic() >= deadline:
            raise TimeoutError("the lock is held by another writer")
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
