"""The worker thread a SQLite connection's jobs run on, and what a job and its caller tell each
other across threads: what both SQLite drivers share (the stdlib ``sqlite3`` of the message and
session stores, ``apsw`` with sqlite-vec of the memory store).

A SQLite connection is used by one thread at a time, and its jobs (a transaction each) may wait
for another process's write lock; so they run one after another on a :class:`JobWorker`, and the
event loop never waits. A caller that gives up (its task is cancelled) must not have its job
commit behind its back: its :class:`JobState` is marked ``cancelled``, a job still waiting for the
worker never starts, and a running one rolls back at its commit (the transaction helpers of each
driver check :func:`current_job`). If the job committed first, the caller is told it is done
instead of cancelled: what it asked for was stored, and saying otherwise would invite a retry.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["JobAbandoned", "JobState", "JobWorker", "current_job", "set_current_job"]

T = TypeVar("T")

_current = threading.local()


class JobState:
    """What a job and its caller tell each other across threads (plain attributes: each is
    written by one side and read by the other)."""

    __slots__ = ("cancelled", "committed", "quick")

    def __init__(self, *, quick: bool = False) -> None:
        self.cancelled = False  # the caller gave up: the job must not commit
        self.committed = False  # the job committed its transaction
        self.quick = quick  # the job runs on the caller's thread (see agentkeep._db.sqlite)


class JobAbandoned(Exception):
    """A job stopped before committing because its caller was cancelled."""


def current_job() -> JobState | None:
    """The state of the job running on this thread, if any."""
    return getattr(_current, "state", None)


def set_current_job(state: JobState | None) -> None:
    """Make ``state`` this thread's current job (``None``: no job runs on it)."""
    _current.state = state


class JobWorker:
    """One thread that runs jobs one after another (see the module docs).

    Args:
        thread_name: The prefix of the thread's name.
    """

    def __init__(self, *, thread_name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)

    async def run(self, job: Callable[[], T]) -> T:
        """Run ``job()`` on the worker thread as the thread's current job, and return its result.

        Raises:
            asyncio.CancelledError: The caller was cancelled and the job did not commit.
        """
        state = JobState()
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._call, job, state)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            state.cancelled = True
            try:
                result = await future
            except BaseException:
                raise asyncio.CancelledError from None
            if not state.committed:
                raise
            return result

    def submit(self, job: Callable[[], object]) -> None:
        """Run ``job()`` on the worker thread in the background (nobody waits for it).

        Raises:
            RuntimeError: After :meth:`shutdown`.
        """
        self._executor.submit(job)

    async def shutdown(self, last: Callable[[], object] | None = None) -> None:
        """Run ``last()`` (closing the connection) on the worker thread, then stop the thread."""
        try:
            if last is not None:
                await asyncio.get_running_loop().run_in_executor(self._executor, last)
        finally:
            self._executor.shutdown(wait=False)

    @staticmethod
    def _call(job: Callable[[], T], state: JobState) -> T:
        if state.cancelled:
            raise JobAbandoned  # cancelled while it waited for the worker: never started
        _current.state = state
        try:
            return job()
        finally:
            _current.state = None
