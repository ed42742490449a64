"""Running one hook script (SPEC section 13) with its event's context.

Python and Bash hooks get the context as JSON in ``LINEAGE_HOOK_CONTEXT`` (with the run settings'
``LINEAGE_*`` variables, like a step). A DuckDB SQL hook runs in a session on the substrates (the
default lake and warehouse attached, like a step's) after a one-row TEMP table ``hook`` is made from
the context — its fields as columns, and ``context`` (the whole JSON) — from a bound parameter: no
context value is ever spliced into SQL. A hook that fails raises ``RunError`` (the hook job retries it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lineage_defs.errors import RunError
from lineage_defs.parse.header import split_body
from lineage_defs.parse.model import Language
from lineage_defs.settings import LineageSettings

CONTEXT_ENV = "LINEAGE_HOOK_CONTEXT"
# the ``hook`` relation's text columns (the lists are VARCHAR[], ``attempt`` an INTEGER, ``context`` JSON)
TEXT_FIELDS = ("event", "hook", "step", "script", "pipeline", "run_id", "job", "status", "error", "ui_url")
LIST_FIELDS = ("asset_keys", "partitions", "failed_checks")
TIMEOUT = 600.0  # seconds a hook may run


def run_hook(settings: LineageSettings, path: str, language: Language, context: Mapping[str, Any], log: Callable[[str], None]) -> None:
    """Run the hook script ``path`` (relative to the pipelines folder) for one event."""
    file = Path(settings.pipelines_dir) / path
    if not file.is_file():
        raise RunError(f"hook script {path} is gone from {settings.pipelines_dir}", fix="restore it, or drop the hook lines naming it")
    payload = json.dumps(dict(context), sort_keys=True)
    if language is Language.DUCKDB:
        _run_sql(settings, file, payload)
        return
    argv = [sys.executable, str(file)] if language is Language.PYTHON else ["bash", str(file)]
    env = {**os.environ, **settings.to_env(), CONTEXT_ENV: payload}
    try:
        done = subprocess.run(argv, cwd=file.parent, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise RunError(f"hook {path} ran longer than {TIMEOUT:.0f}s", fix="make the hook quicker (it runs once per event)") from e
    for line in (done.stdout + done.stderr).splitlines()[-50:]:
        log(line)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-5:]
        raise RunError(f"hook {path} exited with {done.returncode}: {' | '.join(tail) or '(no output)'}", fix="see the hook run's logs")


def _run_sql(settings: LineageSettings, file: Path, payload: str) -> None:
    from lineage_defs.run.substrates import Session, execute

    body, _ = split_body(file.read_text(encoding="utf-8"), Language.DUCKDB)
    columns = [f"j->>'{f}' AS {f}" for f in TEXT_FIELDS]
    columns += [f"CAST(j->'{f}' AS VARCHAR[]) AS {f}" for f in LIST_FIELDS]
    columns += ["CAST(j->>'attempt' AS INTEGER) AS attempt", "j AS context"]
    with Session(settings) as s:
        execute(s.conn, f"CREATE TEMP TABLE hook AS SELECT {', '.join(columns)} FROM (SELECT CAST($1 AS JSON) AS j)", [payload])
        try:
            s.conn.execute(body)
        except Exception as e:  # duckdb's errors: the hook failed
            raise RunError(f"hook {file.name} failed: {e}", fix="see the statement in the message") from e
