"""Every test carries the markers of what it starts, so `make check` (``-m "not daemon and not browser
and not dbt and not scale"``) stays fast: a new test that starts a daemon, a browser, dbt or Celery
without saying so fails here.

Read from the source (``ast``), not by running anything: a test needs what its body, its fixtures and
every helper of ``tests/*.py`` they reach (transitively: functions, classes, module constants) start —
a Dagster process (``dagster``, ``dagster-daemon``, ``dagster-webserver``, ``dg`` as a command,
``webserver.DagsterDev``, the suite's demo), Chromium (``browser.Browser``), a dbt project of its own
(a ``dbt_project.yml`` written) or a dbt build (a run of a selection naming dbt models) or a Celery
worker (``celery`` as a command).
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
MARKERS = ("daemon", "browser", "dbt", "scale")
# a string in command position (a list's first item, ``bin / "x"``, ``.with_name("x")``, ``shutil.which("x")``)
COMMANDS = {
    "dagster": "daemon", "dagster-daemon": "daemon", "dagster-webserver": "daemon", "dg": "daemon",
    "chromium": "browser", "chromedriver": "browser",
    "dbt": "dbt",
    "celery": "scale",
}
# helpers that start something whose command the caller passes in, or that a name says best
SEEDS = {("webserver", "DagsterDev"): "daemon", ("browser", "Browser"): "browser"}
DBT_PROJECT = re.compile(r"(^|/)dbt_project\.yml$")
DBT_KEYS = ("dbt/", "dbt://")  # an asset key or URI of a dbt model
RUNS = {"execute_in_process", "materialize", "materialize_to_memory"}


@dataclass
class Node:
    """A top-level definition of a module under tests/ (function, class, constant) and what it reaches."""

    module: str
    name: str
    tree: ast.AST
    direct: set[str] = field(default_factory=set)
    refs: set[tuple[str, str]] = field(default_factory=set)


def _is_fixture(fn: ast.AST) -> bool:
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr == "fixture":
            return True
    return False


def _command_strings(tree: ast.AST) -> Iterator[str]:
    """Strings used as the command of a process: ``["dagster", …]``, ``bin / "dagster"``, ``.with_name("celery")``."""
    for n in ast.walk(tree):
        if isinstance(n, (ast.List, ast.Tuple)) and n.elts:
            items = [e.value if isinstance(e, ast.Constant) else None for e in n.elts]
            yield str(items[0])
            yield from (str(c) for m, c in zip(items, items[1:]) if m == "-m")  # python -m dagster
        elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and isinstance(n.right, ast.Constant):
            yield str(n.right.value)
        elif isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant):
            f = n.func
            if (isinstance(f, ast.Attribute) and f.attr in ("with_name", "which")) or (isinstance(f, ast.Name) and f.id == "which"):
                yield str(n.args[0].value)


def _direct_needs(tree: ast.AST) -> set[str]:
    needs = {COMMANDS[c] for c in _command_strings(tree) if c in COMMANDS}
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    if any(DBT_PROJECT.search(v.strip()) for v in strings):
        needs.add("dbt")  # a dbt project of the test's own: loading it runs dbt
    runs = any(isinstance(n, ast.Call) and isinstance(n.func, (ast.Attribute, ast.Name)) and (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) in RUNS
               for n in ast.walk(tree))
    if runs and any(v.startswith(DBT_KEYS) for v in strings):
        needs.add("dbt")  # runs Dagster on a selection naming dbt models (the example's own): a dbt build
    return needs


class Suite:
    """Every module of tests/, its top-level definitions, and who reaches whom."""

    def __init__(self, root: Path, extra: dict[str, str] | None = None) -> None:
        sources = {p.stem: p.read_text() for p in sorted(root.glob("*.py"))}
        sources.update(extra or {})
        self.trees = {m: ast.parse(text, filename=f"{m}.py") for m, text in sources.items()}
        self.nodes: dict[tuple[str, str], Node] = {}
        self.fixtures: dict[str, dict[str, tuple[str, str]]] = {}  # module -> fixture name -> node
        for module, tree in self.trees.items():
            self.fixtures[module] = {}
            for stmt in tree.body:
                for name in _defined_names(stmt):
                    node = self.nodes[(module, name)] = Node(module, name, stmt, _direct_needs(stmt))
                    if (module, name) in SEEDS:
                        node.direct.add(SEEDS[(module, name)])
                    if _is_fixture(stmt):
                        self.fixtures[module][name] = (module, name)
        for module, tree in self.trees.items():
            scope = self._scope(module, tree)
            for (m, _), node in self.nodes.items():
                if m == module:
                    node.refs = self._refs(module, node.tree, scope)
        self._needs: dict[tuple[str, str], set[str]] | None = None

    def _scope(self, module: str, tree: ast.Module) -> dict[str, tuple[str, str] | str]:
        """Local name → a definition (module, name), or → a module of tests/ (``import services``)."""
        scope: dict[str, tuple[str, str] | str] = {}
        for stmt in ast.walk(tree):
            if isinstance(stmt, ast.ImportFrom) and stmt.module in self.trees and not stmt.level:
                for alias in stmt.names:
                    scope[alias.asname or alias.name] = (stmt.module, alias.name)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.name in self.trees:
                        scope[alias.asname or alias.name] = alias.name
        for (m, name) in self.nodes:
            if m == module:
                scope[name] = (m, name)
        return scope

    def _fixture(self, module: str, name: str) -> tuple[str, str] | None:
        return self.fixtures[module].get(name) or self.fixtures.get("conftest", {}).get(name)

    def _refs(self, module: str, tree: ast.AST, scope: dict[str, tuple[str, str] | str]) -> set[tuple[str, str]]:
        refs: set[tuple[str, str]] = set()
        if isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):  # a test's or fixture's fixtures, by parameter name
            for arg in [*tree.args.posonlyargs, *tree.args.args, *tree.args.kwonlyargs]:
                fixture = self._fixture(module, arg.arg)
                if fixture:
                    refs.add(fixture)
        for n in ast.walk(tree):
            if isinstance(n, ast.Name):
                target = scope.get(n.id)
                if isinstance(target, tuple):
                    refs.add(target)
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and isinstance(scope.get(n.value.id), str):
                refs.add((str(scope[n.value.id]), n.attr))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("getfixturevalue", "usefixtures"):
                for a in n.args:
                    fixture = self._fixture(module, a.value) if isinstance(a, ast.Constant) and isinstance(a.value, str) else None
                    if fixture:
                        refs.add(fixture)
        return refs

    def needs(self, key: tuple[str, str]) -> set[str]:
        if self._needs is None:  # a fixpoint over every definition: cycles (a helper calling itself) end it too
            needs = {k: set(n.direct) for k, n in self.nodes.items()}
            changed = True
            while changed:
                changed = False
                for k, n in self.nodes.items():
                    more = set().union(*(needs.get(r, set()) for r in n.refs)) - needs[k]
                    if more:
                        needs[k] |= more
                        changed = True
            self._needs = needs
        return self._needs.get(key, set())

    def tests(self) -> Iterator[tuple[str, str, ast.FunctionDef | ast.AsyncFunctionDef, set[str]]]:
        """(module, test name, its definition, its markers) for every test function of every test module."""
        for module, tree in self.trees.items():
            if not module.startswith("test_"):
                continue
            module_marks = _module_marks(tree)
            for stmt in tree.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name.startswith("test"):
                    yield module, stmt.name, stmt, module_marks | _marks(stmt.decorator_list)
                elif isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test"):
                    class_marks = module_marks | _marks(stmt.decorator_list)
                    for fn in stmt.body:
                        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name.startswith("test"):
                            yield module, f"{stmt.name}.{fn.name}", fn, class_marks | _marks(fn.decorator_list)

    def unmarked(self) -> list[str]:
        """``module::test needs X (via …)`` for every test lacking a marker of what it starts."""
        problems = []
        for module, name, fn, marks in self.tests():
            key = (module, name.split(".")[0])
            missing = self.needs(key) - marks
            if missing:
                problems.append(f"{module}.py::{name} needs {', '.join(sorted(missing))} (via {self.why(key, missing)})")
        return problems

    def why(self, key: tuple[str, str], missing: set[str]) -> str:
        """The first path of definitions from a test to one that starts what is missing."""
        stack: list[list[tuple[str, str]]] = [[key]]
        seen = {key}
        while stack:
            path = stack.pop(0)
            node = self.nodes.get(path[-1])
            if node is None:
                continue
            if node.direct & missing:
                return " -> ".join(f"{m}.{n}" for m, n in path)
            for ref in sorted(node.refs - seen):
                seen.add(ref)
                stack.append([*path, ref])
        return "?"


def _defined_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def _mark_name(expr: ast.expr) -> str | None:
    """``pytest.mark.daemon`` (or ``pytest.mark.daemon(...)``) → "daemon"."""
    if isinstance(expr, ast.Call):
        expr = expr.func
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Attribute) and expr.value.attr == "mark":
        return expr.attr
    return None


def _marks(exprs: list[ast.expr]) -> set[str]:
    return {m for m in map(_mark_name, exprs) if m}


def _module_marks(tree: ast.Module) -> set[str]:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets):
            value = stmt.value
            return _marks(list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else [value])
    return set()


def test_every_test_carries_the_markers_of_what_it_starts() -> None:
    problems = Suite(TESTS).unmarked()
    assert not problems, "mark these (pytestmark = [pytest.mark.…] or a decorator), or `make check` gets slow:\n" + "\n".join(problems)


def test_the_check_finds_what_a_helper_starts_two_calls_away() -> None:
    """The check itself can fail: an unmarked test reaching `dagster-daemon`, Chromium, a dbt project and
    Celery only through helpers (a fixture, a function of another module, a module constant)."""
    extra = {
        "helper_of_a_new_test": (
            "from services import Daemon\n"
            "def start(tmp):\n    return Daemon(tmp, tmp, tmp)\n"
            "def celery():\n    import shutil\n    return shutil.which('celery')\n"
        ),
        "test_a_new_one": (
            "import pytest\n"
            "import helper_of_a_new_test as h\n"
            "from browser import Browser\n"
            "@pytest.fixture\ndef running(tmp_path):\n    return h.start(tmp_path)\n"
            "def test_uses_a_daemon_through_a_fixture(running):\n    pass\n"
            "def test_uses_celery_through_a_helper():\n    h.celery()\n"
            "def _ui(url):\n    return Browser(url)\n"
            "@pytest.mark.daemon\ndef test_marked_for_one_but_not_the_other():\n    _ui('x')\n"
            "def test_writes_a_dbt_project(tmp_path):\n    (tmp_path / 'p' / 'dbt_project.yml').write_text('name: p')\n"
            "@pytest.mark.daemon\ndef test_marked(running):\n    pass\n"
            "def test_builds_the_example_s_dbt_models(defs):\n    defs.get_implicit_global_asset_job_def().execute_in_process(asset_selection=[key('dbt/warehouse/main/stg_orders')])\n"
        ),
    }
    problems = "\n".join(Suite(TESTS, extra).unmarked())
    assert "test_a_new_one.py::test_uses_a_daemon_through_a_fixture needs daemon (via test_a_new_one.test_uses_a_daemon_through_a_fixture -> test_a_new_one.running -> helper_of_a_new_test.start -> services.Daemon)" in problems, problems
    assert "test_a_new_one.py::test_uses_celery_through_a_helper needs scale" in problems, problems
    assert "test_a_new_one.py::test_marked_for_one_but_not_the_other needs browser (" in problems, problems
    assert "test_a_new_one.py::test_writes_a_dbt_project needs dbt" in problems, problems
    assert "test_a_new_one.py::test_builds_the_example_s_dbt_models needs dbt" in problems, problems
    assert "test_marked " not in problems, problems


def test_the_markers_are_registered_and_strict() -> None:
    """A misspelt marker (``pytest.mark.deamon``) would mark nothing: pytest refuses unknown ones."""
    config = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {m.split(":", 1)[0].strip() for m in config["markers"]}
    assert registered == set(MARKERS), registered
    assert "--strict-markers" in config["addopts"]
