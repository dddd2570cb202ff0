"""A stored history far longer than the local model's context window still chats: the request is
compacted to the window, counted with the model's own tokenizer; stored history stays whole."""

from __future__ import annotations

import pytest

from agentkeep import Agent
from agentkeep.cli._chat import ChatSession, _window_compaction  # pyright: ignore[reportPrivateUsage]
from agentkeep.clients.local import LocalChatClient
from agentkeep.compaction import (
    CompactionProvider,
    ContextWindowCompactionStrategy,
    SummarizationStrategy,
    count_message_tokens,
    is_summary_message,
    summarized_message_ids,
)
from agentkeep.errors import ChatRequestError
from agentkeep.message_stores import InMemoryMessageStore
from agentkeep.messages import Message
from agentkeep.providers import StorageHistoryProvider


def _long_history(turns: int) -> list[Message]:
    history: list[Message] = []
    for turn in range(turns):
        history.append(Message("user", f"Tell me fact number {turn} about the sea. " + "waves " * 40))
        history.append(Message("assistant", f"Fact {turn}: the sea is wide. " + "salt " * 40))
    return history


async def test_local_chat_fits_a_long_history_into_the_window(local_client: LocalChatClient) -> None:
    store = InMemoryMessageStore()
    await store.append("long", _long_history(40))  # ~4x the 2048-token window
    tokenizer = local_client.tokenizer
    view = (await store.read("long")).messages
    total = sum(count_message_tokens(m, tokenizer=tokenizer) for m in view)
    assert total > 2 * local_client.n_ctx

    plain = ChatSession(local_client, store, "long", max_tokens=16)
    with pytest.raises(ChatRequestError, match="n_ctx"):
        await plain.send("And one more fact?")

    settings = _window_compaction(local_client, 16)
    strategy = settings["compaction_strategy"]
    assert isinstance(strategy, ContextWindowCompactionStrategy)
    chat = ChatSession(local_client, store, "long", max_tokens=16, **settings)
    result = await chat.send("And one more fact?")
    assert result.response.text.strip()
    usage = result.response.usage
    assert usage is not None
    assert usage.input_token_count is not None
    assert usage.input_token_count <= local_client.n_ctx - 16
    stored = (await store.read("long", raw=True)).entries
    assert len(stored) == 80 + 2  # the history is kept whole; only the request was compacted


async def test_local_model_summarizes_older_turns_into_stored_history(local_client: LocalChatClient) -> None:
    store = InMemoryMessageStore()
    history = StorageHistoryProvider(store, "history")
    strategy = SummarizationStrategy(local_client, target_count=2, threshold=1)
    agent = Agent(local_client, "Answer briefly.", context_providers=[history, CompactionProvider(strategy)])
    session = agent.create_session()
    for text in ("My name is Ada.", "I like teal.", "I live in Paris.", "What is my name?"):
        await agent.run(text, session=session)
    assert strategy.last_error is None
    conversation = history.conversation_id(session)
    view = (await store.read(conversation)).messages
    summaries = [m for m in view if is_summary_message(m)]
    assert len(summaries) >= 1
    assert is_summary_message(view[0])  # in place of what it replaced
    assert summaries[0].text.strip()
    replaced = set(summarized_message_ids(summaries[0]))
    raw = (await store.read(conversation, raw=True)).entries
    assert len(raw) == 8  # every original is still stored
    assert replaced & {entry.message.message_id for entry in raw}  # (or earlier summaries it folds in)
    assert "My name is Ada." in [entry.message.text for entry in raw]
