"""The package's shape: rooms in ranks, no import circles, Dagster's public API only (but in one isolated module).

Imports are read from the source (``ast``), at module level and inside
functions alike — a function-level import that closes a circle is still a
circle, only hidden — but not under ``if TYPE_CHECKING:`` (never executed).
Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` too, so those
count as imports — except the packages the importing module itself lies in,
which have begun importing before it.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterator
from pathlib import Path

import dagster
from packaging.specifiers import SpecifierSet

import lineage_defs
from lineage_defs import dagster_storage

PACKAGE = Path(lineage_defs.__file__).parent
# The one module that may import Dagster's private modules: it subclasses Dagster's SQLite event log.
PRIVATE_OK = {"lineage_defs.dagster_storage"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _executed(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _imports(name: str, path: Path) -> set[str]:
    """The package modules ``name`` imports when it runs (parent packages included)."""
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _executed(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            # ``from pkg import submodule`` imports the submodule; a name needs the package itself
            targets = subs + ([base] if len(subs) < len(node.names) else [])
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module") and node.args:
            if isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                targets = [node.args[0].value]
        for t in targets:
            if t == "lineage_defs" or t.startswith("lineage_defs."):
                parts = t.split(".")
                for i in range(1, len(parts) + 1):
                    m = ".".join(parts[:i])
                    # a package this module lies in is already imported (it runs first): only an
                    # explicit import of it (``from lineage_defs.parse import X``) reads from it
                    implicit = i < len(parts) and name.startswith(m + ".")
                    if m in MODULES and m != name and not implicit:
                        out.add(m)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# Each room (a sub-package or top-level module of lineage_defs) imports only rooms of a lower rank:
# data flows up from errors and URIs through the plan to the run and Dagster layers, and the code
# location and the CLI sit on top. A new room gets a rank here (the test below fails until it has one).
RANKS: dict[str, int] = {
    "errors": 0, "events": 0, "dagster_storage": 0,   # leaves: errors, the event store, Dagster's SQLite storage
    "uris": 1,                                       # the URI grammar
    "parse": 2, "settings": 2,                       # a header → data; the settings object
    "plan": 3,                                       # a folder's files → steps (data only, never dbt/)
    "run": 4, "openlineage": 4,                      # executing a step; lineage events as data
    "assets": 5,                                     # script steps → Dagster assets (and what dbt's build shares)
    "dbt": 6,                                        # dbt projects: steps, assets, runs
    "project": 7, "duckdb_io": 7,                    # load_project (plan + dbt); dagster-duckdb interop
    "triggers": 8, "runtime": 8,                     # event sources; the API scripts import
    "sensors": 9,                                    # trigger sensors, cascade conditions
    "location": 10, "demo": 10, "changed": 10, "deploy": 10, "backfill": 10,  # the code location; commands
    "explorer": 10,                                  # lineage-defs docs: the static lineage explorer (plan + instance)
    "definitions": 11, "component": 11,              # what Dagster loads: the code location, the dg component
    "diff": 11,                                      # lineage-defs diff / check --against-instance (reads changed)
    "cli": 12, "__init__": 12,                       # the command line; the package's lazy public names
}  # fmt: skip
# Finer than a room (fnmatch on the name inside lineage_defs): each trigger source's description row
# and the table of them are plain data the parser, the settings and the names read.
MODULE_RANKS: dict[str, int] = {"triggers.source": 1, "triggers.*.source": 1, "triggers.sources": 1}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _rank(module: str, ranks: dict[str, int]) -> int:
    inner = module.partition(".")[2]
    for pattern, rank in MODULE_RANKS.items():
        if fnmatch.fnmatchcase(inner, pattern):
            return rank
    path = MODULES.get(module)
    if path is not None and path.name == "__init__.py" and inner and not _imports(module, path):
        return 0  # a sub-package's __init__ that imports nothing of ours is no layer
    return ranks[_room(module)]


def _rank_violations(graph: dict[str, set[str]], ranks: dict[str, int]) -> list[str]:
    """``a -> b`` for each import of the same or a higher rank (inside one room, only between modules of different ranks)."""
    out = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            ra, rb = _rank(a, ranks), _rank(b, ranks)
            if (_room(a) != _room(b) or ra != rb) and rb >= ra:
                out.append(f"{a} -> {b} ({_room(a)} rank {ra} imports {_room(b)} rank {rb})")
    return out


def test_every_room_has_a_rank_and_imports_only_lower_ranks() -> None:
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    assert {_room(m) for m in MODULES} == set(RANKS), "give each room of lineage_defs a rank in RANKS (and drop gone ones)"
    assert _rank_violations(graph, RANKS) == []


def test_the_rank_check_finds_an_upward_import() -> None:
    """The check itself can fail: plan importing dbt (what plan.project once did) is reported; a same-room import is not."""
    graph = {"lineage_defs.plan.project": {"lineage_defs.dbt.load", "lineage_defs.plan.spec"}}
    assert _rank_violations(graph, RANKS) == ["lineage_defs.plan.project -> lineage_defs.dbt.load (plan rank 3 imports dbt rank 6)"]
    assert _rank_violations({"lineage_defs.triggers.push": {"lineage_defs.sensors"}}, RANKS) != []  # equal-or-higher ranks


def test_the_package_has_no_import_circle() -> None:
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    assert len(graph) > 50 and graph["lineage_defs.location"], "the import graph was not read"
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_one() -> None:
    """The check itself can fail: a circle hidden in a function-level import is found."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    # an import inside a function counts; one under `if TYPE_CHECKING:` does not
    assert "lineage_defs.assets.execute" in _imports("lineage_defs.assets.factory", MODULES["lineage_defs.assets.factory"])
    assert "lineage_defs.dbt.project" not in _imports("lineage_defs.plan.spec", MODULES["lineage_defs.plan.spec"])


def test_dagster_private_modules_only_in_the_isolated_module() -> None:
    offenders = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(m.startswith(("dagster._", "dagster_dbt._", "dagster_pipes._")) for m in mods) and name not in PRIVATE_OK:
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")  # type: ignore[attr-defined]
    assert offenders == []


def test_the_isolated_module_runs_on_the_dagster_it_was_written_for() -> None:
    """dagster_storage subclasses Dagster's private SQLite event log: a Dagster outside the
    versions it was written (and tested) for must be a deliberate change, not an upgrade by accident."""
    assert dagster.__version__ in SpecifierSet(dagster_storage.WRITTEN_FOR), (dagster.__version__, dagster_storage.WRITTEN_FOR)
