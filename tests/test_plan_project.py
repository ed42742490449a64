"""Cross-file planning: `*` over upstreams whose schema comes from their producer."""

from __future__ import annotations

import textwrap
from pathlib import Path

from lineage_defs.plan.project import load_project


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip())


def test_star_over_scd2_view_and_partitioned_target_includes_managed_columns(tmp_path: Path) -> None:
    write(tmp_path, "x/dim.sql", """
        -- pipeline
        -- materialize scd2 ducklake://main/dim key=id track=name
        SELECT 1 AS id, 'a' AS name
    """)
    write(tmp_path, "x/daily.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize ducklake://main/daily
        SELECT 1 AS a
    """)
    write(tmp_path, "x/current.sql", """
        -- pipeline
        -- materialize ducklake://main/current_copy
        SELECT * FROM lake.main.dim_current
    """)
    write(tmp_path, "x/all_days.sql", """
        -- pipeline
        -- materialize ducklake://main/all_days
        SELECT * FROM lake.main.daily
    """)
    project = load_project(tmp_path)
    assert not project.errors
    steps = {s.uri: s for s in project.steps}
    current = steps["ducklake://main/current_copy"]
    assert current.output_columns == ("id", "name", "valid_from", "valid_to", "is_current")
    assert [d.uri for d in current.deps] == ["ducklake://main/dim"]  # the view is a read of the scd2 asset
    assert {(e.source, e.target, e.kind) for e in current.column_edges} == {
        (f"ducklake://main/dim.{c}", f"ducklake://main/current_copy.{c}", "copy")
        for c in ("id", "name", "valid_from", "valid_to", "is_current")
    }
    assert steps["ducklake://main/all_days"].output_columns == ("a", "_partition")
