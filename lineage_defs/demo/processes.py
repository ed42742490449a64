"""Processes that die with whoever started them: each in its own process group, under a supervisor.

Every process a service starts (``dagster dev``'s webserver, daemon, code
servers and runs; the broker; the receiver) stays in the process group of a
small supervisor, the direct child of the starter. The supervisor gets a
parent-death signal (``prctl(PR_SET_PDEATHSIG)``): if the starter dies,
however it dies (SIGKILL included), the supervisor SIGKILLs its whole group.
A normal stop sends SIGTERM to the group, then SIGKILL after a grace period.
Nothing is ever killed by name. Linux only (``prctl``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

PR_SET_PDEATHSIG = 1
# The signal the kernel sends the supervisor when its starter dies.
DEATH_SIGNAL = signal.SIGUSR1

# The supervisor: group leader, runs the command as its child and, on the
# parent-death signal, SIGKILLs the whole group (itself included). SIGTERM from
# a stop is left to the command's own shutdown: the supervisor keeps waiting so
# the group keeps its leader until the command has exited. The command starts
# with SIGINT at its default even when the starter runs with it ignored (a
# background job of a non-interactive shell): `dagster dev` maps SIGTERM onto
# its SIGINT handling and would ignore both.
SUPERVISOR = r"""
import os, signal, subprocess, sys
parent = int(sys.argv[1])
def reap(*_):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGUSR1, reap)
signal.signal(signal.SIGTERM, lambda *_: None)
if os.getppid() != parent:  # the starter died before prctl took effect
    reap()
child = subprocess.Popen(sys.argv[2:], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
sys.exit(child.wait())
"""


def _new_group_with_death_signal() -> None:
    """preexec_fn: a new session (so a new process group) and a parent-death signal."""
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def launch_supervised(argv: list[str], cwd: Path | str, env: Mapping[str, str], output: IO[Any] | int | None) -> subprocess.Popen[bytes]:
    """Start ``argv`` under the supervisor, in a new process group led by the supervisor.

    The group id is the returned process's pid.
    """
    return subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(os.getpid()), *argv],
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=subprocess.STDOUT,
        preexec_fn=_new_group_with_death_signal,  # noqa: PLW1509 - the point of it
    )


def live_group_members(pgid: int) -> list[int]:
    """Pids of the group's processes that still run (zombies, which run nothing, excluded)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(entry))
    return out


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def command_pid(proc: subprocess.Popen[bytes]) -> int | None:
    """The supervised command itself (the supervisor's child), while it runs."""
    try:
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


def stop_group(proc: subprocess.Popen[bytes], grace: float, whole_group: bool = True) -> None:
    """SIGTERM to ``proc``'s process group (``whole_group=False``: to the command alone, which stops
    its own children in order); SIGKILL to what is left after ``grace`` seconds (0: SIGKILL at once)."""
    pgid = proc.pid
    if grace > 0:
        pid = None if whole_group else command_pid(proc)
        if pid is None:
            signal_group(pgid, signal.SIGTERM)
        else:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            proc.poll()  # reap the supervisor once it exits
            if not live_group_members(pgid):
                break
            time.sleep(0.2)
    signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    # SIGKILL is delivered at once but a process exits when the kernel gets to it
    # (one blocked in I/O may take a moment); a child forked while the group was
    # being signalled is caught by signalling again.
    deadline = time.monotonic() + 15
    while live_group_members(pgid) and time.monotonic() < deadline:
        signal_group(pgid, signal.SIGKILL)
        time.sleep(0.2)
