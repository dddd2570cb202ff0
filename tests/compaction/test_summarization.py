"""SummarizationStrategy: seed-002 defaults and examples, failures that leave history alone, properties."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import Content, Message
from agentkeep.compaction import (
    DEFAULT_SUMMARIZATION_PROMPT,
    CharacterEstimatorTokenizer,
    CompactionStrategy,
    CompactionTrigger,
    CompactionTriggers,
    MessageGroupKind,
    MessageIndex,
    PipelineCompactionStrategy,
    SummarizationError,
    SummarizationStrategy,
    ToolResultCompactionStrategy,
    apply_compaction,
    is_summary_message,
    project,
    summarized_message_ids,
)
from agentkeep.errors import ChatClientError, ModelUnavailableError, ScriptExhaustedError
from agentkeep.testing import ScriptedChatClient
from tests.compaction.messages import assistant, call, histories, result, summary, system, texts, user

K = MessageGroupKind
HEADING = "[Summary of the earlier conversation]"


def chat(n: int) -> list[Message]:
    """``system`` then ``n`` alternating user / assistant messages ``u0 a1 u2 ...``."""
    return [system(), *[user(f"u{i}") if i % 2 == 0 else assistant(f"a{i}") for i in range(n)]]


def failing(error: BaseException) -> ScriptedChatClient:
    def raise_it(_messages: Sequence[Message]) -> str:
        raise error

    return ScriptedChatClient(raise_it)


def transcript(client: ScriptedChatClient, call_number: int = 0) -> str:
    return client.calls[call_number][1].text


# -- defaults -----------------------------------------------------------------------------------


def test_defaults_follow_the_seed() -> None:
    client = ScriptedChatClient()
    strategy = SummarizationStrategy(client)
    assert (strategy.target_count, strategy.threshold) == (4, 2)
    assert strategy.max_summary_input_tokens == 8000
    assert strategy.prompt == DEFAULT_SUMMARIZATION_PROMPT
    assert strategy.tokenizer is None
    assert strategy.minimum_preserved == 1
    assert strategy.last_error is None
    assert isinstance(strategy, CompactionStrategy)
    assert repr(strategy) == (
        "SummarizationStrategy(target_count=4, threshold=2, max_summary_input_tokens=8000, "
        "tokenizer=None, minimum_preserved=1)"
    )
    custom = SummarizationStrategy(client, trigger=CompactionTriggers.tokens_exceed(0x500))
    assert "trigger=CompactionTriggers.tokens_exceed(1280)" in repr(custom)


def test_negative_counts_are_rejected() -> None:
    client = ScriptedChatClient()
    with pytest.raises(ValueError, match="target_count must be greater than or equal to 0"):
        SummarizationStrategy(client, target_count=-1)
    with pytest.raises(ValueError, match="threshold must be greater than or equal to 0"):
        SummarizationStrategy(client, threshold=-1)
    with pytest.raises(ValueError, match="max_summary_input_tokens must be greater than or equal to 0"):
        SummarizationStrategy(client, max_summary_input_tokens=-5)
    with pytest.raises(ValueError, match="minimum_preserved must be greater than or equal to 0"):
        SummarizationStrategy(client, minimum_preserved=-1)


# -- the seed example: summarize when non-system messages exceed 6, keep the newest 4 -------------


async def test_nothing_happens_until_non_system_messages_exceed_target_plus_threshold() -> None:
    client = ScriptedChatClient(["summary"])
    strategy = SummarizationStrategy(client=client, target_count=4, threshold=2)
    messages = [*chat(6), system("late rule")]  # 6 non-system messages; system ones do not count
    index = MessageIndex(messages)
    assert not await strategy.compact(index)
    assert client.calls == []
    assert project(index) == messages


async def test_summary_replaces_the_oldest_groups_in_place_and_lists_their_ids() -> None:
    client = ScriptedChatClient(["The user counted from u0 to u2."])
    strategy = SummarizationStrategy(client=client, target_count=4, threshold=2)
    messages = chat(7)
    index = MessageIndex(messages)

    assert await strategy.compact(index)

    out = project(index)
    assert texts(out) == ["be brief", f"{HEADING}\nThe user counted from u0 to u2.", "a3", "u4", "a5", "u6"]
    made = out[1]
    assert made.role == "assistant"
    assert is_summary_message(made)
    assert summarized_message_ids(made) == [m.message_id for m in messages[1:4]]
    assert all(m.message_id is not None for m in messages[1:4])
    assert [g.kind for g in index.groups][:2] == [K.SYSTEM, K.SUMMARY]
    assert strategy.last_error is None


async def test_the_model_gets_one_call_with_the_prompt_and_a_transcript() -> None:
    client = ScriptedChatClient(["short"])
    strategy = SummarizationStrategy(client, prompt="Summarize the key decisions and user preferences only.")
    await strategy.compact(MessageIndex(chat(7)))

    assert len(client.calls) == 1
    sent = client.calls[0]
    assert [m.role for m in sent] == ["system", "user"]
    assert sent[0].text == "Summarize the key decisions and user preferences only."
    assert sent[1].text == "Transcript to summarize, oldest first:\nuser: u0\nassistant: a1\nuser: u2"
    assert client.call_options[0] == {"store": False}


async def test_default_prompt_is_sent_when_none_is_given() -> None:
    client = ScriptedChatClient(["short"])
    await SummarizationStrategy(client).compact(MessageIndex(chat(7)))
    assert client.calls[0][0].text == DEFAULT_SUMMARIZATION_PROMPT


async def test_works_through_apply_compaction_and_in_a_pipeline() -> None:
    client = ScriptedChatClient(["earlier weather talk"])
    messages = [
        user("weather?"),
        call("c1"),
        result("c1"),
        assistant("It is sunny."),
        user("tomorrow?"),
        call("c2"),
        result("c2", value="rain"),
        assistant("Rain."),
        user("thanks"),
    ]
    pipeline = PipelineCompactionStrategy(
        ToolResultCompactionStrategy(), SummarizationStrategy(client, target_count=2, threshold=0)
    )
    out = await apply_compaction(messages, strategy=pipeline)
    # The tool strategy collapsed c1 first; the summarizer then read that collapsed summary too.
    assert "earlier summary: [Tool results: get_weather: sunny, 18°C]" in transcript(client)
    assert texts(out) == [f"{HEADING}\nearlier weather talk", "Rain.", "thanks"]


# -- groups and boundaries ----------------------------------------------------------------------


async def test_a_tool_group_on_the_boundary_is_kept_whole() -> None:
    client = ScriptedChatClient(["s"])
    messages = [
        user("q0"),
        assistant("a0"),
        user("q1"),
        call("c1", "c2"),
        result("c1"),
        result("c2"),
        assistant("a1"),
    ]
    index = MessageIndex(messages)
    # Keeping the 2 newest messages would cut the tool group: it is kept whole instead.
    assert await SummarizationStrategy(client, target_count=2, threshold=0).compact(index)
    out = project(index)
    assert out[1:] == messages[3:]
    assert summarized_message_ids(out[0]) == [m.message_id for m in messages[:3]]


async def test_a_summarized_tool_group_goes_whole_and_is_shortened_in_the_transcript() -> None:
    client = ScriptedChatClient(["s"])
    messages = [
        user("weather?"),
        call("c1"),
        result("c1", value="x" * 1000),
        assistant("It is sunny."),
        user("u"),
        assistant("a"),
        user("u"),
        assistant("a"),
    ]
    index = MessageIndex(messages)
    assert await SummarizationStrategy(client, target_count=4, threshold=0).compact(index)
    out = project(index)
    assert summarized_message_ids(out[0]) == [m.message_id for m in messages[:4]]
    lines = transcript(client).splitlines()
    assert lines[2] == 'assistant: [called get_weather {"city":"Paris"}]'
    assert lines[3].startswith("tool: [get_weather returned: xxx")
    assert lines[3].endswith("…]")
    assert len(lines[3]) < 450


async def test_tool_errors_appear_in_the_transcript() -> None:
    client = ScriptedChatClient(["s"])
    failed = Message("tool", [Content.from_function_result("c1", exception="TimeoutError: slow")])
    messages = [user("q"), call("c1", name="search_docs"), failed, *chat(5)[1:]]
    await SummarizationStrategy(client, target_count=4, threshold=0).compact(MessageIndex(messages))
    assert "tool: [search_docs failed: TimeoutError: slow]" in transcript(client)


async def test_system_messages_are_never_summarized() -> None:
    client = ScriptedChatClient(["s"])
    messages = [system("rule 1"), user("q0"), system("rule 2"), assistant("r0"), *chat(4)[1:]]
    index = MessageIndex(messages)
    assert await SummarizationStrategy(client, target_count=4, threshold=0).compact(index)
    out = project(index)
    assert texts(out) == ["rule 1", f"{HEADING}\ns", "rule 2", "u0", "a1", "u2", "a3"]
    assert transcript(client).splitlines()[1:] == ["user: q0", "assistant: r0"]
    assert summarized_message_ids(out[1]) == [messages[1].message_id, messages[3].message_id]


async def test_the_newest_non_system_group_is_always_kept() -> None:
    client = ScriptedChatClient(["s"])
    messages = [user("u0"), assistant("a1"), user("u2")]
    index = MessageIndex(messages)
    assert await SummarizationStrategy(client, target_count=0, threshold=0).compact(index)
    assert texts(project(index)) == [f"{HEADING}\ns", "u2"]


async def test_minimum_preserved_keeps_more_groups_than_target_count() -> None:
    client = ScriptedChatClient(["s"])
    index = MessageIndex(chat(7))
    assert await SummarizationStrategy(client, target_count=1, threshold=0, minimum_preserved=3).compact(
        index
    )
    assert texts(project(index)) == ["be brief", f"{HEADING}\ns", "u4", "a5", "u6"]


async def test_an_earlier_summary_is_summarized_again() -> None:
    client = ScriptedChatClient(["newer summary"])
    old = summary("earlier: weather talk", replaces=["m1", "m2"])
    old.message_id = "old-summary"
    messages = [old, *chat(7)[1:]]
    index = MessageIndex(messages)
    assert await SummarizationStrategy(client).compact(index)
    assert transcript(client).splitlines()[1] == "earlier summary: earlier: weather talk"
    out = project(index)
    assert texts(out)[0] == f"{HEADING}\nnewer summary"
    assert summarized_message_ids(out[0])[0] == "old-summary"
    assert old not in out


async def test_a_summary_made_here_is_read_back_without_its_heading() -> None:
    client = ScriptedChatClient(["first", "second"])
    strategy = SummarizationStrategy(client, target_count=2, threshold=0)
    index = MessageIndex(chat(4))
    assert await strategy.compact(index)
    index.append([user("u9"), assistant("a9")])
    assert await strategy.compact(index)
    assert transcript(client, 1).splitlines()[1] == "earlier summary: first"
    assert texts(project(index)) == ["be brief", f"{HEADING}\nsecond", "u9", "a9"]


# -- the input budget ---------------------------------------------------------------------------


async def test_only_the_oldest_groups_that_fit_the_budget_are_summarized() -> None:
    client = ScriptedChatClient(["s"])
    messages = [user("x" * 400), assistant("y" * 400), user("z" * 400), *chat(5)[1:]]
    index = MessageIndex(messages)
    strategy = SummarizationStrategy(
        client, target_count=4, threshold=0, prompt="Summarize.", max_summary_input_tokens=300
    )
    assert await strategy.compact(index)
    out = project(index)
    assert summarized_message_ids(out[0]) == [messages[0].message_id, messages[1].message_id]
    assert out[1] is messages[2]  # did not fit: left for a later round
    sent = client.calls[0]
    tokenizer = CharacterEstimatorTokenizer()
    assert sum(tokenizer.count_tokens(m.text) + 4 for m in sent) <= 300


async def test_no_budget_with_none() -> None:
    client = ScriptedChatClient(["s"])
    messages = [*[user("x" * 40_000) for _ in range(3)], *chat(4)[1:]]
    index = MessageIndex(messages)
    assert await SummarizationStrategy(client, target_count=4, max_summary_input_tokens=None).compact(index)
    assert len(summarized_message_ids(project(index)[0])) == 3


async def test_budget_too_small_for_one_group_leaves_history_unchanged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = ScriptedChatClient(["never used"])
    messages = [user("x" * 4000), *chat(7)[1:]]
    index = MessageIndex(messages)
    # The default prompt alone is over 100 tokens: no group fits with it.
    strategy = SummarizationStrategy(client, max_summary_input_tokens=100)
    with caplog.at_level(logging.WARNING, logger="agentkeep.compaction"):
        assert not await strategy.compact(index)
    assert client.calls == []
    assert project(index) == messages
    assert all(m.message_id is None for m in messages)
    assert isinstance(strategy.last_error, SummarizationError)
    assert strategy.last_error.reason == "budget"
    assert "max_summary_input_tokens=100" in str(strategy.last_error)
    assert [r.levelno for r in caplog.records if r.name == "agentkeep.compaction"] == [logging.WARNING]


async def test_the_strategy_tokenizer_counts_the_budget() -> None:
    messages = [user("x" * 800), *chat(7)[1:]]
    # About 200 estimated tokens, 800 at one character per token.
    wide = SummarizationStrategy(ScriptedChatClient(["s"]), prompt="Summarize.", max_summary_input_tokens=600)
    assert await wide.compact(MessageIndex(messages))
    narrow = SummarizationStrategy(
        ScriptedChatClient(["s"]),
        prompt="Summarize.",
        max_summary_input_tokens=600,
        tokenizer=CharacterEstimatorTokenizer(chars_per_token=1),
    )
    index = MessageIndex(messages)
    # At one character per token the first group no longer fits: it is passed over (it stays as
    # it is) and the later groups are summarized, as in the reference.
    assert await narrow.compact(index)
    assert messages[0] in project(index)
    assert "x" * 100 not in transcript(narrow.client)  # type: ignore[arg-type]


# -- a failing summarizer -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [ModelUnavailableError("server down"), ChatClientError("bad answer"), RuntimeError("boom")],
    ids=["unavailable", "chat-client", "any-exception"],
)
async def test_a_failing_summarizer_leaves_history_unchanged_and_reports(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    client = failing(error)
    messages = chat(9)
    index = MessageIndex(messages)
    index.track_changes()
    strategy = SummarizationStrategy(client)
    with caplog.at_level(logging.WARNING, logger="agentkeep.compaction"):
        assert not await strategy.compact(index)
    assert len(client.calls) == 1
    assert project(index) == messages
    assert index.message_count == len(messages)
    assert all(m.message_id is None for m in messages)
    assert index.changes() == ([], [])
    reported = strategy.last_error
    assert isinstance(reported, SummarizationError)
    assert reported.reason == "call"
    assert reported.__cause__ is error
    records = [r for r in caplog.records if r.name == "agentkeep.compaction"]
    assert [r.levelno for r in records] == [logging.WARNING]
    assert type(error).__name__ in records[0].getMessage()


async def test_an_exhausted_script_is_reported_like_any_client_error() -> None:
    strategy = SummarizationStrategy(ScriptedChatClient([]))
    messages = chat(7)
    index = MessageIndex(messages)
    assert not await strategy.compact(index)
    assert strategy.last_error is not None
    assert isinstance(strategy.last_error.__cause__, ScriptExhaustedError)
    assert project(index) == messages


async def test_an_empty_reply_leaves_history_unchanged() -> None:
    strategy = SummarizationStrategy(ScriptedChatClient(["   "]))
    messages = chat(7)
    index = MessageIndex(messages)
    assert not await strategy.compact(index)
    assert strategy.last_error is not None
    assert strategy.last_error.reason == "empty"
    assert project(index) == messages


async def test_a_later_success_clears_the_last_error() -> None:
    replies = iter([RuntimeError("flaky"), "ok"])

    def answer(_messages: Sequence[Message]) -> str:
        reply = next(replies)
        if isinstance(reply, Exception):
            raise reply
        return reply

    strategy = SummarizationStrategy(ScriptedChatClient(answer))
    index = MessageIndex(chat(7))
    assert not await strategy.compact(index)
    assert strategy.last_error is not None
    assert await strategy.compact(index)
    assert strategy.last_error is None


async def test_cancellation_is_not_swallowed() -> None:
    strategy = SummarizationStrategy(failing(asyncio.CancelledError()))
    with pytest.raises(asyncio.CancelledError):
        await strategy.compact(MessageIndex(chat(7)))
    assert strategy.last_error is None


# -- custom trigger and target ------------------------------------------------------------------


async def test_custom_trigger_replaces_the_message_count_trigger() -> None:
    client = ScriptedChatClient(["s"])
    strategy = SummarizationStrategy(client, trigger=CompactionTriggers.tokens_exceed(1_000))
    assert not await strategy.compact(MessageIndex(chat(20)))  # 21 short messages: few tokens
    index = MessageIndex([user("x" * 4000), *chat(6)[1:]])
    assert await strategy.compact(index)
    assert texts(project(index))[0] == f"{HEADING}\ns"


async def test_custom_target_stops_adding_groups_once_it_holds() -> None:
    client = ScriptedChatClient(["s"])
    messages = chat(9)
    strategy = SummarizationStrategy(
        client, target_count=1, threshold=0, target=lambda index: index.included_message_count <= 7
    )
    index = MessageIndex(messages)
    assert await strategy.compact(index)
    # 10 included; leaving out 3 non-system messages reaches 7. The summary adds one back.
    assert summarized_message_ids(project(index)[1]) == [m.message_id for m in messages[1:4]]
    assert index.included_message_count == 8


async def test_custom_target_with_a_failing_call_restores_every_group() -> None:
    messages = chat(9)
    index = MessageIndex(messages)
    strategy = SummarizationStrategy(
        failing(RuntimeError("down")), target_count=1, target=lambda i: i.included_message_count <= 4
    )
    assert not await strategy.compact(index)
    assert project(index) == messages
    assert index.included_message_count == len(messages)


# -- properties ---------------------------------------------------------------------------------


# Earlier summaries among the messages; every result in a message of its own.
HISTORIES = histories(
    max_length=16,
    max_size=300,
    kinds=["system", "user", "assistant", "tool", "summary"],
    split_results=True,
)


def at_most(count: int) -> CompactionTrigger:
    def target(index: MessageIndex) -> bool:
        return index.included_message_count <= count

    return target


@st.composite
def summarizers(draw: st.DrawFn) -> SummarizationStrategy:
    return SummarizationStrategy(
        ScriptedChatClient(lambda _messages: "condensed"),
        target_count=draw(st.integers(0, 6)),
        threshold=draw(st.integers(0, 3)),
        max_summary_input_tokens=draw(st.sampled_from([None, 0, 120, 400, 8000])),
        target=draw(st.sampled_from([None, at_most(3), at_most(8)])),
        minimum_preserved=draw(st.integers(0, 3)),
    )


@settings(max_examples=150, deadline=None)
@given(HISTORIES, summarizers())
async def test_summary_stands_in_place_of_whole_groups_and_keeps_the_tail(
    messages: list[Message], strategy: SummarizationStrategy
) -> None:
    index = MessageIndex(messages)
    before = {id(g): [id(m) for m in g.messages] for g in index.groups}
    tool_groups = [list(g.indices) for g in index.groups if g.kind is K.TOOL_CALL]
    non_system = [g for g in index.groups if g.kind is not K.SYSTEM]
    newest_non_system = non_system[-1] if non_system else None

    changed = await strategy.compact(index)
    out = project(index)
    client = strategy.client
    assert isinstance(client, ScriptedChatClient)
    assert len(client.calls) == int(changed)
    made = [m for m in out if m.text.startswith(HEADING)]
    assert len(made) == int(changed)

    out_ids = {id(m) for m in out}
    assert all(id(m) in out_ids for m in messages if m.role == "system")
    for indices in tool_groups:  # never split
        assert len({id(messages[i]) in out_ids for i in indices}) == 1
    if newest_non_system is not None:
        assert not newest_non_system.excluded
    # Everything but the summary keeps its original order; the summary stands where the first
    # message it replaced stood, and what it replaced is exactly a run of whole groups.
    where = {id(m): i for i, m in enumerate(messages)}
    kept = [where[id(m)] for m in out if id(m) in where]
    assert kept == sorted(kept)
    if changed:
        # A second round (after more messages) may summarize the summary just made.
        index.append([user("later"), assistant("later"), user("later")])
        again = await strategy.compact(index)
        assert len(client.calls) == 1 + int(again)
        position = out.index(made[0])
        replaced = summarized_message_ids(made[0])
        first = min(i for i, m in enumerate(messages) if m.message_id in replaced)
        assert all(where[id(m)] < first for m in out[:position])
        assert all(where[id(m)] > first for m in out[position + 1 :])
        replaced_objects = [id(m) for m in messages if m.message_id in replaced]
        assert all(
            set(members) <= set(replaced_objects) or not set(members) & set(replaced_objects)
            for members in before.values()
        )
        # The trigger needed more than target_count + threshold: at least target_count are kept.
        assert sum(1 for m in out if m.role != "system" and m is not made[0]) >= strategy.target_count


@settings(max_examples=100, deadline=None)
@given(HISTORIES, summarizers())
async def test_a_failing_summarizer_never_changes_the_projection(
    messages: list[Message], strategy: SummarizationStrategy
) -> None:
    strategy.client = failing(ModelUnavailableError("down"))
    index = MessageIndex(messages)
    first = project(index)
    assert not await strategy.compact(index)
    assert project(index) == first
    assert all(m.message_id is None for m in messages)
