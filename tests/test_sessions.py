"""Sessions: the StateBag, AgentSession payloads and ProviderSessionState."""

from __future__ import annotations

import enum
import threading
import uuid
from collections.abc import MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypedDict

import msgspec
import pytest

from agentkeep import (
    SESSION_FORMAT_VERSION,
    AgentkeepError,
    AgentSession,
    Message,
    ProviderSessionState,
    SessionFormatError,
    StateBag,
    StateTypeError,
    register_state_type,
)
from agentkeep.session_stores import session_version, set_session_version


@dataclass
class Prefs:
    name: str
    tags: list[str] = field(default_factory=list)


@dataclass
class Counter:
    count: int = 0


class Note:
    """A value that is not a dataclass but has to_dict() / from_dict()."""

    def __init__(self, text: str, *, pinned: bool = False) -> None:
        self.text = text
        self.pinned = pinned

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "pinned": self.pinned}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Note:
        return cls(data["text"], pinned=data["pinned"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Note) and (self.text, self.pinned) == (other.text, other.pinned)

    __hash__ = None  # type: ignore[assignment]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(TypedDict):
    x: int
    y: int


def _round_trip(session: AgentSession) -> AgentSession:
    return AgentSession.from_json(session.to_json())


# -- StateBag: basic access ---------------------------------------------------------------------


def test_set_and_get() -> None:
    bag = StateBag()
    bag.set("a", 1)
    bag["b"] = {"x": [1, 2]}
    assert bag.get("a") == 1
    assert bag["b"] == {"x": [1, 2]}
    assert bag.get("missing") is None
    assert bag.get("missing", Prefs) is None
    assert bag.try_get("missing", Prefs) is None
    with pytest.raises(KeyError):
        bag["missing"]


def test_get_returns_the_stored_object() -> None:
    bag = StateBag()
    prefs = Prefs("ann")
    bag.set("prefs", prefs)
    assert bag.get("prefs") is prefs
    assert bag.get("prefs", Prefs) is prefs
    assert bag["prefs"] is prefs


def test_initial_values() -> None:
    bag = StateBag({"a": 1, "b": [2]})
    assert list(bag.keys()) == ["a", "b"]
    assert bag.get("b") == [2]


@pytest.mark.parametrize("key", ["", 3, None])
def test_invalid_keys_are_rejected(key: Any) -> None:
    with pytest.raises(StateTypeError):
        StateBag().set(key, 1)


def test_mapping_operations() -> None:
    bag = StateBag()
    assert len(bag) == 0
    assert "a" not in bag
    assert bag.setdefault("a", [1]) == [1]
    assert bag.setdefault("a", [2]) == [1]
    items = bag.setdefault("list", [])
    items.append("x")
    assert bag.get("list") == ["x"]
    assert "a" in bag
    assert 5 not in bag
    assert len(bag) == 2
    assert list(bag.keys()) == ["a", "list"]
    assert list(bag) == ["a", "list"]
    assert bag.pop("a") == [1]
    with pytest.raises(KeyError):  # as a dict's pop
        bag.pop("a")
    assert bag.pop("a", None) is None
    assert bag.pop("a", "fallback") == "fallback"
    del bag["list"]
    assert len(bag) == 0
    with pytest.raises(KeyError):
        del bag["list"]
    bag.set("x", 1)
    bag.clear()
    assert list(bag.keys()) == []
    assert "StateBag" in repr(bag)


def test_the_bag_is_a_mutable_mapping() -> None:
    # What the reference's code does with session.state, a plain dict there.
    bag = StateBag({"a": 1})
    assert isinstance(bag, MutableMapping)
    assert bag == {"a": 1}
    assert StateBag() == {}
    bag.update({"b": [2]})
    assert dict(bag.items()) == {"a": 1, "b": [2]}
    assert sorted(bag.values(), key=str) == [1, [2]]
    assert bag.get("missing", []) == []
    assert bag.get("a", 0) == 1
    assert bag.get("a", int) == 1  # a type: a typed read


def test_iteration_is_over_a_snapshot_of_keys() -> None:
    bag = StateBag({"a": 1, "b": 2})
    for key in bag:
        bag.set(key + "2", 0)  # would raise if iterating the live dict
    assert sorted(bag.keys()) == ["a", "a2", "b", "b2"]


def test_mapping_operations_on_json_held_values() -> None:
    bag = StateBag.from_json_values({"a": {"name": "x"}, "b": [1]})
    assert bag.setdefault("a", "unused") == {"name": "x"}
    assert bag.pop("b") == [1]
    assert list(bag.keys()) == ["a"]


# -- StateBag: JSON form and typed reads ----------------------------------------------------


def test_objects_become_json_only_when_serialized() -> None:
    bag = StateBag()
    prefs = Prefs("ann")
    bag.set("prefs", prefs)
    prefs.tags.append("late")  # a change after set() shows in the serialized form
    assert bag.to_dict() == {"prefs": {"name": "ann", "tags": ["late"]}}


def test_typed_read_of_a_dataclass_after_a_json_round_trip() -> None:
    session = AgentSession()
    session.state.set("prefs", Prefs("ann", ["a", "b"]))
    restored = _round_trip(session)
    # held as JSON until the first typed read
    assert restored.state.to_dict() == {"prefs": {"name": "ann", "tags": ["a", "b"]}}
    first = restored.state.get("prefs", Prefs)
    assert isinstance(first, Prefs)
    assert first == Prefs("ann", ["a", "b"])
    # then cached: the same object comes back
    assert restored.state.get("prefs", Prefs) is first
    assert restored.state.get("prefs") is first
    assert restored.state["prefs"] is first
    # and the object is now the source of truth
    first.tags.append("c")
    assert restored.state.to_dict()["prefs"] == {"name": "ann", "tags": ["a", "b", "c"]}


def test_untyped_read_of_json_returns_plain_json() -> None:
    restored = _round_trip(_session_with(prefs=Prefs("bo", ["t"])))
    value = restored.state.get("prefs")
    assert value == {"name": "bo", "tags": ["t"]}
    assert type(value) is dict
    assert restored.state.get("prefs") is value
    # a later typed read still works
    assert restored.state.get("prefs", Prefs) == Prefs("bo", ["t"])


def test_mutating_an_untyped_json_read_is_kept() -> None:
    restored = _round_trip(_session_with(items=["a"]))
    items = restored.state.get("items")
    items.append("b")
    assert restored.state.to_dict() == {"items": ["a", "b"]}
    assert _round_trip(restored).state.get("items") == ["a", "b"]


def test_typed_read_with_a_generic_alias() -> None:
    restored = _round_trip(_session_with(todo=["milk", "eggs"]))
    items = restored.state.get("todo", list[str])
    assert items == ["milk", "eggs"]
    assert restored.state.get("todo", list[str]) is items
    # an object-form list is returned as is for the matching generic
    bag = StateBag()
    stored = ["x"]
    bag.set("todo", stored)
    assert bag.get("todo", list[str]) is stored


def test_typed_read_of_nested_generics_and_other_msgspec_types() -> None:
    session = _session_with(
        counts={"a": 1, "b": 2},
        many=[Prefs("a"), Prefs("b", ["t"])],
        color=Color.BLUE,
        when=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        point={"x": 1, "y": 2},
    )
    restored = _round_trip(session)
    assert restored.state.get("counts", dict[str, int]) == {"a": 1, "b": 2}
    assert restored.state.get("many", list[Prefs]) == [Prefs("a"), Prefs("b", ["t"])]
    assert restored.state.get("color", Color) is Color.BLUE
    assert restored.state.get("when", datetime) == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert restored.state.get("point", Point) == {"x": 1, "y": 2}


def test_declared_type_on_set() -> None:
    bag = StateBag()
    value: list[str] = []
    bag.set("todo", value, list[str])
    assert bag.get("todo", list[str]) is value


def test_try_get_returns_none_on_type_mismatch_while_get_raises() -> None:
    restored = _round_trip(_session_with(prefs=Prefs("ann")))
    assert restored.state.try_get("prefs", list[int]) is None
    with pytest.raises(StateTypeError) as info:
        restored.state.get("prefs", list[int])
    assert info.value.key == "prefs"
    assert "prefs" in str(info.value)
    assert isinstance(info.value, AgentkeepError)
    assert isinstance(info.value, TypeError)
    assert info.value.__cause__ is not None
    # the failed read left the value intact
    assert restored.state.to_dict() == {"prefs": {"name": "ann", "tags": []}}
    assert restored.state.get("prefs", Prefs) == Prefs("ann")


def test_try_get_returns_the_value_when_it_fits() -> None:
    restored = _round_trip(_session_with(counter=Counter(3)))
    assert restored.state.try_get("counter", Counter) == Counter(3)
    assert restored.state.try_get("counter") == Counter(3)


def test_typed_read_mismatch_on_an_object_value() -> None:
    bag = StateBag()
    prefs = Prefs("ann")
    bag.set("prefs", prefs)
    with pytest.raises(StateTypeError) as info:
        bag.get("prefs", int)
    assert info.value.key == "prefs"
    assert bag.try_get("prefs", list[int]) is None
    assert bag.get("prefs") is prefs


def test_json_missing_required_field_is_a_state_type_error() -> None:
    bag = StateBag.from_json_values({"prefs": {"tags": []}})
    with pytest.raises(StateTypeError) as info:
        bag.get("prefs", Prefs)
    assert info.value.key == "prefs"


def test_unknown_keys_survive_a_session_round_trip_untouched() -> None:
    foreign: dict[str, Any] = {
        "other_provider": {"deep": {"list": [1, 2.5, None, True, "s"], "empty": {}}},
        "scalar": 7,
        "null": None,
    }
    payload = {
        "type": "session",
        "version": 1,
        "session_id": "s-1",
        "service_session_id": None,
        "state": {**foreign, "mine": {"count": 1}},
    }
    session = AgentSession.from_dict(payload)
    counter = session.state.get("mine", Counter)
    assert counter == Counter(1)
    assert counter is not None
    counter.count += 1
    out = session.to_dict()
    assert out["state"] == {**foreign, "mine": {"count": 2}}
    again = _round_trip(session).to_dict()
    assert again["state"] == {**foreign, "mine": {"count": 2}}


def test_values_with_to_dict_and_from_dict() -> None:
    session = _session_with(note=Note("hi", pinned=True), notes=[Note("a"), Note("b")])
    assert session.to_dict()["state"] == {
        "note": {"text": "hi", "pinned": True},
        "notes": [{"text": "a", "pinned": False}, {"text": "b", "pinned": False}],
    }
    restored = _round_trip(session)
    note = restored.state.get("note", Note)
    assert isinstance(note, Note)
    assert note == Note("hi", pinned=True)
    assert restored.state.get("note", Note) is note
    assert restored.state.get("notes", list[Note]) == [Note("a"), Note("b")]


def test_messages_as_state_values() -> None:
    message = Message("user", "remember me", message_id="m1", created_at=datetime(2026, 1, 1, tzinfo=UTC))
    restored = _round_trip(_session_with(last=message, all=[message, Message("assistant", "ok")]))
    assert restored.state.get("last", Message) == message
    history = restored.state.get("all", list[Message])
    assert history is not None
    assert [m.text for m in history] == ["remember me", "ok"]
    assert all(isinstance(m, Message) for m in history)


def test_a_value_that_cannot_be_serialized() -> None:
    bag = StateBag()
    bag.set("fine", 1)
    bag.set("lock", threading.Lock())
    with pytest.raises(StateTypeError) as info:
        bag.to_dict()
    assert info.value.key == "lock"
    assert "lock" in str(info.value)
    session = AgentSession()
    session.state.set("bad", object())
    with pytest.raises(StateTypeError):
        session.to_dict()
    with pytest.raises(StateTypeError):
        session.to_json()
    # the bag still works for reads of the object itself
    assert bag.get("fine") == 1
    with pytest.raises(StateTypeError):
        bag.get("lock", dict)


# -- StateBag: concurrency ----------------------------------------------------------------------


def test_thread_safety_smoke() -> None:
    threads = 8
    rounds = 300
    bag = StateBag.from_json_values({"prefs": {"name": "shared", "tags": ["t"]}})
    barrier = threading.Barrier(threads)

    def worker(index: int) -> Prefs | None:
        own = f"own-{index}"
        barrier.wait()
        typed = bag.get("prefs", Prefs)
        for step in range(rounds):
            bag.set(own, step)
            assert bag.get(own) == step
            bag.set("shared", [index, step])
            shared = bag.get("shared")
            assert isinstance(shared, list)
            assert len(shared) == 2
            bag.setdefault(f"once-{step % 10}", index)
            snapshot = bag.to_dict()
            assert snapshot[own] == step
        return typed

    with ThreadPoolExecutor(max_workers=threads) as pool:
        typed_reads = list(pool.map(worker, range(threads)))

    first = typed_reads[0]
    assert isinstance(first, Prefs)
    assert all(read is first for read in typed_reads)  # converted once, then cached
    for index in range(threads):
        assert bag.get(f"own-{index}") == rounds - 1
    final = bag.get("shared")
    assert final[1] == rounds - 1
    assert final[0] in range(threads)
    assert len(bag) == 1 + threads + 1 + 10


# -- AgentSession -------------------------------------------------------------------------------


def _session_with(**values: Any) -> AgentSession:
    session = AgentSession(session_id="s-1")
    for key, value in values.items():
        session.state.set(key, value)
    return session


def test_new_session() -> None:
    session = AgentSession()
    assert uuid.UUID(session.session_id)
    assert session.service_session_id is None
    assert len(session.state) == 0
    assert AgentSession().session_id != session.session_id
    assert AgentSession(session_id="given").session_id == "given"
    assert AgentSession(service_session_id="conv_1").service_session_id == "conv_1"
    assert "AgentSession" in repr(session)


def test_session_id_is_read_only() -> None:
    session = AgentSession(session_id="s")
    with pytest.raises(AttributeError):
        session.session_id = "other"  # pyright: ignore[reportAttributeAccessIssue]


def test_to_dict_shape() -> None:
    session = AgentSession(session_id="s-1", service_session_id="conv-9")
    session.state.set("k", {"v": 1})
    assert session.to_dict() == {
        "type": "session",
        "version": 1,
        "session_id": "s-1",
        "service_session_id": "conv-9",
        "state": {"k": {"v": 1}},
    }
    assert SESSION_FORMAT_VERSION == 1
    assert AgentSession(session_id="e").to_dict() == {
        "type": "session",
        "version": 1,
        "session_id": "e",
        "service_session_id": None,
        "state": {},
    }


def test_dict_round_trip() -> None:
    session = AgentSession(session_id="s-1", service_session_id="conv")
    session.state.set("prefs", Prefs("ann", ["x"]))
    session.state.set("n", 3)
    restored = AgentSession.from_dict(session.to_dict())
    assert restored.session_id == "s-1"
    assert restored.service_session_id == "conv"
    assert restored.state.get("prefs", Prefs) == Prefs("ann", ["x"])
    assert restored.state.get("n") == 3
    assert restored.to_dict() == session.to_dict()


def test_json_round_trip() -> None:
    session = AgentSession(session_id="s-2")
    session.state.set("counter", Counter(5))
    data = session.to_json()
    assert isinstance(data, bytes)
    assert msgspec.json.decode(data) == session.to_dict()
    for text in (data, data.decode()):
        restored = AgentSession.from_json(text)
        assert restored.session_id == "s-2"
        assert restored.service_session_id is None
        assert restored.state.get("counter", Counter) == Counter(5)
        assert restored.to_dict() == session.to_dict()


def test_payload_without_type_or_state_is_accepted() -> None:
    restored = AgentSession.from_dict({"version": 1, "session_id": "s"})
    assert restored.session_id == "s"
    assert restored.service_session_id is None
    assert len(restored.state) == 0


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (None, "object"),
        ([], "object"),
        ("session", "object"),
        ({"type": "session", "version": 2, "session_id": "s", "state": {}}, "version"),
        ({"type": "session", "version": 0, "session_id": "s", "state": {}}, "version"),
        ({"type": "session", "version": "1", "session_id": "s", "state": {}}, "version"),
        ({"type": "session", "version": True, "session_id": "s", "state": {}}, "version"),
        ({"type": "session", "version": 1.0, "session_id": "s", "state": {}}, "version"),
        ({"type": "session", "version": None, "session_id": "s", "state": {}}, "version"),
        ({"type": "message", "version": 1, "session_id": "s", "state": {}}, "type"),
        ({"type": None, "version": 1, "session_id": "s", "state": {}}, "type"),
        ({"type": "session", "version": 1, "state": {}}, "session_id"),
        ({"type": "session", "version": 1, "session_id": "", "state": {}}, "session_id"),
        ({"type": "session", "version": 1, "session_id": 5, "state": {}}, "session_id"),
        ({"type": "session", "version": 1, "session_id": "s", "service_session_id": 5}, "service_session_id"),
        (
            {"type": "session", "version": 1, "session_id": "s", "service_session_id": ["c"]},
            "service_session_id",
        ),
        ({"type": "session", "version": 1, "session_id": "s", "state": []}, "state"),
        ({"type": "session", "version": 1, "session_id": "s", "state": "{}"}, "state"),
        ({"type": "session", "version": 1, "session_id": "s", "state": None}, "state"),
    ],
)
def test_corrupt_payloads_are_refused(payload: Any, fragment: str) -> None:
    with pytest.raises(SessionFormatError) as info:
        AgentSession.from_dict(payload)
    assert fragment in str(info.value)
    assert isinstance(info.value, AgentkeepError)
    assert isinstance(info.value, ValueError)


def test_reference_payloads_without_a_version_are_read() -> None:
    # The reference writes no version; its file store writes "1.0".
    plain = AgentSession.from_dict({"type": "session", "session_id": "s", "state": {"k": "v"}})
    assert plain.session_id == "s"
    assert plain.state == {"k": "v"}
    snapshot = AgentSession.from_dict({"type": "session", "version": "1.0", "session_id": "t"})
    assert snapshot.state == {}
    assert AgentSession.from_dict({"session_id": "only"}).session_id == "only"
    assert AgentSession.from_dict({}).session_id  # a new id, as the reference's constructor makes
    with pytest.raises(SessionFormatError, match="version"):
        AgentSession.from_dict({"type": "session", "version": "1.1", "session_id": "s"})


def test_newer_version_error_names_both_versions() -> None:
    with pytest.raises(SessionFormatError) as info:
        AgentSession.from_dict({"type": "session", "version": 2, "session_id": "s", "state": {}})
    assert "2" in str(info.value)
    assert "1" in str(info.value)


@pytest.mark.parametrize("text", ["", "{", "not json", b"\x00\x01", '{"version": 1,}'])
def test_invalid_json_is_refused(text: str | bytes) -> None:
    with pytest.raises(SessionFormatError) as info:
        AgentSession.from_json(text)
    assert "JSON" in str(info.value)
    assert isinstance(info.value.__cause__, msgspec.DecodeError)


@pytest.mark.parametrize("text", ["[]", "null", '{"version": 2, "session_id": "s"}'])
def test_valid_json_with_a_bad_payload_is_refused(text: str) -> None:
    with pytest.raises(SessionFormatError):
        AgentSession.from_json(text)


# -- ProviderSessionState -----------------------------------------------------------------------


def test_get_or_initialize_stores_the_initial_value() -> None:
    calls: list[AgentSession | None] = []

    def init(session: AgentSession | None) -> Counter:
        calls.append(session)
        return Counter()

    state = ProviderSessionState[Counter](init, "counter")
    session = AgentSession()
    first = state.get_or_initialize_state(session)
    assert first == Counter(0)
    assert calls == [session]
    assert session.state.get("counter") is first
    assert state.get_or_initialize_state(session) is first
    assert len(calls) == 1


def test_save_state() -> None:
    state = ProviderSessionState[Counter](lambda _: Counter(), "counter")
    session = AgentSession()
    state.save_state(session, Counter(9))
    assert state.get_or_initialize_state(session) == Counter(9)
    value = state.get_or_initialize_state(session)
    value.count += 1
    state.save_state(session, value)
    assert session.to_dict()["state"] == {"counter": {"count": 10}}
    state.save_state(None, Counter(1))  # no session: nothing to do


def test_no_session_gives_a_fresh_unstored_value() -> None:
    calls: list[AgentSession | None] = []

    def init(session: AgentSession | None) -> list[str]:
        calls.append(session)
        return []

    state = ProviderSessionState[list[str]](init, "todo")
    first = state.get_or_initialize_state(None)
    first.append("x")
    second = state.get_or_initialize_state(None)
    assert second == []
    assert second is not first
    assert calls == [None, None]


def test_state_type_from_subscription_survives_a_round_trip() -> None:
    state = ProviderSessionState[Prefs](lambda _: Prefs("new"), "prefs")
    assert state.state_type is Prefs
    session = AgentSession()
    prefs = state.get_or_initialize_state(session)
    prefs.tags.append("x")
    state.save_state(session, prefs)
    restored = _round_trip(session)
    value = state.get_or_initialize_state(restored)
    assert isinstance(value, Prefs)
    assert value == Prefs("new", ["x"])
    assert state.get_or_initialize_state(restored) is value


def test_state_type_from_a_generic_subscription() -> None:
    state = ProviderSessionState[list[Prefs]](lambda _: [], "all")
    assert state.state_type == list[Prefs]
    session = AgentSession()
    state.get_or_initialize_state(session).append(Prefs("a"))
    restored = _round_trip(session)
    value = state.get_or_initialize_state(restored)
    assert value == [Prefs("a")]
    assert all(isinstance(p, Prefs) for p in value)


class Journal:
    """A state class usable directly as the initializer: called without arguments."""

    def __init__(self, entries: list[str] | None = None) -> None:
        self.entries = entries if entries is not None else []

    def to_dict(self) -> dict[str, Any]:
        return {"entries": self.entries}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Journal:
        return cls(entries=list(data["entries"]))


def test_state_type_from_a_class_initializer_survives_a_round_trip() -> None:
    state = ProviderSessionState(Journal, "journal")
    assert state.state_type is Journal
    session = AgentSession(session_id="s-9")
    journal = state.get_or_initialize_state(session)
    assert isinstance(journal, Journal)
    assert journal.entries == []
    journal.entries.append("day 1")
    restored = _round_trip(session)
    value = state.get_or_initialize_state(restored)
    assert isinstance(value, Journal)
    assert value.entries == ["day 1"]
    assert state.get_or_initialize_state(restored) is value


def test_explicit_state_type_wins() -> None:
    state = ProviderSessionState[Any](lambda _: {"count": 0}, "c", state_type=Counter)
    assert state.state_type is Counter
    restored = _round_trip(_session_with(c={"count": 4}))
    assert state.get_or_initialize_state(restored) == Counter(4)


def test_without_a_type_reads_plain_json() -> None:
    def init(_: AgentSession | None) -> Any:
        return Prefs("x")

    state: ProviderSessionState[Any] = ProviderSessionState(init, "untyped")
    assert state.state_type is None
    session = AgentSession()
    assert state.get_or_initialize_state(session) == Prefs("x")
    restored = _round_trip(session)
    assert state.get_or_initialize_state(restored) == {"name": "x", "tags": []}


def test_stored_value_of_the_wrong_shape_is_a_state_type_error() -> None:
    state = ProviderSessionState[Counter](lambda _: Counter(), "counter")
    restored = _round_trip(_session_with(counter={"count": "many"}))
    with pytest.raises(StateTypeError) as info:
        state.get_or_initialize_state(restored)
    assert info.value.key == "counter"


def test_two_states_on_one_session_use_their_own_keys() -> None:
    first = ProviderSessionState[Counter](lambda _: Counter(1), "first")
    second = ProviderSessionState[Counter](lambda _: Counter(2), "second")
    session = AgentSession()
    assert first.get_or_initialize_state(session) == Counter(1)
    assert second.get_or_initialize_state(session) == Counter(2)
    assert session.to_dict()["state"] == {"first": {"count": 1}, "second": {"count": 2}}


def test_empty_state_key_is_rejected() -> None:
    with pytest.raises(ValueError, match="state_key"):
        ProviderSessionState[Counter](lambda _: Counter(), "")


def test_a_stored_object_is_never_converted_to_another_type() -> None:
    bag = StateBag()
    prefs = Prefs(name="dark")
    bag.set("k", prefs)
    with pytest.raises(StateTypeError) as caught:
        bag.get("k", Counter)
    assert caught.value.key == "k"
    assert bag.try_get("k", Counter) is None
    assert bag.get("k", Prefs) is prefs  # untouched by the failed reads
    assert bag.to_dict()["k"] == {"name": "dark", "tags": []}


def test_untyped_read_keeps_json_form_and_in_place_edits_persist() -> None:
    restored = _round_trip(_session_with(counter={"count": 1}))
    raw = restored.state["counter"]
    raw["count"] = 2
    assert restored.state.get("counter", Counter) == Counter(2)


def test_unknown_top_level_session_fields_survive_a_round_trip() -> None:
    payload = AgentSession(session_id="s").to_dict()
    payload["x_owner"] = {"tenant": "t1"}
    restored = AgentSession.from_dict(payload)
    assert restored.to_dict()["x_owner"] == {"tenant": "t1"}


def test_empty_session_id_is_refused() -> None:
    with pytest.raises(ValueError, match="session_id"):
        AgentSession(session_id="")


def test_the_runtime_space_is_never_serialized() -> None:
    session = AgentSession(session_id="s")
    session.runtime["cache:mine"] = object()  # anything: it never reaches a payload
    set_session_version(session, 3)
    payload = session.to_json()
    assert b"cache" not in payload
    assert b"store" not in payload
    restored = AgentSession.from_json(payload)
    assert restored.runtime == {}
    assert session_version(restored) is None
    assert session_version(session) == 3


# -- the reference's shapes (issue 23) --------------------------------------------------------------


def test_assigning_a_dict_to_state_gives_a_bag_that_serializes() -> None:
    session = AgentSession(session_id="s1")
    session.state = {"key": "value"}  # pyright: ignore[reportAttributeAccessIssue]  # as the reference allows
    assert isinstance(session.state, StateBag)
    assert session.to_dict()["state"] == {"key": "value"}
    assert AgentSession.from_dict(session.to_dict()).state == {"key": "value"}


def test_a_service_session_id_may_be_a_mapping_of_ids() -> None:
    ids = {"context_id": "ctx-1", "task_id": "task-2"}
    session = AgentSession(session_id="s", service_session_id=ids)
    assert session.service_session_id == ids
    restored = AgentSession.from_json(session.to_json())
    assert restored.service_session_id == ids
    with pytest.raises(ValueError, match="service_session_id"):
        AgentSession(service_session_id=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="service_session_id"):
        AgentSession(service_session_id={"bad": float("nan")})


@dataclass
class Memo:
    text: str


def _memo_out(memo: Memo) -> dict[str, Any]:
    return {"text": memo.text}


def _memo_in(data: Any) -> Memo:
    return Memo(data["text"])


register_state_type(Memo, type_id="tests.sessions.memo", encoder=_memo_out, decoder=_memo_in)


class First:
    def to_dict(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_dict(cls, data: Any) -> First:
        return cls()


class Second(First):
    pass


register_state_type(First, type_id="tests.sessions.collision")


def test_messages_and_registered_types_in_plain_state_come_back_as_objects() -> None:
    register_state_type(Memo, type_id="tests.sessions.memo")  # the same registration again: a no-op
    session = AgentSession(session_id="s")
    session.state["notes"] = {"items": [Memo("buy milk")], "messages": [Message("user", "hi")]}
    payload = session.to_dict()
    assert payload["state"]["notes"]["items"] == [{"type": "tests.sessions.memo", "text": "buy milk"}]
    assert payload["state"]["notes"]["messages"][0]["type"] == "message"
    restored = AgentSession.from_json(session.to_json())
    notes = restored.state["notes"]
    assert notes["items"] == [Memo("buy milk")]
    assert isinstance(notes["messages"][0], Message)
    assert notes["messages"][0].text == "hi"
    notes["items"].append(Memo("and bread"))  # the restored objects are the value now: edits persist
    assert len(restored.to_dict()["state"]["notes"]["items"]) == 2


def test_state_type_ids_are_unique_and_unknown_tags_stay_data() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_state_type(Second, type_id="tests.sessions.collision")
    with pytest.raises(ValueError, match="both an encoder and a decoder"):
        register_state_type(Second, type_id="tests.sessions.other", encoder=lambda _: {})
    restored = AgentSession.from_dict({"session_id": "s", "state": {"v": {"type": "tests.unknown", "n": 1}}})
    assert restored.state["v"] == {"type": "tests.unknown", "n": 1}


def test_a_stored_value_a_registered_type_refuses_is_a_typed_error() -> None:
    restored = AgentSession.from_dict(
        {"session_id": "s", "state": {"m": {"type": "message", "role": "user", "contents": [123]}}}
    )
    with pytest.raises(StateTypeError, match="cannot be restored"):
        restored.state["m"]


def test_other_formats_items_tagged_message_stay_dicts() -> None:
    item = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}
    restored = AgentSession.from_dict({"session_id": "s", "state": {"responses": {"output": [item]}}})
    assert restored.state["responses"] == {"output": [item]}
