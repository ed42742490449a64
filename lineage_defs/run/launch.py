"""Start a Python or Bash step inside a Dagster Pipes session.

    python -m lineage_defs.run.launch

The parent op runs this under ``PipesSubprocessClient``, with the step's
context (``run.contract``: the planned step, its script, its files). It opens the Pipes
connection, so the step's log lines arrive in Dagster as log events (not only
as raw compute logs), an exception in a Python step reaches the run with its
traceback, and the session is closed cleanly. Imports ``dagster_pipes`` only —
never Dagster itself.

A cancelled run reaches this process as SIGINT (Dagster's Pipes client forwards
the termination): a Python step gets it as ``KeyboardInterrupt``; a Bash step's
script and every process it started get SIGINT too, as Ctrl-C stops a
terminal's foreground job, and SIGKILL ``GRACE`` seconds later if they still
run — a cancelled step must not go on writing after its run says CANCELED.
"""

from __future__ import annotations

import dataclasses
import json
import os
import runpy
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

from lineage_defs.parse.model import Language
from lineage_defs.run import cancel
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
    try:
        code = proc.wait()
    except BaseException:  # the run was cancelled (SIGINT): the script and what it started stop too
        stop_tree(proc)
        raise
    finally:
        for t in threads:
            t.join()
    return code


GRACE = 5.0  # seconds a cancelled Bash step's processes have to exit on SIGINT


def stop_tree(proc: subprocess.Popen[str], grace: float = GRACE) -> None:
    """SIGINT to ``proc`` and each process under it; SIGKILL to those still running ``grace`` seconds later.

    The processes are the ones under ``proc`` when it is called (a process orphaned by its parent's
    exit is no longer under it), each known by its start time, so a reused pid is never signalled.
    Where there is no ``/proc``, ``proc`` alone."""
    tree = _descendants(proc.pid)

    def running(pid: int, start: str) -> bool:
        return proc.poll() is None if pid == proc.pid else _stat(pid) == start

    for pid in [proc.pid, *tree]:
        _signal(pid, signal.SIGINT)
    deadline = time.monotonic() + grace
    while any(running(pid, start) for pid, start in [(proc.pid, ""), *tree.items()]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid, start in [(proc.pid, ""), *tree.items()]:
        if running(pid, start):
            _signal(pid, signal.SIGKILL)
    proc.wait()


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _fields(pid: int) -> list[str] | None:
    """A process' /proc stat fields from its state on (None when it is gone, or there is no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()  # "pid (comm) state ppid ...": comm may hold spaces and parentheses


def _stat(pid: int) -> str | None:
    """The start time (clock ticks since boot) of a running process; None when it is gone or a zombie."""
    fields = _fields(pid)
    return None if fields is None or fields[0] in ("Z", "X") else fields[19]


def interrupt_steps() -> None:
    """SIGINT to each step process (``-m lineage_defs.run.launch``) this process started, as Dagster's
    Pipes client sends on a cancel — for when the run worker's own interrupt was lost (``run.cancel``).
    A step process passes on only the first SIGINT it gets."""
    for pid, start in _descendants(os.getpid()).items():
        fields = _fields(pid)
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if fields is not None and int(fields[1]) == os.getpid() and b"lineage_defs.run.launch" in cmd and _stat(pid) == start:
            _signal(pid, signal.SIGINT)


def _descendants(root: int) -> dict[int, str]:
    """Every running process under ``root`` (children, their children…): pid → start time. Empty without /proc."""
    children: dict[int, list[tuple[int, str]]] = {}
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return {}
    for pid in entries:
        fields = _fields(pid)
        if fields is not None and fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append((pid, fields[19]))
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        for pid, start in children.get(todo.pop(), ()):
            if pid not in out:
                out[pid] = start
                todo.append(pid)
    return out


def main(argv: list[str]) -> int:
    ctx = current()
    if argv or ctx is None:
        print(f"usage: {CONTEXT_ENV}=<context.json> python -m lineage_defs.run.launch (the step's Dagster op starts it)", file=sys.stderr)
        return 2
    script = ctx.script
    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes, cancel.watching(chain_repeats=False):
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
