"""The package type-checks: ``mypy lineage_defs`` with the settings in pyproject.toml reports nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_passes() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "lineage_defs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        print(output)
    assert proc.returncode == 0, f"mypy exited with {proc.returncode}:\n{output}"
