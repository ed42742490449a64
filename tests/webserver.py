"""`dagster dev` (or `lineage-defs demo up`) as a test fixture: started in its own process group, talked to over GraphQL.

The process group is the package's own (``lineage_defs.demo.processes``, which
`make demo` uses too): every process the command starts stays in the group of
a small supervisor, the direct child of the test process, which SIGKILLs the
group when the test process dies, however it dies; a normal teardown sends
SIGTERM to the group, then SIGKILL after a grace period. Nothing is ever
killed by name.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lineage_defs.demo.processes import launch_supervised, live_group_members, stop_group

__all__ = ["DagsterDev", "free_port", "launch_supervised", "live_group_members", "run_problems", "stop_group", "wait_for_location"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


RUN_LOGS = """
query($runId: ID!, $cursor: String) {
  logsForRun(runId: $runId, afterCursor: $cursor) {
    __typename
    ... on EventConnection {
      cursor
      hasMore
      events {
        __typename
        ... on MessageEvent { message level stepKey }
        ... on ErrorEvent { error { message stack } }
      }
    }
    ... on Error { message }
  }
}
"""


def run_problems(dev: DagsterDev, run_id: str) -> str:
    """The errors and warnings of a run's event log, for an assertion message."""
    lines: list[str] = []
    cursor = None
    for _ in range(50):
        conn = dev.graphql(RUN_LOGS, {"runId": run_id, "cursor": cursor})["logsForRun"]
        if conn["__typename"] != "EventConnection":
            return f"logsForRun({run_id}): {conn}"
        for e in conn["events"]:
            err = e.get("error")
            if e.get("level") in ("ERROR", "CRITICAL", "WARNING") or err:
                lines.append(f"[{e['__typename']} {e.get('stepKey') or ''}] {e.get('message', '')}")
                if err:
                    lines.append(f"    {err['message']}\n{''.join(err.get('stack') or [])[-3000:]}")
        cursor = conn["cursor"]
        if not conn["hasMore"]:
            break
    return "\n".join(lines) or "(no errors in the event log)"
