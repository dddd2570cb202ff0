"""Seeds 003 and 004's Python examples, run with only their import lines changed (seed 004's
memory also with the real local model, whose structured output is grammar-constrained).

The examples are committed under ``seed_examples/`` (the parts below a "seed code" marker are the
seeds' text, checked here when the seeds are present). Seed 003's ``RedisChatMessageStore`` runs
against the machine's Redis server; seed 004's ``UserInfoMemory`` runs with a scripted client in
the cloud client's place that answers the structured-output extraction call.
"""

from __future__ import annotations

import ast
import contextlib
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis

from agentkeep import AgentThread, ChatAgent, ChatMessage, ChatOptions, ChatResponse, Message
from agentkeep.clients.local import LocalChatClient
from tests.threads import seeds
from tests.threads.seed_examples import cloud, seed_004_agent, seed_004_user_info_memory

EXAMPLES = Path(__file__).parent / "seed_examples"
FIXTURES = {
    "seed_003_redis_store.py": "003",
    "seed_003_agent.py": "003",
    "seed_004_user_info_memory.py": "004",
    "seed_004_agent.py": "004",
}


@pytest.mark.parametrize(("fixture", "seed"), sorted(FIXTURES.items()))
def test_the_committed_examples_are_the_seeds_code(fixture: str, seed: str) -> None:
    text = seeds.seed_text(seed)
    if text is None:
        pytest.skip(f"the seeds are not in {seeds.SEEDS_DIR}")
    seed_lines = seeds.code_lines(text)
    parts = seeds.seed_parts((EXAMPLES / fixture).read_text(encoding="utf-8"))
    assert parts, f"{fixture} has no seed code marker"
    for part in parts:
        lines = seeds.code_lines(part)
        while lines and not lines[-1]:
            lines.pop()
        assert lines, f"an empty seed part in {fixture}"
        starts = [i for i, line in enumerate(seed_lines) if line == lines[0]]
        assert any(seed_lines[i : i + len(lines)] == lines for i in starts), (
            f"{fixture}: a part is not seed {seed}'s code (apart from import lines)"
        )


def _compiled(path: Path) -> Any:
    """A notebook-style example (top-level ``await``), compiled."""
    return compile(path.read_text(encoding="utf-8"), str(path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


SEED_003_AGENT = _compiled(EXAMPLES / "seed_003_agent.py")


async def _run_notebook(code: Any) -> dict[str, Any]:
    """Run a compiled notebook-style example and return its globals."""
    scope: dict[str, Any] = {"__name__": "seed_example"}
    result = eval(code, scope)
    if result is not None:
        await result
    return scope


async def test_seed_003_redis_message_store_runs_against_real_redis() -> None:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        scope = await _run_notebook(SEED_003_AGENT)
    agent: ChatAgent = scope["agent"]
    thread: AgentThread = scope["thread"]
    store: Any = thread.message_store
    assert store is not None
    try:
        assert "pirate" in printed.getvalue()
        assert type(store).__name__ == "RedisChatMessageStore"
        # The store's own Redis list holds the turn, in the store's own format.
        raw = redis.from_url("redis://localhost:6379", decode_responses=True)
        try:
            stored = await raw.lrange(store.redis_key, 0, -1)  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
        finally:
            await raw.aclose()
        assert [ChatMessage.model_validate_json(s).role.value for s in stored] == ["user", "assistant"]

        # The store's state rides in the thread's serialized form; a resumed thread continues
        # the same Redis list with a new store from the factory.
        state = await thread.serialize()
        assert state["chat_message_store_state"]["thread_id"] == store.thread_id  # pyright: ignore[reportAttributeAccessIssue]
        resumed = await agent.deserialize_thread(state)
        assert resumed.message_store is not store
        assert resumed.message_store.redis_key == store.redis_key  # pyright: ignore[reportAttributeAccessIssue, reportOptionalMemberAccess]
        again = await agent.run("Another one", thread=resumed)
        assert again.text.endswith("(joke 2)")  # the model saw the first turn from Redis
        messages = await resumed.message_store.list_messages()  # pyright: ignore[reportOptionalMemberAccess]
        assert [m.text for m in messages][::2] == ["Tell me a joke about pirates", "Another one"]
        assert all(isinstance(m, ChatMessage) for m in messages)
    finally:
        await store.clear()  # pyright: ignore[reportAttributeAccessIssue, reportOptionalMemberAccess]
        async with agent:  # closes the stores the factory made
            pass


async def test_seed_004_user_info_memory_runs_with_a_structured_output_client() -> None:
    cloud.MADE.clear()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        await seed_004_agent.main()
    lines = printed.getvalue().splitlines()
    assert "MEMORY - User Name: Ruaidhrí" in lines
    assert "MEMORY - User Age: 20" in lines
    (client,) = cloud.MADE
    answers = [calls for calls in client.call_options if calls.get("response_format") is None]
    assert len(answers) == 3
    # Before each run the provider's instructions joined the agent's; what a run's invoked()
    # extracted shows from the next run on.
    assert "Ask the user for their name" in str(answers[0].get("instructions"))
    assert "Ask the user for their name" in str(answers[1].get("instructions"))
    assert "The user's name is Ruaidhrí." in str(answers[2].get("instructions"))
    assert "Ask the user for their age" in str(answers[2].get("instructions"))
    assert "Always address the user by their name." in str(answers[2].get("instructions"))
    extractions = [calls for calls in client.call_options if calls.get("response_format") is not None]
    assert [
        str(e.get("instructions")).startswith("Extract the user's name and age") for e in extractions
    ] == [True] * 3


class RecordingLocalClient(LocalChatClient):
    """The local model, keeping every response (to see the structured-output calls' values)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, n_ctx=2048, max_tokens=48)
        self.responses: list[tuple[ChatOptions, ChatResponse]] = []

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        response = await super().get_response(messages, options=options)
        self.responses.append((options, response))
        return response


async def test_seed_004_user_info_memory_with_the_local_model(local_model_path: Path) -> None:
    client = RecordingLocalClient(local_model_path)
    try:
        memory = seed_004_user_info_memory.UserInfoMemory(client)
        async with ChatAgent(chat_client=client, instructions="Be brief.", context_providers=memory) as agent:
            thread = agent.get_new_thread()
            answer = await agent.run("My name is Ruaidhrí and I am 20 years old.", thread=thread)
        assert isinstance(answer.text, str)
        structured = [(o, r) for o, r in client.responses if o.get("response_format") is not None]
        assert len(structured) == 1  # the provider's extraction call, grammar-constrained
        value = structured[0][1].value
        assert isinstance(value, seed_004_user_info_memory.UserInfo)
        assert value.name is None or isinstance(value.name, str)
        assert value.age is None or isinstance(value.age, int)
        info = memory.user_info
        assert info.name is None or isinstance(info.name, str)
        assert info.age is None or isinstance(info.age, int)
    finally:
        await client.aclose()
