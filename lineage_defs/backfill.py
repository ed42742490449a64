"""``lineage-defs backfill``: launch a partition backfill on a running Dagster webserver.

Dagster has no backfill CLI; its GraphQL ``launchPartitionBackfill`` is what
the UI's backfill launcher calls, so this sends the same mutation.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import Any

from lineage_defs import uris

_PARTITIONS = """
query Partitions($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    __typename
    ... on AssetNode { pools partitionKeysByDimension { name partitionKeys } }
  }
}
"""

_LIMIT = """
mutation Limit($pool: String!, $limit: Int!) { setConcurrencyLimit(concurrencyKey: $pool, limit: $limit) }
"""

_LAUNCH = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on UnauthorizedError { message }
    ... on PartitionSetNotFoundError { message }
    ... on InvalidStepError { invalidStepKey }
    ... on InvalidOutputError { invalidOutputName }
    ... on RunConflict { message }
    ... on ConflictingExecutionParamsError { message }
    ... on PresetNotFoundError { message }
    ... on InvalidSubsetError { message }
    ... on NoModeProvidedError { message }
  }
}
"""


def graphql(url: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url.rstrip("/") + "/graphql",
        data=json.dumps({"query": query, "variables": variables}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = json.loads(resp.read())
    if body.get("errors"):
        raise RuntimeError("; ".join(e.get("message", str(e)) for e in body["errors"]))
    return dict(body["data"])


def partition_range(keys: list[str], first: str, last: str) -> list[str]:
    """The keys from ``first`` to ``last`` inclusive, in the asset's order.

    >>> partition_range(["a", "b", "c", "d"], "b", "c")
    ['b', 'c']
    """
    if first not in keys or last not in keys:
        missing = first if first not in keys else last
        raise ValueError(f"partition '{missing}' does not exist (the asset has {keys[0]} … {keys[-1]})" if keys else "the asset has no partitions")
    i, j = keys.index(first), keys.index(last)
    if i > j:
        raise ValueError(f"--from {first} comes after --to {last}")
    return keys[i : j + 1]


_POOL_LIMIT = """
query PoolLimit($pool: String!) { instance { concurrencyLimit(concurrencyKey: $pool) { limit usingDefaultLimit } } }
"""

_DELETE_LIMIT = """
mutation Unlimit($pool: String!) { deleteConcurrencyLimit(concurrencyKey: $pool) }
"""

_STATUS = """
query Status($id: String!, $key: AssetKeyInput!, $partitions: [String!]) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { status runs(limit: 100000) { runId status tags { key value } } }
    ... on PythonError { message }
    ... on BackfillNotFoundError { message }
  }
  assetNodeOrError(assetKey: $key) {
    __typename
    ... on AssetNode { latestMaterializationByPartition(partitions: $partitions) { partition runId } }
  }
}
"""

ENDED = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}
_RUN_FAILED = {"FAILURE", "CANCELED", "CANCELING"}
_RUN_ACTIVE = {"STARTING", "STARTED"}
GLYPHS = {"done": "█", "running": "▒", "queued": "·", "waiting": " ", "failed": "x"}


def run_partitions(tags: dict[str, str], names: list[str]) -> list[str]:
    """The partitions one run of the backfill builds: its partition tag, or its range.

    >>> run_partitions({"dagster/asset_partition_range_start": "b", "dagster/asset_partition_range_end": "c"}, ["a", "b", "c", "d"])
    ['b', 'c']
    """
    if "dagster/partition" in tags:
        return [tags["dagster/partition"]]
    start, end = tags.get("dagster/asset_partition_range_start"), tags.get("dagster/asset_partition_range_end")
    if start in names and end in names:
        return names[names.index(start) : names.index(end) + 1]
    return []


def partition_states(names: list[str], runs: list[dict[str, Any]], latest_run: dict[str, str]) -> dict[str, str]:
    """done | failed | running | queued | waiting for each partition of a backfill.

    A partition is done when its latest materialization came from a run of the
    backfill (a range run that failed midway still materialized its committed
    partitions); otherwise the runs that target it say how far it got.
    """
    ours = {r["runId"] for r in runs}
    states = {p: "done" if latest_run.get(p) in ours else "waiting" for p in names}
    rank = {"waiting": 0, "queued": 1, "failed": 2, "running": 3}
    for r in runs:
        tags = {t["key"]: t["value"] for t in r.get("tags", [])}
        state = "failed" if r["status"] in _RUN_FAILED else "running" if r["status"] in _RUN_ACTIVE else None
        if state is None and r["status"] == "SUCCESS":
            continue  # its partitions are done (or were not ours to build)
        state = state or "queued"
        for p in run_partitions(tags, names):
            if states.get(p) not in (None, "done") and rank[state] >= rank[states[p]]:
                states[p] = state
    return states


_RUN_ERRORS = """
query Errors($runId: ID!, $cursor: String) {
  logsForRun(runId: $runId, afterCursor: $cursor) {
    __typename
    ... on EventConnection {
      cursor hasMore
      events { __typename ... on MessageEvent { message level } ... on ExecutionStepFailureEvent { error { message } } }
    }
  }
}
"""


def run_errors(url: str, run_id: str) -> tuple[list[str], list[str]]:
    """A run's ERROR log messages and its step failures' error messages, in order."""
    logs: list[str] = []
    failures: list[str] = []
    cursor = None
    for _ in range(100):  # pages of the run's event log
        conn = graphql(url, _RUN_ERRORS, {"runId": run_id, "cursor": cursor})["logsForRun"]
        if conn["__typename"] != "EventConnection":
            break
        for e in conn["events"]:
            if e["__typename"] == "ExecutionStepFailureEvent" and e.get("error"):
                failures.append(str(e["error"]["message"]))
            elif e.get("level") == "ERROR" and e.get("message"):
                logs.append(str(e["message"]))
        cursor = conn["cursor"]
        if not conn["hasMore"]:
            break
    return logs, failures


def partition_error(partition: str, logs: list[str], failures: list[str]) -> str | None:
    """The first line of why ``partition`` failed: the step's own line for it (a range run logs
    one per partition), else the step failure's.

    >>> partition_error("2025-01-02", ["x.sql partition 2025-01-02 failed: x.sql:3:1: input not there yet\\n  quoted"], [])
    'x.sql:3:1: input not there yet'
    """
    marker = f" partition {partition} failed: "
    for m in logs:
        if marker in m:
            return m.split(marker, 1)[1].strip().splitlines()[0]
    for m in failures:
        lines = [ln for ln in m.strip().splitlines() if ln.strip()]
        if lines:
            return lines[0]
    return None


def failure_lines(url: str, runs: list[dict[str, Any]], names: list[str], failed: list[str]) -> dict[str, str]:
    """Each failed partition's error line, read from the event log of the backfill's failed run of it."""
    out: dict[str, str] = {}
    wanted = set(failed)
    for r in runs:
        if r["status"] not in _RUN_FAILED:
            continue
        tags = {t["key"]: t["value"] for t in r.get("tags", [])}
        parts = [p for p in run_partitions(tags, names) if p in wanted and p not in out]
        if not parts:
            continue
        try:
            logs, failures = run_errors(url, r["runId"])
        except (urllib.error.URLError, RuntimeError):
            continue  # the list of partitions is still printed
        for p in parts:
            line = partition_error(p, logs, failures)
            if line:
                out[p] = f"{line} (run {r['runId']})"
    return out


def render(names: list[str], states: dict[str, str], width: int = 60) -> str:
    """One cell per partition (or per group of partitions past ``width``), then the counts."""
    cells = [states[p] for p in names]
    if len(cells) > width:  # a group shows its least finished member
        order = ["failed", "waiting", "queued", "running", "done"]
        size = -(-len(cells) // width)
        cells = [min(cells[i : i + size], key=order.index) for i in range(0, len(cells), size)]
    counts = {k: sum(1 for p in names if states[p] == k) for k in GLYPHS}
    parts = [f"{counts['done']}/{len(names)} materialized"]
    parts += [f"{counts[k]} {k}" for k in ("running", "queued", "failed") if counts[k]]
    return f"[{''.join(GLYPHS[c] for c in cells)}] " + ", ".join(parts)


def wait_for_backfill(url: str, backfill_id: str, key: list[str], names: list[str], poll: float = 1.0, out: Any = None) -> int:
    """Show progress until the backfill ends; 0 when every partition is materialized, else 1."""
    import time

    out = out or sys.stderr
    tty = hasattr(out, "isatty") and out.isatty()
    shown = ""
    while True:
        data = graphql(url, _STATUS, {"id": backfill_id, "key": {"path": key}, "partitions": names})
        backfill = data["partitionBackfillOrError"]
        if backfill["__typename"] != "PartitionBackfill":
            print(f"lineage-defs backfill: {backfill.get('message', backfill['__typename'])}", file=sys.stderr)
            return 1
        node = data["assetNodeOrError"]
        latest = {e["partition"]: e["runId"] for e in (node.get("latestMaterializationByPartition") or []) if e} if node["__typename"] == "AssetNode" else {}
        states = partition_states(names, backfill["runs"], latest)
        line = render(names, states)
        ended = backfill["status"] in ENDED and not any(s in ("running", "queued") for s in states.values())
        if line != shown or ended:
            print(("\r" if tty else "") + line + ("" if tty and not ended else "\n"), end="", file=out, flush=True)
            shown = line
        if ended:
            failed = [p for p in names if states[p] != "done"]
            if failed:
                print(f"backfill {backfill_id} ended {backfill['status']}: not materialized: {', '.join(failed)}", file=out)
                why = failure_lines(url, backfill["runs"], names, failed)
                for p in failed:
                    print(f"  {p}: {why.get(p, 'no run of the backfill built it')}", file=out)
                return 1
            print(f"backfill {backfill_id}: all {len(names)} partitions materialized", file=out)
            return 0
        time.sleep(poll)


def launch_backfill(asset: str, first: str, last: str, concurrency: int | None, url: str, wait: bool = False) -> int:
    try:
        key = list(uris.key_path(asset))
    except uris.UriError as e:
        print(f"lineage-defs backfill: {e.message} — {e.fix}", file=sys.stderr)
        return 2
    restore: list[tuple[str, int | None]] = []  # pools whose limit this backfill changed, with the limit before
    try:
        node = graphql(url, _PARTITIONS, {"key": {"path": key}})["assetNodeOrError"]
        if node["__typename"] != "AssetNode":
            print(f"lineage-defs backfill: no asset {asset} on {url}", file=sys.stderr)
            return 1
        dims = node["partitionKeysByDimension"]
        if not dims:
            print(f"lineage-defs backfill: {asset} is not partitioned", file=sys.stderr)
            return 1
        names = partition_range(dims[0]["partitionKeys"], first, last)
        params: dict[str, Any] = {"assetSelection": [{"path": key}], "partitionNames": names, "fromFailure": False}
        if concurrency:
            # Dagster caps parallel runs of a step through its pool, an instance-wide
            # limit: set it for this backfill, wait for the backfill, then put it back.
            pools = node.get("pools") or []
            if not pools:
                print(f"lineage-defs backfill: --concurrency needs a pool: add '-- pool <name>' to the step that builds {asset}", file=sys.stderr)
                return 2
            for pool in pools:
                info = graphql(url, _POOL_LIMIT, {"pool": pool})["instance"]["concurrencyLimit"]
                restore.append((pool, None if info["usingDefaultLimit"] else info["limit"]))
                graphql(url, _LIMIT, {"pool": pool, "limit": concurrency})
                before = "the default" if restore[-1][1] is None else restore[-1][1]
                print(f"pool {pool}: limit {concurrency} for this backfill (was {before}; restored when it ends)", file=sys.stderr)
            wait = True
        result = graphql(url, _LAUNCH, {"params": params})["launchPartitionBackfill"]
        if result["__typename"] != "LaunchBackfillSuccess":
            print(f"lineage-defs backfill: {result['__typename']}: {result.get('message', result)}", file=sys.stderr)
            return 1
        print(f"backfill {result['backfillId']}: {len(names)} partitions of {asset} ({names[0]} … {names[-1]})", flush=True)
        if wait:
            return wait_for_backfill(url, result["backfillId"], key, names)
        return 0
    except (urllib.error.URLError, RuntimeError, ValueError) as e:
        print(f"lineage-defs backfill: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nlineage-defs backfill: stopped waiting; the backfill goes on", file=sys.stderr)
        return 130
    finally:
        for pool, limit in restore:
            try:
                if limit is None:
                    graphql(url, _DELETE_LIMIT, {"pool": pool})
                else:
                    graphql(url, _LIMIT, {"pool": pool, "limit": limit})
                print(f"pool {pool}: limit restored to {'the default' if limit is None else limit}", file=sys.stderr)
            except (urllib.error.URLError, RuntimeError) as e:
                print(f"lineage-defs backfill: could not restore pool {pool}'s limit ({e}); set it with: dagster instance concurrency set {pool} <n>", file=sys.stderr)
