"""Start a Python or Bash step inside a Dagster Pipes session.

    python -m lineage_defs.run.launch

The parent op runs this under ``PipesSubprocessClient``, with the step's
context (``run.contract``: the planned step, its script, its files). It opens the Pipes
connection, so the step's log lines arrive in Dagster as log events (not only
as raw compute logs), an exception in a Python step reaches the run with its
traceback, and the session is closed cleanly. Imports ``dagster_pipes`` only —
never Dagster itself.
"""

from __future__ import annotations

import dataclasses
import json
import runpy
import subprocess
import sys
import threading
import traceback
from typing import IO, Any

from lineage_defs.parse.model import Language
from lineage_defs.run.contract import CONTEXT_ENV, StepContext, current, use_pipes


def _forward(stream: IO[str], echo: IO[str], log: Any) -> None:
    for line in stream:
        echo.write(line)
        echo.flush()
        text = line.rstrip("\n")
        if text:
            log(text)


def run_bash(script: str, pipes: Any) -> int:
    """Run the script, echoing its output and sending each line to Dagster (stderr as warnings)."""
    proc = subprocess.Popen(["bash", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    assert proc.stdout is not None and proc.stderr is not None
    threads = [
        threading.Thread(target=_forward, args=(proc.stdout, sys.stdout, pipes.log.info), daemon=True),
        threading.Thread(target=_forward, args=(proc.stderr, sys.stderr, pipes.log.warning), daemon=True),
    ]
    for t in threads:
        t.start()
    code = proc.wait()
    for t in threads:
        t.join()
    return code


def main(argv: list[str]) -> int:
    ctx = current()
    if argv or ctx is None:
        print(f"usage: {CONTEXT_ENV}=<context.json> python -m lineage_defs.run.launch (the step's Dagster op starts it)", file=sys.stderr)
        return 2
    script = ctx.script
    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:
        use_pipes(pipes)  # runtime.log reads it (run.contract: the run layer never imports runtime)
        try:
            if ctx.step.language == Language.BASH:
                code = run_bash(script, pipes)
                if code:
                    raise SystemExit(f"{script} exited with status {code}")
                return 0
            sys.argv = [script]
            runpy.run_path(script, run_name="__main__")
        except BaseException as e:
            if not (isinstance(e, SystemExit) and e.code in (0, None)):
                _record_error(e, ctx)
            raise
    return 0


def _record_error(e: BaseException, ctx: StepContext) -> None:
    """Leave the step's own error where the parent op raises it from (file:line of the script)."""
    message = str(e.code) if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}"
    frames = traceback.extract_tb(e.__traceback__)
    mine = [f for f in frames if f.filename == ctx.script]
    where = mine[-1] if mine else None
    from lineage_defs.run.inputs import InputMissing

    # an input that is not there yet (a data test on a slice left empty by it): the parent names it
    missing = [dataclasses.asdict(m) for m in e.missing] if isinstance(e, InputMissing) else []
    if isinstance(e, InputMissing):
        message = e.said or message
    with open(ctx.error_file, "w") as f:
        json.dump({"message": message, "line": where.lineno if where else 0, "text": (where.line or "") if where else "",
                   "traceback": "".join(traceback.format_exception(e)), "missing": missing}, f)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
