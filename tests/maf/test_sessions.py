"""Agent Framework sessions in and out, against sessions the real framework (1.23) serialized.

* framework → agentkeep → framework equals the original (no store in between), and through a
  real SQLite message store equals it but for the documented fields (each message gains an id
  and its creation time);
* agentkeep → framework → agentkeep gives the messages back with ids and times;
* what agentkeep exports loads in the framework: ``loaded.json`` records the framework's own
  ``AgentSession.from_dict`` and an agent turn on each exported file (``generate.py --check``),
  and the committed exports are what the exporter writes today;
* bad input is a :class:`~agentkeep.errors.SessionFormatError` naming the problem.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from agentkeep import (
    Agent,
    AgentSession,
    InMemoryHistoryProvider,
    Message,
    MessageFormatError,
    SessionFormatError,
)
from agentkeep.contents import UnknownContent
from agentkeep.maf import (
    CREATED_AT_PROPERTY,
    ROLE_PROPERTY,
    message_from_maf,
    message_to_maf,
    session_from_maf,
    session_to_maf,
)
from agentkeep.message_stores.sqlite import SQLiteMessageStore
from agentkeep.testing import ScriptedChatClient
from tests.fixtures.maf import export_samples
from tests.maf.fixtures import EXPORTED, LOADED, SESSIONS, VERSIONS
from tests.test_messages import messages


def _deep(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"role": "user", "contents": []}
    for _ in range(depth):
        value = {"role": "user", "contents": [{"type": "x", "inner": value}]}
    return value


def _histories(session: dict[str, Any]) -> list[list[Any]]:
    return [v["messages"] for v in session["state"].values() if isinstance(v, dict) and "messages" in v]


def test_the_fixtures_come_from_agent_framework_1_23() -> None:
    assert VERSIONS["agent-framework-core"].startswith("1.23.")
    assert len(SESSIONS) >= 8


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_framework_to_agentkeep_to_framework_is_the_original(name: str) -> None:
    original = SESSIONS[name]
    imported = session_from_maf(copy.deepcopy(original))
    back = session_to_maf(
        imported.session, imported.messages, history_source_id=imported.history_source_id or "in_memory"
    )
    assert back == original


def _without_documented_fields(session: dict[str, Any], original: dict[str, Any]) -> dict[str, Any]:
    """``session`` without what agentkeep adds on the way through a store (an id where the
    original had none, the creation time)."""
    out = copy.deepcopy(session)
    for source, holder in out["state"].items():
        if not isinstance(holder, dict) or "messages" not in holder:
            continue
        before = original["state"][source]["messages"]
        for message, was in zip(holder["messages"], before, strict=True):
            assert message["additional_properties"].pop(CREATED_AT_PROPERTY)
            assert message["message_id"]
            if "message_id" not in was:
                del message["message_id"]
    return out


@pytest.mark.parametrize("name", sorted(n for n, s in SESSIONS.items() if any(_histories(s))))
async def test_through_a_real_store_only_ids_and_times_are_added(name: str, tmp_path: Path) -> None:
    original = SESSIONS[name]
    imported = session_from_maf(copy.deepcopy(original))
    store = SQLiteMessageStore(tmp_path / "history.db")
    await store.setup()
    try:
        await store.append("s", imported.messages)
        stored = [entry.message for entry in (await store.read("s")).entries]
    finally:
        await store.aclose()
    assert all(m.message_id and m.created_at for m in stored)
    back = session_to_maf(
        imported.session, stored, history_source_id=imported.history_source_id or "in_memory"
    )
    assert _without_documented_fields(back, original) == original


def test_agentkeep_to_framework_to_agentkeep_keeps_ids_and_times() -> None:
    exported = export_samples.samples()["native.json"]
    imported = session_from_maf(exported)
    again = session_to_maf(imported.session, imported.messages)
    assert again == exported
    assert [m.message_id for m in imported.messages] == [f"ak-native-{n}" for n in range(7)]
    assert all(m.created_at is not None for m in imported.messages)
    assert imported.session.state.get("notes") == {"topic": "weather"}


def test_content_agentkeep_cannot_hold_exactly_is_kept_whole() -> None:
    reasoning = SESSIONS["reasoning_usage.json"]["state"]["in_memory"]["messages"][2]
    message = message_from_maf(reasoning)
    kinds = [c.kind for c in message.contents if isinstance(c, UnknownContent)]
    assert kinds == ["text_reasoning", "usage"]  # only encrypted reasoning; provider-specific counts
    unmodeled = SESSIONS["unmodeled_contents.json"]["state"]["in_memory"]["messages"]
    kept = {c.kind for m in unmodeled for c in message_from_maf(m).contents if isinstance(c, UnknownContent)}
    assert {
        "hosted_file",
        "code_interpreter_tool_call",
        "function_approval_request",
        "oauth_consent_request",
    } <= kept
    # Stored and read back, a kept-whole content of a known kind stays kept whole.
    again = Message.from_json(message.to_json())
    assert again == message
    assert again.to_dict()["contents"][0]["type"] == "agentkeep.opaque"
    # A foreign kind that happens to use that name is kept whole too.
    foreign = message_from_maf({"role": "user", "contents": [{"type": "agentkeep.opaque", "x": 1}]})
    assert Message.from_json(foreign.to_json()) == foreign


def test_a_developer_message_is_a_system_message_that_goes_back_as_developer() -> None:
    messages = SESSIONS["system_and_metadata.json"]["state"]["in_memory"]["messages"]
    developer = next(m for m in messages if m["role"] == "developer")
    message = message_from_maf(developer)
    assert message.role == "system"
    assert (message.additional_properties or {})[ROLE_PROPERTY] == "developer"


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_what_agentkeep_exports_loads_in_the_framework(name: str) -> None:
    assert export_samples.samples()[name] == json.loads(EXPORTED[name]), (
        "the exporter changed: run tests/fixtures/maf/export_samples.py, then generate.py --check"
    )
    report = LOADED["files"][name]
    assert report["ok"], report["error"]
    if report["message_count"]:  # the check runs an agent turn on every session with a history
        assert report["agent_run"]["ok"], report["agent_run"]["error"]
    assert report["message_count"] == sum(len(h) for h in _histories(export_samples.samples()[name]))


def test_every_export_was_checked_by_the_framework() -> None:
    assert set(LOADED["files"]) == set(EXPORTED)
    assert LOADED["versions"]["agent-framework-core"] == VERSIONS["agent-framework-core"]


async def test_an_agent_continues_an_imported_session() -> None:
    imported = session_from_maf(copy.deepcopy(SESSIONS["basic_text.json"]))
    client = ScriptedChatClient(["Paris, still."])
    agent = Agent(client, context_providers=InMemoryHistoryProvider())
    session = imported.in_memory_session()
    await agent.run("And again?", session=session)
    sent = [m.text for m in client.calls[0]]
    assert sent[:4] == [m.text for m in imported.messages]
    assert sent[-1] == "And again?"
    out = session_to_maf(session)  # the session's own in-memory history
    assert len(out["state"]["in_memory"]["messages"]) == 6


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "must be a JSON object"),
        ({"format": "agentkeep.conversation", "messages": []}, "an agentkeep export"),
        ({"type": "thread", "session_id": "s"}, "'type' is 'thread'"),
        ({"session_id": "s", "version": "2.0"}, "version '2.0' is not supported"),
        ({"session_id": "s", "version": ["1.0"]}, "is not supported"),
        ({"session_id": "s", "state": {"in_memory": {"messages": [_deep(3000)]}}}, "nested too deeply"),
        ({"session_id": ""}, "'session_id'"),
        ({"session_id": "s", "state": []}, "'state' must be an object"),
        ({"session_id": "s", "service_session_id": 3}, "service_session_id"),
        ({"session_id": "s", "state": {"in_memory": {"messages": [{"role": "robot"}]}}}, "robot"),
        (
            {"session_id": "s", "state": {"in_memory": {"messages": [{"role": "user", "contents": {}}]}}},
            "list",
        ),
        (
            {"session_id": "s", "state": {"in_memory": {"messages": [{"role": "user", "contents": [7]}]}}},
            "object",
        ),
        ({"session_id": "s", "state": {"a": {"messages": []}, "b": {"messages": []}}}, "several histories"),
    ],
)
def test_bad_input_is_a_session_format_error(document: Any, problem: str) -> None:
    with pytest.raises(SessionFormatError, match=problem):
        session_from_maf(document)


def test_a_history_can_be_chosen_by_its_source_id() -> None:
    document = {"session_id": "s", "state": {"a": {"messages": []}, "b": {"messages": [{"role": "user"}]}}}
    imported = session_from_maf(document, history_source_id="b")
    assert [m.role for m in imported.messages] == ["user"]
    assert imported.session.state.get("a") == {"messages": []}
    with pytest.raises(SessionFormatError, match="no history under 'c'"):
        session_from_maf(document, history_source_id="c")


def test_the_files_properties_cannot_rewrite_checked_fields() -> None:
    sneaky = {
        "role": "user",
        "contents": [{"type": "text", "text": "hi"}],
        "additional_properties": {
            "agentkeep.extra_fields": {"role": "system", "message_id": "other", "note": 1},
            "agentkeep.role": "developer",
        },
    }
    message = message_from_maf(sneaky)
    assert message.role == "user"
    assert message.message_id is None
    assert message.extra_fields == {"note": 1}
    assert message_to_maf(message)["role"] == "user"
    with pytest.raises(MessageFormatError, match="must be an object"):
        message_from_maf({"role": "user", "additional_properties": {"agentkeep.extra_fields": [1]}})


def test_message_round_trip_of_agentkeep_only_fields() -> None:
    message = Message("user", ["hi"], message_id="m1")
    message.extra_fields = {"custom": 1}
    out = message_from_maf(session_to_maf(_session("x"), [message])["state"]["in_memory"]["messages"][0])
    assert out == message


def _session(session_id: str) -> AgentSession:
    return AgentSession(session_id=session_id)


@settings(max_examples=150, deadline=None)
@given(messages())
def test_property_an_agentkeep_message_survives_the_framework_form(message: Message) -> None:
    framework = message_to_maf(message)
    assert framework["type"] == "message"
    assert "created_at" not in framework  # the framework refuses fields it does not know
    assert message_from_maf(json.loads(json.dumps(framework))) == message
