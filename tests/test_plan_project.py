"""Cross-file planning: `*` over upstreams whose schema comes from their producer."""

from __future__ import annotations

import textwrap
from pathlib import Path

from lineage_defs.project import load_project


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


def test_uris_built_at_run_time_match_templated_assets_or_nothing(tmp_path: Path) -> None:
    write(tmp_path, "x/raw.sh", """
        # pipeline
        # partitioned dynamic key="$.day"
        # materialize manual s3:///raw/orders/{partition}.csv
        echo
    """)
    write(tmp_path, "x/report.py", """
        # pipeline
        # partitioned dynamic key="$.day"
        # materialize manual s3:///reports/x_{partition}.json
        from lineage_defs import runtime
        key = runtime.partition().key
        src = open(runtime.path(f"s3:///raw/orders/{key}.csv")).read()
        other = runtime.path("s3:///unrelated/" + key)
        with open(runtime.path(f"s3:///reports/x_{key}.json"), "w") as f:
            f.write(src)
    """)
    project = load_project(tmp_path)
    assert not project.errors
    report = next(s for s in project.steps if s.path == "x/report.py")
    assert [d.uri for d in report.deps] == ["s3:///raw/orders/{partition}.csv"]
    # no phantom asset from an f-string's literal prefix
    assert project.externals == ()


def test_steps_directly_in_the_pipelines_folder_are_located_errors(tmp_path: Path) -> None:
    write(tmp_path, "orders.sql", """
        -- Orders.
        -- pipeline
        -- materialize ducklake://main/orders
        SELECT 1 AS id
    """)
    write(tmp_path, "notes.sql", "SELECT 1\n")  # not a step: no complaint
    project = load_project(tmp_path)
    (err,) = project.errors
    assert (err.path, err.line, err.col) == ("orders.sql", 2, 4)
    assert "belongs in a pipeline sub-folder" in err.message and "shop/orders.sql" in (err.fix or "")
    assert project.steps == ()


def test_a_folder_with_no_step_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "empty_pipeline").mkdir()
    write(tmp_path, "real/a.sql", """
        -- pipeline
        -- materialize ducklake://main/a
        SELECT 1 AS id
    """)
    project = load_project(tmp_path)
    assert not project.errors
    assert [(w.path, w.message) for w in project.warnings] == [("empty_pipeline", "this pipeline folder holds no step")]

    nothing = tmp_path / "nothing"
    nothing.mkdir()
    project = load_project(nothing)
    assert [w.message for w in project.warnings] == ["the pipelines folder holds no step"]
