"""The database layer (private): connection ownership, schemas, migrations and error mapping.

One module per database, each used by both of that database's stores (the message store in
:mod:`agentkeep.message_stores` and the session store in :mod:`agentkeep.session_stores`):

* :mod:`.sqlite`: :class:`~agentkeep._db.sqlite.SQLiteDatabase`, the file's schema and the
  worker thread that owns its connection (standard library only).
* :mod:`.redis`: :class:`~agentkeep._db.redis.RedisConnection`, Lua scripts by SHA, key escaping
  (extra ``[redis]``).
* :mod:`.postgres`: :class:`~agentkeep._db.postgres.PostgresDatabase`, the pool, the schema and
  its migrations (extra ``[postgres]``).

Nothing is imported here, so importing one database's module needs no other database's driver.
"""

__all__: list[str] = []
