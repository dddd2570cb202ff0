"""OpenAI-compatible chat clients, on the official ``openai`` SDK (extra ``[openai]``).

Two clients live here, both on :class:`openai.AsyncOpenAI`:

* :class:`OpenAIChatClient` speaks the Chat Completions API (``POST /v1/chat/completions``), which
  every OpenAI-compatible server offers (OpenAI, llama.cpp's server, vLLM, Ollama, LM Studio,
  ...). The agent holds the history and sends the whole conversation on every call.
* :class:`OpenAIResponsesClient` speaks the Responses API (``POST /v1/responses``) with
  **service-managed history**: the service keeps the conversation, the response id (or the
  conversation id) becomes ``session.service_session_id``, and later calls send only the new
  messages with ``previous_response_id``. ``options["store"] = False`` makes it stateless.

Both map agentkeep :class:`~agentkeep.messages.Message` objects to the wire format and back
(text, images and files, tool calls and their results), stream, report token usage, parse
structured output (``response_format``) into :attr:`ChatResponse.value`, and turn the SDK's
errors into agentkeep errors with the HTTP status and a one-line message that never shows the
API key::

    openai error                                agentkeep error
    APIConnectionError, APITimeoutError         ModelUnavailableError (status_code None)
    HTTP 408, 429 and 5xx                       ModelUnavailableError (status_code set)
    other 4xx (400, 401, 403, 404, 422, ...)    ChatRequestError (status_code set)
    anything else the SDK raises                ChatClientError

Transient failures (refused connections, timeouts, 408 / 409 / 429 / 5xx answers) are retried by
the SDK with exponential backoff, ``max_retries`` times, before they surface.

Configuration comes from the arguments or the environment: ``OPENAI_BASE_URL``,
``OPENAI_API_KEY`` and ``OPENAI_MODEL``. A local server needs no real key: when a base URL is
set and no key is given, the key ``"not-needed"`` is sent.

**Requests.** The clients encode each request body themselves, with msgspec, and hand the bytes
to the SDK client's ``post()``, which sends them with its connections, headers, authentication,
retries and timeouts, and raises its error types. A conversation is resent whole on every call:
each message's JSON is kept (:class:`~.openai_wire.MessageEncoder`), so an earlier message costs a
look-up, where the SDK's ``create()`` walked every field of every message against its parameter
types on every call. The JSON is the one ``create()`` sends for the same arguments (which
:meth:`_OpenAIClientBase._request` still builds: ``create()`` is used when the SDK's ``post()``
takes no bytes, or for options msgspec cannot encode). The chat client decodes streamed chunks
with msgspec into :class:`~.openai_wire.ChatChunk` (the SDK still reads the stream and splits its
events).

The mapping to and from the wire format (pure functions) lives in :mod:`.openai_wire`; this
module holds the clients, their configuration and lifecycle, and the error mapping.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import os
import re
from collections.abc import AsyncIterator, Generator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, ClassVar, Self, cast

import msgspec

from ..contents import (
    Content,
    FunctionCallContent,
    TextContent,
    TextReasoningContent,
    UnknownContent,
    UsageContent,
    UsageDetails,
)
from ..errors import ChatClientError, ChatRequestError, ModelUnavailableError
from ..messages import Message
from ..tools import FunctionTool
from .base import BaseChatClient, ChatOptions, ChatResponse, ChatResponseUpdate
from .openai_wire import (
    ChatChunk,
    MessageEncoder,
    OutputFormat,
    PartialCall,
    chat_items,
    chat_leading,
    chat_usage,
    decode_chunk,
    encode_body,
    one_line,
    output_format,
    parse_arguments,
    reasoning_of,
    response_items,
    responses_usage,
    server_message,
    stream_error,
    to_chat_messages,
    to_response_items,
)

# Imported with the module, not on first use: importing the SDK reads files for a good half
# second, which must not happen inside the event loop that constructs the first client.
try:
    import openai
    from openai import AsyncOpenAI, AsyncStream, OpenAIError
    from openai._models import FinalRequestOptions  # pyright: ignore[reportPrivateUsage]
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.responses import Response, ResponseStreamEvent
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the OpenAI clients need the openai package: pip install 'agentkeep[openai]'") from exc

__all__ = [
    "OpenAIChatClient",
    "OpenAIEmbedder",
    "OpenAIResponsesClient",
    "to_chat_messages",
    "to_response_items",
]

_NOT_NEEDED = "not-needed"
_DEFAULT_BASE_URL = "https://api.openai.com/v1"
_USERINFO = re.compile(r"//[^/@]*@")
_KEY_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9_\-.=]{6,}"),
)

# Whether this SDK's ``post`` takes a body as bytes (``content=``), and the per-request options
# its own ``create`` methods pass (they authenticate with the API key only).
_RAW_POST = "content" in inspect.signature(AsyncOpenAI.post).parameters
_POST_SECURITY = "security" in getattr(FinalRequestOptions, "model_fields", {})


def _post_options() -> Any:
    return {"security": {"bearer_auth": True}} if _POST_SECURITY else {}


class _ChunkStream(AsyncStream[ChatChunk]):
    """The SDK's stream of a chat completion, its chunks decoded by msgspec into
    :class:`~.openai_wire.ChatChunk` (the fields the client reads) instead of into the SDK's
    models: the SDK reads the response and splits its server-sent events; an ``error`` in an
    event raises :class:`openai.APIError` as the SDK's stream does, and the events after
    ``[DONE]`` are read, so the connection can serve the next request."""

    async def __stream__(self) -> AsyncIterator[ChatChunk]:  # pyright: ignore[reportIncompatibleMethodOverride]
        events = self._iter_events()
        try:
            async for event in events:
                if event.data.startswith("[DONE]"):
                    async for _ in events:
                        pass
                    break
                try:
                    chunk = decode_chunk(event.data)
                except msgspec.DecodeError as exc:
                    raise openai.APIResponseValidationError(
                        self.response, event.data, message=f"a stream chunk that does not fit: {exc}"
                    ) from exc
                if chunk.error:
                    error: Any = chunk.error
                    message: Any = (
                        cast("dict[str, Any]", error).get("message") if isinstance(error, dict) else None
                    )
                    raise openai.APIError(
                        message
                        if isinstance(message, str) and message
                        else "An error occurred during streaming",
                        self.response.request,
                        body=chunk.error,
                    )
                yield chunk
        finally:
            await self.response.aclose()


# -- the clients --------------------------------------------------------------------------------


class _OpenAIClientBase(BaseChatClient[ChatOptions]):
    """Configuration, lifecycle, request encoding and error mapping shared by both clients."""

    _PATH: ClassVar[str]  # the endpoint, under the base URL
    _ITEMS: ClassVar[str]  # the body's key for the messages
    _RESULT: ClassVar[type[Any]]  # what a non-streamed answer parses into
    _STREAM: ClassVar[type[AsyncStream[Any]]]  # what a streamed answer parses into
    _STREAM_EXTRA: ClassVar[Mapping[str, Any]] = {}  # more body for a streamed call

    @staticmethod
    def _wire_items(message: Message) -> list[dict[str, Any]]:
        """One message's wire form."""
        raise NotImplementedError

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        self.model: str | None = model or os.environ.get("OPENAI_MODEL") or None
        self.timeout = timeout
        self.max_retries = max_retries
        self._lock = asyncio.Lock()
        if client is not None:
            self._client: AsyncOpenAI | None = client
            self._owns_client = False
            self._base_url = str(client.base_url).rstrip("/")
            self._api_key = client.api_key
        else:
            base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
            api_key = api_key or os.environ.get("OPENAI_API_KEY") or (_NOT_NEEDED if base_url else None)
            if api_key is None:
                raise ChatRequestError(
                    "no API key: pass api_key= or set OPENAI_API_KEY "
                    "(a local server needs none: pass its base_url= or set OPENAI_BASE_URL)"
                )
            # The SDK client is made on first use, in a worker thread: making one loads TLS
            # certificates from disk, which must not block the event loop.
            self._client = None
            self._owns_client = True
            self._base_url = (base_url or _DEFAULT_BASE_URL).rstrip("/")
            self._api_key = api_key
        self._closed = False
        self._encoder = MessageEncoder(self._wire_items)

    def _make_client(self) -> AsyncOpenAI:
        return openai.AsyncOpenAI(
            api_key=self._api_key, base_url=self._base_url, timeout=self.timeout, max_retries=self.max_retries
        )

    async def _sdk(self) -> AsyncOpenAI:
        """The SDK client, made in a worker thread on first use (see :attr:`client`)."""
        client = self._client
        if client is None:
            async with self._lock:
                if self._client is None:
                    self._client = await asyncio.to_thread(self._make_client)
                client = self._client
        return client

    @property
    def base_url(self) -> str:
        """The server's base URL (e.g. ``http://127.0.0.1:8080/v1``)."""
        return self._base_url

    @property
    def client(self) -> AsyncOpenAI:
        """The underlying :class:`openai.AsyncOpenAI` client (made now if no request made it yet,
        which loads TLS certificates from disk: better not inside the event loop)."""
        if self._client is None:
            self._client = self._make_client()
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it (an injected one is left open)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_client and self._client is not None:
            await self._client.close()

    async def load(self) -> None:
        """Settle the model name before the first call: without one (no ``model`` and no
        ``OPENAI_MODEL``) ask the server's model list, and use its model if it offers exactly one.

        Raises:
            ChatRequestError: No model name, and the server offers none or several (named).
            ModelUnavailableError: The server cannot be reached.
        """
        if self.model is not None:
            return
        names = await self._model_names()
        if len(names) != 1:
            offered = ", ".join(names[:10]) or "none"
            raise ChatRequestError(
                f"no model name: the server at {self._base_url} offers {offered}; name one "
                "(--api-model NAME, model=, or OPENAI_MODEL)"
            )
        self.model = names[0]

    async def check_ready(self) -> None:
        """Return when the server answers its model list (one quick request, no retries).

        Raises:
            ModelUnavailableError: It does not (unreachable, timed out, 5xx).
            ChatRequestError: It refused the request (e.g. a wrong API key).
        """
        await self._model_names()

    async def _model_names(self) -> list[str]:
        sdk = (await self._sdk()).with_options(max_retries=0, timeout=min(self.timeout, 5.0))
        with self._mapped_errors():
            page = await sdk.models.list()
        return [model.id for model in page.data]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _model_for(self, options: ChatOptions) -> str:
        if self._closed:
            raise ChatClientError(f"{type(self).__name__} is closed")
        model = options.get("model") or self.model
        if not model:
            raise ChatRequestError("no model name: pass model= (or options['model']) or set OPENAI_MODEL")
        return model

    def _redact(self, text: str) -> str:
        key = self._api_key
        if len(key) >= 4 and key != _NOT_NEEDED:
            text = text.replace(key, "***")
        for pattern in _KEY_PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.groups() else "sk-") + "***", text)
        return text

    def _error(self, exc: OpenAIError) -> ChatClientError:
        """The agentkeep error for an SDK error: typed, with the status and a one-line message."""
        where = _USERINFO.sub("//", self.base_url)  # no user:password@ in messages
        if isinstance(exc, openai.APITimeoutError):
            within = f" within {self.timeout:g}s" if self._owns_client else ""
            return ModelUnavailableError(f"{where}: no answer{within} (timed out)")
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            reason = one_line(str(cause)) if cause is not None and str(cause) else "connection failed"
            return ModelUnavailableError(self._redact(f"cannot reach {where}: {reason}"))
        if isinstance(exc, openai.APIStatusError):
            status: int = exc.status_code
            detail = server_message(exc.body) or exc.response.reason_phrase or "no details"
            text = self._redact(f"{where} answered HTTP {status}: {one_line(detail)}")
            if status in (408, 429) or status >= 500:
                return ModelUnavailableError(text, status_code=status)
            return ChatRequestError(text, status_code=status)
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        return ChatClientError(self._redact(f"{where}: {one_line(str(message))}"))

    @contextmanager
    def _mapped_errors(self) -> Generator[None, None, None]:
        """Raise the SDK's errors inside the block as agentkeep errors (see :meth:`_error`)."""
        try:
            yield
        except openai.OpenAIError as exc:
            raise self._error(exc) from exc

    def _common(self, options: ChatOptions) -> tuple[dict[str, Any], OutputFormat | None]:
        """The request's model and the client's settings (:meth:`_settings`), and the structured
        output asked for: what both ways of sending a request share."""
        model = self._model_for(options)  # first: a closed client or no model is the error to report
        output = output_format(options.get("response_format"))
        return {"model": model, **self._settings(options, output)}, output

    def _request(
        self, messages: Sequence[Message], options: ChatOptions
    ) -> tuple[dict[str, Any], OutputFormat | None]:
        """The SDK keyword arguments for ``messages`` and ``options`` (for the SDK's own ``create``),
        and the structured output asked for."""
        common, output = self._common(options)
        items = [*self._leading(options)]
        for message in messages:
            items.extend(self._wire_items(message))
        request = {self._ITEMS: items, **common}
        extra = options.get("additional_properties")
        if extra:
            request["extra_body"] = dict(extra)
        return request, output

    def _encoded(
        self, messages: Sequence[Message], options: ChatOptions, *, stream: bool
    ) -> tuple[bytes | None, OutputFormat | None]:
        """The request body the SDK's ``create`` would send for :meth:`_request` (the same JSON),
        encoded here: each message once (see :class:`MessageEncoder`), the rest with msgspec;
        ``None`` for options holding a value msgspec has no JSON form for (a pydantic model in
        ``additional_properties``, say), which the SDK's own encoder may have."""
        common, output = self._common(options)
        rest: dict[str, Any] = {**common, "stream": stream}
        if stream:
            rest.update(self._STREAM_EXTRA)
        extra = options.get("additional_properties")
        if extra:
            rest.update(extra)
        items = self._encoder.encode(messages, leading=self._leading(options))
        try:
            return encode_body(self._ITEMS, items, rest), output
        except (TypeError, msgspec.EncodeError):
            return None, output

    async def _post(
        self, messages: Sequence[Message], options: ChatOptions, *, stream: bool
    ) -> tuple[Any, OutputFormat | None]:
        """Send ``messages`` through the SDK client's own ``post`` (its connection pool, headers,
        authentication, retries, timeouts, error types and SSE parsing) with the body encoded here
        (:meth:`_encoded`), skipping the SDK's per-call walk through every message of the prompt.
        Falls back to the SDK's ``create`` when the installed SDK cannot post raw bytes or the
        options hold a value msgspec cannot encode. The SDK's errors are raised as they are."""
        # encoded first: a closed client or no model name is the error to report, before an SDK
        # client is made
        body, output = self._encoded(messages, options, stream=stream) if _RAW_POST else (None, None)
        if body is None:
            request, output = self._request(messages, options)
            if stream:
                request.update(self._STREAM_EXTRA)
            return await self._create(await self._sdk(), request, stream=stream), output
        sdk = await self._sdk()
        result: Any = await sdk.post(
            self._PATH,
            cast_to=self._RESULT,
            content=body,
            options=_post_options(),
            stream=stream,
            stream_cls=self._STREAM,
        )
        return result, output

    async def _create(self, sdk: AsyncOpenAI, request: dict[str, Any], *, stream: bool) -> Any:
        """The SDK's own ``create`` for ``request`` (:meth:`_request`)."""
        raise NotImplementedError

    def _leading(self, options: ChatOptions) -> list[dict[str, Any]]:
        """Items sent before the messages (the Chat Completions client's instructions)."""
        return []

    def _settings(self, options: ChatOptions, output: OutputFormat | None) -> dict[str, Any]:
        """The client's own part of the request besides the messages: tools, sampling, output format."""
        raise NotImplementedError

    @staticmethod
    def _with_value(response: ChatResponse, output: OutputFormat | None) -> ChatResponse:
        """``response`` with its structured output parsed, unless the model called a tool instead."""
        if output is not None and not response.messages[0].function_calls:
            response.value = output.parse(response.text)
        return response

    def _tool_choice(self, options: ChatOptions, tools: Sequence[FunctionTool]) -> Any:
        choice: Any = options.get("tool_choice") or "auto"
        if choice == "required" and len(tools) == 1:
            # The same request, in the form servers without "required" (llama.cpp's) understand.
            return {"type": "function", "function": {"name": tools[0].name}}
        return choice

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"


class OpenAIChatClient(_OpenAIClientBase):
    """A chat client for any server that speaks the OpenAI Chat Completions API.

    The agent keeps the history (locally, in history providers); every call sends the whole
    conversation, with the instructions as a leading system message.

    Args:
        model: Model name (default: ``OPENAI_MODEL``); ``options["model"]`` overrides it per call.
        base_url: The API's base URL, e.g. ``http://127.0.0.1:8080/v1`` (default:
            ``OPENAI_BASE_URL``, else OpenAI's).
        api_key: The API key (default: ``OPENAI_API_KEY``; ``"not-needed"`` when a base URL is
            set and no key is).
        client: An :class:`openai.AsyncOpenAI` to use instead of creating one; it is not closed by
            :meth:`aclose`.
        timeout: Seconds to wait for the server on each request.
        max_retries: Retries (with exponential backoff) for refused connections, timeouts and
            408 / 409 / 429 / 5xx answers.

    Raises:
        ChatRequestError: No API key and no base URL.

    Example:
        ```python
        async with OpenAIChatClient("gpt-4o-mini") as client:
            agent = client.as_agent("You are terse.")
            print(await agent.run("Hello"))
        ```
    """

    _PATH = "/chat/completions"
    _ITEMS = "messages"
    _RESULT = ChatCompletion
    _STREAM = _ChunkStream
    _STREAM_EXTRA: ClassVar[Mapping[str, Any]] = {"stream_options": {"include_usage": True}}

    @staticmethod
    def _wire_items(message: Message) -> list[dict[str, Any]]:
        return chat_items(message)

    def _leading(self, options: ChatOptions) -> list[dict[str, Any]]:
        return chat_leading(options.get("instructions"))

    async def _create(self, sdk: AsyncOpenAI, request: dict[str, Any], *, stream: bool) -> Any:
        return await sdk.chat.completions.create(stream=stream, **request)

    def _settings(self, options: ChatOptions, output: OutputFormat | None) -> dict[str, Any]:
        request: dict[str, Any] = {}
        tools = options.get("tools") or []
        if tools:
            request["tools"] = [tool.schema() for tool in tools]
            request["tool_choice"] = self._tool_choice(options, tools)
        for key in ("temperature", "top_p", "max_tokens", "stop", "seed", "user"):
            value = options.get(key)
            if value is not None:
                request[key] = value
        if output is not None:
            request["response_format"] = output.for_chat()
        return request

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        """Answer ``messages`` with one Chat Completions call.

        Raises:
            ModelUnavailableError: The server cannot be reached, timed out or answered 5xx / 429.
            ChatRequestError: The server refused the request (4xx), or no model name is set.
            ChatClientError: The answer cannot be used (no choices, structured output that does
                not fit ``response_format``).
        """
        with self._mapped_errors():
            completion, output = await self._post(messages, options, stream=False)
        return self._with_value(self._from_completion(completion), output)

    def _from_completion(self, completion: ChatCompletion) -> ChatResponse:
        if not completion.choices:
            raise ChatClientError(f"{self.base_url} answered with no choices")
        choice = completion.choices[0]
        message = choice.message
        contents: list[Content] = []
        reasoning = reasoning_of(message)
        if reasoning:
            contents.append(TextReasoningContent(reasoning))
        if message.content:
            contents.append(TextContent(message.content))
        refusal = getattr(message, "refusal", None)
        if isinstance(refusal, str) and refusal:
            contents.append(TextContent(refusal, additional_properties={"refusal": True}))
        for call in message.tool_calls or []:
            function = getattr(call, "function", None)
            if function is None:  # a custom (non-function) tool call
                contents.append(UnknownContent(call.model_dump(mode="json")))
                continue
            contents.append(FunctionCallContent(call.id, function.name, parse_arguments(function.arguments)))
        if not contents:
            contents.append(TextContent(""))
        return ChatResponse(
            [Message("assistant", contents)],
            usage=chat_usage(completion.usage),
            response_id=completion.id,
            finish_reason=choice.finish_reason,
            model=completion.model,
        )

    async def get_streaming_response(
        self, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        """Stream the answer: text deltas as they come, whole tool calls and usage at the end.

        Tool-call argument deltas are assembled and yielded as complete
        :class:`~agentkeep.contents.FunctionCallContent` objects in the last update, with the
        usage (asked for with ``stream_options={"include_usage": True}``; servers that ignore it
        report none) and the finish reason.

        Raises:
            ModelUnavailableError: As :meth:`get_response`, also when the stream breaks off.
            ChatRequestError: As :meth:`get_response`.
        """
        calls: dict[int, PartialCall] = {}
        usage: UsageDetails | None = None
        finish_reason: str | None = None
        response_id: str | None = None
        model: str | None = None
        with self._mapped_errors():
            stream: AsyncStream[ChatChunk] | AsyncStream[ChatCompletionChunk]
            stream, _ = await self._post(messages, options, stream=True)
            async with stream:
                async for chunk in stream:
                    response_id = chunk.id or response_id
                    model = chunk.model or model
                    if chunk.usage is not None:
                        usage = chat_usage(chunk.usage)
                    for choice in chunk.choices or ():
                        if choice.index != 0:
                            continue
                        finish_reason = choice.finish_reason or finish_reason
                        delta = choice.delta
                        if delta is None:  # some servers send null for an empty delta
                            continue
                        contents: list[Content] = []
                        reasoning = reasoning_of(delta)
                        if reasoning:
                            contents.append(TextReasoningContent(reasoning))
                        if delta.content:
                            contents.append(TextContent(delta.content))
                        for piece in delta.tool_calls or []:
                            partial = calls.setdefault(piece.index, PartialCall())
                            partial.call_id = partial.call_id or piece.id or ""
                            if piece.function is not None:
                                # Some servers repeat the name in every delta: it is not a fragment.
                                partial.name = partial.name or piece.function.name or ""
                                if piece.function.arguments:
                                    partial.arguments.append(piece.function.arguments)
                        if contents:
                            yield ChatResponseUpdate(contents, response_id=response_id, model=model)
        final: list[Content] = [
            FunctionCallContent(
                call.call_id or f"call_{index}", call.name, parse_arguments("".join(call.arguments))
            )
            for index, call in sorted(calls.items())
        ]
        if usage is not None:
            final.append(UsageContent(usage))
        yield ChatResponseUpdate(final, response_id=response_id, finish_reason=finish_reason, model=model)


class OpenAIResponsesClient(_OpenAIClientBase):
    """A chat client for the OpenAI Responses API, with service-managed conversations.

    The service keeps the history: each answer's id (or, for a conversation created with the
    Conversations API, the ``conv_...`` id) is returned as :attr:`ChatResponse.conversation_id`,
    which an agent stores as ``session.service_session_id``. A call with
    ``options["conversation_id"]`` sends only the new messages, with ``previous_response_id``
    (or ``conversation`` for a ``conv_...`` id). Tool calls travel as ``function_call`` items and
    their results as ``function_call_output`` items. ``options["store"] = False`` asks the
    service to keep nothing: the client then behaves like a stateless one and the agent keeps the
    history.

    Instructions are sent on every call (the Responses API does not carry them over from a
    previous response). ``stop`` and ``seed`` have no Responses equivalent and are ignored.

    Args:
        model: Model name (default: ``OPENAI_MODEL``); ``options["model"]`` overrides it per call.
        base_url: The API's base URL (default: ``OPENAI_BASE_URL``, else OpenAI's).
        api_key: The API key (default: ``OPENAI_API_KEY``; ``"not-needed"`` when a base URL is
            set and no key is).
        client: An :class:`openai.AsyncOpenAI` to use instead of creating one; it is not closed by
            :meth:`aclose`.
        timeout: Seconds to wait for the server on each request.
        max_retries: Retries (with exponential backoff) for refused connections, timeouts and
            408 / 409 / 429 / 5xx answers.

    Raises:
        ChatRequestError: No API key and no base URL.

    Example:
        ```python
        client = OpenAIResponsesClient("gpt-4o-mini")
        agent = client.as_agent("You are terse.")
        session = agent.create_session()
        await agent.run("My name is Ada.", session=session)
        saved = session.service_session_id  # the service holds the conversation
        resumed = agent.get_session(service_session_id=saved)
        print(await agent.run("What is my name?", session=resumed))
        ```
    """

    stores_by_default = True

    _PATH = "/responses"
    _ITEMS = "input"
    _RESULT = Response
    _STREAM = AsyncStream[ResponseStreamEvent]

    @staticmethod
    def _wire_items(message: Message) -> list[dict[str, Any]]:
        return response_items(message)

    async def _create(self, sdk: AsyncOpenAI, request: dict[str, Any], *, stream: bool) -> Any:
        return await sdk.responses.create(stream=stream, **request)

    def _settings(self, options: ChatOptions, output: OutputFormat | None) -> dict[str, Any]:
        request: dict[str, Any] = {}
        instructions = options.get("instructions")
        if instructions:
            request["instructions"] = instructions
        conversation_id = options.get("conversation_id")
        if isinstance(conversation_id, dict):
            raise ChatRequestError(
                "the Responses API names a conversation by a string id, not a mapping of ids "
                f"({sorted(conversation_id)})"
            )
        if conversation_id:
            key = "conversation" if conversation_id.startswith("conv_") else "previous_response_id"
            request[key] = conversation_id
        if options.get("store") is False:
            request["store"] = False
        tools = options.get("tools") or []
        if tools:
            request["tools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "strict": False,
                }
                for tool in tools
            ]
            choice = self._tool_choice(options, tools)
            if isinstance(choice, Mapping):  # chat form {"type": "function", "function": {"name"}}
                function = cast("Mapping[str, Any]", choice).get("function")
                if isinstance(function, Mapping):
                    choice = {"type": "function", "name": cast("Mapping[str, Any]", function)["name"]}
            request["tool_choice"] = choice
        for key, wire in (
            ("temperature", "temperature"),
            ("top_p", "top_p"),
            ("max_tokens", "max_output_tokens"),
            ("user", "user"),
            ("metadata", "metadata"),
        ):
            value = options.get(key)
            if value is not None:
                request[wire] = value
        if output is not None:
            request["text"] = output.for_responses()
        return request

    def _conversation_id(self, response: Response, options: ChatOptions) -> str | None:
        conversation = getattr(response, "conversation", None)
        conversation_id: Any = getattr(conversation, "id", None)
        if isinstance(conversation_id, str) and conversation_id:
            return conversation_id
        if options.get("store") is False:
            kept = options.get("conversation_id")  # nothing new was kept: the conversation stays
            return kept if isinstance(kept, str) else None
        return response.id

    def _from_response(self, response: Response, options: ChatOptions) -> ChatResponse:
        if response.status == "failed":
            error = response.error
            raise stream_error(
                error.code if error is not None else None,
                error.message if error is not None else "the response failed",
                f"{self.base_url}: response {response.id} failed",
            )
        contents: list[Content] = []
        for item in response.output:
            if item.type == "message":
                for part in item.content:
                    if part.type == "output_text":
                        contents.append(TextContent(part.text))
                    else:
                        contents.append(TextContent(part.refusal, additional_properties={"refusal": True}))
            elif item.type == "function_call":
                contents.append(FunctionCallContent(item.call_id, item.name, parse_arguments(item.arguments)))
            elif item.type == "reasoning":
                text = "".join(s.text for s in item.summary)
                if text:
                    contents.append(TextReasoningContent(text))
            else:  # built-in tools agentkeep did not ask for: kept, not dropped
                contents.append(UnknownContent(item.model_dump(mode="json")))
        if not contents:
            contents.append(TextContent(""))
        return ChatResponse(
            [Message("assistant", contents)],
            usage=responses_usage(response.usage),
            conversation_id=self._conversation_id(response, options),
            response_id=response.id,
            finish_reason=_finish_reason(response, contents),
            model=str(response.model),
        )

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        """Answer ``messages`` with one Responses API call.

        Raises:
            ModelUnavailableError: The server cannot be reached, timed out or answered 5xx / 429.
            ChatRequestError: The server refused the request (4xx: unknown model, unknown
                ``previous_response_id``, ...), or no model name is set.
            ChatClientError: The response failed, or its structured output does not fit.
        """
        with self._mapped_errors():
            response, output = await self._post(messages, options, stream=False)
        return self._with_value(self._from_response(response, options), output)

    async def get_streaming_response(
        self, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        """Stream the answer from the Responses event stream.

        Text (and reasoning) deltas are yielded as they come; tool calls arrive whole
        (``response.output_item.done``); the last update carries the usage, the finish reason and
        the conversation id from ``response.completed``.

        Raises:
            ModelUnavailableError: As :meth:`get_response`, also when the stream breaks off
                before the response completes.
            ChatRequestError: As :meth:`get_response`, also for an ``error`` event with a code.
            ChatClientError: The response failed.
        """
        calls: list[Content] = []
        final: Response | None = None
        response_id: str | None = None
        with self._mapped_errors():
            stream: AsyncStream[ResponseStreamEvent]
            stream, _ = await self._post(messages, options, stream=True)
            async with stream:
                async for event in stream:
                    if event.type == "response.created":
                        response_id = event.response.id
                    elif event.type == "response.output_text.delta":
                        yield ChatResponseUpdate([TextContent(event.delta)], response_id=response_id)
                    elif event.type in (
                        "response.reasoning_summary_text.delta",
                        "response.reasoning_text.delta",
                    ):
                        delta: str = getattr(event, "delta", "")
                        yield ChatResponseUpdate([TextReasoningContent(delta)], response_id=response_id)
                    elif event.type == "response.output_item.done":
                        item = event.item
                        if item.type == "function_call":
                            calls.append(
                                FunctionCallContent(item.call_id, item.name, parse_arguments(item.arguments))
                            )
                    elif event.type in ("response.completed", "response.incomplete", "response.failed"):
                        final = getattr(event, "response", None)
                    elif event.type == "error":
                        raise stream_error(event.code, event.message, f"{self.base_url}: stream error")
        if final is None:
            raise ModelUnavailableError(f"{self.base_url}: the stream ended before the response completed")
        result = self._from_response(final, options)  # raises for a failed response
        yield self._update(result, calls or result.messages[0].function_calls)


def _finish_reason(response: Response, contents: Sequence[Content]) -> str:
    if response.status == "incomplete":
        details = response.incomplete_details
        reason = details.reason if details is not None else None
        return "length" if reason in (None, "max_output_tokens") else str(reason)
    return "tool_calls" if any(isinstance(c, FunctionCallContent) for c in contents) else "stop"


class OpenAIEmbedder:
    """An :class:`~agentkeep.memory.Embedder` for any server with the OpenAI embeddings API
    (``POST /v1/embeddings``): OpenAI, vLLM, llama.cpp's server, ...

    Texts go in batches of ``batch_size``; the vectors come back in order, normalized (a server that
    answers with one vector per token, as llama.cpp's does for a model without pooling, has them
    averaged). It shares
    the chat clients' configuration, lifecycle and typed errors (an unreachable server is a
    :class:`~agentkeep.errors.ModelUnavailableError`, a refused request a
    :class:`~agentkeep.errors.ChatRequestError`).

    Args:
        model: The embedding model's name (default: ``OPENAI_MODEL``).
        dimensions: The length of its vectors (a reply of another length is refused).
        base_url: The API's base URL (default: ``OPENAI_BASE_URL``, else OpenAI's).
        api_key: The API key (default: ``OPENAI_API_KEY``; none needed with a base URL).
        client: An :class:`openai.AsyncOpenAI` to use (left open by :meth:`aclose`).
        batch_size: Texts per request.
        timeout: Seconds per request.
        max_retries: The SDK's retries of a failed request.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        dimensions: int,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        batch_size: int = 128,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        if dimensions <= 0 or batch_size <= 0:
            raise ValueError("dimensions and batch_size must be positive")
        self.dimensions = dimensions
        self.batch_size = batch_size
        self._http = OpenAIChatClient(
            model, base_url=base_url, api_key=api_key, client=client, timeout=timeout, max_retries=max_retries
        )

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalized vector per text, in order.

        Raises:
            ModelUnavailableError: The server cannot be reached or did not answer in time.
            ChatRequestError: The server refused the request (no model name, bad input).
            ChatClientError: A reply of another length or count than asked for.
        """
        if not texts:
            return []
        model = self._http._model_for({})  # pyright: ignore[reportPrivateUsage]
        sdk = await self._http._sdk()  # pyright: ignore[reportPrivateUsage]
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            with self._http._mapped_errors():  # pyright: ignore[reportPrivateUsage]
                reply = await sdk.embeddings.create(model=model, input=batch)
            items = sorted(reply.data, key=lambda item: item.index)
            if len(items) != len(batch):
                raise ChatClientError(f"{self.base_url}: {len(items)} embeddings for {len(batch)} texts")
            for item in items:
                vector = self._vector(item.embedding)
                if len(vector) != self.dimensions:
                    raise ChatClientError(
                        f"{self.base_url}: an embedding of {len(vector)} dimensions, not {self.dimensions}"
                    )
                length = math.sqrt(math.fsum(v * v for v in vector))
                vectors.append([v / length for v in vector] if length else vector)
        return vectors

    def _vector(self, given: Any) -> list[float]:
        """A reply's embedding as one vector: a server that gives one vector per token (llama.cpp's,
        for a model without pooling) has its token vectors averaged (mean pooling).

        Raises:
            ChatClientError: Not a vector of numbers (nor a list of them).
        """
        try:
            if given and isinstance(given[0], list):
                rows = [[float(v) for v in row] for row in cast("list[list[Any]]", given)]
                return [math.fsum(column) / len(rows) for column in zip(*rows, strict=True)]
            return [float(v) for v in cast("list[Any]", given)]
        except (TypeError, ValueError) as exc:
            raise ChatClientError(f"{self.base_url}: an embedding that is not a vector of numbers") from exc

    @property
    def base_url(self) -> str:
        """The server's base URL."""
        return self._http.base_url

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it."""
        await self._http.aclose()

    def __repr__(self) -> str:
        model, url = self._http.model, self.base_url
        return f"OpenAIEmbedder(model={model!r}, base_url={url!r}, dimensions={self.dimensions})"
