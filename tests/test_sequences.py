"""MessageLog, MessageView and MessageChain: stamping, snapshots and O(1) sequence behaviour."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from agentkeep import (
    Message,
    MessageChain,
    MessageLog,
    MessageSourceType,
    MessageView,
    get_source_id,
    get_source_type,
)

HEX32 = re.compile(r"[0-9a-f]{32}")


def _msgs(*texts: str) -> list[Message]:
    return [Message("user", t) for t in texts]


def _texts(items: Sequence[Message] | MessageLog) -> list[str]:
    return [m.text for m in items]


# -- MessageLog ---------------------------------------------------------------------------------


def test_extend_stamps_copies_and_leaves_caller_objects_unchanged() -> None:
    caller = _msgs("a", "b")
    log = MessageLog("history")
    stored = log.extend(caller)
    assert len(stored) == 2
    for original, kept in zip(caller, stored, strict=True):
        assert kept is not original
        assert kept.text == original.text
        assert original.message_id is None
        assert original.created_at is None
        assert get_source_type(original) is MessageSourceType.EXTERNAL
        assert get_source_id(original) is None
        assert get_source_type(kept) is MessageSourceType.CHAT_HISTORY
        assert get_source_id(kept) == "history"


def test_extend_assigns_ids_and_times() -> None:
    log = MessageLog("h")
    stored = log.extend(_msgs("a", "b", "c"))
    ids = [m.message_id for m in stored]
    assert all(i is not None and HEX32.fullmatch(i) for i in ids)
    assert len(set(ids)) == 3
    assert all(m.created_at is not None for m in stored)


def test_extend_keeps_given_ids() -> None:
    log = MessageLog("h")
    when = datetime(2026, 1, 1, tzinfo=UTC)
    original = Message("user", "x", message_id="given", created_at=when)
    (stored,) = log.extend([original])
    assert stored.message_id == "given"
    assert stored.created_at == when
    assert stored == original  # equality ignores the stamp
    assert stored is not original


def test_extend_returns_the_stored_objects_in_order() -> None:
    log = MessageLog("h", _msgs("a"))
    stored = log.extend(_msgs("b", "c"))
    view = log.view()
    assert _texts(view) == ["a", "b", "c"]
    assert view[1] is stored[0]
    assert view[2] is stored[1]
    assert log.extend([]) == []
    assert len(log) == 3


def test_extend_accepts_any_iterable() -> None:
    log = MessageLog("h")
    log.extend(Message("user", t) for t in "xyz")
    assert _texts(log) == ["x", "y", "z"]


def test_initial_messages_are_stamped_like_appended_ones() -> None:
    caller = _msgs("a")
    log = MessageLog("h", caller)
    assert len(log) == 1
    assert log.view()[0] is not caller[0]
    assert get_source_id(log.view()[0]) == "h"
    assert caller[0].message_id is None


def test_custom_source_type() -> None:
    log = MessageLog("rag", _msgs("ctx"), source_type=MessageSourceType.CONTEXT_PROVIDER)
    assert get_source_type(log.view()[0]) is MessageSourceType.CONTEXT_PROVIDER
    view = log.view()
    assert view.source_type is MessageSourceType.CONTEXT_PROVIDER
    assert view.source_id == "rag"


def test_messages_already_in_the_log_are_not_copied_again() -> None:
    first = MessageLog("h", _msgs("a", "b"))
    second = MessageLog("h")
    stored = second.extend(first.view())
    assert all(a is b for a, b in zip(stored, first.view(), strict=True))
    other = MessageLog("other")
    restamped = other.extend(first.view())
    assert all(a is not b for a, b in zip(restamped, first.view(), strict=True))
    assert [get_source_id(m) for m in first.view()] == ["h", "h"]
    assert [get_source_id(m) for m in restamped] == ["other", "other"]
    assert [m.message_id for m in restamped] == [m.message_id for m in first.view()]


def test_view_is_a_snapshot_after_extend() -> None:
    log = MessageLog("h", _msgs("a", "b"))
    view = log.view()
    log.extend(_msgs("c", "d"))
    assert len(view) == 2
    assert _texts(view) == ["a", "b"]
    assert next(reversed(view)).text == "b"
    with pytest.raises(IndexError):
        view[2]
    assert len(log.view()) == 4


def test_view_is_a_snapshot_after_replace() -> None:
    log = MessageLog("h", _msgs("a", "b", "c"))
    view = log.view()
    tail = log.tail(2)
    log.replace(_msgs("summary"))
    assert _texts(view) == ["a", "b", "c"]
    assert _texts(tail) == ["b", "c"]
    assert _texts(log.view()) == ["summary"]
    assert len(log) == 1


def test_replace_stamps_and_identifies_without_touching_caller_objects() -> None:
    log = MessageLog("h")
    caller = _msgs("x")
    log.replace(caller)
    (kept,) = log.view()
    assert kept is not caller[0]
    assert get_source_id(kept) == "h"
    assert kept.message_id is not None
    assert caller[0].message_id is None
    assert get_source_type(caller[0]) is MessageSourceType.EXTERNAL


def test_view_bounds() -> None:
    log = MessageLog("h", _msgs("a", "b", "c", "d", "e"))
    assert _texts(log.view(1, 3)) == ["b", "c"]
    assert _texts(log.view(3)) == ["d", "e"]
    assert _texts(log.view(0, 100)) == ["a", "b", "c", "d", "e"]
    assert len(log.view(10)) == 0
    assert len(log.view(4, 2)) == 0
    assert list(log.view(4, 2)) == []


def test_view_with_negative_bounds_counts_from_the_end() -> None:
    log = MessageLog("h", _msgs("a", "b", "c", "d"))
    assert _texts(log.view(0, -1)) == ["a", "b", "c"]
    assert _texts(log.view(-2)) == ["c", "d"]
    assert _texts(log.view(-3, -1)) == ["b", "c"]
    assert len(log.view(0, -10)) == 0
    assert _texts(log.view(-10)) == ["a", "b", "c", "d"]


def test_view_indexing() -> None:
    log = MessageLog("h", _msgs("a", "b", "c", "d", "e"))
    view = log.view(1, 4)  # b c d
    assert view[0].text == "b"
    assert view[2].text == "d"
    assert view[-1].text == "d"
    assert view[-3].text == "b"
    for bad in (3, 4, -4, 100):
        with pytest.raises(IndexError):
            view[bad]


def test_view_slicing_gives_views() -> None:
    log = MessageLog("h", _msgs("a", "b", "c", "d", "e"))
    view = log.view()
    part = view[1:4]
    assert isinstance(part, MessageView)
    assert _texts(part) == ["b", "c", "d"]
    assert part.source_id == "h"
    sub = part[1:]
    assert _texts(sub) == ["c", "d"]
    assert sub[0] is view[2]
    assert _texts(view[-2:]) == ["d", "e"]
    assert _texts(view[:-3]) == ["a", "b"]
    assert len(view[3:1]) == 0
    assert _texts(view[10:]) == []
    log.extend(_msgs("f"))
    assert _texts(view[3:100]) == ["d", "e"]


def test_view_slicing_with_a_step() -> None:
    view = MessageLog("h", _msgs("a", "b", "c", "d", "e")).view()
    assert _texts(view[::2]) == ["a", "c", "e"]
    assert _texts(view[::-1]) == ["e", "d", "c", "b", "a"]
    assert _texts(view[1:4][::-1]) == ["d", "c", "b"]


def test_view_iteration_and_reversed() -> None:
    log = MessageLog("h", _msgs("a", "b", "c", "d"))
    full = log.view()
    middle = log.view(1, 3)
    assert _texts(full) == ["a", "b", "c", "d"]
    assert _texts(middle) == ["b", "c"]
    assert [m.text for m in reversed(full)] == ["d", "c", "b", "a"]
    assert [m.text for m in reversed(middle)] == ["c", "b"]
    assert [m.text for m in reversed(log.view(0, 0))] == []
    assert middle[0] in middle
    assert full.index(middle[1]) == 2
    assert middle.count(full[1]) == 1
    assert middle.count(full[0]) == 0  # every stored message has its own id
    assert full[0] not in middle


def test_view_equality() -> None:
    log = MessageLog("h", _msgs("a", "b"))
    view = log.view()
    items = list(view)
    assert view == items
    assert items == view
    assert view == log.view()
    assert view == tuple(items)
    assert view != items[:1]
    assert view != "ab"
    assert view != 3
    assert log.view(0, 0) == []


def test_view_is_unhashable_and_has_a_repr() -> None:
    view = MessageLog("h", _msgs("a")).view()
    with pytest.raises(TypeError):
        hash(view)
    assert "1 messages" in repr(view)
    assert "chat_history:h" in repr(view)


def test_tail() -> None:
    log = MessageLog("h", _msgs("a", "b", "c"))
    assert _texts(log.tail(2)) == ["b", "c"]
    assert _texts(log.tail(3)) == ["a", "b", "c"]
    assert _texts(log.tail(10)) == ["a", "b", "c"]
    assert len(log.tail(0)) == 0
    tail = log.tail(1)
    log.extend(_msgs("d"))
    assert _texts(tail) == ["c"]
    assert _texts(log.tail(1)) == ["d"]


def test_log_iteration_len_and_to_list() -> None:
    log = MessageLog("h", _msgs("a", "b"))
    assert len(log) == 2
    assert _texts(log) == ["a", "b"]
    wire = log.to_list()
    assert [w["contents"] for w in wire] == [[{"type": "text", "text": "a"}], [{"type": "text", "text": "b"}]]
    assert all("message_id" in w for w in wire)
    assert [Message.from_dict(w) for w in wire] == list(log.view())
    assert "2 messages" in repr(log)


def test_from_owned_takes_the_list_without_copying() -> None:
    owned = [Message.from_dict({"role": "user", "contents": [{"type": "text", "text": t}]}) for t in "ab"]
    ids_before = [m.message_id for m in owned]
    assert ids_before == [None, None]
    log = MessageLog.from_owned(owned, "h")
    view = log.view()
    assert view[0] is owned[0]
    assert view[1] is owned[1]
    # stamped and identified in place
    assert all(get_source_type(m) is MessageSourceType.CHAT_HISTORY for m in owned)
    assert all(get_source_id(m) == "h" for m in owned)
    assert all(m.message_id is not None and m.created_at is not None for m in owned)
    assert log.source_id == "h"


def test_from_owned_keeps_existing_ids_and_custom_stamp() -> None:
    owned = [Message("user", "a", message_id="keep")]
    log = MessageLog.from_owned(owned, "ctx", source_type=MessageSourceType.CONTEXT_PROVIDER)
    assert owned[0].message_id == "keep"
    assert get_source_type(owned[0]) is MessageSourceType.CONTEXT_PROVIDER
    assert log.source_type is MessageSourceType.CONTEXT_PROVIDER
    log.extend(_msgs("b"))
    assert _texts(log) == ["a", "b"]
    assert get_source_type(log.view()[1]) is MessageSourceType.CONTEXT_PROVIDER


def test_adopt_restamps_in_place() -> None:
    log = MessageLog("old", _msgs("a", "b"))
    before = list(log.view())
    log.adopt("new")
    assert log.source_id == "new"
    after = list(log.view())
    assert all(a is b for a, b in zip(before, after, strict=True))
    assert [get_source_id(m) for m in after] == ["new", "new"]
    assert all(get_source_type(m) is MessageSourceType.CHAT_HISTORY for m in after)
    # later appends get the new stamp, and re-stamping with the new id is free
    (added,) = log.extend(_msgs("c"))
    assert get_source_id(added) == "new"
    assert log.view().source_id == "new"
    same = log.extend([after[0]])
    assert same[0] is after[0]


# -- MessageChain -------------------------------------------------------------------------------


def test_chain_concatenates() -> None:
    a, b = _msgs("a1", "a2"), _msgs("b1")
    chain = MessageChain(a, b)
    assert len(chain) == 3
    assert _texts(chain) == ["a1", "a2", "b1"]
    assert chain[0] is a[0]
    assert chain[1] is a[1]
    assert chain[2] is b[0]
    assert chain[-1] is b[0]
    assert chain[-3] is a[0]


def test_chain_index_errors() -> None:
    chain = MessageChain(_msgs("a"), _msgs("b"))
    for bad in (2, 3, -3):
        with pytest.raises(IndexError):
            chain[bad]
    with pytest.raises(IndexError):
        MessageChain()[0]


def test_chain_indexing_across_many_parts() -> None:
    parts = [_msgs(*(f"{p}-{i}" for i in range(size))) for p, size in enumerate([3, 1, 4, 1, 5])]
    chain = MessageChain(*parts)
    flat = [m for part in parts for m in part]
    assert len(chain) == len(flat) == 14
    for i, message in enumerate(flat):
        assert chain[i] is message
        assert chain[i - len(flat)] is message
    assert list(chain) == flat


def test_chain_lengths_are_fixed_at_construction() -> None:
    history = _msgs("h1", "h2")
    inputs = _msgs("i1")
    chain = MessageChain(history, inputs)
    history.append(Message("user", "late"))
    inputs.append(Message("user", "late too"))
    assert len(chain) == 3
    assert _texts(chain) == ["h1", "h2", "i1"]
    assert chain[2].text == "i1"
    assert chain == [history[0], history[1], inputs[0]]


def test_chain_of_views_is_stable_when_the_log_grows() -> None:
    log = MessageLog("h", _msgs("a", "b"))
    chain = MessageChain(log.view(), _msgs("input"))
    log.extend(_msgs("c"))
    assert _texts(chain) == ["a", "b", "input"]


def test_chain_equality() -> None:
    a, b = _msgs("a"), _msgs("b", "c")
    chain = MessageChain(a, b)
    as_list = a + b
    assert chain == as_list
    assert as_list == chain
    assert chain == MessageChain(as_list)
    assert chain == tuple(as_list)
    assert chain != as_list[:2]
    assert chain != [*as_list, Message("user", "d")]
    assert chain != _msgs("a", "b", "x")
    assert chain != "abc"
    assert chain != 3
    assert MessageChain() == []


def test_chain_flattens_nested_chains() -> None:
    a, b, c = _msgs("a"), _msgs("b"), _msgs("c")
    inner = MessageChain(a, b)
    outer = MessageChain(inner, c)
    assert len(outer.parts) == 3
    assert all(x is y for x, y in zip(outer.parts, (a, b, c), strict=True))
    assert _texts(outer) == ["a", "b", "c"]
    deeper = MessageChain(MessageChain(outer), MessageChain(), inner)
    assert len(deeper.parts) == 5
    assert _texts(deeper) == ["a", "b", "c", "a", "b"]


def test_nested_chain_keeps_the_inner_fixed_lengths() -> None:
    a = _msgs("a")
    inner = MessageChain(a)
    a.append(Message("user", "grown"))
    outer = MessageChain(inner, _msgs("z"))
    assert _texts(outer) == ["a", "z"]
    assert outer[1].text == "z"


def test_chain_skips_empty_parts() -> None:
    a = _msgs("a")
    chain = MessageChain([], a, [], MessageChain(), [])
    assert chain.parts == (a,)
    assert len(chain) == 1
    assert _texts(chain) == ["a"]
    empty = MessageChain([], [])
    assert len(empty) == 0
    assert list(empty) == []
    assert empty.parts == ()


def test_chain_slicing_gives_a_list() -> None:
    chain = MessageChain(_msgs("a", "b"), _msgs("c", "d"))
    assert _texts(chain[1:3]) == ["b", "c"]
    assert _texts(chain[::-1]) == ["d", "c", "b", "a"]
    assert _texts(chain[-1:]) == ["d"]
    assert chain[5:] == []


def test_chain_reversed_and_containment() -> None:
    a, b = _msgs("a"), _msgs("b")
    chain = MessageChain(a, b)
    assert [m.text for m in reversed(chain)] == ["b", "a"]
    assert b[0] in chain
    assert Message("user", "zzz") not in chain


def test_chain_is_unhashable_and_has_a_repr() -> None:
    chain = MessageChain(_msgs("a"), _msgs("b", "c"))
    with pytest.raises(TypeError):
        hash(chain)
    assert repr(chain) == "MessageChain(3 messages in 2 parts)"
