"""`dagster dev` as a test fixture: started in its own process group, talked to over GraphQL.

Every process `dagster dev` starts (webserver, daemon, code servers, run workers,
step subprocesses) stays in the process group of a small supervisor, which is the
direct child of the test process. The supervisor gets a parent-death signal
(``prctl(PR_SET_PDEATHSIG)``): if the test process dies, however it dies, the
supervisor SIGKILLs its whole group, so a crashed test leaves nothing running.
A normal teardown sends SIGTERM to the group, then SIGKILL after a grace period.
Nothing is ever killed by name.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
# The signal the kernel sends the supervisor when the test process dies.
DEATH_SIGNAL = signal.SIGUSR1

# The supervisor: group leader, runs the command as its child and, on the
# parent-death signal, SIGKILLs the whole group (itself included). SIGTERM from
# the teardown is left to the command's own shutdown: the supervisor keeps
# waiting so the group keeps its leader until the command has exited.
SUPERVISOR = r"""
import os, signal, subprocess, sys
parent = int(sys.argv[1])
def reap(*_):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGUSR1, reap)
signal.signal(signal.SIGTERM, lambda *_: None)
if os.getppid() != parent:  # the test process died before prctl took effect
    reap()
child = subprocess.Popen(sys.argv[2:])
sys.exit(child.wait())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _new_group_with_death_signal() -> None:
    """preexec_fn: a new session (so a new process group) and a parent-death signal."""
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def launch_supervised(argv: list[str], cwd: Path, env: Mapping[str, str], output: Any) -> subprocess.Popen[bytes]:
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


def stop_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to ``proc``'s process group; SIGKILL to what is left after ``grace`` seconds."""
    pgid = proc.pid

    def signal_group(sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass

    signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()  # reap the supervisor once it exits
        if not live_group_members(pgid):
            break
        time.sleep(0.2)
    signal_group(signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    # SIGKILL is delivered at once but a process exits when the kernel gets to it
    # (one blocked in I/O may take a moment); a child forked while the group was
    # being signalled is caught by signalling again.
    deadline = time.monotonic() + 15
    while live_group_members(pgid) and time.monotonic() < deadline:
        signal_group(signal.SIGKILL)
        time.sleep(0.2)


class GraphQLError(AssertionError):
    """The server answered with errors."""


class ServerFailed(AssertionError):
    """Waiting is pointless: the server reported a failure that will not go away."""


class DagsterDev:
    """One `dagster dev` process tree and a GraphQL client for it."""

    def __init__(self, argv: list[str], cwd: Path, env: Mapping[str, str], port: int, log_path: Path) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env = dict(env)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        self._log = open(self.log_path, "wb")
        self.proc = launch_supervised(self.argv, self.cwd, self.env, self._log)

    @property
    def pgid(self) -> int:
        assert self.proc is not None
        return self.proc.pid  # setsid: the supervisor leads its own group

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace: float = 8.0) -> None:
        """SIGTERM to the whole group, SIGKILL to whatever is left after ``grace`` seconds."""
        if self.proc is None:
            return
        try:
            stop_group(self.proc, grace)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    # -- GraphQL -------------------------------------------------------------------
    def graphql(self, query: str, variables: Mapping[str, Any] | None = None, timeout: float = 60) -> dict[str, Any]:
        """POST a query; the ``data`` of the answer, or GraphQLError naming the errors."""
        body = json.dumps({"query": query, "variables": dict(variables or {})}).encode()
        req = urllib.request.Request(f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise GraphQLError(f"HTTP {e.code} from /graphql: {e.read()[:2000]!r}") from e
        if answer.get("errors"):
            raise GraphQLError(f"GraphQL errors: {json.dumps(answer['errors'], indent=1)[:4000]}")
        return answer["data"]

    def server_info(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.url}/server_info", timeout=5) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            return None

    def wait_until(self, what: str, probe: Callable[[], Any], timeout: float, interval: float = 1.0) -> Any:
        """Call ``probe`` until it returns something truthy; fail with the server log on timeout or exit."""
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while True:
            if not self.alive():
                raise AssertionError(f"dagster dev exited ({self.proc.returncode if self.proc else '?'}) while waiting for {what}\n{self.log_tail()}")
            try:
                value = probe()
                if value:
                    return value
            except ServerFailed:
                raise
            except Exception as e:  # the server is still coming up
                last_error = e
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error!r})\n{self.log_tail()}")
            time.sleep(interval)


WORKSPACE_QUERY = """
query {
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        locationOrLoadError {
          __typename
          ... on PythonError { message stack }
          ... on RepositoryLocation { name repositories { name } }
        }
      }
    }
    ... on PythonError { message }
  }
}
"""


def wait_for_location(dev: DagsterDev, location: str, timeout: float) -> dict[str, Any]:
    """Wait until GraphQL answers and ``location`` is loaded; fail at once on a load error."""

    def probe() -> dict[str, Any] | None:
        if dev.server_info() is None:
            return None
        ws = dev.graphql(WORKSPACE_QUERY)["workspaceOrError"]
        if ws["__typename"] != "Workspace":
            raise ServerFailed(f"workspaceOrError: {ws}")
        for entry in ws["locationEntries"]:
            if entry["name"] != location or entry["loadStatus"] != "LOADED":
                continue
            loc = entry["locationOrLoadError"]
            if loc is None:
                return None
            if loc["__typename"] == "PythonError":
                raise ServerFailed(f"code location {location} failed to load: {loc['message']}\n{loc['stack']}")
            return entry
        return None

    return dev.wait_until(f"code location {location}", probe, timeout)
