"""Where the seeds are (``AGENTKEEP_SEEDS_DIR``, else ``../shared/seeds`` next to the checkout),
and reading them: the seed text for a number, and the names its snippets import from
``agent_framework``. A clean clone elsewhere has no seeds; the tests that compare with them skip."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEEDS_DIR = Path(os.environ.get("AGENTKEEP_SEEDS_DIR", ROOT.parent / "shared" / "seeds"))

_IMPORT = re.compile(r"^from agent_framework import (\([^)]*\)|.+)$", re.MULTILINE)


def seed_text(number: str) -> str | None:
    """The text of seed ``number`` (``"003"``), or ``None`` when the seeds are not here."""
    found = sorted(SEEDS_DIR.glob(f"{number}_*.txt")) if SEEDS_DIR.is_dir() else []
    return found[0].read_text(encoding="utf-8") if found else None


def seed_numbers() -> list[str]:
    """The numbers of the seeds that are here."""
    return sorted(p.name[:3] for p in SEEDS_DIR.glob("[0-9][0-9][0-9]_*.txt")) if SEEDS_DIR.is_dir() else []


def imported_names(text: str) -> set[str]:
    """The names ``from agent_framework import ...`` lines of ``text`` import."""
    names: set[str] = set()
    for match in _IMPORT.finditer(text):
        listed = match.group(1).strip("()")
        names.update(name.strip() for name in listed.split(",") if name.strip())
    return names


def code_lines(text: str) -> list[str]:
    """``text``'s lines without import lines and trailing spaces, for comparing code parts."""
    return [
        line.rstrip()
        for line in text.splitlines()
        if not line.startswith(("from ", "import ")) and not line.startswith("# --- seed code")
    ]


def seed_parts(fixture: str) -> list[str]:
    """The parts of a fixture file below its ``# --- seed code ---`` markers."""
    return fixture.split("# --- seed code ---\n")[1:]
