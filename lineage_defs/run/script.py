"""The script a run executes: the file the step was planned from, checked by content hash.

Nothing executable comes from the state dir: a SQL step's statements are
split from the script file itself when the run starts (never taken from the
plan cache), after checking that the file is the one the step was planned
from (``ScriptStep.file_hash``, the hash of the whole file); a Python or
Bash step's process is started only after the same check. A file edited
between the code location's load and the run fails the run with the fix,
instead of running a mix of the two versions.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lineage_defs.errors import Location, RunError
from lineage_defs.parse.header import split_body
from lineage_defs.plan.cache import content_hash
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings


def script_path(settings: LineageSettings, step: ScriptStep) -> Path:
    return Path(settings.pipelines_dir) / step.path


def checked_text(settings: LineageSettings, step: ScriptStep) -> str:
    """The script's text, when it is the file the step was planned from; RunError otherwise."""
    path = script_path(settings, step)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")  # as the plan read it
    except OSError as e:
        raise RunError(f"cannot read the step's script {path}: {e.strerror or e}", Location(step.path), "the pipelines folder must be readable by run processes (LINEAGE_PIPELINES_DIR)") from None
    if step.file_hash and content_hash(step.path, text) != step.file_hash:
        raise RunError(
            f"{step.path} changed after this run's code location was loaded: the run does not execute a script other than the one it was planned from",
            Location(step.path),
            "run it again: a new run loads the file as it is now",
        )
    return text


def checked_step(settings: LineageSettings, step: ScriptStep) -> ScriptStep:
    """The step with its SQL statements split from the checked script file (SQL steps; others are only checked)."""
    text = checked_text(settings, step)
    if not step.language.is_sql:
        return step
    from lineage_defs.plan.sql import split_statements  # sqlglot: the run tokenizes its statements anyway

    body, body_line = split_body(text, step.language)
    statements = split_statements(body, step.language.value, body_line)
    return dataclasses.replace(step, statements=statements)
