"""Running a use of a test type (``data_test <type> <args>``) on the slice just written.

A SQL test type's last statement returns the failing rows; it reads the tested
relation as ``this`` (a view the runner makes over the slice; ``_slice`` names it too) and its
arguments as ``$<param>``: they are bound parameters converted to the declared
types, never text in the SQL. A Python test type's ``check(con, table, **args)``
returns the failing count.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lineage_defs.errors import Location, RunError
from lineage_defs.parse.model import DataTest
from lineage_defs.parse.test_type import convert
from lineage_defs.plan.test_types import used_parameters

SLICE_VIEWS = ("this", "_slice")  # the slice under test as custom tests and test types read it (SPEC: `this`; `_slice` too)
SLICE_VIEW = SLICE_VIEWS[0]


def describe(t: DataTest) -> str:
    """``rows_between(min=1, max=10)``: the use with its arguments bound to their parameters."""
    return f"{t.type_name}({', '.join(f'{b.name}={b.text!r}' for b in t.bound)})"


def arguments(t: DataTest) -> dict[str, Any]:
    """The use's arguments as their declared types (the plan checked that each converts)."""
    return {b.name: convert(b.type, b.text) for b in t.bound}


def script_path(t: DataTest, root: str) -> Path:
    """The test type's script: relative to the pipelines folder, or absolute (a library folder's)."""
    return Path(root).resolve() / (t.script or "")


def sql_test(t: DataTest, root: str, compile_script: Callable[[str], tuple[str, dict[str, Any]]]) -> tuple[str, dict[str, Any], str]:
    """(SQL of the failing rows, its bound parameters, description) of a SQL test type's use.

    ``compile_script(path)`` gives the script's compiled last statement and its partition parameters.
    """
    sql, params = compile_script(str(script_path(t, root)))
    values = arguments(t)
    used = used_parameters(sql)
    params = {**params, **{k: v for k, v in values.items() if k in used}}
    return sql, params, f"{describe(t)} returns no rows"


def python_test(conn: Any, t: DataTest, root: str) -> tuple[int, str]:
    """(failing count, description) of a Python test type's use: its ``check(con, table, **args)``."""
    path = script_path(t, root)
    at = Location(t.script or "")
    spec = importlib.util.spec_from_file_location(f"lineage_test_type_{t.type_name}", path)
    if spec is None or spec.loader is None:
        raise RunError(f"test type script '{path}' cannot be loaded", at, "it must be a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except FileNotFoundError as e:
        raise RunError(f"test type script '{path}' is gone", at, "restore it, or reload the code location") from e
    check = getattr(module, "check", None)
    if not callable(check):
        raise RunError(f"test type '{t.type_name}' defines no check()", at, "define def check(con, table, **args) -> int returning the failing count")
    n = check(conn, SLICE_VIEW, **arguments(t))
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise RunError(f"check() of test type '{t.type_name}' returned {n!r}", at, "return the number of failing rows (0: the test passes)")
    return n, f"{describe(t)} finds no failing rows"
