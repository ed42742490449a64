"""The package type-checks: ``mypy lineage_defs`` with the settings in pyproject.toml reports
nothing, and the plan and the dbt room pass ``mypy --strict``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mypy(*args: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)
    return proc.returncode, proc.stdout + proc.stderr


def test_mypy_passes() -> None:
    code, output = _mypy("lineage_defs")
    assert code == 0, f"mypy exited with {code}:\n{output}"


def test_plan_and_dbt_pass_mypy_strict() -> None:
    # --strict follows imports into the other layers; only errors in these two rooms count here
    _, output = _mypy("--strict", "lineage_defs/plan", "lineage_defs/dbt")
    ours = [line for line in output.splitlines() if line.startswith(("lineage_defs/plan/", "lineage_defs/dbt/"))]
    assert "source files" in output, output
    assert ours == [], "\n".join(ours)
