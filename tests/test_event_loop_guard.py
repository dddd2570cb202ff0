"""The suite-wide guard (``no_blocking_calls_in_the_event_loop`` in conftest.py) really catches
blocking calls agentkeep makes in the event loop's thread, and lets the same call through in a
worker thread."""

from __future__ import annotations

import time

import pytest
from blockbuster import BlockingError

from agentkeep import FunctionTool


def _nap() -> str:
    time.sleep(0.001)
    return "rested"


async def test_a_blocking_tool_run_in_the_event_loop_is_caught() -> None:
    with pytest.raises(BlockingError, match=r"time\.sleep"):
        await FunctionTool(_nap).invoke({})


async def test_the_same_tool_in_a_worker_thread_passes() -> None:
    assert await FunctionTool(_nap, run_in_thread=True).invoke({}) == "rested"


def test_outside_an_event_loop_nothing_is_blocked() -> None:
    assert _nap() == "rested"
