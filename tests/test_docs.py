"""Every Python block of the pages in docs/ runs (the README's example runs in test_readme.py).

The blocks of one page run in order in one namespace, as a reader would type them into an async
REPL (top-level ``await`` works), in a temporary folder with a private data folder. A block's
imports run first, outside the event loop (as a module's imports would); the rest runs inside it.
The only name a page may use without defining it is ``client``: a scripted model that echoes the
last message.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from agentkeep.testing import ScriptedChatClient

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """The page's Python blocks, each with the line it starts on."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start()) + 2, match.group(1)) for match in _BLOCK.finditer(text)]


def test_the_pages_have_python_blocks() -> None:
    with_blocks = {page.name for page in PAGES if python_blocks(page)}
    assert {"storage.md", "compaction.md", "guide.md", "session-stores.md", "cli.md"} <= with_blocks


def _split(line: int, source: str, page: Path) -> tuple[Any, Any]:
    """The block's top-level imports and the rest, compiled (line numbers as on the page)."""
    tree = ast.parse("\n" * (line - 1) + source, str(page))
    imports: list[ast.stmt] = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    rest = [node for node in tree.body if not isinstance(node, ast.Import | ast.ImportFrom)]
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    return (
        compile(ast.Module(imports, []), str(page), "exec", dont_inherit=True),
        compile(ast.Module(rest, []), str(page), "exec", flags=flags, dont_inherit=True),
    )


@pytest.mark.parametrize("page", [page for page in PAGES if python_blocks(page)], ids=lambda page: page.name)
def test_the_python_blocks_of_a_page_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    namespace: dict[str, Any] = {
        "__name__": f"docs_{page.stem}",
        "client": ScriptedChatClient(lambda messages: f"echo: {messages[-1].text}"),
    }
    with asyncio.Runner() as runner:
        for line, source in python_blocks(page):
            imports, rest = _split(line, source, page)
            exec(imports, namespace)  # the project's own documentation
            result = eval(rest, namespace)
            if inspect.iscoroutine(result):
                runner.run(asyncio.wait_for(result, timeout=120))  # a hang guard
