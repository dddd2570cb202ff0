"""OpenTelemetry spans (extra ``[otel]``: ``opentelemetry-api``); without it every call here is a
no-op that costs a function call.

Spans, each a child of the one before: ``agentkeep.host.request`` (method, route, tenant) →
``agentkeep.host.turn`` (agent, conversation, tenant) → ``agentkeep.agent.run`` (agent, session)
→ ``agentkeep.provider.before_run`` / ``agentkeep.provider.after_run`` (provider) and
``agentkeep.model.call`` (client) → ``agentkeep.store.read`` / ``agentkeep.store.append`` /
``agentkeep.session_store.get`` / ``agentkeep.session_store.save`` (backend). Attributes carry ids,
names and counts, never message text. Export them by configuring an OpenTelemetry SDK tracer
provider in the application, as for any instrumented library.

Spans that must outlive an ``await``-free stretch (a streamed run yields between its steps) are
started with :func:`start` and ended explicitly; their children are made current only around
awaited calls (:meth:`Span.child`), so no context leaks across a ``yield``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Mapping
from contextlib import AbstractContextManager
from typing import Any, Final

__all__ = ["Span", "span", "start"]

try:
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - depends on the installation
    _trace = None
    _context = None

_TRACER: Final = None if _trace is None else _trace.get_tracer("agentkeep")
_Attributes = Mapping[str, str | int | float | bool]

# Whether a tracer provider is set is asked on every span. The API's answer reads the environment
# each time while none is set, so the global it keeps is looked at first, where it exists; once a
# real provider is set it stays set (the API refuses to replace it), so that answer is kept.
_GLOBAL_PROVIDER: Final = "_TRACER_PROVIDER"
_PROVIDER_GLOBAL_KNOWN: Final = _trace is not None and hasattr(_trace, _GLOBAL_PROVIDER)
_PROVIDER_FROM_ENVIRONMENT: Final = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_configured = False


def _tracer() -> Any:
    """The tracer, or ``None`` while no tracer provider is configured (spans would record
    nothing: skipping them keeps an unconfigured installation as cheap as one without the API)."""
    global _configured
    if _configured:
        return _TRACER
    if _trace is None:
        return None
    unset = _PROVIDER_GLOBAL_KNOWN and getattr(_trace, _GLOBAL_PROVIDER) is None
    if unset and not _PROVIDER_FROM_ENVIRONMENT:
        return None  # none set in code, none named in the environment
    if isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider | _trace.NoOpTracerProvider):
        return None
    _configured = True
    return _TRACER


def _clean(attributes: Mapping[str, Any]) -> dict[str, str | int | float | bool]:
    return {key: value for key, value in attributes.items() if isinstance(value, str | int | float | bool)}


class Span:
    """A span started by :func:`start` (a no-op one without OpenTelemetry)."""

    __slots__ = ("_span",)

    def __init__(self, otel_span: Any = None) -> None:
        self._span = otel_span

    def child(self, name: str, **attributes: Any) -> AbstractContextManager[None]:
        """A child span, current for the block (use it around awaited calls only)."""
        if _TRACER is None or _trace is None or self._span is None:
            return _NOTHING
        return self._child(name, attributes)

    @contextlib.contextmanager
    def _child(self, name: str, attributes: Mapping[str, Any]) -> Generator[None]:
        assert _TRACER is not None
        assert _trace is not None
        parent = _trace.set_span_in_context(self._span)
        with _TRACER.start_as_current_span(
            name,
            context=parent,
            attributes=_clean(attributes),
            record_exception=False,
            set_status_on_exception=False,
        ) as made:
            try:
                yield
            except BaseException as exc:
                Span(made).fail(exc)
                raise

    def current(self) -> AbstractContextManager[None]:
        """This span as the current one for the block, which may ``yield`` as long as one task
        runs all of it (a host's streamed turn): spans started inside become its children."""
        if _context is None or _trace is None or self._span is None:
            return _NOTHING
        return self._current()

    @contextlib.contextmanager
    def _current(self) -> Generator[None]:
        assert _context is not None
        assert _trace is not None
        token = _context.attach(_trace.set_span_in_context(self._span))
        try:
            yield
        finally:
            _context.detach(token)

    def start_child(self, name: str, **attributes: Any) -> Span:
        """A child span to end explicitly (for a stretch with ``yield`` in it)."""
        if _TRACER is None or _trace is None or self._span is None:
            return Span()
        parent = _trace.set_span_in_context(self._span)
        return Span(_TRACER.start_span(name, context=parent, attributes=_clean(attributes)))

    def set(self, **attributes: Any) -> None:
        if self._span is not None:
            self._span.set_attributes(_clean(attributes))

    def fail(self, exc: BaseException) -> None:
        """Record that what the span covers failed with ``exc`` (its type, not its text)."""
        if self._span is not None and _trace is not None:
            self._span.set_status(_trace.Status(_trace.StatusCode.ERROR, type(exc).__name__))
            self._span.set_attribute("error.type", type(exc).__name__)

    def end(self) -> None:
        if self._span is not None:
            self._span.end()


def start(name: str, **attributes: Any) -> Span:
    """A span, child of the current one, that the caller ends (see the module docs)."""
    tracer = _tracer()
    if tracer is None:
        return Span()
    return Span(tracer.start_span(name, attributes=_clean(attributes)))


# What the context managers above give while nothing is traced: no-ops made once (the spans of
# one turn would otherwise cost a generator each).
_NOTHING: Final = contextlib.nullcontext()
_UNTRACED: Final = contextlib.nullcontext(Span())


def span(name: str, **attributes: Any) -> AbstractContextManager[Span]:
    """A span, child of the current one, current for the block; an exception marks it failed."""
    tracer = _tracer()
    if tracer is None:
        return _UNTRACED
    return _traced(tracer, name, attributes)


@contextlib.contextmanager
def _traced(tracer: Any, name: str, attributes: Mapping[str, Any]) -> Generator[Span]:
    with tracer.start_as_current_span(
        name, attributes=_clean(attributes), record_exception=False, set_status_on_exception=False
    ) as made:
        wrapped = Span(made)
        try:
            yield wrapped
        except BaseException as exc:
            wrapped.fail(exc)
            raise
