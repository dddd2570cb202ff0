"""Stores from URLs (agentkeep.store_urls): every form opens the store it names, on the real backend."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from agentkeep import Agent, AgentkeepError, Message, StoreURLError
from agentkeep.memory import InMemoryMemoryStore
from agentkeep.memory.postgres import PostgresMemoryStore
from agentkeep.memory.sqlite import SQLiteMemoryStore
from agentkeep.message_stores import InMemoryMessageStore, SupportsClose
from agentkeep.message_stores.postgres import PostgresMessageStore
from agentkeep.message_stores.redis import RedisMessageStore
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.session_stores import FileSystemSessionStore, InMemorySessionStore
from agentkeep.session_stores.postgres import PostgresSessionStore
from agentkeep.session_stores.redis import RedisSessionStore
from agentkeep.session_stores.sqlite import SQLiteSessionStore
from agentkeep.store_urls import (
    DEFAULT_HISTORY_SOURCE_ID,
    describe_store,
    open_history_provider,
    open_memory_store,
    open_message_store,
    open_session_store,
    parse_store_url,
    redact_url,
)
from agentkeep.testing import ScriptedChatClient
from tests.message_stores.backend_postgres import URL as POSTGRES_URL
from tests.message_stores.backend_postgres import drop_schema, new_schema
from tests.message_stores.backend_redis import REDIS_URL, delete_prefix, unique_prefix


def test_the_forms_parse_into_locations(tmp_path: Path) -> None:
    assert parse_store_url(f"sqlite://{tmp_path}/x.db").path == tmp_path / "x.db"
    assert parse_store_url("memory://").backend == "memory"
    assert parse_store_url(f"file://{tmp_path}/sessions").path == tmp_path / "sessions"
    redis = parse_store_url("rediss://:pw@host:6380/1?key_prefix=app&health_check_interval=5")
    assert (redis.backend, redis.options) == ("redis", {"key_prefix": "app"})
    assert redis.url == "rediss://:pw@host:6380/1?health_check_interval=5"  # the driver's URL
    postgres = parse_store_url("postgres://me@db/app?schema=chat&sslmode=disable")
    assert (postgres.backend, postgres.options, postgres.url) == (
        "postgres",
        {"schema": "chat"},
        "postgres://me@db/app?sslmode=disable",
    )


@pytest.mark.parametrize(
    "bad",
    [
        "ftp://x",
        "nonsense",
        "memory://somewhere",
        "sqlite:///x.db?mode=ro",
        "file://",
        "redis://h:port/0",
        "redis://h/0?key_prefix=",
    ],
)
def test_a_bad_url_is_a_typed_error_without_the_password(bad: str) -> None:
    with pytest.raises(StoreURLError) as caught:
        open_message_store(bad.replace("//", "//:hunter2@", 1) if bad.startswith("redis") else bad)
    assert isinstance(caught.value, AgentkeepError)
    assert isinstance(caught.value, ValueError)
    assert "hunter2" not in str(caught.value)


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert redact_url("postgresql://me:pw@db/app") == "postgresql://me:***@db/app"
    assert redact_url("sqlite:///tmp/x.db") == "sqlite:///tmp/x.db"


async def test_memory_and_sqlite_message_stores(tmp_path: Path) -> None:
    memory = open_message_store("memory://", max_messages=3)
    assert isinstance(memory, InMemoryMessageStore)
    assert memory.max_messages == 3
    sqlite = open_message_store(f"sqlite://{tmp_path}/h.db", ttl=60, timeout=2.0)
    assert isinstance(sqlite, SQLiteMessageStore)
    assert (sqlite.path, sqlite.ttl, sqlite.database.timeout) == (tmp_path / "h.db", 60, 2.0)
    try:
        assert await sqlite.append("c", [Message("user", ["hi"])]) == [1]
        assert describe_store(sqlite) == f"sqlite at {tmp_path / 'h.db'}"
    finally:
        await sqlite.aclose()
    with pytest.raises(StoreURLError, match="session files"):
        open_message_store(f"file://{tmp_path}")


async def test_server_message_stores_use_their_namespace() -> None:
    prefix, schema = unique_prefix("urls"), new_schema("akurl")
    redis = open_message_store(f"{REDIS_URL}?key_prefix={prefix}")
    postgres = open_message_store(f"{POSTGRES_URL}?schema={schema}")
    try:
        assert isinstance(redis, RedisMessageStore)
        assert redis.key_prefix == prefix
        assert isinstance(postgres, PostgresMessageStore)
        assert postgres.schema == schema
        for store in (redis, postgres):
            assert await store.append("c", [Message("user", ["hi"])]) == [1]
            assert [e.message.text for e in (await store.read("c")).entries] == ["hi"]
        assert describe_store(redis).startswith("redis at redis://127.0.0.1:6379/0")
        assert describe_store(postgres).startswith("postgres at postgresql://postgres@127.0.0.1:5432/test")
    finally:
        for store in (redis, postgres):
            assert isinstance(store, SupportsClose)
            await store.aclose()
        await delete_prefix(prefix)
        await drop_schema(schema)


async def test_session_stores_of_every_form(tmp_path: Path) -> None:
    agent = Agent(ScriptedChatClient(lambda _: "hello"), name="a")
    prefix, schema = unique_prefix("urlsessions"), new_schema("akurls")
    stores = [
        (open_session_store("memory://"), InMemorySessionStore),
        (open_session_store(f"file://{tmp_path}/sessions"), FileSystemSessionStore),
        (open_session_store(f"sqlite://{tmp_path}/s.db"), SQLiteSessionStore),
        (open_session_store(f"{REDIS_URL}?key_prefix={prefix}", ttl=60), RedisSessionStore),
        (open_session_store(f"{POSTGRES_URL}?schema={schema}"), PostgresSessionStore),
    ]
    try:
        for store, kind in stores:
            assert isinstance(store, kind)
            session = await store.get_session(agent, "conv")
            await agent.run("hi", session=session)
            await store.save_session(agent, "conv", session)
            restored = await store.get_session(agent, "conv")
            assert len(restored.to_dict()["state"]["in_memory"]["messages"]) == 2, kind
        redis_store = stores[3][0]
        assert isinstance(redis_store, RedisSessionStore)
        assert (redis_store.key_prefix, redis_store.ttl) == (prefix, 60)
        assert stores[1][0].root_dir == tmp_path / "sessions"  # type: ignore[attr-defined]
    finally:
        for store, _ in stores:
            await store.aclose()
        await delete_prefix(prefix)
        await drop_schema(schema)
    with pytest.raises(StoreURLError, match="only Redis"):
        open_session_store("memory://", ttl=60)


async def test_a_history_provider_from_a_url_owns_its_store(tmp_path: Path) -> None:
    provider = open_history_provider(f"sqlite://{tmp_path}/p.db", load_limit=10, max_messages=100)
    assert provider.source_id == DEFAULT_HISTORY_SOURCE_ID
    assert provider.load_limit == 10
    client = ScriptedChatClient(lambda messages: f"{len(messages)} seen")
    agent = Agent(client, context_providers=[provider])
    session = agent.create_session(session_id="s")
    await agent.run("one", session=session)
    await agent.run("two", session=session)
    assert [m.text for m in client.calls[-1]] == ["one", "1 seen", "two"]
    store = provider.store
    assert isinstance(store, SQLiteMessageStore)
    assert store.max_messages == 100
    await provider.aclose()
    reopened = open_message_store(f"sqlite://{tmp_path}/p.db")
    try:
        assert len((await reopened.read("s", raw=True)).entries) == 4
    finally:
        assert isinstance(reopened, SupportsClose)
        await reopened.aclose()


async def test_a_backend_of_another_package_registers_its_schemes() -> None:
    from agentkeep.message_stores import InMemoryMessageStore
    from agentkeep.store_urls import MessageStoreOptions, StoreLocation, register_store_backend

    opened: list[StoreLocation] = []

    def open_mine(location: StoreLocation, options: MessageStoreOptions) -> InMemoryMessageStore:
        opened.append(location)
        return InMemoryMessageStore(max_messages=options["max_messages"], ttl=options["ttl"])

    register_store_backend(
        "mine", schemes=["mine", "mine+tls"], own_parameter="space", message_store=open_mine
    )
    store = open_message_store("mine+tls://db.example:7000/x?space=s1&pool=4", max_messages=3)
    assert isinstance(store, InMemoryMessageStore)
    assert store.max_messages == 3
    [location] = opened
    assert (location.backend, location.options, location.url) == (
        "mine",
        {"space": "s1"},
        "mine+tls://db.example:7000/x?pool=4",
    )
    assert parse_store_url("MINE://h/x").backend == "mine"
    with pytest.raises(StoreURLError, match="a mine store holds no sessions"):
        open_session_store("mine://h/x")
    with pytest.raises(ValueError, match="not a URL scheme"):
        register_store_backend("bad", schemes=["no spaces"], message_store=open_mine)


# -- one constructor shape ----------------------------------------------------------------------------
DURABLE = [
    SQLiteMessageStore,
    RedisMessageStore,
    PostgresMessageStore,
    FileSystemSessionStore,
    SQLiteSessionStore,
    RedisSessionStore,
    PostgresSessionStore,
    SQLiteMemoryStore,
    PostgresMemoryStore,
]
IN_PROCESS = [InMemoryMessageStore, InMemorySessionStore, InMemoryMemoryStore]


def _parameters(function: object) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", DURABLE + IN_PROCESS, ids=lambda backend: backend.__name__)
def test_every_backend_takes_its_connection_first_and_options_by_keyword(backend: type) -> None:
    options = _parameters(backend.__init__)[1:]  # after self
    if backend in DURABLE:  # the client, pool, file or folder comes first, positional
        assert options.pop(0).kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert [p.name for p in options if p.kind is not inspect.Parameter.KEYWORD_ONLY] == []
    assert isinstance(inspect.getattr_static(backend, "from_url"), classmethod)
    url, *url_options = _parameters(backend.from_url)
    assert (url.name, url.kind) == ("url", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in url_options)
    assert {p.name for p in url_options} <= {p.name for p in options}  # the constructor's options


async def test_memory_stores_of_every_form(tmp_path: Path) -> None:
    schema = new_schema("akurlmem")
    stores = [
        (open_memory_store("memory://", dimensions=4), InMemoryMemoryStore),
        (open_memory_store(f"sqlite://{tmp_path}/m.db", dimensions=4, ttl=60), SQLiteMemoryStore),
        (open_memory_store(f"{POSTGRES_URL}?schema={schema}", dimensions=4), PostgresMemoryStore),
    ]
    try:
        for store, kind in stores:
            assert isinstance(store, kind)
            assert store.dimensions == 4
            await store.setup()
        sqlite, postgres = stores[1][0], stores[2][0]
        assert isinstance(sqlite, SQLiteMemoryStore)
        assert (sqlite.path, sqlite.ttl) == (tmp_path / "m.db", 60)
        assert isinstance(postgres, PostgresMemoryStore)
        assert postgres.schema == schema
    finally:
        for store, _ in stores:
            await store.aclose()
        await drop_schema(schema)
    with pytest.raises(StoreURLError, match="holds no long-term memory"):
        open_memory_store(f"{REDIS_URL}")


def test_the_resolver_leaves_local_places_to_the_table_and_the_stores(tmp_path: Path) -> None:
    from agentkeep.store_urls import SessionStoreOptions, StoreLocation, register_store_backend

    assert parse_store_url("sqlite://").path == parse_store_url(None).path == SQLiteMessageStore().path
    assert parse_store_url("file://").path is None  # the session folder store refuses it when opened
    with pytest.raises(StoreURLError, match="name the folder"):
        open_session_store("file://")
    with pytest.raises(StoreURLError, match="names no place"):
        open_session_store("memory://somewhere")

    def open_here(location: StoreLocation, options: SessionStoreOptions) -> FileSystemSessionStore:
        assert location.path is not None
        return FileSystemSessionStore(location.path, key_ring=options["key_ring"])

    register_store_backend(
        "here",
        schemes=["here"],
        local=True,
        default_path=lambda: tmp_path / "default",
        session_store=open_here,
    )
    store = open_session_store("here://")
    assert isinstance(store, FileSystemSessionStore)
    assert store.root_dir == tmp_path / "default"
    assert parse_store_url("here://elsewhere").path == Path("elsewhere")
