"""``agentkeep keys generate`` and ``agentkeep keys rotate`` as real subprocesses, and the other
commands reading an encrypted store through ``AGENTKEEP_KEYS``."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentkeep import KeyRing, Message
from agentkeep.message_stores.base import close_store
from agentkeep.message_stores.codec import record_key_id
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from tests.test_cli import ok, one_line_error, run


def generated(env: dict[str, str], key_id: str) -> str:
    entry = ok(run(env, "keys", "generate", key_id)).strip()
    assert entry.startswith(f"{key_id}=")
    assert KeyRing.from_text(entry).key_ids == (key_id,)
    return entry


async def test_rotate_encrypts_a_plain_store_then_moves_it_to_a_new_key(
    env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite://{path}"
    plain = SQLiteMessageStore(path)
    try:
        await plain.append(
            "s-1", [Message("user", ["the launch code is 0451"]), Message("assistant", ["noted"])]
        )
    finally:
        await close_store(plain)
    k1, k2 = generated(env, "k1"), generated(env, "k2")
    assert k1 != generated(env, "k1")

    first = ok(run({**env, "AGENTKEEP_KEYS": k1}, "keys", "rotate", "--store", url))
    assert "2 of 2 records" in first
    assert "'k1'" in first
    store = SQLiteMessageStore(path, key_ring=KeyRing.from_text(k1))
    try:
        assert [record_key_id(r.body) for r in await store.stored_records("s-1")] == ["k1", "k1"]
    finally:
        await close_store(store)
    shown = ok(run({**env, "AGENTKEEP_KEYS": k1}, "sessions", "show", "s-1", "--store", url))
    assert "the launch code is 0451" in shown

    second = ok(
        run({**env, "AGENTKEEP_KEYS": f"{k2},{k1}"}, "keys", "rotate", "--store", url, "--batch-size", "1")
    )
    assert "2 of 2 records" in second
    assert "'k2'" in second
    again = ok(run({**env, "AGENTKEEP_KEYS": f"{k2},{k1}"}, "keys", "rotate", "--store", url))
    assert "0 of 2 records" in again
    store = SQLiteMessageStore(path, key_ring=KeyRing.from_text(k2))
    try:
        assert {record_key_id(r.body) for r in await store.stored_records("s-1")} == {"k2"}
    finally:
        await close_store(store)

    one_line_error(
        run({**env, "AGENTKEEP_KEYS": k1}, "sessions", "show", "s-1", "--store", url), "'k2'", "decrypt"
    )
    one_line_error(run(env, "sessions", "show", "s-1", "--store", url), "'k2'", "no key ring")


@pytest.mark.parametrize(
    ("variables", "arguments", "fragment"),
    [
        ({}, ["keys", "rotate"], "AGENTKEEP_KEYS"),
        ({"AGENTKEEP_KEYS": "k1=short"}, ["keys", "rotate"], "not valid base64"),
        ({}, ["keys", "generate", "bad id"], "key id"),
        (
            {"AGENTKEEP_KEYS": "k1=" + KeyRing.generate_key()},
            ["keys", "rotate", "--store", "memory://"],
            "nothing",
        ),
    ],
)
def test_key_errors_are_one_line(
    env: dict[str, str], variables: dict[str, str], arguments: list[str], fragment: str
) -> None:
    line = one_line_error(run({**env, **variables}, *arguments), fragment)
    assert "short" not in line or "base64" in line
