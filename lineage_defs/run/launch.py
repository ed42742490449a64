"""Start a Python or Bash step inside a Dagster Pipes session.

    python -m lineage_defs.run.launch python|bash <script>

The parent op runs this under ``PipesSubprocessClient``. It opens the Pipes
connection, so the step's log lines arrive in Dagster as log events (not only
as raw compute logs), an exception in a Python step reaches the run with its
traceback, and the session is closed cleanly. Imports ``dagster_pipes`` only —
never Dagster itself.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
import threading
from typing import IO, Any


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
    if len(argv) != 2 or argv[0] not in ("python", "bash"):
        print("usage: python -m lineage_defs.run.launch python|bash <script>", file=sys.stderr)
        return 2
    language, script = argv
    from dagster_pipes import open_dagster_pipes

    from lineage_defs import runtime

    with open_dagster_pipes() as pipes:
        runtime.use_pipes(pipes)
        try:
            if language == "bash":
                code = run_bash(script, pipes)
                if code:
                    raise SystemExit(f"{script} exited with status {code}")
                return 0
            sys.argv = [script]
            runpy.run_path(script, run_name="__main__")
        except BaseException as e:
            if not (isinstance(e, SystemExit) and e.code in (0, None)):
                _record_error(e)
            raise
    return 0


def _record_error(e: BaseException) -> None:
    """Leave the step's own error where the parent op raises it from (file:line of the script)."""
    import json
    import os
    import traceback

    path = os.environ.get("LINEAGE_ERROR_FILE")
    if not path:
        return
    message = str(e.code) if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}"
    frames = traceback.extract_tb(e.__traceback__)
    mine = [f for f in frames if f.filename == os.environ.get("LINEAGE_SCRIPT")]
    where = mine[-1] if mine else None
    with open(path, "w") as f:
        json.dump({"message": message, "line": where.lineno if where else 0, "text": (where.line or "") if where else "",
                   "traceback": "".join(traceback.format_exception(e))}, f)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
