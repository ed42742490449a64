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


def launch_backfill(asset: str, first: str, last: str, concurrency: int | None, url: str) -> int:
    try:
        key = list(uris.key_path(asset))
    except uris.UriError as e:
        print(f"lineage-defs backfill: {e.message} — {e.fix}", file=sys.stderr)
        return 2
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
            # Dagster caps parallel runs of a step through its pool: set that pool's limit.
            pools = node.get("pools") or []
            if not pools:
                print(f"lineage-defs backfill: --concurrency needs a pool: add '-- pool <name>' to the step that builds {asset}", file=sys.stderr)
                return 2
            for pool in pools:
                graphql(url, _LIMIT, {"pool": pool, "limit": concurrency})
        result = graphql(url, _LAUNCH, {"params": params})["launchPartitionBackfill"]
    except (urllib.error.URLError, RuntimeError, ValueError) as e:
        print(f"lineage-defs backfill: {e}", file=sys.stderr)
        return 1
    if result["__typename"] != "LaunchBackfillSuccess":
        print(f"lineage-defs backfill: {result['__typename']}: {result.get('message', result)}", file=sys.stderr)
        return 1
    print(f"backfill {result['backfillId']}: {len(names)} partitions of {asset} ({names[0]} … {names[-1]})")
    return 0
