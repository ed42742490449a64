"""`lineage-defs check` on the broken-scripts corpus (tests/fixtures/invalid).

``expected.txt`` lists the first line of every rendered problem, as the CLI
prints it (paths relative to the pipelines folder). One subprocess runs the
whole corpus; the tests read its output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "fixtures" / "invalid"
PIPELINES = CORPUS / "pipelines"
HEADLINE = re.compile(r"^(?P<path>[\w./-]+):(?P<line>\d+):(?P<col>\d+): ")


@dataclass(frozen=True)
class CheckRun:
    returncode: int
    stdout: str
    stderr_lines: list[str]


def _command() -> list[str]:
    script = Path(sys.executable).with_name("lineage-defs")
    if script.exists():
        return [str(script)]
    found = shutil.which("lineage-defs")
    return [found] if found else [sys.executable, "-m", "lineage_defs.cli"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> CheckRun:
    env = {**os.environ, "LINEAGE_STATE_DIR": str(tmp_path_factory.mktemp("state"))}
    env.pop("LINEAGE_PIPELINES_DIR", None)
    proc = subprocess.run(
        [*_command(), "check", str(PIPELINES), "--no-cache"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return CheckRun(proc.returncode, proc.stdout, proc.stderr.splitlines())


def _expected() -> list[str]:
    lines = (CORPUS / "expected.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def _headlines(run: CheckRun) -> list[str]:
    return [line for line in run.stderr_lines if HEADLINE.match(line)]


def test_corpus_size() -> None:
    expected = _expected()
    assert len(expected) >= 30
    assert len(set(expected)) == len(expected), "duplicate lines in expected.txt"


def test_exit_code_is_one(run: CheckRun) -> None:
    assert run.returncode == 1, run.stdout + "\n".join(run.stderr_lines)


def test_every_expected_problem_is_reported(run: CheckRun) -> None:
    reported = set(run.stderr_lines)
    missing = [line for line in _expected() if line not in reported]
    assert not missing, "not reported:\n" + "\n".join(missing) + "\n\nreported:\n" + "\n".join(_headlines(run))


def test_nothing_unexpected_is_reported(run: CheckRun) -> None:
    expected = set(_expected())
    extra = [line for line in _headlines(run) if line not in expected]
    assert not extra, "not in expected.txt:\n" + "\n".join(extra)


def test_summary_counts(run: CheckRun) -> None:
    expected = _expected()
    warnings = sum(1 for line in expected if HEADLINE.sub("", line).startswith("warning: "))
    errors = len(expected) - warnings
    assert re.search(rf"\b{errors} errors, {warnings} warnings\b", run.stdout), run.stdout


@pytest.mark.parametrize("headline", _expected())
def test_quoted_line_and_caret_follow(run: CheckRun, headline: str) -> None:
    m = HEADLINE.match(headline)
    assert m, f"malformed expected line: {headline}"
    assert headline in run.stderr_lines, f"not reported: {headline}"
    i = run.stderr_lines.index(headline)
    quoted, caret = run.stderr_lines[i + 1], run.stderr_lines[i + 2]
    source = (PIPELINES / m["path"]).read_text(encoding="utf-8").splitlines()[int(m["line"]) - 1]
    assert quoted == f"    {source}"
    col = int(m["col"])
    assert re.fullmatch(r"    " + " " * (col - 1) + r"\^+", caret), f"caret not at column {col}:\n{quoted}\n{caret}"
    width = len(caret) - 4 - (col - 1)
    assert col - 1 + width <= len(source) + 1, "caret runs past the end of the line"
