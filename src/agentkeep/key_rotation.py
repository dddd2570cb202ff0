"""Key rotation: re-encrypt everything a store holds with its key ring's current key, online.

``agentkeep keys rotate --store URL`` runs :func:`rotate_store`. How it works:

* **Message stores** (:class:`~agentkeep.message_stores.base.SupportsRecordRewrite` and
  :class:`~agentkeep.message_stores.base.SupportsListing`): every conversation is read in batches of
  records as stored; each record not yet under the current key (plaintext ones included) is
  decrypted and sealed again (:func:`~agentkeep.message_stores.codec.reseal`), and the batch is written
  back with a compare-and-set per record (``replace_records``): a record that changed meanwhile
  (trimmed, deleted) is left alone. Appends, reads and compactions go on throughout; a record is
  readable before and after its replacement, because the ring holds both keys.
* **Session stores** (:class:`~agentkeep.session_stores.base.SupportsPayloadRewrite`): every payload not
  under the current key is re-encrypted under the same version, replaced only if the session is
  still stored as read; one saved meanwhile was written with the writer's current key.

**Resuming.** Rotation keeps no state of its own: what is under the current key is skipped without
being decrypted, so running it again after a crash (or Ctrl-C) continues where the data still
needs it. Switch every writer to the new current key before rotating; what a writer still on the
old key stores meanwhile stays readable and is picked up by the next run.

**Failures.** A record or payload under a key the ring does not hold stops the rotation with a
:class:`~agentkeep.errors.DecryptionError` naming the key; one that does not decode at all is left
as it is and named in :attr:`RotationProgress.damaged`. Nothing is deleted or overwritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .encryption import KeyMismatch, KeyRing, decryption_error, reencrypt_payload
from .message_stores.base import StoredRecord, SupportsListing, SupportsRecordRewrite
from .message_stores.codec import reseal, seal_key
from .session_stores.base import StoredPayload, SupportsPayloadRewrite

__all__ = ["RotationProgress", "rotate_messages", "rotate_sessions", "rotate_store"]


@dataclass(slots=True)
class RotationProgress:
    """What a rotation has done so far (passed to the progress callback after every batch).

    Attributes:
        conversations: Conversations to go through (known once they are listed).
        conversations_done: Conversations gone through.
        records_total: Messages the listed conversations hold (summaries come on top).
        records: Records read.
        records_reencrypted: Records replaced by their re-encrypted form.
        records_changed: Records that changed between reading and replacing (left as they were).
        sessions: Session payloads read.
        sessions_reencrypted: Payloads replaced by their re-encrypted form.
        sessions_changed: Payloads saved by someone else meanwhile (left as they were).
        damaged: Records and payloads that do not decode (left as they are, and named here).
    """

    conversations: int = 0
    conversations_done: int = 0
    records_total: int = 0
    records: int = 0
    records_reencrypted: int = 0
    records_changed: int = 0
    sessions: int = 0
    sessions_reencrypted: int = 0
    sessions_changed: int = 0
    damaged: list[str] = field(default_factory=list[str])


ProgressCallback = Callable[[RotationProgress], None]


async def rotate_messages(
    store: object,
    key_ring: KeyRing,
    *,
    batch_size: int = 500,
    progress: RotationProgress | None = None,
    on_progress: ProgressCallback | None = None,
) -> RotationProgress:
    """Re-encrypt every record of a message store with ``key_ring``'s current key.

    Raises:
        TypeError: The store cannot list conversations or rewrite records.
        DecryptionError: A record is under a key the ring does not hold (nothing of it changed).
        StorageError: The backend failed (what was replaced so far stays replaced).
        TypeError: The store cannot do it.
    """
    if not isinstance(store, SupportsRecordRewrite) or not isinstance(store, SupportsListing):
        raise TypeError(f"{type(store).__name__} cannot list conversations and rewrite their records")
    done = RotationProgress() if progress is None else progress
    conversations = await store.list_conversations()
    done.conversations += len(conversations)
    done.records_total += sum(info.message_count for info in conversations)
    for info in conversations:
        key = seal_key(info.conversation_id, key_ring)
        after = 0
        while True:
            records = await store.stored_records(info.conversation_id, after=after, limit=batch_size)
            if not records:
                break
            changes: list[tuple[StoredRecord, bytes]] = []
            for record in records:
                try:
                    body = reseal(key, record.message_id, record.created_at, record.body)
                except KeyMismatch as exc:
                    raise decryption_error(
                        exc, backend=_backend(store), conversation_id=info.conversation_id, seq=record.seq
                    ) from exc
                except ValueError as exc:
                    done.damaged.append(f"conversation {info.conversation_id!r}, seq {record.seq}: {exc}")
                    continue
                if body is not None:
                    changes.append((record, body))
            if changes:
                replaced = await store.replace_records(info.conversation_id, changes)
                done.records_reencrypted += replaced
                done.records_changed += len(changes) - replaced
            done.records += len(records)
            after = records[-1].seq
            if on_progress is not None:
                on_progress(done)
        done.conversations_done += 1
        if on_progress is not None:
            on_progress(done)
    return done


async def rotate_sessions(
    store: object,
    key_ring: KeyRing,
    *,
    batch_size: int = 100,
    progress: RotationProgress | None = None,
    on_progress: ProgressCallback | None = None,
) -> RotationProgress:
    """Re-encrypt every session payload of a session store with ``key_ring``'s current key.

    Raises:
        TypeError: The store cannot rewrite payloads.
        DecryptionError: A payload is under a key the ring does not hold (nothing of it changed).
        StorageError: The backend failed.
    """
    if not isinstance(store, SupportsPayloadRewrite):
        raise TypeError(f"{type(store).__name__} cannot rewrite session payloads")
    done = RotationProgress() if progress is None else progress
    after: tuple[str, str] | None = None
    while True:
        batch = await store.stored_payloads(after=after, limit=batch_size)
        if not batch:
            return done
        for stored in batch:
            try:
                new = _reencrypted(store, key_ring, stored)
            except _Damaged as exc:
                done.damaged.append(str(exc))
                continue
            if new is not None:
                if await store.replace_payload(stored, new):
                    done.sessions_reencrypted += 1
                else:
                    done.sessions_changed += 1
        done.sessions += len(batch)
        after = (batch[-1].agent, batch[-1].conversation_id)
        if on_progress is not None:
            on_progress(done)


def _reencrypted(store: object, key_ring: KeyRing, stored: StoredPayload) -> bytes | None:
    try:
        return reencrypt_payload(
            key_ring,
            stored.payload,
            agent=stored.agent,
            conversation_id=stored.conversation_id,
            version=stored.version,
        )
    except KeyMismatch as exc:
        raise decryption_error(exc, backend=_backend(store), conversation_id=stored.conversation_id) from exc
    except ValueError as exc:
        raise _Damaged(f"session {stored.conversation_id!r} of agent {stored.agent!r}: {exc}") from exc


class _Damaged(Exception):
    """A payload that does not decode: reported in the progress, skipped."""


async def rotate_store(
    key_ring: KeyRing,
    *,
    message_store: object | None = None,
    session_store: object | None = None,
    batch_size: int = 500,
    on_progress: ProgressCallback | None = None,
) -> RotationProgress:
    """Rotate a message store and a session store (either may be ``None``) in one report."""
    progress = RotationProgress()
    if message_store is not None:
        await rotate_messages(
            message_store, key_ring, batch_size=batch_size, progress=progress, on_progress=on_progress
        )
    if session_store is not None:
        await rotate_sessions(
            session_store,
            key_ring,
            batch_size=min(batch_size, 100),
            progress=progress,
            on_progress=on_progress,
        )
    return progress


def _backend(store: object) -> str:
    backend = getattr(store, "backend", None)
    return backend if isinstance(backend, str) else type(store).__name__
