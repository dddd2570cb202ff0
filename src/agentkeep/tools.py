"""Function tools: Python callables the model can call.

:class:`FunctionTool` wraps a sync or async callable. Its JSON schema comes from the type hints
(through msgspec, so dataclasses, enums, ``Literal``, ``TypedDict`` and nested containers work) and
its descriptions from the docstring (first paragraph, and Google-style ``Args:`` entries).
Arguments from the model are validated and converted to the annotated types before the call;
arguments that do not fit raise :class:`~agentkeep.errors.ToolArgumentError`, which the agent's
tool loop hands back to the model as the call's exception instead of crashing the run.

Sync callables run on the event loop thread (keep them quick) unless ``run_in_thread=True``.

:meth:`FunctionTool.declaration` makes a tool the model may call but agentkeep does not run (a
browser's tool behind an AG-UI client, say): a model answer that calls one ends the run with the
call unanswered, and the caller sends its result in the next run's input.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from types import SimpleNamespace
from typing import Any, cast, get_type_hints, overload

import msgspec

from .errors import ToolArgumentError, ToolError

__all__ = ["FunctionTool", "ToolLike", "normalize_tools", "tool"]

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The summary paragraph and the ``Args:`` descriptions of a Google-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip():
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args:
            if stripped.endswith(":") and not line.startswith((" ", "\t")):
                break  # next section
            if not stripped:
                continue
            match = _ARG_LINE.match(line)
            indent = len(line) - len(line.lstrip())
            if match and (current is None or indent <= 4):
                name = match.group(1).lstrip("*")
                params[name] = match.group(3).strip()
                current = name
            elif current is not None:
                params[current] = f"{params[current]} {stripped}".strip()
    return " ".join(summary), params


def _parameter_hints(target: Any) -> dict[str, Any]:
    """The evaluated parameter annotations of ``target`` (its return annotation is not needed, so
    one that cannot be resolved, e.g. a local class under postponed annotations, does no harm)."""
    raw = dict(getattr(target, "__annotations__", None) or {})
    raw.pop("return", None)
    holder = SimpleNamespace(__annotations__=raw)
    return get_type_hints(holder, globalns=getattr(inspect.unwrap(target), "__globals__", None))


class FunctionTool:
    """A callable the model can call, with its name, description and JSON schema.

    Args:
        func: The sync or async callable.
        name: Tool name (default: the function's name); letters, digits, ``_`` and ``-``.
        description: What the tool does (default: the docstring's first paragraph).
        run_in_thread: Run a sync ``func`` in a worker thread instead of on the event loop.

    Raises:
        ToolError: The name is invalid, or a parameter cannot be described as JSON schema
            (``*args``/``**kwargs``, positional-only parameters, unsupported annotations).
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        run_in_thread: bool = False,
    ) -> None:
        self.func = func
        self.name = name if name is not None else getattr(func, "__name__", "")
        if not _NAME_RE.match(self.name):
            raise ToolError(f"invalid tool name {self.name!r}", tool_name=self.name)
        summary, param_docs = _parse_docstring(inspect.getdoc(func))
        self.description = description if description is not None else summary
        self.run_in_thread = run_in_thread
        self._is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
            getattr(func, "__call__", None)  # noqa: B004 - callable objects with async __call__
        )
        self._args_type, self.parameters = self._build_schema(param_docs)
        self.additional_properties: dict[str, Any] = {}
        self.declaration_only = False
        """Whether the caller runs this tool (see :meth:`declaration`)."""

    @classmethod
    def declaration(
        cls, name: str, *, description: str = "", parameters: Mapping[str, Any] | None = None
    ) -> FunctionTool:
        """A tool the model may call but agentkeep does not run: a model answer that calls it ends
        the run, the call left for the caller to answer in the next run's input.

        Args:
            name: The tool's name.
            description: What it does, for the model.
            parameters: Its parameters as JSON schema (default: no parameters).

        Raises:
            ToolError: The name is invalid or ``parameters`` is not a JSON-schema object.
        """
        if not _NAME_RE.match(name):
            raise ToolError(f"invalid tool name {name!r}", tool_name=name)
        try:
            schema: dict[str, Any] = (
                {"type": "object", "properties": {}} if parameters is None else dict(parameters)
            )
        except (TypeError, ValueError) as exc:
            raise ToolError(
                f"the parameters of tool {name!r} must be a JSON-schema object", tool_name=name
            ) from exc
        if schema.get("type", "object") != "object":
            raise ToolError(f"the parameters of tool {name!r} must be a JSON-schema object", tool_name=name)

        def not_here() -> Any:
            raise ToolError(f"tool {name!r} is run by the caller, not by agentkeep", tool_name=name)

        made = cls(not_here, name=name, description=description)
        made.parameters = schema  # what the model sees; the caller checks the arguments
        made.declaration_only = True
        return made

    def _build_schema(self, param_docs: Mapping[str, str]) -> tuple[Any, dict[str, Any]]:
        try:
            signature = inspect.signature(self.func)
            annotated: Any = self.func
            func_type: type[Any] = type(self.func)
            call: Any = inspect.getattr_static(func_type, "__call__", None)
            if not inspect.isroutine(annotated) and inspect.isfunction(call):
                annotated = call  # a callable object: its __call__ carries the hints
            hints = _parameter_hints(annotated)
        except (TypeError, ValueError, NameError) as exc:
            raise ToolError(
                f"cannot read the signature of tool {self.name!r}: {exc}", tool_name=self.name
            ) from exc
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
                raise ToolError(
                    f"tool {self.name!r}: parameter {param.name!r} must be a plain or keyword parameter",
                    tool_name=self.name,
                )
            annotation = hints.get(param.name, Any)
            if param.default is inspect.Parameter.empty:
                fields.append((param.name, annotation))
            else:
                fields.append((param.name, annotation, param.default))
        args_type = msgspec.defstruct(f"{self.name}_arguments", fields, forbid_unknown_fields=True)
        try:
            schema = msgspec.json.schema(args_type)
        except (TypeError, ValueError) as exc:
            raise ToolError(
                f"tool {self.name!r} has a parameter type with no JSON schema: {exc}", tool_name=self.name
            ) from exc
        defs = schema.pop("$defs", {})
        ref = schema.get("$ref", "")
        body = dict(defs.pop(ref.rsplit("/", 1)[-1], schema)) if ref else dict(schema)
        body.pop("title", None)
        body.setdefault("properties", {})
        body.setdefault("required", [])
        body["additionalProperties"] = False
        for pname, text in param_docs.items():
            prop = body["properties"].get(pname)
            if isinstance(prop, dict) and text:
                cast(dict[str, Any], prop).setdefault("description", text)
        if defs:
            body["$defs"] = defs
        return args_type, body

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function declaration: ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def parse_arguments(self, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Validate model-given arguments and convert them to the annotated Python types.

        Raises:
            ToolArgumentError: Not JSON, not an object, missing/unknown parameters or wrong types.
        """
        if arguments is None or arguments == "":
            raw: Any = {}
        elif isinstance(arguments, str):
            try:
                raw = msgspec.json.decode(arguments)
            except msgspec.DecodeError as exc:
                raise ToolArgumentError(
                    f"arguments for tool {self.name!r} are not valid JSON: {exc}", tool_name=self.name
                ) from exc
        else:
            raw = arguments
        if not isinstance(raw, Mapping):
            raise ToolArgumentError(
                f"arguments for tool {self.name!r} must be a JSON object, not {type(raw).__name__}",
                tool_name=self.name,
            )
        try:
            converted = msgspec.convert(raw, self._args_type, strict=False)
        except msgspec.ValidationError as exc:
            raise ToolArgumentError(
                f"invalid arguments for tool {self.name!r}: {exc}", tool_name=self.name
            ) from exc
        return {field: getattr(converted, field) for field in converted.__struct_fields__}

    async def invoke(self, arguments: Mapping[str, Any] | str | None = None) -> Any:
        """Validate ``arguments`` and call the function; returns what it returns.

        Raises:
            ToolArgumentError: The arguments do not fit the parameters.
            Exception: Whatever the function raises.
        """
        kwargs = self.parse_arguments(arguments)
        if self._is_async:
            return await self.func(**kwargs)
        if self.run_in_thread:
            return await asyncio.to_thread(self.func, **kwargs)
        result = self.func(**kwargs)
        if inspect.isawaitable(result):
            return await result
        return result

    def __repr__(self) -> str:
        kind = ", declaration_only=True" if self.declaration_only else ""
        return f"FunctionTool(name={self.name!r}{kind})"


@overload
def tool(func: Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    run_in_thread: bool = False,
    approval_mode: str | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    run_in_thread: bool = False,
    approval_mode: str | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Decorator turning a function into a :class:`FunctionTool` (``@tool`` or ``@tool(name=...)``).

    ``approval_mode`` is the reference's: ``"never_require"`` (or ``None``) is how agentkeep runs
    every tool; ``"always_require"`` (an approval request before each call) is not supported.

    Raises:
        ToolError: ``approval_mode`` asks for approvals.
    """
    if approval_mode not in (None, "never_require"):
        raise ToolError(
            f"approval_mode={approval_mode!r}: agentkeep runs tools without approval requests "
            "(only 'never_require')",
            tool_name=name or getattr(func, "__name__", "tool"),
        )

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, run_in_thread=run_in_thread)

    return wrap(func) if func is not None else wrap


ToolLike = FunctionTool | Callable[..., Any]
"""A tool, or a plain callable that becomes one."""


def normalize_tools(tools: ToolLike | Iterable[ToolLike] | None) -> list[FunctionTool]:
    """Tools as :class:`FunctionTool` objects; plain callables are wrapped.

    Raises:
        ToolError: Two tools share a name, or a callable cannot become a tool.
    """
    if tools is None:
        return []
    items: Iterable[ToolLike] = [tools] if isinstance(tools, FunctionTool) or callable(tools) else tools
    out: list[FunctionTool] = []
    seen: set[str] = set()
    for item in items:
        made = item if isinstance(item, FunctionTool) else FunctionTool(item)
        if made.name in seen:
            raise ToolError(f"two tools are named {made.name!r}", tool_name=made.name)
        seen.add(made.name)
        out.append(made)
    return out
