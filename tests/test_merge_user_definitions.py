"""``Definitions.merge(lineage_defs.definitions.defs, Definitions(assets=[hand_made]))``, as a Dagster
user composes, where ``hand_made`` is keyed like the relation a script reads: it loads (inputs no step
produces are no asset of ours, only dependencies), the hand-made asset is that one node, the script is
downstream of it, and one run materializes both.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.run.substrates import Session
from services import IN_PROCESS

pytestmark = pytest.mark.daemon  # runs the dagster command line

HAND_MADE = dg.AssetKey(["duckdb", "warehouse", "hand_made"])
DOUBLED = dg.AssetKey(["ducklake", "main", "doubled"])
SCRIPT = """
-- pipeline
-- materialize ducklake://main/doubled
SELECT id, v * 2 AS doubled FROM warehouse.main.hand_made
"""
USER_MODULE = '''
import dagster as dg

import lineage_defs.definitions


@dg.asset(key=["duckdb", "warehouse", "hand_made"], group_name="mine", required_resource_keys={"lineage_duckdb"})
def hand_made(context: dg.AssetExecutionContext) -> None:
    with context.resources.lineage_duckdb.get_connection() as con:
        con.execute("CREATE OR REPLACE TABLE warehouse.main.hand_made AS SELECT i AS id, i * 10 AS v FROM range(3) t(i)")


defs = dg.Definitions.merge(lineage_defs.definitions.defs, dg.Definitions(assets=[hand_made]))
'''


def test_a_hand_made_asset_merged_with_definitions_merge_is_the_node_the_script_reads(tmp_path: Path) -> None:
    pipelines = tmp_path / "pipelines"
    (pipelines / "p").mkdir(parents=True)
    (pipelines / "p" / "doubled.sql").write_text(SCRIPT.lstrip())
    (tmp_path / "user_defs.py").write_text(textwrap.dedent(USER_MODULE))
    state = tmp_path / "state"
    ours = build_definitions(pipelines, settings=LineageSettings(state_dir=str(state)))
    assert HAND_MADE not in {a.key for a in ours.assets or () if isinstance(a, dg.AssetSpec)}  # no stand-in of ours to clash

    @dg.asset(key=HAND_MADE.path)
    def hand_made() -> None: ...

    graph = dg.Definitions.merge(ours, dg.Definitions(assets=[hand_made])).resolve_asset_graph()
    assert [k for k in graph.get_all_asset_keys() if k.path[-1] == "hand_made"] == [HAND_MADE]  # one node
    assert graph.get(HAND_MADE).is_materializable
    assert graph.get(DOUBLED).parent_keys == {HAND_MADE}

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        **os.environ, "LINEAGE_PIPELINES_DIR": str(pipelines), "LINEAGE_STATE_DIR": str(state), "DAGSTER_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }  # fmt: skip
    env.pop("LINEAGE_DEFINITIONS", None)
    dagster = str(Path(sys.executable).parent / "dagster")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([dagster, *args, "-m", "user_defs"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)

    valid = run("definitions", "validate")
    assert valid.returncode == 0 and "Validation successful" in valid.stdout + valid.stderr, valid.stderr[-3000:]
    listed = run("asset", "list")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert listed.stdout.split().count("duckdb/warehouse/hand_made") == 1
    # one run: the hand-made asset writes the relation, then the script reads it
    done = run("asset", "materialize", "--select", "duckdb/warehouse/hand_made,ducklake/main/doubled", *IN_PROCESS)
    assert done.returncode == 0 and "RUN_SUCCESS" in done.stderr, done.stderr[-3000:]
    assert done.stderr.count("RUN_SUCCESS") == 1
    with Session(LineageSettings(state_dir=str(state))) as s:
        assert s.conn.execute("SELECT id, doubled FROM lake.main.doubled ORDER BY 1").fetchall() == [(0, 0), (1, 20), (2, 40)]
