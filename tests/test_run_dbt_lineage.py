"""The post-materialization lineage pass: each way it can fail degrades to one note, never an exception;
a cancellation goes through.

The compiled SQL is what a dbt-core build writes under ``target/compiled``;
the static-analysis engine is a stand-in executable (no engine here writes
the index: Fusion's strict mode needs a login) that writes index files in the
engine's schema, or fails the way a real one would.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dbt_projects import stand_in_engine
from lineage_defs.plan.spec import ColumnEdge
from lineage_defs.dbt.lineage_pass import BuiltModel, Engine, LineagePass, PassResult, detect_engine

STG, DAILY = "dbt://warehouse/main/stg", "dbt://warehouse/main/daily"
NODE_URIS = {"model.p.stg": STG, "model.p.daily": DAILY, "source.p.lake.orders": "ducklake://main/orders"}
ALIASES = {"duckdb://warehouse/stg": STG, "duckdb://warehouse/daily": DAILY}
MODELS = [BuiltModel("model.p.stg", STG, "models/stg.sql"), BuiltModel("model.p.daily", DAILY, "models/daily.sql")]

WRITE_INDEX = """
import pyarrow as pa, pyarrow.parquet as pq
(target / "index").mkdir(parents=True)
pq.write_table(pa.table({
    "from_node_id": ["source.p.lake.orders", "model.p.stg", "model.p.stg"],
    "from_column": ["amount", "amount", "day"],
    "to_node_id": ["model.p.stg", "model.p.daily", "model.p.daily"],
    "to_column": ["amount", "total", "day"],
    "lineage_kind": ["copy", "aggregate", "group_by"],
}), target / "index" / "dbt.column_lineage.parquet")
pq.write_table(pa.table({"unique_id": ["model.p.daily", "model.p.daily"], "column_name": ["total", "day"],
    "declared_type": [None, "DATE"], "inferred_type": ["DOUBLE", "DATE"], "column_index": [1, 0]}),
    target / "index" / "dbt.node_columns.parquet")
"""


@pytest.fixture
def build_target(tmp_path: Path) -> Path:
    """What `dbt build` left: compiled SQL of both models."""
    compiled = tmp_path / "target" / "compiled" / "p" / "models"
    compiled.mkdir(parents=True)
    (compiled / "stg.sql").write_text('select amount, cast(ts as date) as day from "lake"."main"."orders" where amount > 0')
    (compiled / "daily.sql").write_text('select day, sum(amount) as total from "warehouse"."main"."stg" group by day')
    return tmp_path / "target"


def _pass(target: Path, engine: Engine, tmp_path: Path, budget: float = 60.0, **kw: object) -> PassResult:
    def static_compile(own: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        assert engine.executable
        return subprocess.run([engine.executable, "compile", "--static-analysis", "strict", "--target-path", str(own)], capture_output=True, text=True, timeout=timeout)

    lineage = LineagePass(
        engine=engine, build_target=target, project_name="p", node_uris=NODE_URIS, aliases=ALIASES,
        static_compile=static_compile, cache_file=tmp_path / "cache.json", **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    return lineage.run(MODELS, budget)


def test_dbt_core_uses_the_compiled_sql(build_target: Path, tmp_path: Path) -> None:
    engine = detect_engine(None)
    assert engine.kind == "core"
    r = _pass(build_target, engine, tmp_path)
    assert (r.source, r.note) == ("sqlglot", None)
    assert set(r.edges[STG]) == {
        ColumnEdge("ducklake://main/orders.amount", f"{STG}.amount", "copy"),
        ColumnEdge("ducklake://main/orders.ts", f"{STG}.day", "mod"),
        ColumnEdge("ducklake://main/orders.amount", STG, "scan"),
    }
    assert ColumnEdge(f"{STG}.amount", f"{DAILY}.total", "mod") in r.edges[DAILY]  # warehouse.main.stg IS the model
    assert r.columns[DAILY] == [("day", "unknown"), ("total", "unknown")]


def test_warm_pass_reuses_the_cache(build_target: Path, tmp_path: Path) -> None:
    first = _pass(build_target, detect_engine(None), tmp_path)
    stamp = (tmp_path / "cache.json").stat().st_mtime_ns
    second = _pass(build_target, detect_engine(None), tmp_path)
    assert second.edges == first.edges and (tmp_path / "cache.json").stat().st_mtime_ns == stamp  # nothing new to write
    (build_target / "compiled" / "p" / "models" / "stg.sql").write_text('select amount from "lake"."main"."orders"')
    third = _pass(build_target, detect_engine(None), tmp_path)
    assert set(third.edges[STG]) == {ColumnEdge("ducklake://main/orders.amount", f"{STG}.amount", "copy")}


def test_static_engine_index(build_target: Path, tmp_path: Path) -> None:
    engine = detect_engine(str(stand_in_engine(tmp_path / "engine", WRITE_INDEX)))
    assert engine.kind == "static"
    r = _pass(build_target, engine, tmp_path)
    assert (r.source, r.note) == ("index", None)
    assert r.edges[DAILY] == (ColumnEdge(f"{STG}.amount", f"{DAILY}.total", "mod"), ColumnEdge(f"{STG}.day", DAILY, "scan"))
    assert r.edges[STG] == (ColumnEdge("ducklake://main/orders.amount", f"{STG}.amount", "copy"),)
    assert r.columns[DAILY] == [("day", "DATE"), ("total", "DOUBLE")]


@pytest.mark.parametrize(
    ("body", "note", "source"),
    [
        ("print('error: model daily: unsupported'); sys.exit(1)\n", "static analysis rejected (exit 1)", "sqlglot"),
        ("pass\n", "the engine wrote no lineage index", "sqlglot"),
        ("(target / 'index').mkdir(parents=True); (target / 'index' / 'dbt.column_lineage.parquet').write_bytes(b'PAR1 not parquet')\n", "lineage index unusable", "sqlglot"),
        ("import time; time.sleep(30)\n", "time budget reached during the static-analysis compile", ""),
    ],
    ids=["rejected", "no-index", "corrupt-index", "slow-engine"],
)
def test_each_failure_is_one_note_and_never_raises(build_target: Path, tmp_path: Path, body: str, note: str, source: str) -> None:
    engine = detect_engine(str(stand_in_engine(tmp_path / "engine", body)))
    r = _pass(build_target, engine, tmp_path, budget=2.0 if "sleep" in body else 60.0)
    assert r.note is not None and r.note.startswith(note), r.note
    assert r.source == source
    assert bool(r.edges) == bool(source)  # the compiled SQL still gives lineage when the index failed


def test_oversized_index_is_partial(build_target: Path, tmp_path: Path) -> None:
    engine = detect_engine(str(stand_in_engine(tmp_path / "engine", WRITE_INDEX)))
    r = _pass(build_target, engine, tmp_path, caps={"max_edges": 1})
    assert r.source == "index" and r.note and "more than 1 edges" in r.note
    assert sum(len(e) for e in r.edges.values()) == 1


def test_wrong_engine_gives_no_lineage(build_target: Path, tmp_path: Path) -> None:
    fake = tmp_path / "not-dbt"
    fake.write_text("#!/bin/sh\necho 'sqlfluff 3.0.0'\n")
    fake.chmod(0o755)
    r = _pass(build_target, detect_engine(str(fake)), tmp_path)
    assert r.note and r.note.startswith("wrong engine") and not r.edges and r.source == ""


def test_time_budget_gives_partial_lineage(build_target: Path, tmp_path: Path) -> None:
    ticks = iter([0.0, 0.0, 0.5, 5.0, 5.0, 5.0])
    r = _pass(build_target, detect_engine(None), tmp_path, budget=1.0, clock=lambda: next(ticks))
    assert r.note == "time budget reached after 1 of 2 models"
    assert set(r.edges) == {STG}


def test_cancellation_goes_through(build_target: Path, tmp_path: Path) -> None:
    def interrupted(own: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        LineagePass(Engine("static", "2.0", "engine"), build_target, "p", NODE_URIS, ALIASES, static_compile=interrupted).run(MODELS, 60)
