"""Message builders shared by the compaction tests."""

from __future__ import annotations

from typing import Any

from agentkeep import Content, Message
from agentkeep.compaction import SUMMARY_PROPERTY

__all__ = ["assistant", "call", "reasoning", "result", "summary", "system", "user"]


def user(text: str = "question") -> Message:
    return Message("user", text)


def assistant(text: str = "answer") -> Message:
    return Message("assistant", text)


def system(text: str = "be brief") -> Message:
    return Message("system", text)


def reasoning(text: str = "thinking") -> Message:
    return Message("assistant", [Content.from_text_reasoning(text)])


def call(*call_ids: str, name: str = "get_weather") -> Message:
    return Message(
        "assistant", [Content.from_function_call(c, name, arguments={"city": "Paris"}) for c in call_ids]
    )


def result(*call_ids: str, value: Any = "sunny, 18°C") -> Message:
    return Message("tool", [Content.from_function_result(c, result=value) for c in call_ids])


def summary(text: str = "earlier: weather talk", replaces: list[str] | None = None) -> Message:
    return Message("assistant", text, additional_properties={SUMMARY_PROPERTY: replaces or ["m1", "m2"]})
