#!/usr/bin/env python3
"""Run Agent Framework Python's own unit tests for the memory layer against agentkeep.

Usage::

    scripts/maf_suite.py FRAMEWORK [--python PY] [--keep DIR] [--json OUT] [--show-excluded]

``FRAMEWORK`` is a checkout of the ``microsoft/agent-framework`` repository: a work tree, or a
bare git directory (its ``HEAD`` is read with ``git archive``). The script copies the test files
below into a temporary folder laid out as the framework lays them out, puts the names-only shim
(``scripts/maf_shim``: packages ``agent_framework`` and ``agent_framework_redis`` whose modules
only re-export agentkeep's names) first on ``PYTHONPATH`` (the caller's ``PYTHONPATH`` after it,
so ``PYTHONPATH=src`` tests this work tree's agentkeep), runs pytest there with ``PY`` (default:
this interpreter; it must not have the real ``agent_framework`` installed) and prints, per file,
how many tests pass, fail and error, then the failing tests of the *fair set* with a one-line
reason.

The fair set leaves out, by reading each test's source (its body, decorators, and the fixtures
and helpers of its module it uses; the conftest's fixtures are the framework's test rig):

* tests that use the framework's private helpers: a ``_``-prefixed name imported from the
  framework, a ``_``-prefixed attribute the test file does not define itself (``_response``, the
  framework's way of handing a :class:`SessionContext` its run's response, is supported by
  agentkeep and stays in), or a patch of a framework module's internals (``patch("agent_framework
  ...")``, ``monkeypatch.setattr(<framework name>, ...)``);
* tests of parts outside this project: middleware, MCP, hosted-tool and tool-approval contents,
  the Redis vector context provider, and the framework's experimental-feature and usage markers.

Nothing of the framework is copied into this project: the tests are read from the checkout given.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

SHIM = Path(__file__).resolve().parent / "maf_shim"

# Framework path -> where it goes in the temp folder (the framework's own layout).
CORE = "python/packages/core/tests"
REDIS = "python/packages/redis/tests"
SUPPORT = {
    f"{CORE}/__init__.py": "tests/__init__.py",
    f"{CORE}/conftest.py": "tests/conftest.py",
    f"{CORE}/core/__init__.py": "tests/core/__init__.py",
}
# The fixtures and mock clients of test_agents.py (the three files use none of them).
AGENTS_CONFTEST = {f"{CORE}/core/conftest.py": "tests/core/conftest.py"}
SUITE = {
    f"{CORE}/core/test_sessions.py": "tests/core/test_sessions.py",
    f"{CORE}/core/test_compaction.py": "tests/core/test_compaction.py",
    f"{REDIS}/test_providers.py": "redis_tests/test_providers.py",
}
AGENTS = {**AGENTS_CONFTEST, f"{CORE}/core/test_agents.py": "tests/core/test_agents.py"}

PYTEST_INI = """\
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
timeout = 120
junit_family = xunit1
markers =
    integration: marks tests as integration tests that require external services
"""

# Names that mark a test as one of a part outside this project.
OUT_OF_SCOPE: dict[str, str] = {
    **dict.fromkeys(
        [
            "chat_middleware",
            "agent_middleware",
            "function_middleware",
            "ChatContext",
            "AgentContext",
            "FunctionInvocationContext",
            "MiddlewareException",
            "MessageInjectionMiddleware",
            "ChatMiddlewareLayer",
            "extend_middleware",
            "get_middleware",
            "middleware",
        ],
        "middleware",
    ),
    **dict.fromkeys(
        ["MCPTool", "from_mcp_server_tool_call", "from_mcp_server_tool_result", "_build_prefixed_mcp_name"],
        "MCP",
    ),
    **dict.fromkeys(
        [
            "from_code_interpreter_tool_call",
            "from_code_interpreter_tool_result",
            "from_shell_tool_call",
            "from_shell_tool_result",
            "from_image_generation_tool_call",
            "from_image_generation_tool_result",
            "from_hosted_file",
            "from_hosted_vector_store",
            "from_function_approval_request",
            "from_function_approval_response",
            "to_function_approval_response",
            "approval_mode",
            "UserInputRequiredException",
        ],
        "hosted-tool and tool-approval contents",
    ),
    **dict.fromkeys(
        ["RedisContextProvider", "patch_index_from_dict", "mock_index"], "Redis vector context provider"
    ),
    **dict.fromkeys(
        ["ExperimentalFeature", "__feature_stage__", "__feature_id__", "FeatureIndex", "mark_feature_used"],
        "experimental-feature and usage markers",
    ),
}
# A private attribute agentkeep supports, so the tests that use it are held to it.
SUPPORTED_PRIVATE = frozenset({"_response"})
PATCHERS = frozenset({"patch", "object", "setattr", "setitem", "delattr"})

# test_agents.py: tests of sessions, context providers and per-service-call persistence.
MEMORY_LAYER = frozenset(
    {
        "AgentSession",
        "create_session",
        "get_session",
        "session",
        "context_providers",
        "ContextProvider",
        "HistoryProvider",
        "InMemoryHistoryProvider",
        "SessionContext",
        "service_session_id",
        "require_per_service_call_history_persistence",
        "compaction_strategy",
        "serialize_session",
        "deserialize_session",
    }
)


@dataclass
class TestSource:
    """What a test's source says about it: why it is left out of the fair set, if it is."""

    excluded: list[str] = field(default_factory=list)
    memory_layer: bool = False


@dataclass
class Outcome:
    file: str
    test_id: str
    status: str  # passed, failed, error, skipped
    reason: str = ""
    source: TestSource = field(default_factory=TestSource)

    @property
    def fair(self) -> bool:
        return not self.source.excluded


# -- reading the framework ------------------------------------------------------------------------
def read_framework(root: Path, paths: Iterable[str]) -> tuple[dict[str, bytes], str]:
    """The files at ``paths`` of the checkout ``root`` and the commit they come from."""
    paths = list(paths)
    commit = "unknown"
    if (root / "python" / "packages").is_dir():
        with_git = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        if with_git.returncode == 0:
            commit = with_git.stdout.strip()
        return {p: (root / p).read_bytes() for p in paths if (root / p).is_file()}, commit
    git = ["git", f"--git-dir={root}"]
    commit = subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run(
        [*git, "archive", "--format=tar", "HEAD", *paths], capture_output=True, check=True
    )
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            extracted = tar.extractfile(member)
            if extracted is not None:
                files[member.name] = extracted.read()
    return files, commit


# -- reading the tests' source --------------------------------------------------------------------
def _names_used(nodes: Iterable[ast.AST]) -> Iterator[tuple[str, ast.AST]]:
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Name):
                yield node.id, node
            elif isinstance(node, ast.Attribute):
                yield node.attr, node
            elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
                yield node.arg, node


def _patch_targets(nodes: Iterable[ast.AST], framework_names: set[str]) -> Iterator[str]:
    """Framework internals a test patches."""
    for top in nodes:
        for node in ast.walk(top):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name not in PATCHERS:
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                if first.value.startswith("agent_framework"):
                    yield first.value
            elif isinstance(first, ast.Name) and first.id in framework_names:
                yield first.id


class ModuleSource:
    """One test file's source, read once: its defs, imports and fixtures."""

    def __init__(self, text: str) -> None:
        self.tree = ast.parse(text)
        self.framework_names: set[str] = set()
        self.private_imports: set[str] = set()
        self.defs: dict[str, ast.AST] = {}
        self.fixtures: dict[str, ast.AST] = {}
        self.defined_attrs: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agent_framework"):
                for alias in node.names:
                    local = alias.asname or alias.name
                    self.framework_names.add(local)
                    if alias.name.startswith("_"):
                        self.private_imports.add(local)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defined_attrs.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute):
                        self.defined_attrs.add(target.attr)
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[node.name] = node
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_fixture(node):
                    self.fixtures[node.name] = node

    def find(self, qualified: list[str]) -> ast.AST | None:
        """The test function ``Class::...::name`` (``qualified`` without the file)."""
        scope: list[ast.stmt] = self.tree.body
        found: ast.AST | None = None
        for part in qualified:
            found = next(
                (
                    n
                    for n in scope
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part
                ),
                None,
            )
            if found is None:
                return None
            scope = found.body  # type: ignore[attr-defined]
        return found

    def closure(self, node: ast.AST) -> list[ast.AST]:
        """``node`` with the module's helpers, classes and fixtures it uses, transitively."""
        seen: dict[int, ast.AST] = {id(node): node}
        todo = [node]
        while todo:
            current = todo.pop()
            for name, _ in _names_used([current]):
                for table in (self.defs, self.fixtures):
                    target = table.get(name)
                    if target is not None and id(target) not in seen:
                        seen[id(target)] = target
                        todo.append(target)
        return list(seen.values())

    def classify(self, node: ast.AST) -> TestSource:
        nodes = self.closure(node)
        out = TestSource()
        reasons: list[str] = []
        for name, used in _names_used(nodes):
            if name in OUT_OF_SCOPE:
                reasons.append(f"outside this project: {OUT_OF_SCOPE[name]} ({name})")
            if isinstance(used, ast.Name) and name in self.private_imports:
                reasons.append(f"private framework helper {name}")
            if (
                isinstance(used, ast.Attribute)
                and name.startswith("_")
                and not name.startswith("__")
                and name not in self.defined_attrs
                and name not in SUPPORTED_PRIVATE
            ):
                reasons.append(f"private framework attribute .{name}")
            if name in MEMORY_LAYER:
                out.memory_layer = True
        for target in _patch_targets(nodes, self.framework_names):
            reasons.append(f"patches framework internals ({target})")
        out.excluded = list(dict.fromkeys(reasons))
        return out


def _is_fixture(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = (
            target.attr
            if isinstance(target, ast.Attribute)
            else target.id
            if isinstance(target, ast.Name)
            else ""
        )
        if name == "fixture":
            return True
    return False


# -- running --------------------------------------------------------------------------------------
def build(folder: Path, files: dict[str, bytes], layout: dict[str, str], shim: Path) -> None:
    shutil.copytree(shim, folder / "shim", ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "pytest.ini").write_text(PYTEST_INI)
    for source, target in layout.items():
        if source in files:
            (folder / target).parent.mkdir(parents=True, exist_ok=True)
            (folder / target).write_bytes(files[source])


def run_pytest(python: str, folder: Path, targets: list[str], extra: list[str]) -> tuple[Path, str]:
    report = folder / "report.xml"
    # The shim goes first; the caller's PYTHONPATH follows it (made absolute: pytest runs in the
    # temporary folder), so that `PYTHONPATH=src` tests the agentkeep of this work tree rather
    # than the one the environment has installed.
    given = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = os.pathsep.join([str(folder / "shim"), *given])
    env = {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    command = [
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        "--junitxml",
        str(report),
        *extra,
        *targets,
    ]
    ran = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, check=False)
    return report, ran.stdout + ran.stderr


def outcomes(report: Path, folder: Path, sources: dict[str, ModuleSource]) -> list[Outcome]:
    results: list[Outcome] = []
    if not report.exists():
        return results
    for case in ET.parse(report).getroot().iter("testcase"):
        file = case.get("file") or ""
        name = case.get("name") or ""
        classname = case.get("classname") or ""
        module = file.removesuffix(".py").replace("/", ".")
        classes = classname.removeprefix(module).strip(".").split(".") if classname.startswith(module) else []
        qualified = [c for c in classes if c] + [name.split("[", 1)[0]]
        status, reason = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                status = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                reason = _one_line(element.get("message") or element.text or "")
                break
        source = sources.get(file)
        node = source.find(qualified) if source is not None else None
        classified = source.classify(node) if source is not None and node is not None else TestSource()
        if not file:  # a collection error names no file
            file = classname.replace(".", "/") + ".py"
        results.append(Outcome(file, "::".join([file, *qualified[:-1], name]), status, reason, classified))
    return results


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= 160 else line[:157] + "..."


# -- reporting ------------------------------------------------------------------------------------
def summarize(results: list[Outcome], *, show_excluded: bool, agents: bool) -> dict[str, object]:
    by_file: dict[str, Counter[str]] = {}
    fair: dict[str, Counter[str]] = {}
    for result in results:
        by_file.setdefault(result.file, Counter())[result.status] += 1
        if result.fair and not (agents and not result.source.memory_layer):
            fair.setdefault(result.file, Counter())[result.status] += 1
    header = " ".join(f"{h:>5}" for h in ("tests", "pass", "fail", "error", "skip"))
    print(f"{'file':44} {header} | {'fair':>5} {'pass':>5} {'%':>5}")
    totals, fair_totals = Counter[str](), Counter[str]()
    for file in sorted(by_file):
        counts, fair_counts = by_file[file], fair.get(file, Counter())
        totals.update(counts)
        fair_totals.update(fair_counts)
        _row(file, counts, fair_counts)
    _row("all", totals, fair_totals)
    if agents:
        print("(test_agents.py's fair columns count its session / context-provider / persistence tests only)")
    failing = [r for r in results if r.fair and r.status in {"failed", "error"}]
    if agents:
        failing = [r for r in failing if r.source.memory_layer]
    if failing:
        print("\nfailing tests of the fair set:")
        for result in failing:
            print(f"  {result.test_id}  [{result.status}] {result.reason}")
    excluded = Counter(r.source.excluded[0].split(" (")[0] for r in results if not r.fair)
    if excluded:
        print("\nleft out of the fair set:")
        for reason, count in excluded.most_common():
            print(f"  {count:4}  {reason}")
    if show_excluded:
        for result in results:
            if not result.fair:
                print(f"  {result.test_id}  [{result.status}] {'; '.join(result.source.excluded)}")
    total_fair = sum(fair_totals.values())
    return {
        "totals": dict(totals),
        "fair": dict(fair_totals),
        "fair_pass_rate": fair_totals["passed"] / total_fair if total_fair else None,
        "tests": [
            {"id": r.test_id, "status": r.status, "reason": r.reason, "excluded": r.source.excluded}
            for r in results
        ],
    }


def _row(file: str, counts: Counter[str], fair: Counter[str]) -> None:
    tests, fair_tests = sum(counts.values()), sum(fair.values())
    percent = f"{100 * fair['passed'] / fair_tests:4.0f}%" if fair_tests else "    -"
    print(
        f"{file:44} {tests:5} "
        + " ".join(f"{counts[k]:5}" for k in ("passed", "failed", "error", "skipped"))
        + f" | {fair_tests:5} {fair['passed']:5} {percent}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "framework", type=Path, help="a checkout of microsoft/agent-framework (work tree or git dir)"
    )
    parser.add_argument("--python", default=sys.executable, help="the interpreter to run pytest with")
    parser.add_argument(
        "--keep", type=Path, help="build the folder here and keep it (default: a temp folder)"
    )
    parser.add_argument("--json", type=Path, help="write every outcome here")
    parser.add_argument("--show-excluded", action="store_true", help="list the tests left out and why")
    parser.add_argument("--agents", action="store_true", help="run test_agents.py instead of the three files")
    parser.add_argument(
        "--shim", type=Path, default=SHIM, help="the shim packages (default: scripts/maf_shim)"
    )
    parser.add_argument("-k", dest="keyword", help="only tests matching this pytest -k expression")
    args = parser.parse_args(argv)

    has_real = subprocess.run(
        [
            args.python,
            "-c",
            "import importlib.util as u, sys; sys.exit(u.find_spec('agent_framework') is None)",
        ],
        check=False,
    )
    if has_real.returncode == 0:
        print(
            f"error: {args.python} has the real agent_framework installed; use a venv without it",
            file=sys.stderr,
        )
        return 2

    layout = {**SUPPORT, **(AGENTS if args.agents else SUITE)}
    files, commit = read_framework(args.framework, layout)
    missing = [p for p in layout if p not in files]
    if missing:
        print(f"error: not in {args.framework}: {', '.join(missing)}", file=sys.stderr)
        return 2
    folder = args.keep or Path(tempfile.mkdtemp(prefix="maf-suite-"))
    if args.keep and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        build(folder, files, layout, args.shim)
        # The conftest's fixtures are the framework's test rig (its mock clients patch its own
        # defaults): a test is judged by its own source and its module's helpers, not by them.
        sources = {
            target: ModuleSource(files[source].decode())
            for source, target in layout.items()
            if Path(target).name.startswith("test_")
        }
        targets = [t for s, t in layout.items() if Path(t).name.startswith("test_")]
        report, output = run_pytest(
            args.python, folder, targets, ["-k", args.keyword] if args.keyword else []
        )
        results = outcomes(report, folder, sources)
        if not results:
            print(output[-3000:], file=sys.stderr)
        print(f"agent-framework {commit} against agentkeep ({args.python})\n")
        summary = summarize(results, show_excluded=args.show_excluded, agents=args.agents)
        if args.json:
            args.json.write_text(json.dumps({"commit": commit, **summary}, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
