"""The SQLite memory store's file: its layout (created, or upgraded in place), its connection, the
writes of vectors that keep the per-scope change log (what keeps search caches coherent, see
:mod:`._vector_cache`) and the full-text index of the memories' words (an FTS5 table whose row
is the memory's: a memory is in it exactly while it has a vector, so both change in one write),
and the per-scope summary that the listing of scopes reads (each scope's
count of current memories and its newest ``updated_at``, kept by every write in its own
transaction). Used by :mod:`.sqlite`, whose store runs all of it on its worker thread.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from .._db.sqlite_vec import VecConnection
from ..errors import (
    MemoryFormatError,
    SchemaVersionError,
)
from ._lexical import INDEXED_METADATA
from ._vector_cache import LOG_KEEP
from .base import meta_number
from .records import MemoryScope

__all__ = [
    "LAYOUT",
    "VecConnection",
    "account",
    "create_or_upgrade",
    "delete_vector",
    "forget_user",
    "has_vector",
    "log_change",
    "purge_before",
    "put_vector",
    "put_words",
    "vector_bytes",
]

LAYOUT: Final = 6
# vec0 keeps each scope's vectors in chunks of this many; a scope takes at least one chunk
# (64 x 384 x 4 bytes = 96 KiB), where the default 1,024 took 1.5 MiB per user. Searches of large
# scopes are as fast (measured: 3.0 ms for 10k vectors either way).
_CHUNK: Final = 64


def vector_bytes(values: Sequence[float]) -> bytes:
    return array("f", values).tobytes()


def log_change(db: VecConnection, scope: str, rowid: int, vectors: int) -> None:
    """Log that the vector of ``rowid`` (of ``scope``) changed, in the write transaction: the
    scope's change counter goes up by one and its vector count by ``vectors`` (see
    :mod:`._vector_cache`). Writes are serialized, so the counter's order is commit order."""
    found = db.one(
        "INSERT INTO agentkeep_memory_scopes (scope, tenant, seq, vectors) VALUES (?, ?, 1, ?) "
        "ON CONFLICT (scope) DO UPDATE SET seq = seq + 1, vectors = vectors + excluded.vectors "
        "RETURNING id, seq",
        (scope, _tenant(scope), vectors),
    )
    assert found is not None  # an upsert with RETURNING always returns its row
    scope_id, seq = found
    db.run(
        "INSERT INTO agentkeep_memory_changes (scope_id, seq, memory_rowid) VALUES (?, ?, ?)",
        (scope_id, seq, rowid),
    )
    if seq > LOG_KEEP:  # one old entry out per entry in: a cache this far behind rebuilds
        db.run(
            "DELETE FROM agentkeep_memory_changes WHERE scope_id = ? AND seq = ?",
            (scope_id, seq - LOG_KEEP),
        )


def _tenant(scope: str) -> str:
    """The tenant part of a scope's key (``""``: none): what the listing index starts with."""
    return scope.partition("\x1f")[0]


def account(db: VecConnection, scope: str, memories: int) -> None:
    """Bring the scope's summary up to date after a write of its memories, in the write
    transaction: its count of current memories goes up by ``memories`` (negative: down) and its
    newest ``updated_at`` is read again from the index of current memories (one step: the
    newest of them; ``NULL`` when none is left, which takes the scope out of the listing)."""
    newest = db.one(
        "SELECT updated_at FROM agentkeep_memories WHERE scope = ? AND superseded_by IS NULL "
        "ORDER BY updated_at DESC LIMIT 1",
        (scope,),
    )
    db.run(
        "INSERT INTO agentkeep_memory_scopes (scope, tenant, seq, vectors, memories, newest) "
        "VALUES (?, ?, 0, 0, ?, ?) ON CONFLICT (scope) DO UPDATE SET "
        "memories = memories + excluded.memories, newest = excluded.newest",
        (scope, _tenant(scope), memories, None if newest is None else newest[0]),
    )


def has_vector(db: VecConnection, rowid: int) -> bool:
    return db.one("SELECT 1 FROM agentkeep_memory_vectors WHERE memory_rowid = ?", (rowid,)) is not None


def put_vector(
    db: VecConnection,
    rowid: int,
    scope: MemoryScope,
    kind: str,
    updated: int,
    vector: Sequence[float],
    text: str,
) -> None:
    """Store ``vector`` as the embedding of ``rowid`` (replacing the one it had), logged, and
    ``text`` (:func:`~._lexical.indexed_text`) as its words in the full-text index."""
    had = has_vector(db, rowid)
    if had:
        _drop_vector(db, rowid)
    db.run("INSERT INTO agentkeep_memory_words (rowid, text) VALUES (?, ?)", (rowid, text))
    db.run(
        "INSERT INTO agentkeep_memory_vectors (memory_rowid, scope, kind, updated_at, embedding) "
        "VALUES (?, ?, ?, ?, ?)",
        (rowid, scope.key, kind, updated, vector_bytes(vector)),
    )
    log_change(db, scope.key, rowid, 0 if had else 1)


def put_words(db: VecConnection, rowid: int, text: str) -> None:
    """Replace the words the full-text index holds for ``rowid`` (a memory with a vector)."""
    db.run("DELETE FROM agentkeep_memory_words WHERE rowid = ?", (rowid,))
    db.run("INSERT INTO agentkeep_memory_words (rowid, text) VALUES (?, ?)", (rowid, text))


def _drop_vector(db: VecConnection, rowid: int) -> None:
    """Delete the embedding of ``rowid`` and its words (unlogged: the callers log or drop logs)."""
    db.run("DELETE FROM agentkeep_memory_vectors WHERE memory_rowid = ?", (rowid,))
    db.run("DELETE FROM agentkeep_memory_words WHERE rowid = ?", (rowid,))


def delete_vector(db: VecConnection, scope: str, rowid: int) -> None:
    """Remove the embedding of ``rowid`` if it has one, logged, and its words."""
    if has_vector(db, rowid):
        _drop_vector(db, rowid)
        log_change(db, scope, rowid, -1)


def forget_user(db: VecConnection, user_key: str) -> int:
    """Delete every record and vector of a user (every agent), with the scopes' change logs:
    nothing that names the user stays. A scope written again later gets a new scope id, so a
    cache of the old one (in any process) is rebuilt, never caught up."""
    with db.write():
        rowids = [
            r for (r,) in db.rows("SELECT rowid FROM agentkeep_memories WHERE user_key = ?", (user_key,))
        ]
        for rowid in rowids:
            _drop_vector(db, rowid)
        db.run("DELETE FROM agentkeep_memories WHERE user_key = ?", (user_key,))
        # A scope key is the user key, the separator and the agent: every agent's scope lies in
        # this range (ids never hold the separator, which sorts just below the space).
        scopes = ("scope >= ? AND scope < ?", (f"{user_key}\x1f", f"{user_key} "))
        db.run(
            "DELETE FROM agentkeep_memory_changes WHERE scope_id IN "
            f"(SELECT id FROM agentkeep_memory_scopes WHERE {scopes[0]})",
            scopes[1],
        )
        db.run(f"DELETE FROM agentkeep_memory_scopes WHERE {scopes[0]}", scopes[1])
        return len(rowids)


def purge_before(db: VecConnection, cutoff: int) -> int:
    """Delete the records (and vectors) updated before ``cutoff``, every vector's removal logged
    and every scope's summary brought up to date."""
    with db.write():
        rows = db.rows(
            "SELECT rowid, scope, superseded_by IS NULL FROM agentkeep_memories WHERE updated_at < ?",
            (cutoff,),
        )
        current: dict[str, int] = {}
        for rowid, scope, is_current in rows:
            delete_vector(db, scope, rowid)
            current[scope] = current.get(scope, 0) + is_current
        db.run("DELETE FROM agentkeep_memories WHERE updated_at < ?", (cutoff,))
        for scope, removed in current.items():
            account(db, scope, -removed)
        return len(rows)


def _create_tables(db: VecConnection, dimensions: int) -> None:
    """Layout 1: the records and their vectors."""
    db.run(
        # AUTOINCREMENT: a deleted record's rowid is never given to a later one, so a vector row
        # (or a change logged for a cache) can never point at another record (of another scope)
        """CREATE TABLE agentkeep_memories (
            rowid INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL,
            scope TEXT NOT NULL,
            user_key TEXT NOT NULL,
            key TEXT,
            kind TEXT NOT NULL,
            text TEXT NOT NULL,
            source_session_id TEXT,
            metadata TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            superseded_by TEXT
        )"""
    )
    db.run("CREATE UNIQUE INDEX agentkeep_memories_id ON agentkeep_memories (scope, id)")
    db.run("CREATE INDEX agentkeep_memories_scope ON agentkeep_memories (scope, updated_at)")
    db.run("CREATE INDEX agentkeep_memories_user ON agentkeep_memories (user_key)")
    db.run(
        "CREATE UNIQUE INDEX agentkeep_memories_current_key ON agentkeep_memories (scope, key) "
        "WHERE key IS NOT NULL AND superseded_by IS NULL"
    )
    db.run(
        f"""CREATE VIRTUAL TABLE agentkeep_memory_vectors USING vec0(
            memory_rowid INTEGER PRIMARY KEY,
            scope TEXT PARTITION KEY,
            kind TEXT,
            updated_at INTEGER,
            embedding float[{dimensions}] distance_metric=cosine,
            chunk_size={_CHUNK}
        )"""
    )


def _create_change_log(db: VecConnection, dimensions: int) -> None:
    """Layout 2: each scope's change counter and vector count, and the log of changed vectors
    (what keeps a search cache coherent, see :mod:`._vector_cache`). A file of layout 1 gets the
    counts of its scopes once; nothing else is rewritten."""
    db.run(
        # AUTOINCREMENT: a scope forgotten and written again gets a new id, which no cache has
        """CREATE TABLE agentkeep_memory_scopes (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            scope TEXT NOT NULL UNIQUE,
            seq INTEGER NOT NULL,
            vectors INTEGER NOT NULL
        )"""
    )
    db.run(
        """CREATE TABLE agentkeep_memory_changes (
            scope_id INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            memory_rowid INTEGER NOT NULL,
            PRIMARY KEY (scope_id, seq)
        ) WITHOUT ROWID"""
    )
    db.run(
        "INSERT INTO agentkeep_memory_scopes (scope, seq, vectors) "
        "SELECT scope, 0, count(*) FROM agentkeep_memory_vectors GROUP BY scope"
    )


def _add_scope_summary(db: VecConnection, dimensions: int) -> None:
    """Layout 3: each scope's tenant, count of current memories and newest ``updated_at`` (the
    summary the listing of scopes reads, indexed in its order), and an index of current memories
    by scope and time (a scope's newest, and the count of its expired ones, in one range). A file
    of layout 2 gets the summary of its scopes once, from the memories."""
    db.run("ALTER TABLE agentkeep_memory_scopes ADD COLUMN tenant TEXT NOT NULL DEFAULT ''")
    db.run("ALTER TABLE agentkeep_memory_scopes ADD COLUMN memories INTEGER NOT NULL DEFAULT 0")
    db.run("ALTER TABLE agentkeep_memory_scopes ADD COLUMN newest INTEGER")
    db.run(
        "INSERT INTO agentkeep_memory_scopes (scope, seq, vectors, memories, newest) "
        "SELECT scope, 0, 0, count(*), max(updated_at) FROM agentkeep_memories "
        "WHERE superseded_by IS NULL GROUP BY scope "
        "ON CONFLICT (scope) DO UPDATE SET memories = excluded.memories, newest = excluded.newest"
    )
    db.run("UPDATE agentkeep_memory_scopes SET tenant = substr(scope, 1, instr(scope, char(31)) - 1)")
    db.run(
        "CREATE INDEX agentkeep_memory_scopes_listing ON agentkeep_memory_scopes (tenant, newest DESC, scope)"
    )
    db.run(
        "CREATE INDEX agentkeep_memories_current ON agentkeep_memories (scope, updated_at) "
        "WHERE superseded_by IS NULL"
    )


def _add_word_index(db: VecConnection, dimensions: int) -> None:
    """Layout 4: the full-text index of the words of every memory that has a vector (FTS5, the
    Porter stemmer over Unicode words, diacritics folded; its rowid is the memory's), and an
    index of current memories by scope and the time they were said (searches within a window).
    A file of layout 3 indexes its memories' words once."""
    db.run(
        "CREATE VIRTUAL TABLE agentkeep_memory_words USING fts5("
        "text, tokenize = 'porter unicode61 remove_diacritics 2')"
    )
    db.run(
        "INSERT INTO agentkeep_memory_words (rowid, text) "
        "SELECT m.rowid, m.text FROM agentkeep_memories AS m WHERE m.superseded_by IS NULL "
        "AND EXISTS (SELECT 1 FROM agentkeep_memory_vectors AS v WHERE v.memory_rowid = m.rowid)"
    )
    db.run(
        "CREATE INDEX agentkeep_memories_said ON agentkeep_memories (scope, created_at) "
        "WHERE superseded_by IS NULL"
    )


def _metadata_text(name: str) -> str:
    """SQL for a newline and the string value of the metadata entry ``name`` (none: '')."""
    value = f"json_extract(m.metadata, '$.{name}')"
    return (
        f"CASE WHEN json_type(m.metadata, '$.{name}') = 'text' AND {value} <> '' "
        f"THEN char(10) || {value} ELSE '' END"
    )


def _index_metadata_words(db: VecConnection, dimensions: int) -> None:
    """Layout 5: every memory's words indexed with those of its speaker and context (what
    :func:`~._lexical.indexed_text` gives a memory written from now on)."""
    db.run("DELETE FROM agentkeep_memory_words")
    extra = " || ".join(_metadata_text(name) for name in INDEXED_METADATA)
    db.run(
        f"INSERT INTO agentkeep_memory_words (rowid, text) SELECT m.rowid, m.text || {extra} "
        "FROM agentkeep_memories AS m WHERE m.superseded_by IS NULL "
        "AND EXISTS (SELECT 1 FROM agentkeep_memory_vectors AS v WHERE v.memory_rowid = m.rowid)"
    )


def _index_sessions(db: VecConnection, dimensions: int) -> None:
    """Layout 6: an index of current memories by scope, session and the order they were said
    (what was said next after a search hit, see :meth:`~.base.MemoryStore.following`)."""
    db.run(
        "CREATE INDEX agentkeep_memories_session ON agentkeep_memories "
        "(scope, source_session_id, created_at, updated_at, id) WHERE superseded_by IS NULL"
    )


_MIGRATIONS: Final[tuple[Callable[[VecConnection, int], None], ...]] = (
    _create_tables,
    _create_change_log,
    _add_scope_summary,
    _add_word_index,
    _index_metadata_words,
    _index_sessions,
)
"""One step per layout, in order: a file of layout ``n`` runs the steps from index ``n`` on."""


def _meta_number(found: dict[str, object], name: str, path: Path) -> int:
    """The whole number a meta row holds (0 when absent; see :func:`~.base.meta_number`)."""
    return meta_number(found.get(name, "0"), name, backend="sqlite", store=str(path))


def create_or_upgrade(db: VecConnection, path: Path, dimensions: int) -> None:
    """Create the store's tables in the file, or bring a file of an older layout up to date.

    Raises:
        SchemaVersionError: The file is of a newer layout than this code knows.
        MemoryFormatError: The file holds embeddings of another length.
    """
    with db.write():
        db.run(
            "CREATE TABLE IF NOT EXISTS agentkeep_memory_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
        )
        found: dict[str, object] = dict(db.rows("SELECT name, value FROM agentkeep_memory_meta"))  # pyright: ignore[reportAssignmentType]
        layout = _meta_number(found, "layout", path)
        if layout > LAYOUT:
            raise SchemaVersionError(f"{path} holds memories of a newer layout ({layout})", backend="sqlite")
        if "dimensions" in found and _meta_number(found, "dimensions", path) != dimensions:
            raise MemoryFormatError(
                f"{path} holds {found['dimensions']}-dimension embeddings, not {dimensions}"
            )
        if layout == LAYOUT:
            return
        for migrate in _MIGRATIONS[layout:]:
            migrate(db, dimensions)
        db.run(
            "INSERT INTO agentkeep_memory_meta (name, value) VALUES ('layout', ?), ('dimensions', ?) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (str(LAYOUT), str(dimensions)),
        )
