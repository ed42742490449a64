"""Snapshot of the bundled example's Definitions: every asset, its deps, partitions, checks and policies.

The snapshot is ``tests/snapshots/example_definitions.json``. After an intended
change to the example or to how steps become assets, regenerate it with
``UPDATE_SNAPSHOTS=1 pytest tests/test_example_snapshot.py`` and review the diff.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, Definitions, TimeWindowPartitionsDefinition

from conftest import with_example_parse
from lineage_defs import LineageSettings, build_definitions

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pipelines"
SNAPSHOT = Path(__file__).parent / "snapshots" / "example_definitions.json"


def _key(key: AssetKey) -> str:
    return key.to_user_string()


def _partitions(pdef: Any) -> dict[str, Any] | None:
    if pdef is None:
        return None
    out: dict[str, Any] = {"type": type(pdef).__name__}
    if isinstance(pdef, TimeWindowPartitionsDefinition):
        out.update(start=pdef.start.isoformat(), timezone=pdef.timezone, fmt=pdef.fmt, end_offset=pdef.end_offset)
    else:  # dynamic
        out["name"] = getattr(pdef, "name", None)
    return out


def _raw(value: Any, attr: str) -> Any:
    """The TableSchema / TableColumnLineage itself, whether or not Dagster wrapped it in a MetadataValue."""
    return getattr(value, attr, value)


def render(defs: Definitions) -> dict[str, Any]:
    """A plain, stable description of every asset of ``defs``."""
    graph = defs.resolve_asset_graph()
    assets: dict[str, Any] = {}
    for key in sorted(graph.get_all_asset_keys(), key=_key):
        node = graph.get(key)
        adef = graph.assets_def_for_key(key)
        meta = node.metadata
        schema = _raw(meta.get("dagster/column_schema"), "schema")
        lineage = _raw(meta.get("dagster/column_lineage"), "column_lineage")
        op = adef.op if adef.is_executable and adef.node_def is not None else None
        retry = op.retry_policy if op is not None else None
        fresh = node.freshness_policy
        parents = sorted(node.parent_keys, key=_key)
        assets[_key(key)] = {
            "group": node.group_name,
            "deps": [_key(p) for p in parents],
            "partitions": _partitions(node.partitions_def),
            # as Dagster resolves them: its default where the factory sets none
            "partition_mappings": {
                _key(p): type(graph.get_partition_mapping(key, p)).__name__ for p in parents
            },
            "kinds": sorted(node.kinds),
            "owners": list(node.owners),
            "tags": {k: v for k, v in sorted(node.tags.items()) if not k.startswith("dagster/kind/")},
            "checks": {c.name: c.blocking for c in sorted(adef.check_specs, key=lambda c: c.name) if c.asset_key == key},
            "freshness": None
            if fresh is None
            else {
                "fail_seconds": fresh.fail_window.to_timedelta().total_seconds(),
                "warn_seconds": fresh.warn_window.to_timedelta().total_seconds() if fresh.warn_window else None,
            },
            "retry": None
            if retry is None
            else {"max_retries": retry.max_retries, "delay": retry.delay, "backoff": retry.backoff.value if retry.backoff else None},
            "pool": op.pool if op is not None else None,
            "automation": node.automation_condition.get_label() if node.automation_condition else None,
            "description": (node.description or "").splitlines()[0] if node.description else None,
            "columns": [c.name for c in schema.columns] if schema is not None else None,
            "column_lineage": None
            if lineage is None
            else {
                col: sorted(f"{_key(d.asset_key)}.{d.column_name}" for d in deps)
                for col, deps in sorted(lineage.deps_by_column.items())
            },
        }
    return assets


def test_example_definitions_match_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = with_example_parse(tmp_path / "state")
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(state))
    defs = build_definitions(EXAMPLE, settings=LineageSettings(state_dir=str(state)))
    actual = json.dumps(render(defs), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(actual, encoding="utf-8")
    expected = SNAPSHOT.read_text(encoding="utf-8") if SNAPSHOT.exists() else ""
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=str(SNAPSHOT.relative_to(ROOT)),
                tofile="examples/pipelines (now)",
            )
        )
        pytest.fail(
            "the example's Definitions differ from the snapshot; if the change is intended, "
            f"regenerate with UPDATE_SNAPSHOTS=1 and review the file:\n{diff}",
            pytrace=False,
        )
