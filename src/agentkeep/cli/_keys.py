"""``agentkeep keys``: make encryption keys and rotate a store to its current key.

The rotation itself is :mod:`agentkeep.key_rotation`; this module opens the store's message and
session parts from one URL, shows a progress bar on standard error and sums up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .. import store_urls
from ..encryption import KeyRing
from ..errors import CLIError, StoreURLError
from ..key_rotation import RotationProgress, rotate_store
from ..message_stores.base import close_store, setup_store
from ._stores import describe_store, key_ring_from_env, parse_store_url

__all__ = ["generate_key_entry", "rotate", "summary"]


def generate_key_entry(key_id: str) -> str:
    """A ``<key id>=<key>`` entry with a fresh key (checked as a key ring would)."""
    entry = f"{key_id}={KeyRing.generate_key()}"
    KeyRing.from_text(entry, source="the new key")
    return entry


def _ring() -> KeyRing:
    ring = key_ring_from_env()
    if ring is None:
        raise CLIError(
            "set AGENTKEEP_KEYS (or AGENTKEEP_KEYS_FILE) to the key ring, the new current key first"
        )
    return ring


@contextlib.contextmanager
def _bar(err: Console, *, show: bool) -> Generator[Progress]:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=False, disable=not show) as bar:
        yield bar


def rotate(url: str | None, *, batch_size: int, err: Console) -> tuple[str, RotationProgress, str]:
    """Re-encrypt everything in the store at ``url`` with the ring's current key; returns where,
    what was done and the current key's id.

    Raises:
        CLIError: No key ring, or a URL that names nothing to rotate.
    """
    ring = _ring()
    location = parse_store_url(url)
    if location.backend == "memory":
        raise CLIError("memory:// keeps nothing at rest: there is nothing to rotate")

    async def run() -> tuple[str, RotationProgress]:
        try:
            messages = (
                None if location.backend == "file" else store_urls.open_message_store(url, key_ring=ring)
            )
            sessions = store_urls.open_session_store(url, key_ring=ring)
        except StoreURLError as exc:
            raise CLIError(str(exc)) from exc
        where = describe_store(messages if messages is not None else sessions)
        try:
            if messages is not None:
                await setup_store(messages)
            await setup_store(sessions)
            with _bar(err, show=err.is_terminal) as bar:
                records = bar.add_task("records", total=None, note="")
                payloads = bar.add_task("sessions", total=None, note="", visible=False)

                def show(done: RotationProgress) -> None:
                    bar.update(
                        records,
                        completed=done.records,
                        total=max(done.records_total, done.records) or None,
                        note=f"{done.conversations_done}/{done.conversations} conversations",
                    )
                    if done.sessions:
                        bar.update(payloads, completed=done.sessions, total=None, visible=True, note="")

                done = await rotate_store(
                    ring,
                    message_store=messages,
                    session_store=sessions,
                    batch_size=batch_size,
                    on_progress=show,
                )
            return where, done
        finally:
            if messages is not None:
                await close_store(messages)
            await close_store(sessions)

    where, done = asyncio.run(run())
    return where, done, ring.current.key_id


def summary(where: str, done: RotationProgress, key_id: str) -> str:
    """One paragraph on what a rotation did."""
    lines = [
        f"rotated {where} to key {key_id!r}: "
        f"{done.records_reencrypted} of {done.records} records and "
        f"{done.sessions_reencrypted} of {done.sessions} sessions re-encrypted "
        f"({done.conversations_done} conversations)"
    ]
    if done.records_changed or done.sessions_changed:
        lines.append(
            f"{done.records_changed} records and {done.sessions_changed} sessions changed while rotating; "
            "they were written by others since and were left as they are: run the rotation again "
            "once every writer uses the new key"
        )
    lines.extend(f"not readable, left as it is: {what}" for what in done.damaged)
    return "\n".join(lines)
