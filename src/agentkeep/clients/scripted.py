"""A scripted chat client: a real, documented test double for agents (no model, no network).

See :class:`ScriptedChatClient`; it is re-exported from :mod:`agentkeep.testing`.
"""

from __future__ import annotations

import inspect
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import msgspec

from ..contents import Content, TextContent, UsageContent, UsageDetails
from ..errors import ChatClientError, ScriptExhaustedError
from ..messages import Message
from ..sessions import from_builtins
from .base import BaseChatClient, ChatOptions, ChatResponse, ChatResponseUpdate

__all__ = ["Reply", "Responder", "ScriptedChatClient"]

Reply = str | Message
"""A scripted reply: text (one assistant message) or a whole message (e.g. with tool calls)."""

Responder = (
    Callable[[Sequence[Message]], Reply | Awaitable[Reply]]
    | Callable[[Sequence[Message], ChatOptions], Reply | Awaitable[Reply]]
)
"""A callable script: ``(messages) -> reply`` or ``(messages, options) -> reply``, sync or async
(an async one can take its time or raise, like a real model)."""

_WORDS = re.compile(r"\S+\s*|\s+")


class ScriptedChatClient(BaseChatClient[ChatOptions]):
    """A chat client that answers from a script, for tests and examples.

    Args:
        replies: A list of replies consumed in order (a ``str`` is an assistant text reply, a
            :class:`~agentkeep.messages.Message` is returned as is, e.g. one with tool calls), or a
            callable ``(messages) -> str | Message`` (or ``(messages, options) -> ...`` to see the
            instructions and tools too) asked for every reply. ``None``: echo the last user
            message's text.
        service_managed: Keep conversations on the "service" side like the OpenAI Responses API:
            answers carry a ``conversation_id``, and a call with ``options["conversation_id"]``
            continues that conversation (only new messages need to be sent).
        usage: Usage to report with every response: fixed :class:`UsageDetails`, or a callable
            ``(messages, reply) -> UsageDetails``. ``None`` reports output tokens only, estimated
            at four characters per token.

    Attributes:
        calls: The messages sent on each call, in call order.
        call_options: The options sent on each call.
        conversations: Service-managed conversations by id (``service_managed=True``).

    Example:
        ```python
        client = ScriptedChatClient(
            [ScriptedChatClient.tool_call("get_weather", {"city": "Paris"}), "It is sunny."]
        )
        agent = client.as_agent(tools=[get_weather])
        response = await agent.run("Weather in Paris?")
        assert response.text == "It is sunny."
        assert len(client.calls) == 2
        ```
    """

    def __init__(
        self,
        replies: Iterable[Reply] | Responder | None = None,
        *,
        service_managed: bool = False,
        usage: UsageDetails | Callable[[Sequence[Message], Message], UsageDetails] | None = None,
    ) -> None:
        self._script: list[Reply] | None = None
        self._responder: Callable[[Sequence[Message], ChatOptions], Reply | Awaitable[Reply]] | None = None
        if callable(replies):
            self._responder = _two_argument(replies)
        elif replies is not None:
            self._script = list(replies)
        self._next = 0
        self.service_managed = service_managed
        self.usage = usage
        self.calls: list[Sequence[Message]] = []
        self.call_options: list[ChatOptions] = []
        self.conversations: dict[str, list[Message]] = {}

    @property
    def stores_by_default(self) -> bool:  # type: ignore[override]
        """``True`` in service-managed mode."""
        return self.service_managed

    @staticmethod
    def tool_call(
        name: str, arguments: Mapping[str, Any] | str | None = None, *, call_id: str | None = None
    ) -> Message:
        """An assistant message asking for one tool call (a handy scripted reply)."""
        return Message(
            "assistant",
            [
                Content.from_function_call(
                    call_id or f"call_{uuid.uuid4().hex[:12]}", name, arguments=arguments
                )
            ],
        )

    @property
    def remaining(self) -> int | None:
        """Scripted replies not used yet (``None`` for callable / echo scripts)."""
        return None if self._script is None else len(self._script) - self._next

    async def _reply(self, conversation: Sequence[Message], options: ChatOptions) -> Message:
        if self._script is not None:
            if self._next >= len(self._script):
                raise ScriptExhaustedError(
                    f"ScriptedChatClient has no reply left for call {len(self.calls)} "
                    f"(script had {len(self._script)} replies)"
                )
            reply: Reply = self._script[self._next]
            self._next += 1
        elif self._responder is not None:
            answer = self._responder(conversation, options)
            reply = await answer if inspect.isawaitable(answer) else answer
        else:
            reply = _echo(conversation)
        if isinstance(reply, str):
            return Message("assistant", [reply])
        if isinstance(reply, Message):  # pyright: ignore[reportUnnecessaryIsInstance]
            clone = reply.copy()
            clone.contents = list(reply.contents)
            clone.message_id = None  # each use is a new message
            clone.created_at = None
            return clone
        raise ChatClientError(f"a scripted reply must be str or Message, not {type(reply).__name__}")

    def _usage(self, messages: Sequence[Message], reply: Message) -> UsageDetails | None:
        if isinstance(self.usage, UsageDetails):
            return self.usage
        if self.usage is not None:
            return self.usage(messages, reply)
        out = max(1, len(reply.text) // 4) if reply.text else 0
        return UsageDetails(output_token_count=out, total_token_count=out)

    def _conversation(
        self, messages: Sequence[Message], options: ChatOptions
    ) -> tuple[Sequence[Message], str | None]:
        stateful = self.service_managed if options.get("store") is None else bool(options.get("store"))
        conversation_id = options.get("conversation_id")
        if conversation_id is not None:
            if conversation_id not in self.conversations:
                raise ChatClientError(f"unknown conversation {conversation_id!r}")
            history = self.conversations[conversation_id]
            history.extend(messages)
            return history, conversation_id
        if not stateful:
            return messages, None
        conversation_id = f"conv_{uuid.uuid4().hex}"
        self.conversations[conversation_id] = list(messages)
        return self.conversations[conversation_id], conversation_id

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        self.calls.append(messages)
        self.call_options.append(options)
        conversation, conversation_id = self._conversation(messages, options)
        reply = await self._reply(conversation, options)
        if conversation_id is not None:
            self.conversations[conversation_id].append(reply)
        value = None
        response_format = options.get("response_format")
        if isinstance(response_format, type) and reply.text:
            try:
                value = from_builtins(msgspec.json.decode(reply.text), response_format)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise ChatClientError(
                    f"scripted reply does not fit {response_format.__name__}: {exc}"
                ) from exc
        return ChatResponse(
            [reply],
            usage=self._usage(messages, reply),
            conversation_id=conversation_id,
            response_id=f"resp_{uuid.uuid4().hex[:16]}",
            finish_reason="tool_calls" if reply.function_calls else "stop",
            model="scripted",
            value=value,
        )

    async def get_streaming_response(
        self, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        """Stream a reply word by word (tool calls and usage arrive whole)."""
        response = await self.get_response(messages, options=options)
        reply = response.messages[0]
        message_id = f"msg_{uuid.uuid4().hex[:16]}"
        pieces: list[Content] = []
        for content in reply.contents:
            if isinstance(content, TextContent) and not content.additional_properties:
                pieces.extend(TextContent(word) for word in _WORDS.findall(content.text))
            else:
                pieces.append(content)
        if response.usage is not None:
            pieces.append(UsageContent(response.usage))
        for index, piece in enumerate(pieces):
            yield ChatResponseUpdate(
                [piece],
                role=reply.role,
                message_id=message_id,
                conversation_id=response.conversation_id,
                response_id=response.response_id,
                finish_reason=response.finish_reason if index == len(pieces) - 1 else None,
                model=response.model,
            )


def _two_argument(
    responder: Responder,
) -> Callable[[Sequence[Message], ChatOptions], Reply | Awaitable[Reply]]:
    """The responder as a ``(messages, options)`` callable, whichever form it was given in."""
    try:
        parameters = list(inspect.signature(responder).parameters.values())
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        parameters = []
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2:
        return cast("Callable[[Sequence[Message], ChatOptions], Reply | Awaitable[Reply]]", responder)
    one = cast("Callable[[Sequence[Message]], Reply | Awaitable[Reply]]", responder)
    return lambda messages, _options: one(messages)


def _echo(messages: Sequence[Message]) -> str:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "user":
            return message.text
    return ""
