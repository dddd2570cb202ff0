"""Function tools: schemas from type hints and docstrings, argument parsing, invocation."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

import pytest

from agentkeep import FunctionTool, ToolArgumentError, ToolError, tool
from agentkeep.tools import normalize_tools


class Unit(Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


@dataclass
class Location:
    city: str
    country: str = "FR"


def get_weather(
    location: Location,
    days: int = 1,
    unit: Unit = Unit.CELSIUS,
    detail: Literal["short", "long"] = "short",
    tags: list[str] | None = None,
) -> str:
    """Get the weather forecast.

    Looks it up in a made-up service.

    Args:
        location: Where to look.
        days: How many days
            to forecast.
        unit: Temperature unit.
    """
    return f"{location.city}/{location.country}: sunny for {days} day(s) in {unit.value} ({detail})"


def add(a: int, b: int) -> int:
    return a + b


# -- schema ------------------------------------------------------------------------------------


def test_schema_from_typed_function() -> None:
    weather = FunctionTool(get_weather)
    assert weather.name == "get_weather"
    assert weather.description == "Get the weather forecast."

    params = weather.parameters
    assert params["type"] == "object"
    assert params["required"] == ["location"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert set(props) == {"location", "days", "unit", "detail", "tags"}
    assert props["days"]["type"] == "integer"
    assert props["days"]["default"] == 1
    assert props["days"]["description"] == "How many days to forecast."
    assert props["location"]["description"] == "Where to look."
    assert props["unit"]["description"] == "Temperature unit."
    assert "description" not in props["detail"]
    assert sorted(props["detail"]["enum"]) == ["long", "short"]
    assert props["detail"]["default"] == "short"
    assert props["tags"]["anyOf"] == [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]

    defs = params["$defs"]
    assert props["location"]["$ref"] == "#/$defs/Location"
    assert defs["Location"]["properties"] == {
        "city": {"type": "string"},
        "country": {"type": "string", "default": "FR"},
    }
    assert defs["Location"]["required"] == ["city"]
    assert props["unit"]["$ref"] == "#/$defs/Unit"
    assert sorted(defs["Unit"]["enum"]) == ["celsius", "fahrenheit"]


def test_openai_style_declaration() -> None:
    declaration = FunctionTool(add).schema()
    assert declaration == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    }


def test_function_without_parameters() -> None:
    def now() -> str:
        """The time."""
        return "noon"

    made = FunctionTool(now)
    assert made.parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    assert made.parse_arguments(None) == {}
    assert made.parse_arguments("") == {}
    assert made.parse_arguments({}) == {}


def test_explicit_name_and_description_override() -> None:
    made = FunctionTool(add, name="sum_two", description="Sum two integers.")
    assert made.name == "sum_two"
    assert made.description == "Sum two integers."
    assert made.schema()["function"]["name"] == "sum_two"


def test_tool_decorator_forms() -> None:
    @tool
    def shout(text: str) -> str:
        """Make text loud."""
        return text.upper()

    @tool(name="whisper-it", description="Make text quiet.")
    def whisper(text: str) -> str:
        return text.lower()

    assert isinstance(shout, FunctionTool)
    assert shout.name == "shout"
    assert shout.description == "Make text loud."
    assert isinstance(whisper, FunctionTool)
    assert whisper.name == "whisper-it"
    assert whisper.description == "Make text quiet."


@pytest.mark.parametrize("name", ["has space", "dot.name", "x" * 65, "ünïcode"])
def test_invalid_name_is_refused(name: str) -> None:
    with pytest.raises(ToolError) as info:
        FunctionTool(add, name=name)
    assert info.value.tool_name == name


def test_lambda_needs_a_name() -> None:
    with pytest.raises(ToolError, match="<lambda>"):
        FunctionTool(lambda x: x)
    assert FunctionTool(lambda x: x, name="identity").name == "identity"


def test_var_args_are_refused() -> None:
    def many(*values: int) -> int:
        return sum(values)

    def loose(**options: str) -> str:
        return ""

    def positional(a: int, /) -> int:
        return a

    for func in (many, loose, positional):
        with pytest.raises(ToolError) as info:
            FunctionTool(func)
        assert info.value.tool_name == func.__name__


def test_unannotated_parameter_accepts_anything() -> None:
    def anything(value) -> str:
        return repr(value)

    made = FunctionTool(anything)
    assert made.parameters["required"] == ["value"]
    assert made.parse_arguments({"value": [1, "x"]}) == {"value": [1, "x"]}


# -- argument parsing --------------------------------------------------------------------------


def test_parse_arguments_from_dict_and_json() -> None:
    weather = FunctionTool(get_weather)
    from_dict = weather.parse_arguments({"location": {"city": "Paris"}, "unit": "fahrenheit"})
    assert from_dict == {
        "location": Location("Paris", "FR"),
        "days": 1,
        "unit": Unit.FAHRENHEIT,
        "detail": "short",
        "tags": None,
    }
    from_json = weather.parse_arguments('{"location": {"city": "Oslo", "country": "NO"}, "days": 3}')
    assert from_json["location"] == Location("Oslo", "NO")
    assert from_json["days"] == 3
    assert from_json["unit"] is Unit.CELSIUS


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"a": "one", "b": 2}, "a"),  # wrong type
        ({"a": 1}, "b"),  # missing
        ({"a": 1, "b": 2, "c": 3}, "c"),  # extra
        ('{"a": 1, "b": [2]}', "b"),  # wrong type in JSON
        ("[1, 2]", "object"),  # not an object
        ('"text"', "object"),  # not an object
        ("{not json", "JSON"),  # invalid JSON
    ],
)
def test_bad_arguments_raise_tool_argument_error(arguments: dict[str, Any] | str, fragment: str) -> None:
    made = FunctionTool(add)
    with pytest.raises(ToolArgumentError) as info:
        made.parse_arguments(arguments)
    assert info.value.tool_name == "add"
    assert fragment in str(info.value)
    assert "add" in str(info.value)
    assert isinstance(info.value, ToolError)
    assert isinstance(info.value, ValueError)


def test_wrong_literal_and_enum_values_are_refused() -> None:
    weather = FunctionTool(get_weather)
    with pytest.raises(ToolArgumentError):
        weather.parse_arguments({"location": {"city": "Paris"}, "detail": "medium"})
    with pytest.raises(ToolArgumentError):
        weather.parse_arguments({"location": {"city": "Paris"}, "unit": "kelvin"})
    with pytest.raises(ToolArgumentError):
        weather.parse_arguments({"location": {"country": "FR"}})


# -- invocation --------------------------------------------------------------------------------


async def test_invoke_sync_tool() -> None:
    assert await FunctionTool(add).invoke({"a": 2, "b": 3}) == 5
    assert await FunctionTool(add).invoke('{"a": 2, "b": 3}') == 5


async def test_invoke_async_tool() -> None:
    async def slow_add(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    made = FunctionTool(slow_add)
    assert await made.invoke({"a": 20, "b": 22}) == 42


async def test_invoke_callable_object_with_async_call() -> None:
    class Doubler:
        __name__ = "double"

        async def __call__(self, value: int) -> int:
            return value * 2

    made = FunctionTool(Doubler())
    assert made.name == "double"
    assert made.parameters["properties"] == {"value": {"type": "integer"}}
    assert await made.invoke({"value": 21}) == 42
    with pytest.raises(ToolArgumentError):
        await made.invoke({"value": "x"})


async def test_invoke_sync_callable_object() -> None:
    class Greeter:
        def __call__(self, name: str, polite: bool = False) -> str:
            return f"Good day, {name}" if polite else f"hi {name}"

    made = FunctionTool(Greeter(), name="greet")
    assert made.parameters["required"] == ["name"]
    assert made.parameters["properties"]["polite"] == {"type": "boolean", "default": False}
    assert await made.invoke({"name": "Ada", "polite": True}) == "Good day, Ada"


async def test_invoke_validates_before_calling() -> None:
    calls: list[int] = []

    def record(value: int) -> int:
        calls.append(value)
        return value

    made = FunctionTool(record)
    with pytest.raises(ToolArgumentError):
        await made.invoke({"value": "nope"})
    assert calls == []


async def test_invoke_passes_tool_exceptions_through() -> None:
    def fail() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        await FunctionTool(fail).invoke()


async def test_run_in_thread() -> None:
    def where() -> int:
        return threading.get_ident()

    loop_thread = threading.get_ident()
    assert await FunctionTool(where).invoke() == loop_thread
    assert await FunctionTool(where, run_in_thread=True).invoke() != loop_thread

    @tool(run_in_thread=True)
    def where_decorated() -> int:
        return threading.get_ident()

    assert await where_decorated.invoke() != loop_thread


# -- normalize_tools ---------------------------------------------------------------------------


def test_normalize_tools_wraps_callables_and_keeps_tools() -> None:
    made = FunctionTool(add)
    assert normalize_tools(None) == []
    assert normalize_tools(made) == [made]
    single = normalize_tools(add)
    assert [t.name for t in single] == ["add"]
    mixed = normalize_tools([made, get_weather])
    assert mixed[0] is made
    assert [t.name for t in mixed] == ["add", "get_weather"]


def test_normalize_tools_refuses_duplicate_names() -> None:
    with pytest.raises(ToolError) as info:
        normalize_tools([add, FunctionTool(get_weather, name="add")])
    assert info.value.tool_name == "add"


def test_empty_name_is_refused() -> None:
    def f() -> None:
        return None

    with pytest.raises(ToolError):
        FunctionTool(f, name="")


def test_unresolvable_return_annotation_does_no_harm() -> None:
    class Local:
        pass

    def make(count: int) -> Local:
        return Local()

    made = FunctionTool(make)
    assert made.parameters["properties"]["count"]["type"] == "integer"
