"""OpenTelemetry spans of a hosted turn, exported by the SDK's in-memory exporter: request → turn
→ run → providers → store operations, and the model call; ids as attributes, never message text."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.host.conftest import ALICE, Hosted, run, user

EXPORTER = InMemorySpanExporter()
REQUEST_ENDED = threading.Event()


class _Watch(SpanProcessor):
    """Tells the test when the server has ended a request span."""

    def on_end(self, span: ReadableSpan) -> None:
        if span.name == "agentkeep.host.request":
            REQUEST_ENDED.set()


@pytest.fixture(scope="module", autouse=True)
def exporting() -> Iterator[None]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    provider.add_span_processor(_Watch())
    trace.set_tracer_provider(provider)  # once per process: the API keeps the first
    yield
    provider.shutdown()  # later tests record nothing
    EXPORTER.clear()


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


async def test_a_turn_is_traced_from_request_to_store(hosted: Hosted) -> None:
    EXPORTER.clear()
    REQUEST_ENDED.clear()
    events = await run(hosted.server.url, "traced", [user("the secret word is marmalade")], key=ALICE[0])
    assert events[-1]["type"] == "RUN_FINISHED"
    # the server ends the request span just after the last byte: wait for it (bounded)
    assert await asyncio.to_thread(REQUEST_ENDED.wait, 10)
    spans = EXPORTER.get_finished_spans()
    [request] = [
        s
        for s in by_name(spans, "agentkeep.host.request")
        if s.attributes and s.attributes.get("url.path") == "/agents/chat"
    ]
    [turn] = by_name(spans, "agentkeep.host.turn")
    [agent_run] = by_name(spans, "agentkeep.agent.run")
    assert turn.parent is not None
    assert request.context is not None
    assert turn.parent.span_id == request.context.span_id
    assert agent_run.parent is not None
    assert turn.context is not None
    assert agent_run.parent.span_id == turn.context.span_id
    assert turn.attributes is not None
    assert turn.attributes["agentkeep.tenant"] == "alice"
    assert turn.attributes["agentkeep.conversation"] == "traced"
    assert agent_run.attributes is not None
    assert agent_run.attributes["agentkeep.session"] == "traced"
    assert agent_run.attributes["agentkeep.tenant"] == "alice"
    children = {
        s.name
        for s in spans
        if s.parent is not None and agent_run.context and s.parent.span_id == agent_run.context.span_id
    }
    assert {
        "agentkeep.provider.before_run",
        "agentkeep.provider.after_run",
        "agentkeep.model.call",
    } <= children
    names = {s.name for s in spans}
    assert {"agentkeep.store.read", "agentkeep.session_store.get", "agentkeep.session_store.save"} <= names
    # the turn's two messages were stored with its session, in one step (no append of their own)
    assert "agentkeep.store.append" not in names
    [*_, save] = by_name(spans, "agentkeep.session_store.save")
    assert save.attributes is not None
    assert save.attributes["agentkeep.messages"] == 2
    for span in spans:
        for value in (span.attributes or {}).values():
            assert "marmalade" not in str(value)
