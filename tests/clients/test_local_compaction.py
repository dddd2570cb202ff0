"""A stored history far longer than the local model's context window still chats: the request is
compacted to the window, counted with the model's own tokenizer; stored history stays whole."""

from __future__ import annotations

import pytest

from agentkeep.cli._chat import ChatSession, _window_compaction  # pyright: ignore[reportPrivateUsage]
from agentkeep.clients.local import LocalChatClient
from agentkeep.compaction import ContextWindowCompactionStrategy, count_message_tokens
from agentkeep.errors import ChatRequestError
from agentkeep.messages import Message
from agentkeep.storage import InMemoryMessageStore


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
    view = (await store.read_view("long")).messages
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
    stored = await store.read("long")
    assert len(stored) == 80 + 2  # the history is kept whole; only the request was compacted
