"""The examples in examples/ run, assert what they show, and `make demo` (walkthrough.py) succeeds."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
EXAMPLES = [
    "multi_turn_memory",
    "shared_session",
    "persist_session",
    "audit_history",
    "user_info_memory",
    "todo_provider",
]


@pytest.fixture
def examples_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES_DIR))


def _load(name: str) -> ModuleType:
    return importlib.import_module(name)


@pytest.mark.usefixtures("examples_path")
@pytest.mark.parametrize("name", EXAMPLES)
async def test_example_main_runs(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = _load(name)
    assert module.__doc__
    assert "seed" in module.__doc__
    await module.main()
    assert capsys.readouterr().out.strip()


@pytest.mark.usefixtures("examples_path")
async def test_walkthrough_lists_every_example(capsys: pytest.CaptureFixture[str]) -> None:
    walkthrough = _load("walkthrough")
    assert [name for name, _ in walkthrough.EXAMPLES] == EXAMPLES
    assert await walkthrough.main() == 0
    assert "6/6 examples passed" in capsys.readouterr().out


@pytest.mark.slow
def test_walkthrough_script_exits_zero() -> None:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES_DIR / "walkthrough.py")],
        capture_output=True,
        encoding="utf-8",
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in (
        "=== 1. multi_turn_memory",
        "assistant > You like Italian food.",
        "EchoAgent > Again, as WeatherAgent said:",
        "MEMORY - User Name: Ruaidhrí",
        "MEMORY - User Age: 20",
        "after a JSON round trip",
        "6/6 examples passed",
    ):
        assert line in result.stdout
