"""The parquet lineage index reader, on files written here in the engine's schema.

No engine available here writes ``dbt.column_lineage.parquet`` (Fusion's strict
mode needs a login; dbt-core 1.x has no static analysis), so these tests write
the index themselves: by column name in any order, both locations, caps,
a multi-million-row file under a memory bound, a corrupt file.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lineage_defs.dbt.index import COLUMNS_FILE, LINEAGE_FILE, IndexUnavailable, find_index, read_index

M1, M2, SRC = "model.p.m1", "model.p.m2", "source.p.lake.t"


def write_lineage(folder: Path, rows: list[tuple[str, str, str, str, str]], extra_column: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    cols = {
        # deliberately not in the documented order, with an extra column: read by NAME
        "lineage_kind": [r[4] for r in rows],
        "to_column": [r[3] for r in rows],
        "from_node_id": [r[0] for r in rows],
        "to_node_id": [r[2] for r in rows],
        "from_column": [r[1] for r in rows],
    }
    if extra_column:
        cols["engine_internal"] = list(range(len(rows)))
    pq.write_table(pa.table(cols), folder / LINEAGE_FILE)


def write_columns(folder: Path, rows: list[tuple[str, str, str | None, str | None, int]]) -> None:
    pq.write_table(
        pa.table({
            "column_index": [r[4] for r in rows], "unique_id": [r[0] for r in rows], "column_name": [r[1] for r in rows],
            "declared_type": [r[2] for r in rows], "inferred_type": [r[3] for r in rows],
        }),
        folder / COLUMNS_FILE,
    )  # fmt: skip


ROWS = [
    (SRC, "amount", M1, "amount_eur", "copy"),
    (SRC, "id", M1, "id", "passthrough"),
    (SRC, "status", M1, "status", "filter"),
    (M1, "amount_eur", M2, "revenue", "aggregate"),
    (M1, "id", M2, "n", "transform"),
    ("model.p.other", "x", "model.p.unbuilt", "y", "copy"),
]


@pytest.mark.parametrize("where", ["index", "info_schema/v1"])
def test_reads_both_locations_by_column_name(tmp_path: Path, where: str) -> None:
    write_lineage(tmp_path / where, ROWS)
    write_columns(tmp_path / where, [(M1, "status_ignored", None, "VARCHAR", 9), (M1, "id", "BIGINT", None, 0), (M1, "amount_eur", None, "DOUBLE", 1), (M2, "revenue", "DOUBLE", None, 0)])
    folder = find_index(tmp_path)
    assert folder == tmp_path / where
    idx = read_index(folder, [M1, M2])
    assert idx.truncated is None
    assert idx.edges == [
        (SRC, "amount", M1, "amount_eur", "copy"),
        (SRC, "id", M1, "id", "copy"),
        (M1, "amount_eur", M2, "revenue", "mod"),
        (M1, "id", M2, "n", "mod"),
        (SRC, "status", M1, None, "scan"),  # scans last, pointing at the whole model
    ]
    assert idx.columns[M1] == [("id", "BIGINT"), ("amount_eur", "DOUBLE"), ("status_ignored", "VARCHAR")]  # by column_index
    assert "model.p.unbuilt" not in idx.columns


def test_missing_index_and_missing_column(tmp_path: Path) -> None:
    assert find_index(tmp_path) is None
    with pytest.raises(IndexUnavailable, match="does not exist"):
        read_index(tmp_path, [M1])
    pq.write_table(pa.table({"from_node_id": ["a"], "to_node_id": ["b"]}), tmp_path / LINEAGE_FILE)
    with pytest.raises(IndexUnavailable, match="no column 'from_column'"):
        read_index(tmp_path, [M1])


def test_corrupt_file_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    write_lineage(tmp_path, ROWS)
    data = (tmp_path / LINEAGE_FILE).read_bytes()
    (tmp_path / LINEAGE_FILE).write_bytes(data[: len(data) // 2] + b"\0" * 64 + data[-16:])
    with pytest.raises(IndexUnavailable, match="unreadable"):
        read_index(tmp_path, [M1])


def test_caps_keep_direct_edges_first(tmp_path: Path) -> None:
    rows = [(SRC, f"s{i}", M1, None, "filter") for i in range(50)] + [(SRC, f"c{i}", M1, f"c{i}", "copy") for i in range(30)]
    write_lineage(tmp_path, [(a, b, c, d or "", e) for a, b, c, d, e in rows])
    idx = read_index(tmp_path, [M1], max_edges=40, batch_rows=16)
    kinds = [e[4] for e in idx.edges]
    assert kinds.count("copy") == 30 and kinds.count("scan") == 10  # every direct edge, scans fill the rest
    idx = read_index(tmp_path, [M1], max_edges=20, batch_rows=16)
    assert [e[4] for e in idx.edges] == ["copy"] * 20 and idx.truncated and "more than 20" in idx.truncated
    idx = read_index(tmp_path, [M1], max_rows=32, batch_rows=16)
    assert idx.rows_read == 32 and idx.truncated and "larger than 32 rows" in idx.truncated


def test_deadline_stops_reading(tmp_path: Path) -> None:
    write_lineage(tmp_path, ROWS * 10)
    ticks = iter(range(100))
    idx = read_index(tmp_path, [M1, M2], batch_rows=8, deadline=1.5, clock=lambda: float(next(ticks)))
    assert idx.truncated and idx.truncated.startswith("time budget reached") and idx.rows_read < 60


def _big_index(path: Path, n: int = 3_000_000, chunk: int = 250_000) -> None:
    """``n`` edges over 20,000 models, written in chunks (the test process never holds them all)."""
    import pyarrow.compute as pc

    def named(prefix: str, values: pa.Array) -> pa.Array:
        return pc.binary_join_element_wise(prefix, pc.cast(values, pa.string()), "")

    schema = pa.schema([(c, pa.string()) for c in ("from_node_id", "from_column", "to_node_id", "to_column", "lineage_kind")])
    with pq.ParquetWriter(path, schema) as w:
        for start in range(0, n, chunk):
            ids = pa.array(range(start, start + chunk), pa.int64())
            w.write_table(pa.table({
                "from_node_id": named("model.big.m", pc.add(pc.divide(ids, 151), 1)),
                "from_column": named("c", pc.bit_wise_and(ids, 63)),
                "to_node_id": named("model.big.m", pc.divide(ids, 150)),
                "to_column": named("c", pc.bit_wise_and(ids, 31)),
                "lineage_kind": pa.array((["copy", "transform", "filter"] * (chunk // 3 + 1))[:chunk]),
            }, schema=schema))  # fmt: skip


def test_multi_million_row_index_stays_under_a_memory_bound(tmp_path: Path) -> None:
    """3 million rows, 20 built models among 20,000: the reading process's peak RSS stays bounded."""
    (tmp_path / "index").mkdir()
    _big_index(tmp_path / "index" / LINEAGE_FILE)
    script = textwrap.dedent(f"""
        import pathlib, resource, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        import pyarrow, pyarrow.compute, pyarrow.parquet
        from lineage_defs.dbt.index import find_index, read_index
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        idx = read_index(find_index(pathlib.Path({str(tmp_path)!r})), [f"model.big.m{{i}}" for i in range(0, 20_000, 1_000)], max_edges=1_000)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        whole = pyarrow.parquet.read_table({str(tmp_path / "index" / LINEAGE_FILE)!r}).nbytes  # what reading it all would hold
        print(idx.rows_read, len(idx.edges), idx.truncated is not None, base, peak, whole)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows, kept, truncated, base_kb, peak_kb, whole = out.stdout.split()
    assert int(rows) == 3_000_000 and int(kept) == 1_000 and truncated == "True"
    growth = (int(peak_kb) - int(base_kb)) * 1024
    # the whole table in Arrow memory is far larger than the bound (as Python objects, ~10x more)
    assert int(whole) > 150_000_000 and growth < 64_000_000, (whole, growth)
