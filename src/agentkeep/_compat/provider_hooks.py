"""The earlier context-provider hooks (seed 004), run through the core's ``before_run`` / ``after_run``.

A provider of the earlier API overrides ``invoking(messages, **kwargs) -> Context`` and
``invoked(request_messages, response_messages, invoke_exception, **kwargs)`` instead of the core's
``before_run`` / ``after_run``. :func:`adapt_provider_class` decides, once, when a class is made:
a class overriding the earlier hooks gets ``before_run`` / ``after_run`` that call them
(``invoking`` with the run's new input as :class:`~agentkeep.chat_message.ChatMessage` objects,
``invoked`` with those, the response messages and the exception of a failed run); a class
overriding hooks of both generations is refused. Hooks that take ``**kwargs`` (or a ``context``
keyword) also get an :class:`InvokingContext` / :class:`InvokedContext` as ``context=``.

An earlier-shape provider keeps its data on itself, as it did then: it takes no key in the
session's state bag (``keeps_session_state = False``), and need not call the core's
``__init__`` (:class:`EarlierHooks` gives it a ``source_id``, its class name, when it is made).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Self

from ..chat_message import ChatMessage, as_chat_messages
from ..messages import Message
from ..sessions import AgentSession, ProviderSessionState

if TYPE_CHECKING:
    from ..agent import Agent
    from ..providers.context import AIContext, SessionContext

__all__ = ["EarlierHooks", "InvokedContext", "InvokingContext", "adapt_provider_class"]

_INPUT_KEY = "agentkeep.earlier-hooks.input"
_RESPONSE_KEY = "agentkeep.earlier-hooks.response"


@dataclass(frozen=True, slots=True)
class InvokingContext:
    """What an earlier-shape ``invoking`` hook is called with (also passed as ``context=``)."""

    request_messages: Sequence[Message]
    """The run's new input messages."""
    session: AgentSession
    """The session (the thread's) the run continues."""


@dataclass(frozen=True, slots=True)
class InvokedContext:
    """What an earlier-shape ``invoked`` hook is called with (also passed as ``context=``)."""

    request_messages: Sequence[Message]
    """The run's new input messages."""
    session: AgentSession
    """The session (the thread's) the run continued."""
    response_messages: Sequence[Message] = field(default=())
    """The messages the run produced (empty if it failed)."""
    invoke_exception: Exception | None = None
    """The exception that failed the run, if any."""


class EarlierHooks:
    """The earlier hooks' defaults, inherited by the core's ``ContextProvider``."""

    uses_earlier_hooks: ClassVar[bool] = False
    """``True`` for a class that overrides the earlier ``invoking``/``invoked`` hooks (set when
    the class is made)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # Defaults for subclasses that never call ``ContextProvider.__init__`` (the earlier shape
        # did not need to); ``__init__`` replaces them.
        provider: Any = super().__new__(cls)
        provider.source_id = cls.__name__
        provider.session_state = ProviderSessionState(_new_dict, cls.__name__, state_type=dict)
        return provider

    async def invoking(self, messages: Sequence[ChatMessage], **kwargs: Any) -> AIContext | None:
        """The earlier hook before the model call: return a ``Context`` to add to the run.

        Override this (and/or :meth:`invoked`) instead of ``before_run``/``after_run`` to write a
        provider in the earlier shape."""
        return None

    async def invoked(
        self,
        request_messages: Sequence[ChatMessage],
        response_messages: Sequence[ChatMessage] | None = None,
        invoke_exception: Exception | None = None,
        **kwargs: Any,
    ) -> None:
        """The earlier hook after the run: see the request, the response and the run's error."""


def adapt_provider_class(cls: type[EarlierHooks], *, base: type[EarlierHooks]) -> None:
    """Run ``cls``'s earlier hooks through ``before_run`` / ``after_run`` if it overrides them
    (``base`` is the core's provider class, whose hooks are the defaults).

    Raises:
        TypeError: ``cls`` overrides hooks of both generations.
    """
    earlier = [
        name for name in ("invoking", "invoked") if getattr(cls, name) is not getattr(EarlierHooks, name)
    ]
    current = [
        name
        for name, adapter in (("before_run", _before_run), ("after_run", _after_run))
        if getattr(cls, name) not in (getattr(base, name), adapter)
    ]
    if earlier and current:
        raise TypeError(
            f"{cls.__name__} overrides {current[0]}() and {earlier[0]}(): a context provider "
            "uses either the hooks before_run/after_run or the earlier invoking/invoked, not both"
        )
    cls.uses_earlier_hooks = bool(earlier)
    if earlier:
        setattr(cls, "before_run", _before_run)  # noqa: B010 - the adapters replace the defaults
        setattr(cls, "after_run", _after_run)  # noqa: B010
        setattr(cls, "keeps_session_state", False)  # noqa: B010 - its data is on itself


async def _before_run(
    self: EarlierHooks, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
) -> AIContext | None:
    """Calls the earlier ``invoking``."""
    messages = _converted(context, _INPUT_KEY, lambda: context.input_messages)
    if _takes_context(type(self).invoking):
        return await self.invoking(messages, context=InvokingContext(messages, session))
    return await self.invoking(messages)


async def _after_run(
    self: EarlierHooks, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
) -> None:
    """Calls the earlier ``invoked``."""
    request = _converted(context, _INPUT_KEY, lambda: context.input_messages)
    response = _converted(context, _RESPONSE_KEY, lambda: context.response_messages)
    error = context.exception if isinstance(context.exception, Exception) else None
    if _takes_context(type(self).invoked):
        await self.invoked(
            request, response, error, context=InvokedContext(request, session, response, error)
        )
    else:
        await self.invoked(request, response, error)


def _converted(
    context: SessionContext, key: str, messages: Callable[[], Sequence[Message]]
) -> list[ChatMessage]:
    """``messages`` as ``ChatMessage`` objects, converted by the run's first earlier-shape
    provider and shared by the others through the context's metadata."""
    found: list[ChatMessage] | None = context.metadata.get(key)
    if found is None:
        found = context.metadata[key] = as_chat_messages(messages())
    return found


@functools.cache
def _takes_context(hook: Callable[..., Any]) -> bool:
    """Whether an earlier hook accepts ``context=`` (a ``**kwargs`` or a ``context`` parameter);
    asked once per hook function."""
    parameters = inspect.signature(hook).parameters.values()
    return any(
        p.kind is p.VAR_KEYWORD or (p.name == "context" and p.kind is not p.POSITIONAL_ONLY)
        for p in parameters
    )


def _new_dict(_: AgentSession | None) -> dict[str, Any]:
    return {}
