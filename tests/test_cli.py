"""``lineage-defs``: graph (JSON shape of SPEC section 9, column text), new (every scaffold is a valid step), check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import with_example_parse
from lineage_defs import cli
from lineage_defs.project import load_project
from lineage_defs.plan.spec import Strategy

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pipelines"
LANGS = ("duckdb", "postgres", "python", "bash")
OUTPUTS = ("ducklake", "duckdb", "datatable", "s3_parquet", "none")
COMBOS = [(lang, out, part) for lang in LANGS for out in OUTPUTS for part in (None, "daily")]


def run_cli(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("lineage-defs")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "lineage_defs.cli"]
    env = {k: v for k, v in os.environ.items() if k != "LINEAGE_PIPELINES_DIR"}
    env["LINEAGE_STATE_DIR"] = str(state)
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    s = tmp_path / "state"
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(s))
    monkeypatch.delenv("LINEAGE_PIPELINES_DIR", raising=False)
    return s


@pytest.fixture(scope="module")
def example_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One state dir for the commands that only read the example: the first parses its dbt project, the
    others load it warm (a warm load is the cold one: test_plan_cache.py)."""
    return with_example_parse(tmp_path_factory.mktemp("example") / "state")


def _split_column(ref: str, uris: set[str]) -> tuple[str, str]:
    uri, _, col = ref.rpartition(".")
    assert uri in uris and col, f"{ref!r} is not <asset uri>.<column> of a listed asset"
    return uri, col


# -- graph -------------------------------------------------------------------------------
def test_graph_json_has_the_spec_shape(example_state: Path) -> None:
    r = run_cli("graph", str(EXAMPLE), "--json", state=example_state)
    assert r.returncode == 0, r.stderr
    g = json.loads(r.stdout)
    assert set(g) == {"assets", "column_edges"}

    uris = [a["uri"] for a in g["assets"]]
    assert len(uris) == len(set(uris)), "an asset is listed twice"
    known = set(uris)
    for a in g["assets"]:
        assert set(a) == {"uri", "key", "source", "upstream", "partitions", "strategy", "checks"}, a
        assert a["key"] and all(isinstance(p, str) for p in a["key"])
        assert a["uri"].split("://", 1)[0] == a["key"][0]
        assert a["source"] is None or (EXAMPLE / a["source"]).is_file()
        # an external (read, produced by no step: the example's hand-written order_sizes) has no source and no strategy
        assert a["strategy"] in {s.value for s in Strategy} or (a["source"] is None and a["strategy"] is None), a
        assert a["partitions"] is None or set(a["partitions"]) == {"kind", "start", "tz"}
        assert all(isinstance(c, str) for c in a["checks"])
        for up in a["upstream"]:
            assert up in known, f"{a['uri']} reads {up}, which is not in the asset list"

    kinds = set()
    for e in g["column_edges"]:
        assert set(e) == {"from", "to", "kind"}, e
        assert e["kind"] in ("copy", "mod", "scan")
        kinds.add(e["kind"])
        _split_column(e["from"], known)
        if e["kind"] == "scan":
            assert e["to"] in known, f"a scan edge must point at the whole asset, got {e['to']!r}"
        else:
            _split_column(e["to"], known)
    assert kinds == {"copy", "mod", "scan"}

    by_uri = {a["uri"]: a for a in g["assets"]}
    monthly = by_uri["ducklake://main/monthly_revenue"]
    assert monthly["partitions"] == {"kind": "monthly", "start": "2025-01-01", "tz": None}
    assert monthly["upstream"] == ["ducklake://main/daily_revenue"]
    assert monthly["source"] == "analytics/monthly_revenue.sql"
    assert monthly["key"] == ["ducklake", "main", "monthly_revenue"]
    strategies = {u: a["strategy"] for u, a in by_uri.items()}
    assert strategies["ducklake://main/customers"] == "merge"
    assert strategies["ducklake://main/dim_customers"] == "scd2"
    assert strategies["ducklake://main/kpi_snapshots"] == "append"
    assert strategies["ducklake://main/orders"] == "partition_replace"
    assert strategies["ducklake://main/products"] == "replace"
    assert strategies["s3:///raw/events/{partition}.csv"] == "manual"
    assert set(by_uri["ducklake://main/orders"]["checks"]) >= {"unique_order_id", "relationships_customer_id", "order_amounts"}


def test_graph_columns_text_shows_every_edge_kind(example_state: Path) -> None:
    r = run_cli("graph", str(EXAMPLE), "--columns", state=example_state)
    assert r.returncode == 0, r.stderr
    for kind in ("[copy]", "[mod]", "[scan]"):
        assert kind in r.stdout
    assert "ducklake://main/monthly_revenue  (analytics/monthly_revenue.sql, partition_replace [monthly])" in r.stdout
    assert "      .category ← ducklake://main/daily_revenue.category  [copy]" in r.stdout


# -- new ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("lang", "output", "partitioned"), COMBOS, ids=[f"{l}-{o}-{p or 'unpartitioned'}" for l, o, p in COMBOS])
def test_new_scaffolds_a_valid_step(lang: str, output: str, partitioned: str | None, tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "pipelines"
    argv = ["new", "demo/my_step", "--lang", lang, "--output", output, "--folder", str(folder)]
    assert cli.main(argv + (["--partitioned", partitioned] if partitioned else [])) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.parent == folder / "demo" and path.is_file()

    assert cli.main(["check", str(folder)]) == 0, capsys.readouterr().err
    assert "1 steps, 0 errors, 0 warnings" in capsys.readouterr().out

    (step,) = load_project(folder).steps
    assert step.language == lang
    assert (step.partitioning.kind if step.partitioning else None) == partitioned
    prefix = {"ducklake": "ducklake://main/", "duckdb": "duckdb://warehouse/", "datatable": "datatable://", "s3_parquet": "s3:///", "none": "ducklake://main/"}
    assert step.uri.startswith(prefix[output])
    if output == "s3_parquet":
        assert step.uri.endswith(".parquet")
        assert ("{partition}" in step.uri) == bool(partitioned)  # one object per partition
    if output == "none" or lang == "bash":
        assert step.strategy == "manual"
    else:
        assert step.strategy == ("partition_replace" if partitioned else "replace")
    if step.strategy == "manual":  # runtime.write() refuses a manual target: the scaffold must not call it
        assert "runtime.write(" not in path.read_text()


def test_new_for_every_combination_in_one_folder_passes_check(tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "pipelines"
    for lang, output, part in COMBOS:
        name = f"s_{lang}_{output}_{part or 'all'}"
        assert cli.main(["new", f"demo/{name}", "--lang", lang, "--output", output, "--folder", str(folder), *(["--partitioned", part] if part else [])]) == 0
    r = run_cli("check", str(folder), state=state)
    assert r.returncode == 0, r.stderr
    assert f"{len(COMBOS)} steps, 0 errors" in r.stdout


def test_new_refuses_to_overwrite(tmp_path: Path, state: Path) -> None:
    folder = tmp_path / "pipelines"
    target = folder / "demo" / "orders.sql"
    target.parent.mkdir(parents=True)
    target.write_text("-- mine\nSELECT 1\n")
    r = run_cli("new", "demo/orders", "--lang", "duckdb", "--output", "ducklake", "--folder", str(folder), state=state)
    assert r.returncode == 1
    assert "exists" in r.stderr and "not overwriting" in r.stderr
    assert target.read_text() == "-- mine\nSELECT 1\n"


def test_new_needs_pipeline_slash_name(tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["new", "orders", "--lang", "duckdb", "--output", "ducklake", "--folder", str(tmp_path)]) == 2
    assert "<pipeline>/<name>" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# -- check -------------------------------------------------------------------------------
def test_check_reports_errors_and_exits_1(tmp_path: Path, state: Path) -> None:
    folder = tmp_path / "pipelines"
    (folder / "demo").mkdir(parents=True)
    (folder / "demo" / "ok.sql").write_text("-- pipeline\n-- materialize ducklake://main/ok\nSELECT 1 AS id\n")
    (folder / "demo" / "bad.sql").write_text("-- pipeline\n-- partitoned daily\n-- materialize ducklake://main/bad\nSELECT 1 AS id\n")
    r = run_cli("check", str(folder), state=state)
    assert r.returncode == 1
    assert "demo/bad.sql:2:" in r.stderr
    assert "did you mean 'partitioned'" in r.stderr
    assert "1 error" in r.stdout


def test_check_on_the_example_exits_0(example_state: Path) -> None:
    r = run_cli("check", str(EXAMPLE), state=example_state)
    assert r.returncode == 0, r.stderr
    assert "0 errors" in r.stdout


@pytest.mark.parametrize("args", [("graph", str(EXAMPLE)), ("graph", str(EXAMPLE), "--json")])
def test_output_into_a_closed_pipe_ends_quietly(args: tuple[str, ...], example_state: Path) -> None:
    """`lineage-defs graph … | head`: the reader goes away before the output is written; no traceback."""
    script = Path(sys.executable).with_name("lineage-defs")
    env = {k: v for k, v in os.environ.items() if k != "LINEAGE_PIPELINES_DIR"} | {"LINEAGE_STATE_DIR": str(example_state)}
    proc = subprocess.Popen([str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # like `head` exiting: every write of the command now fails with EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err  # 128 + SIGPIPE, as a shell reports it
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err


def test_events_lists_each_stream_and_replays_a_failed_batch(state: Path) -> None:
    from lineage_defs.events.store import EventStore, NewEvent
    from lineage_defs.settings import LineageSettings

    assert "no event store" in run_cli("events", state=state).stdout
    with EventStore(LineageSettings(state_dir=str(state)).events_store) as store:
        store.add_messages("kafka:p__s:t", [NewEvent(f"0:{o}", b'{"n": 1}', partition=0, offset=o) for o in range(3)])
        store.add_messages("kafka:p__s:t", [NewEvent("0:3", b"[[[", partition=0, offset=3, error="partition_from=json:$.day: not JSON")])
        done, failed = store.cut_batches("kafka:p__s:t", max_batch=2)
        store.settle(done=[done.id], failed={failed.id: "2 run(s) failed, the last r9 (failure); 2 of 2 attempts used"})
    out = run_cli("events", state=state)
    assert out.returncode == 0, out.stderr
    assert "kafka:p__s:t: 4 events stored, 3 batched, 1 rejected; batches: 0 open, 1 done, 1 failed" in out.stdout
    assert "#4 0:3: partition_from=json:$.day: not JSON" in out.stdout
    assert f"{done.id}  2 events" in out.stdout and "done (a run succeeded)" in out.stdout
    assert f"FAILED — 2 run(s) failed, the last r9 (failure); 2 of 2 attempts used; after fixing the cause: lineage-defs events replay {failed.id}" in out.stdout

    again = run_cli("events", "replay", failed.id, state=state)
    assert again.returncode == 0 and f"batch {failed.id} (1 events of kafka:p__s:t) is open again (replay 1)" in again.stdout
    assert "nothing to replay" in run_cli("events", "replay", done.id, state=state).stdout
    missing = run_cli("events", "replay", "nope-1", state=state)
    assert missing.returncode == 1 and "no batch nope-1" in missing.stderr
    assert "1 open, 1 done, 0 failed" in run_cli("events", state=state).stdout
