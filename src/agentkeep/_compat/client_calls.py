"""Chat-client call shapes of other generations, turned into the core's strict one.

The core's contract is ``get_response(messages: Sequence[Message], *, options: ChatOptions)``
(:mod:`agentkeep.clients.base`). Two other shapes reach :class:`~agentkeep.clients.base.BaseChatClient`:

* **The earlier call** (seed 004): ``client.get_response(messages=..., chat_options=ChatOptions(...))``,
  options as keywords (``response_format=UserInfo``), messages as text. :func:`adapt_client_class`
  wraps a class's own ``get_response`` / ``get_streaming_response`` once, when the class is made,
  so ``chat_options`` and option keywords merge into ``options`` and text becomes a user message;
  keywords the wrapped method declares itself pass through. A call in today's shape goes straight
  through.
* **The reference's client-authoring hook**: a subclass implements ``_inner_get_response(*,
  messages, stream, options)`` instead, returning (or awaiting to) a response, or with
  ``stream=True`` an async iterable of updates. :func:`adapt_base_client` makes the base class's
  two methods call it when an instance has it.

Nothing here imports the clients package: the option names and the option check come in as
arguments, so this module sits below the core it adapts.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..messages import Message, MessageInput, normalize_messages

if TYPE_CHECKING:
    from ..clients.base import ChatOptions, ChatResponse, ChatResponseUpdate

__all__ = ["CallShape", "OptionCheck", "accepting_earlier_shape", "adapt_base_client", "adapt_client_class"]

OptionCheck = Callable[[Mapping[str, Any]], dict[str, Any]]
"""Checks loose keywords as chat options (raising ``TypeError`` for an unknown one)."""

_METHODS = (("get_response", False), ("get_streaming_response", True))
_MARKER = "_accepts_earlier_call_shape"


class CallShape:
    """How a wrapped ``get_response`` / ``get_streaming_response`` takes an earlier-shape call:
    which extra keywords the method declares itself (passed through), the rest being options."""

    __slots__ = ("any_keyword", "check", "option_names", "own")

    def __init__(
        self, method: Callable[..., Any], *, option_names: frozenset[str], check: OptionCheck
    ) -> None:
        parameters = inspect.signature(method).parameters
        self.own = frozenset(
            name
            for name, parameter in parameters.items()
            if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)
        ) - {"self", "messages", "options"}
        self.any_keyword = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        self.option_names = option_names
        self.check = check

    @staticmethod
    def is_today(messages: Any, options: Any, chat_options: Any, loose: Mapping[str, Any]) -> bool:
        """Whether a call is in today's shape already (then it passes straight through)."""
        return (
            options is not None
            and chat_options is None
            and not loose
            and not isinstance(messages, str | Message)
        )

    def today(
        self, given: Any, options: Any, chat_options: Any, loose: Mapping[str, Any]
    ) -> tuple[Sequence[Message], ChatOptions, dict[str, Any]]:
        """The call's messages, options and the method's own keywords, in today's shape."""
        messages: Sequence[Message] = given
        if isinstance(given, str | Message) or (
            isinstance(given, list) and any(isinstance(m, str) for m in cast("list[Any]", given))
        ):
            messages = normalize_messages(cast("MessageInput", given))
        passed = {
            key: value
            for key, value in loose.items()
            if key in self.own or (self.any_keyword and key not in self.option_names)
        }
        merged: dict[str, Any] = {}
        for part in (options, chat_options):
            if part:
                merged.update(cast("Mapping[str, Any]", part))
        merged.update(self.check({k: v for k, v in loose.items() if k not in passed}))
        return messages, cast("ChatOptions", merged), passed


def accepting_earlier_shape(
    method: Callable[..., Any], *, streaming: bool, option_names: frozenset[str], check: OptionCheck
) -> Callable[..., Any]:
    """``method`` (a client's ``get_response`` or ``get_streaming_response``) taking the earlier
    call shape too (module docstring); a today-shape call goes straight through."""
    if getattr(method, _MARKER, False):
        return method
    shape = CallShape(method, option_names=option_names, check=check)
    if streaming:

        @functools.wraps(method)
        def stream(
            self: Any, messages: Any, *, options: Any = None, chat_options: Any = None, **loose: Any
        ) -> Any:
            if shape.is_today(messages, options, chat_options, loose):
                return method(self, messages, options=options)
            today, merged, passed = shape.today(messages, options, chat_options, loose)
            return method(self, today, options=merged, **passed)

        wrapper: Callable[..., Any] = stream
    else:

        @functools.wraps(method)
        async def respond(
            self: Any, messages: Any, *, options: Any = None, chat_options: Any = None, **loose: Any
        ) -> ChatResponse:
            if shape.is_today(messages, options, chat_options, loose):
                return await method(self, messages, options=options)
            today, merged, passed = shape.today(messages, options, chat_options, loose)
            return await method(self, today, options=merged, **passed)

        wrapper = respond
    setattr(wrapper, _MARKER, True)  # a marker on a function
    return wrapper


def adapt_client_class(cls: type, *, option_names: frozenset[str], check: OptionCheck) -> None:
    """Let the methods ``cls`` defines itself take the earlier call shape (a subclass's
    ``__init_subclass__`` seam)."""
    for name, streaming in _METHODS:
        own = cls.__dict__.get(name)
        if own is not None:
            wrapped = accepting_earlier_shape(
                own, streaming=streaming, option_names=option_names, check=check
            )
            setattr(cls, name, wrapped)


def adapt_base_client(cls: type, *, option_names: frozenset[str], check: OptionCheck) -> None:
    """Make the base client class's own two methods call a reference-style
    ``_inner_get_response`` when an instance has one, and take the earlier call shape."""
    core_response: Callable[..., Any] = cls.__dict__["get_response"]
    core_stream: Callable[..., Any] = cls.__dict__["get_streaming_response"]

    @functools.wraps(core_response)
    async def get_response(self: Any, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        inner = getattr(self, "_inner_get_response", None)
        if inner is None:
            return await core_response(self, messages, options=options)
        made = inner(messages=list(messages), stream=False, options=dict(options))
        return cast("ChatResponse", await made if inspect.isawaitable(made) else made)

    @functools.wraps(core_stream)
    def get_streaming_response(
        self: Any, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        inner = getattr(self, "_inner_get_response", None)
        if inner is None:
            return core_stream(self, messages, options=options)
        return _inner_updates(inner, messages, options)

    setattr(cls, "get_response", get_response)  # noqa: B010 - replacing a method on its class
    setattr(cls, "get_streaming_response", get_streaming_response)  # noqa: B010
    adapt_client_class(cls, option_names=option_names, check=check)


async def _inner_updates(
    inner: Callable[..., Any], messages: Sequence[Message], options: ChatOptions
) -> AsyncIterator[ChatResponseUpdate]:
    made = inner(messages=list(messages), stream=True, options=dict(options))
    stream = made if hasattr(made, "__aiter__") else await made  # a stream, or a call making one
    async for update in cast("AsyncIterator[ChatResponseUpdate]", stream):
        yield update
