"""The database layer (private): connection ownership, schemas, migrations and error mapping.

One module per database, each used by that database's stores (the message store in
:mod:`agentkeep.message_stores`, the session store in :mod:`agentkeep.session_stores` and the
memory store in :mod:`agentkeep.memory`):

* :mod:`.jobs`: :class:`~agentkeep._db.jobs.JobWorker`, the worker thread a SQLite connection's
  jobs run on, and the protocol by which a cancelled caller's job rolls back instead of
  committing (both SQLite drivers use it).
* :mod:`.sqlite`: :class:`~agentkeep._db.sqlite.SQLiteDatabase`, the file's schema and the
  connection its jobs run on, quick jobs on the caller's thread (standard library only).
* :mod:`.sqlite_vec`: :class:`~agentkeep._db.sqlite_vec.VecConnection`, the memory store's
  connection (``apsw`` with sqlite-vec, extra ``[memory]``), its transactions and error mapping.
* :mod:`.redis`: :class:`~agentkeep._db.redis.RedisConnection`, Lua scripts by SHA, key escaping
  (extra ``[redis]``).
* :mod:`.postgres`: :class:`~agentkeep._db.postgres.PostgresDatabase`, the pool, the schema and
  its migrations (extra ``[postgres]``).

Nothing is imported here, so importing one database's module needs no other database's driver.
"""

__all__: list[str] = []
