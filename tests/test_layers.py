"""The layer order of docs/architecture.md ("Who may import whom"), checked on the source.

Every module of ``src/agentkeep`` belongs to one layer; a module imports only its own layer and the
layers below it (imports under ``if TYPE_CHECKING:`` excepted: type hints only). Private modules
(``_``-prefixed) are imported only from inside their own package. The layers are read from the
architecture doc itself, so the doc and the code cannot drift apart unnoticed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "agentkeep"
DOC = ROOT / "docs" / "architecture.md"

LAZY: frozenset[tuple[str, str]] = frozenset(
    {
        # (importer, imported): imports made inside a function, named as exceptions by the doc
        ("agentkeep.compaction.harness", "agentkeep.agent"),
        ("agentkeep.clients.base", "agentkeep.agent"),
    }
)


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def documented_layers() -> list[list[str]]:
    """The numbered list under "Who may import whom": each layer's module and package names (an
    item may go on over indented lines; parenthesized remarks are not names)."""
    text = DOC.read_text(encoding="utf-8").split("## Who may import whom", 1)[1]
    items: list[str] = []
    for line in text.splitlines():
        found = re.match(r"^(\d+)\. (.*)$", line)
        if found is not None:
            items.append(found.group(2))
        elif items and line.startswith("   ") and line.strip():
            items[-1] += " " + line.strip()
        elif items and line.strip():
            break  # the list ended
    return [
        [f"agentkeep.{name}" for name in re.findall(r"`([\w.]+)`", re.sub(r"\([^)]*\)", "", item))]
        for item in items
    ]


LAYERS = documented_layers()


def layer_of(module: str) -> int | None:
    """The layer of ``module``: that of the most specific name in the doc that holds it."""
    best: tuple[int, int] | None = None
    for number, names in enumerate(LAYERS, start=1):
        for name in names:
            holds = module == name or module.startswith(name + ".")
            if holds and (best is None or len(name) > best[1]):
                best = (number, len(name))
    return None if best is None else best[0]


def imports_of(path: Path) -> list[tuple[str, bool]]:
    """The agentkeep modules ``path`` imports (resolved), each with whether it is lazy (inside a
    function); imports under ``if TYPE_CHECKING:`` are left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other, lazy)
                continue
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend(
                    (alias.name, inner) for alias in child.names if alias.name.startswith("agentkeep")
                )
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join([*base, child.module] if child.module else base)
                else:
                    target = child.module or ""
                if target.startswith("agentkeep"):
                    for alias in child.names:  # `from pkg import module` names a module
                        candidate = f"{target}.{alias.name}"
                        is_module = (SRC.parent / Path(*candidate.split("."))).with_suffix(
                            ".py"
                        ).exists() or (SRC.parent / Path(*candidate.split(".")) / "__init__.py").exists()
                        found.append((candidate if is_module else target, inner))
            visit(child, inner)

    visit(tree, False)
    return found


def modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if p.name != "__main__.py")


def test_the_doc_names_seven_layers_and_every_module_has_one() -> None:
    assert len(LAYERS) == 7
    missing = [
        module_name(p) for p in modules() if p != SRC / "__init__.py" and layer_of(module_name(p)) is None
    ]
    assert missing == [], "modules docs/architecture.md does not place in a layer"


def test_no_module_imports_a_layer_above_its_own() -> None:
    violations: list[str] = []
    for path in modules():
        importer = module_name(path)
        if importer == "agentkeep":
            continue  # the package re-exports every layer
        own = layer_of(importer)
        assert own is not None
        for imported, lazy in imports_of(path):
            theirs = layer_of(imported)
            if path.name == "__init__.py" and imported.startswith(importer + "."):
                continue  # a package re-exports its own modules
            if theirs is not None and theirs > own and not (lazy and (importer, imported) in LAZY):
                violations.append(f"{importer} (layer {own}) imports {imported} (layer {theirs})")
    assert violations == []


def test_private_modules_are_imported_only_from_their_own_package() -> None:
    violations: list[str] = []
    for path in modules():
        importer = module_name(path)
        for imported, _ in imports_of(path):
            parts = imported.split(".")
            for depth, part in enumerate(parts):
                if part.startswith("_") and not part.startswith("__"):
                    owner = ".".join(parts[:depth])  # the package the private module lives in
                    if not (importer == owner or importer.startswith(owner + ".")):
                        violations.append(f"{importer} imports {imported}")
                    break
    assert violations == []


def mapped_paths() -> list[str]:
    """The paths the tree map of docs/architecture.md ("The map") names, relative to
    ``src/agentkeep``: an entry is a line that starts left of the description column (28), its
    depth given by its indent, a folder ending in ``/``; other lines go on a description."""
    text = DOC.read_text(encoding="utf-8").split("## The map", 1)[1]
    block = text.split("```", 2)[1]
    lines = [line for line in block.splitlines()[2:] if line.strip()]  # after "src/agentkeep/"
    folders: list[str] = []
    paths: list[str] = []
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        if indent >= 28:
            continue
        assert indent % 2 == 0, f"a map entry at an odd indent: {line!r}"
        assert indent >= 2, f"a map entry outside src/agentkeep/: {line!r}"
        depth = indent // 2 - 1
        assert depth <= len(folders), f"a map entry deeper than its folder: {line!r}"
        del folders[depth:]
        name = line.split()[0]
        paths.append("/".join([*folders, name.rstrip("/")]))
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
    return paths


def test_the_tree_map_names_every_file_of_the_package_and_nothing_else() -> None:
    mapped = mapped_paths()
    assert len(mapped) == len(set(mapped)), "the map names a path twice"
    missing_on_disk = [p for p in mapped if not (SRC / p).exists()]
    assert missing_on_disk == [], "the map names paths src/agentkeep does not have"
    on_disk = {
        p.relative_to(SRC).as_posix()
        for p in SRC.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and (p.suffix == ".py" or p.name == "py.typed")
    }
    folders = {
        p.relative_to(SRC).as_posix() for p in SRC.rglob("*") if p.is_dir() and p.name != "__pycache__"
    }
    unmapped = sorted((on_disk | folders) - set(mapped))
    assert unmapped == [], "files and folders of src/agentkeep the map leaves out"


SEAMS: frozenset[str] = frozenset({"agentkeep.clients.base", "agentkeep.providers.context"})
"""The core modules that call into ``agentkeep._compat`` (docs/architecture.md, "Compatibility")."""


def test_the_compatibility_layer_is_reached_only_at_its_seams() -> None:
    callers = {
        importer
        for path in modules()
        if not (importer := module_name(path)).startswith("agentkeep._compat")
        for imported, _ in imports_of(path)
        if imported == "agentkeep._compat" or imported.startswith("agentkeep._compat.")
    }
    assert callers == SEAMS, "a module outside the seams docs/architecture.md names uses agentkeep._compat"
