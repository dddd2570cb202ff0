"""``agentkeep sessions compact``: strategies on a stored session's view, recorded non-destructively.

The command runs as a real subprocess on a temporary SQLite store (and on the real Redis and
PostgreSQL servers, each test with a namespace of its own); the store is then read directly to
check what was recorded: the view changed, the raw log still holds every original. The helpers
behind the command are also tested in process.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer

from agentkeep import Content, Message
from agentkeep.cli import ChatSession, CLIError, open_store
from agentkeep.cli._compact import StrategyName, compact_conversation, plan_compaction
from agentkeep.compaction import MessageIndex
from agentkeep.message_stores import InMemoryMessageStore, Summary
from agentkeep.message_stores.base import HistoryView, MessageStore, StoredMessage, close_store, setup_store
from agentkeep.testing import ScriptedChatClient
from tests.test_cli import ok, one_line_error, run, shown_roles

SESSION = "weather"

# -- helpers ------------------------------------------------------------------------------------------


def weather_messages() -> list[Message]:
    """A system message and three turns; the first two call a tool (two tool-call groups)."""

    def call(call_id: str, city: str) -> Message:
        return Message(
            "assistant", [Content.from_function_call(call_id, "get_weather", arguments={"city": city})]
        )

    def result(call_id: str, value: dict[str, Any]) -> Message:
        return Message("tool", [Content.from_function_result(call_id, result=value)])

    return [
        Message("system", ["You are a weather assistant."]),
        Message("user", ["What's the weather in Paris?"]),
        call("call-1", "Paris"),
        result("call-1", {"sky": "sunny", "temperature": 18, "wind": "a light breeze from the south west"}),
        Message("assistant", ["It is sunny in Paris, 18 degrees."]),
        Message("user", ["And in Oslo?"]),
        call("call-2", "Oslo"),
        result("call-2", {"sky": "snow", "temperature": -3}),
        Message("assistant", ["It snows in Oslo, minus 3 degrees."]),
        Message("user", ["Thanks!"]),
        Message("assistant", ["You're welcome."]),
    ]


async def seed(store_url: str, messages: list[Message], conversation_id: str = SESSION) -> list[Message]:
    """Store ``messages`` under ``conversation_id`` (they get their ids and times)."""
    store = open_store(store_url)
    try:
        await setup_store(store)
        await store.append(conversation_id, messages)
    finally:
        await close_store(store)
    return messages


async def stored(store_url: str, conversation_id: str = SESSION) -> tuple[HistoryView, list[StoredMessage]]:
    """The view and the raw log of a stored conversation."""
    store = open_store(store_url)
    try:
        await setup_store(store)
        return await store.read(conversation_id), (await store.read(conversation_id, raw=True)).entries
    finally:
        await close_store(store)


def compact(env: dict[str, str], store_url: str, *args: str, session: str = SESSION) -> str:
    return ok(run(env, "sessions", "compact", session, "--store", store_url, *args))


def counts(output: str) -> dict[str, tuple[int, int]]:
    """The before/after table the command printed: row label -> (before, after)."""
    rows = re.findall(r"^ *(\w+) +(\d+) +(\d+) *$", output, flags=re.MULTILINE)
    return {label: (int(before), int(after)) for label, before, after in rows}


def view_dicts(view: HistoryView) -> list[dict[str, Any]]:
    return [entry.message.to_dict() for entry in view.entries]


def estimated_tokens(messages: list[Message]) -> int:
    return MessageIndex(messages).included_token_count


# -- tool-result: dry run, then for real --------------------------------------------------------------


async def test_tool_result_dry_run_then_recorded(env: dict[str, str], store_url: str) -> None:
    messages = await seed(store_url, weather_messages())
    view_before, raw_before = await stored(store_url)
    tokens_before = estimated_tokens(messages)

    dry = compact(env, store_url, "--strategy", "tool-result", "--dry-run")
    assert "strategy: tool-result (keep 1 tool-call group)" in dry
    table = counts(dry)
    assert table["system"] == (1, 1)
    assert table["user"] == (3, 3)
    assert table["assistant_text"] == (3, 3)
    assert table["tool_call"] == (2, 1)
    assert table["summary"] == (0, 1)
    assert table["groups"] == (9, 9)
    assert table["messages"] == (11, 10)
    assert table["tokens"][0] == tokens_before
    assert table["tokens"][1] < tokens_before
    assert "dry run: nothing stored (would exclude 2 messages, add 1 summary)" in dry
    view, raw = await stored(store_url)
    assert view.epoch == view_before.epoch == 0
    assert view_dicts(view) == view_dicts(view_before)
    assert [(e.seq, e.excluded) for e in raw] == [(e.seq, e.excluded) for e in raw_before]

    real = compact(env, store_url, "--strategy", "tool-result")
    assert counts(real) == table  # the same computation
    assert "recorded compaction (epoch 1): excluded 2 messages, added 1 summary" in real
    view, raw = await stored(store_url)
    assert view.epoch == 1
    summary = view.entries[2]
    assert summary.is_summary
    assert summary.replaces == (messages[2].message_id, messages[3].message_id)
    assert summary.message.text.startswith('[Tool results: get_weather: {"sky":"sunny","temperature":18,')
    # the summary stands where the collapsed call stood; everything else is as it was
    others = [e.message.message_id for e in view.entries if not e.is_summary]
    assert others == [m.message_id for i, m in enumerate(messages) if i not in (2, 3)]
    # non-destructive: the raw log keeps every original, the collapsed two marked excluded
    assert [e.message.message_id for e in raw] == [m.message_id for m in messages]
    assert [e.seq for e in raw if e.excluded] == [3, 4]

    shown = ok(run(env, "sessions", "show", SESSION, "--store", store_url))
    assert "10 messages" in shown
    assert "summary of 2 messages (assistant): [Tool results: get_weather: " in shown
    assert "call-1" not in shown
    assert "-> call get_weather" in shown  # the newest tool call is kept
    raw_shown = ok(run(env, "sessions", "show", SESSION, "--store", store_url, "--raw"))
    assert raw_shown.count("(excluded)") == 2
    assert "[call-1]" in raw_shown

    # the newest tool-call group is kept, so a second run has nothing to do
    again = compact(env, store_url, "--strategy", "tool-result")
    assert "nothing to compact (9 groups, 10 messages" in again
    assert "nothing stored" in again
    assert (await stored(store_url))[0].epoch == 1


async def test_chat_loads_the_compacted_view(env: dict[str, str], store_url: str) -> None:
    """What a later ``agentkeep chat --session ID`` sends: the summary, not the collapsed call."""
    await seed(store_url, weather_messages())
    compact(env, store_url, "--strategy", "tool-result")
    client = ScriptedChatClient(["Cloudy, probably."])
    store = open_store(store_url)
    try:
        await setup_store(store)
        await ChatSession(client, store, SESSION).send("And tomorrow?")
    finally:
        await close_store(store)
    sent = list(client.calls[0])
    texts = [message.text for message in sent]
    assert any(text.startswith("[Tool results: get_weather:") for text in texts)
    call_ids = [c.call_id for m in sent for c in [*m.function_calls, *m.function_results]]
    assert call_ids == ["call-2", "call-2"]
    assert texts[-1] == "And tomorrow?"


# -- pipelines and the other strategies ---------------------------------------------------------------


async def test_pipeline_runs_strategies_in_order(env: dict[str, str], store_url: str) -> None:
    messages = await seed(store_url, weather_messages())
    output = compact(env, store_url, "--strategy", "tool-result", "--strategy", "turns", "--keep", "1")
    assert "strategy: tool-result (keep 1 tool-call group) → turns (keep 1 turn)" in output
    table = counts(output)
    assert table["user"] == (3, 1)
    assert table["tool_call"] == (2, 0)
    assert "summary" not in table  # made by the first step, dropped with its turn by the second
    assert table["messages"] == (11, 3)
    # the summary was made and dropped within the run: it is not recorded
    assert "recorded compaction (epoch 1): excluded 8 messages;" in output
    view, raw = await stored(store_url)
    assert [e.message.message_id for e in view.entries] == [
        messages[0].message_id,
        *(m.message_id for m in messages[-2:]),
    ]
    assert len(raw) == 11
    assert sum(e.excluded for e in raw) == 8
    shown = ok(run(env, "sessions", "show", SESSION, "--store", store_url))
    assert shown_roles(shown) == ["system", "user", "assistant"]


async def test_a_later_compaction_excludes_an_earlier_summary(env: dict[str, str], store_url: str) -> None:
    await seed(store_url, weather_messages())
    compact(env, store_url, "--strategy", "tool-result")
    output = compact(env, store_url, "--strategy", "turns", "--keep", "1")
    assert counts(output)["summary"] == (1, 0)
    assert "recorded compaction (epoch 2): excluded 6 messages and 1 earlier summary;" in output
    view, raw = await stored(store_url)
    assert view.epoch == 2
    assert [e.message.text for e in view.entries] == [
        "You are a weather assistant.",
        "Thanks!",
        "You're welcome.",
    ]
    assert len(raw) == 11
    shown = ok(run(env, "sessions", "show", SESSION, "--store", store_url))
    assert "summary of" not in shown


async def test_selective_tool_calls_and_sliding_window(env: dict[str, str], store_url: str) -> None:
    await seed(store_url, weather_messages())
    selective = compact(env, store_url, "--strategy", "selective-tool-calls", "--keep", "0", "--dry-run")
    assert counts(selective)["tool_call"] == (2, 0)
    assert "would exclude 4 messages)" in selective
    window = compact(env, store_url, "--strategy", "sliding-window", "--keep", "2")
    assert counts(window)["groups"] == (9, 3)  # the system message and the newest two groups
    assert "excluded 8 messages" in window
    shown = ok(run(env, "sessions", "show", SESSION, "--store", store_url))
    assert shown_roles(shown) == ["system", "user", "assistant"]


async def test_token_strategies(env: dict[str, str], store_url: str) -> None:
    messages = await seed(store_url, weather_messages())
    total = estimated_tokens(messages)
    fits = compact(env, store_url, "--strategy", "token-budget", "--max-tokens", str(total))
    assert f"nothing to compact (9 groups, 11 messages, {total} tokens): nothing stored" in fits

    target = total // 2
    limits = ["--max-tokens", str(total - 1), "--target-tokens", str(target)]
    truncation = compact(env, store_url, "--strategy", "truncation", *limits, "--dry-run")
    assert f"truncation (over {total - 1} tokens: down to {target})" in truncation
    before, after = counts(truncation)["tokens"]
    assert before == total
    assert after <= target
    assert counts(truncation)["system"] == (1, 1)

    budget = compact(env, store_url, "--strategy", "token-budget", "--max-tokens", str(total - 1))
    assert f"token-budget (to at most {total - 1} tokens)" in budget
    table = counts(budget)
    assert table["tokens"][1] <= total - 1
    assert table["summary"] == (0, 1)  # collapsing the older tool result was enough
    assert table["groups"] == (9, 9)
    assert (await stored(store_url))[0].epoch == 1


async def test_openai_tokenizer(env: dict[str, str], store_url: str) -> None:
    pytest.importorskip("bpe_openai")
    await seed(store_url, weather_messages())
    output = compact(
        env, store_url, "--strategy", "tool-result", "--tokenizer", "openai:o200k_base", "--dry-run"
    )
    assert "tokens counted with o200k_base" in output
    unknown = run(
        env,
        "sessions",
        "compact",
        SESSION,
        "--store",
        store_url,
        "--strategy",
        "turns",
        "--tokenizer",
        "openai:x",
    )
    one_line_error(unknown, "unknown OpenAI encoding 'x'")


# -- nothing to do, errors ----------------------------------------------------------------------------


async def test_nothing_to_compact_leaves_the_store_alone(env: dict[str, str], store_url: str) -> None:
    await seed(store_url, [Message("user", ["Hello"]), Message("assistant", ["Hi!"])], "small")
    for strategy in ("tool-result", "selective-tool-calls", "sliding-window", "turns"):
        output = compact(env, store_url, "--strategy", strategy, session="small")
        assert "nothing to compact (2 groups, 2 messages, " in output, output
        assert "recorded" not in output
    view, raw = await stored(store_url, "small")
    assert view.epoch == 0
    assert [e.excluded for e in raw] == [False, False]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ["--strategy", "tool-result", "--max-tokens", "10"],
            "Invalid value for '--max-tokens': not used by tool-result",
        ),
        (
            ["--strategy", "turns", "--target-tokens", "10"],
            "Invalid value for '--target-tokens': not used by turns",
        ),
        (
            ["--strategy", "truncation", "--max-tokens", "10", "--keep", "2"],
            "Invalid value for '--keep': not used by truncation",
        ),
        (["--strategy", "truncation"], "'--max-tokens': required by --strategy truncation"),
        (
            ["--strategy", "turns", "--strategy", "token-budget"],
            "'--max-tokens': required by --strategy token-budget",
        ),
        (
            ["--strategy", "truncation", "--max-tokens", "10", "--target-tokens", "20"],
            "20 is more than --max-tokens (10)",
        ),
        (["--strategy", "summarize"], "'summarize' is not one of"),
        ([], "Missing option '--strategy'"),
        (["--strategy", "turns", "--keep", "-1"], "'--keep'"),
        (["--strategy", "turns", "--tokenizer", "gpt"], "Invalid value for '--tokenizer'"),
    ],
)
async def test_bad_option_combinations_exit_with_status_2(
    env: dict[str, str], store_url: str, args: list[str], fragment: str
) -> None:
    await seed(store_url, weather_messages())
    result = run(env, "sessions", "compact", SESSION, "--store", store_url, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert fragment in " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.stderr).split()), result.stderr
    assert (await stored(store_url))[0].epoch == 0


def test_unknown_session_is_a_one_line_error(env: dict[str, str], store_url: str) -> None:
    result = run(env, "sessions", "compact", "nope", "--store", store_url, "--strategy", "tool-result")
    one_line_error(result, "no session 'nope' in sqlite at")
    assert result.stdout == ""


# -- on the servers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("server_store", ["redis", "postgres"], indirect=True)
async def test_compact_on_servers(env: dict[str, str], server_store: str) -> None:
    messages = await seed(server_store, weather_messages())
    dry = compact(env, server_store, "--strategy", "tool-result", "--dry-run")
    assert "dry run: nothing stored" in dry
    assert (await stored(server_store))[0].epoch == 0

    real = compact(
        env, server_store, "--strategy", "tool-result", "--strategy", "selective-tool-calls", "--keep", "0"
    )
    assert counts(real)["tool_call"] == (2, 0)
    assert counts(real)["summary"] == (0, 2)
    assert "recorded compaction (epoch 1): excluded 4 messages, added 2 summaries" in real
    view, raw = await stored(server_store)
    assert view.epoch == 1
    assert [i for i, entry in enumerate(view.entries) if entry.is_summary] == [2, 5]
    assert [e.message.message_id for e in raw] == [m.message_id for m in messages]
    assert [e.seq for e in raw if e.excluded] == [3, 4, 7, 8]
    shown = ok(run(env, "sessions", "show", SESSION, "--store", server_store))
    assert shown.count("summary of 2 messages (assistant): [Tool results: get_weather:") == 2
    one_line_error(
        run(env, "sessions", "compact", "nope", "--store", server_store, "--strategy", "turns"),
        "no session 'nope'",
    )


# -- the helpers behind the command, in process -------------------------------------------------------


async def test_a_summary_recorded_without_its_mark_is_still_a_summary() -> None:
    """A summary from an import or a hand-made compaction is a summary group, not a system message."""
    store = InMemoryMessageStore()
    messages = weather_messages()
    await store.append("s", messages)
    replaced = [m.message_id or "" for m in messages[1:5]]
    await store.record_compaction(
        "s", excluded=replaced, summaries=[Summary(Message("system", ["Paris: sunny."]), replaced)]
    )
    plan = plan_compaction([StrategyName.TURNS], keep=1)
    report = await compact_conversation(store, "s", plan)
    assert report.before.groups["summary"] == 1
    assert report.after.groups.get("summary", 0) == 0
    assert report.excluded_summaries == 1
    assert report.describe_change() == "excluded 4 messages and 1 earlier summary"
    assert [e.message.text for e in (await store.read("s")).entries] == [
        "You are a weather assistant.",
        "Thanks!",
        "You're welcome.",
    ]
    await close_store(store)


class _Interfering(InMemoryMessageStore):
    """Records another compaction right after the command read the view (a concurrent process)."""

    interfere = True

    async def read(
        self, conversation_id: str, *, raw: bool = False, last: int | None = None, after: int | None = None
    ) -> HistoryView:
        view = await super().read(conversation_id, raw=raw, last=last, after=after)
        if self.interfere and not raw:
            self.interfere = False
            await self.record_compaction(
                conversation_id, excluded=[view.entries[-1].message.message_id or ""]
            )
        return view


async def test_a_concurrent_compaction_is_not_overwritten() -> None:
    store: MessageStore = _Interfering()
    await store.append("s", weather_messages())
    with pytest.raises(CLIError, match="compacted by someone else meanwhile"):
        await compact_conversation(store, "s", plan_compaction([StrategyName.TOOL_RESULT]))
    assert (await store.read("s")).epoch == 1  # only the other compaction
    await close_store(store)


def test_plan_compaction() -> None:
    plan = plan_compaction([StrategyName.TRUNCATION, StrategyName.TOOL_RESULT], keep=2, max_tokens=100)
    assert plan.target_tokens == 100
    assert plan.describe() == "truncation (to at most 100 tokens) → tool-result (keep 2 tool-call groups)"
    with pytest.raises(typer.BadParameter, match="give at least one"):
        plan_compaction([])
    with pytest.raises(typer.BadParameter, match="not used by turns"):
        plan_compaction([StrategyName.TURNS], max_tokens=5)
