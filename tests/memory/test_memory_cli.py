"""``agentkeep memory list|search|forget`` as real subprocesses on a SQLite memory file of the
test's own (seeded with the packaged model's embeddings)."""

from __future__ import annotations

from pathlib import Path

from agentkeep.memory import MemoryRecord, MemoryScope
from agentkeep.memory.embedders import MiniLMEmbedder
from agentkeep.memory.sqlite import SQLiteMemoryStore
from tests.test_cli import ok, one_line_error, run

MAREN = MemoryScope("maren", tenant_id="acme")
FACTS = ["The user lives in Bergen.", "The user has a dog called Pixel.", "The user likes green tea."]


async def _seed(path: Path, embedder: MiniLMEmbedder) -> None:
    store = SQLiteMemoryStore(path, dimensions=embedder.dimensions)
    try:
        for text, vector in zip(FACTS, await embedder.embed(FACTS), strict=True):
            await store.add(MAREN, MemoryRecord(text, embedding=vector, source_session_id="s-1"))
        (other,) = await embedder.embed(["Bob likes chess."])
        await store.add(
            MemoryScope("bob", tenant_id="acme"), MemoryRecord("Bob likes chess.", embedding=other)
        )
        await store.add(
            MemoryScope("maren", tenant_id="globex"), MemoryRecord("Globex note.", embedding=other)
        )
    finally:
        await store.aclose()


async def test_list_search_and_forget(env: dict[str, str], tmp_path: Path, minilm: MiniLMEmbedder) -> None:
    path = tmp_path / "memory.db"
    await _seed(path, minilm)
    where = ["--memory-store", f"sqlite://{path}"]
    listed = ok(run(env, "memory", "list", "--user", "maren", "--tenant", "acme", *where))
    assert all(fact in listed for fact in FACTS)
    assert "Bob" not in listed
    assert "Globex" not in listed
    found = ok(
        run(
            env,
            "memory",
            "search",
            "what is my pet called",
            "--user",
            "maren",
            "--tenant",
            "acme",
            "-k",
            "1",
            *where,
        )
    )
    assert "Pixel" in found
    assert "[session s-1]" in found
    users = ok(run(env, "memory", "users", "--tenant", "acme", *where))
    assert "maren" in users
    assert "bob" in users
    assert "maren" not in ok(run(env, "memory", "users", "--tenant", "acme", "--q", "bo", *where))
    assert "no users with memories in tenant nobody" in ok(
        run(env, "memory", "users", "--tenant", "nobody", *where)
    )
    forgot = ok(run(env, "memory", "forget", "--user", "maren", "--tenant", "acme", "--yes", *where))
    assert forgot.strip() == "forgot 3 memories of acme::maren"
    assert "no memories" in ok(run(env, "memory", "list", "--user", "maren", "--tenant", "acme", *where))
    assert "Bob likes chess." in ok(run(env, "memory", "list", "--user", "bob", "--tenant", "acme", *where))
    assert "Globex note." in ok(run(env, "memory", "list", "--user", "maren", "--tenant", "globex", *where))


async def test_bad_options_are_one_line_errors(env: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    one_line_error(
        run(env, "memory", "list", "--user", "u", "--memory-store", f"sqlite://{missing}"), "no memory store"
    )
    assert not missing.exists()  # a mistyped path is not made into an empty store
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path, dimensions=384)
    await store.setup()
    await store.aclose()
    where = ["--memory-store", f"sqlite://{path}"]
    one_line_error(run(env, "memory", "list", "--user", "u", "--memory-store", "memory://"), "memory://")
    one_line_error(run(env, "memory", "list", "--user", "u", "--tenant", "a::", *where), "tenant_id")
    one_line_error(
        run(env, "memory", "list", "--user", "u", "--memory-store", "redis://127.0.0.1:6379/0"), "SQLite"
    )
    one_line_error(run(env, "memory", "search", " ", "--user", "u", *where), "query")
    refused = run(env, "memory", "forget", "--user", "u", *where)  # no --yes, nothing typed: nothing done
    assert refused.returncode == 1
    assert "nothing removed" in refused.stderr
    narrowed = ok(run(env, "memory", "list", "--user", "u", "--tenant", "acme::team", *where))  # a sub-tenant
    assert "no memories of acme::team::u" in narrowed


async def test_users_are_listed_a_page_at_a_time(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    store = SQLiteMemoryStore(path, dimensions=384)
    try:
        for n in range(5):
            await store.add(MemoryScope(f"user-{n}", tenant_id="acme"), MemoryRecord(f"note {n}"))
    finally:
        await store.aclose()
    where = ["--memory-store", f"sqlite://{path}"]
    seen: list[str] = []
    args = ["memory", "users", "--tenant", "acme", "--limit", "2", *where]
    for _ in range(5):  # bounded: 5 users in pages of 2
        shown = ok(run(env, *args))
        seen += sorted((u for u in (f"user-{n}" for n in range(5)) if u in shown), key=shown.index)
        more = [line for line in shown.splitlines() if line.startswith("more: --after ")]
        if not more:
            break
        args = ["memory", "users", "--tenant", "acme", "--limit", "2", "--after", more[0].split()[-1], *where]
    assert seen == [f"user-{n}" for n in (4, 3, 2, 1, 0)]
    one_line_error(run(env, "memory", "users", "--tenant", "acme", "--after", "nonsense", *where), "--after")
