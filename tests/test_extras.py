"""Optional parts: importing one without its extra raises an ImportError that names the extra."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CASES = [
    ("agentkeep.message_stores.redis", "redis", "redis"),
    ("agentkeep.session_stores.redis", "redis", "redis"),
    ("agentkeep.message_stores.postgres", "psycopg", "postgres"),
    ("agentkeep.session_stores.postgres", "psycopg", "postgres"),
    ("agentkeep.message_stores.postgres", "psycopg_pool", "postgres"),
    ("agentkeep.clients.openai", "openai", "openai"),
    ("agentkeep.cli", "typer", "cli"),
    ("agentkeep.cli", "rich", "cli"),
    ("agentkeep.memory.sqlite", "apsw", "memory"),
    ("agentkeep.memory.sqlite", "sqlite_vec", "memory"),
    ("agentkeep.memory.postgres", "numpy", "memory"),
    ("agentkeep.memory.sqlite", "simsimd", "memory"),
    ("agentkeep.memory.postgres", "simsimd", "memory"),
    ("agentkeep.memory.postgres", "psycopg", "postgres"),
]


@pytest.mark.parametrize(("module", "driver", "extra"), CASES)
def test_a_missing_driver_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, driver: str, extra: str
) -> None:
    for name in [driver, *(n for n in sys.modules if n.startswith(f"{driver}."))]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the driver were not installed
    for name in list(sys.modules):
        if name == module or name.startswith((f"{module}.", "agentkeep._db.", "agentkeep.memory._")):
            monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError, match=rf"pip install 'agentkeep\[{extra}\]'"):
        importlib.import_module(module)


def test_the_core_needs_no_extra() -> None:
    blocked = ["typer", "rich", "redis", "psycopg", "psycopg_pool", "openai", "llama_cpp"]
    blocked += ["apsw", "sqlite_vec", "numpy", "simsimd", "sentence_transformers", "torch"]
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "import agentkeep, agentkeep.compaction, agentkeep.message_stores.sqlite,"
        " agentkeep.session_stores.sqlite\n"
        "import agentkeep.store_urls, agentkeep.testing.conformance\n"
        "import agentkeep.memory, agentkeep.memory.semantic, agentkeep.memory.embedders\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_command_without_the_cli_extra_says_what_to_install() -> None:
    code = "import sys\nsys.modules['typer'] = None\nfrom agentkeep.__main__ import main\nmain()\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        == "error: the agentkeep command needs typer and rich: pip install 'agentkeep[cli]'"
    )


def test_the_embedding_model_without_its_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentkeep.memory.embedders import MiniLMEmbedder

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ImportError, match=r"pip install 'agentkeep\[embeddings\]'"):
        MiniLMEmbedder()._load()  # pyright: ignore[reportPrivateUsage]
