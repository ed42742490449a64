"""The type check's settings: pyproject.toml holds the plan and the dbt room to every flag of
``mypy --strict``, so the one ``mypy lineage_defs`` run of `make typecheck` (a CI step of its own,
not part of the suite: it takes a minute or more) is also their strict check.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy.main import process_options
from mypy.options import Options

ROOT = Path(__file__).resolve().parents[1]
STRICT_ROOMS = ("lineage_defs.plan.graph", "lineage_defs.plan.names", "lineage_defs.dbt.project", "lineage_defs.dbt.assets")


def _options(*args: str) -> Options:
    _, options = process_options([*args, "-c", "pass"])
    return options


def test_plan_and_dbt_are_held_to_every_strict_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    # what --strict changes, asked of mypy itself: a flag a new mypy adds to --strict fails here
    plain, strict = _options("--config-file", ""), _options("--config-file", "", "--strict")
    flags = [n for n in dir(strict) if not n.startswith("_") and not callable(getattr(strict, n))]
    wanted = {n: getattr(strict, n) for n in flags if getattr(plain, n) != getattr(strict, n)}
    assert "disallow_untyped_defs" in wanted and "warn_redundant_casts" in wanted, wanted
    monkeypatch.chdir(ROOT)  # the project's pyproject.toml is found from the working directory
    ours = _options()
    for module in STRICT_ROOMS:
        options = ours.clone_for_module(module)
        missing = {n: getattr(options, n) for n, v in wanted.items() if getattr(options, n) != v}
        assert missing == {}, f"{module} is not held to --strict: {missing} (set them in pyproject.toml [tool.mypy])"
    # and the rest of the package is not silently strict: the overrides are scoped to the two rooms
    assert not ours.clone_for_module("lineage_defs.run.script").disallow_untyped_defs
