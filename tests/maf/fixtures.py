"""The Agent Framework fixtures (``tests/fixtures/maf/``, written by the real
``agent-framework-core`` 1.23 and ``agent-framework-redis`` through ``generate.py``), read once at
import (outside any event loop)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "maf"
SESSIONS: dict[str, dict[str, Any]] = {
    path.name: json.loads(path.read_text(encoding="utf-8"))
    for path in sorted((HERE / "sessions").glob("*.json"))
}
EXPORTED: dict[str, str] = {
    path.name: path.read_text(encoding="utf-8") for path in sorted((HERE / "exported").glob("*.json"))
}
LOADED: dict[str, Any] = json.loads((HERE / "loaded.json").read_text(encoding="utf-8"))
REDIS_DUMP: dict[str, Any] = json.loads((HERE / "redis" / "dump.json").read_text(encoding="utf-8"))
VERSIONS: dict[str, Any] = json.loads((HERE / "versions.json").read_text(encoding="utf-8"))
