"""A `dg` project with LineageDefsComponent beside a hand-written Python asset: scaffold, check, list, dev, launch.

The project is written into a temp dir the way `create-dagster project` lays
it out (``[tool.dg]`` in pyproject, ``src/<root>/definitions.py``, a defs
folder); `dg scaffold defs lineage_defs.LineageDefsComponent` adds the
component. Offline: HTTP(S) proxies point at a local socket that counts
connections, and none may arrive (no update check, no telemetry upload).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from services import IN_PROCESS
from webserver import DagsterDev, free_port, wait_for_location

pytestmark = pytest.mark.daemon

PYPROJECT = """\
[project]
name = "shopproj"
version = "0.1.0"
requires-python = ">=3.11"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "shopproj"

[tool.dg.cli]
telemetry = { enabled = false }
"""
DEFINITIONS = """\
from pathlib import Path

import dagster as dg

from lineage_defs import merge_definitions


@dg.definitions
def defs() -> dg.Definitions:
    # a table the scripts read and a hand-written asset produces is one node
    return merge_definitions(dg.load_from_defs_folder(path_within_project=Path(__file__).parent))
"""
HANDWRITTEN = """\
import dagster as dg
import pandas as pd


@dg.asset(key=["ducklake", "main", "hello_counts"], ins={"hello": dg.AssetIn(key=["ducklake", "main", "hello"])},
          io_manager_key="lineage_io_manager")
def hello_counts(hello: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"rows": [len(hello)], "greeting": [hello["greeting"].iloc[0]]})
"""
DEV_ASSETS = "{ assetNodes { assetKey { path } dependencyKeys { path } isMaterializable } }"


class ProxyTrap:
    """A local socket every HTTP(S) proxy variable points at: counts who tried to go out."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


def test_a_dg_project_scaffolds_checks_lists_and_runs_the_component(tmp_path: Path) -> None:
    project = tmp_path / "shopproj"
    pkg = project / "src" / "shopproj"
    (pkg / "defs").mkdir(parents=True)
    (project / "pyproject.toml").write_text(PYPROJECT)
    (pkg / "__init__.py").write_text("")
    (pkg / "definitions.py").write_text(DEFINITIONS)
    (pkg / "defs" / "__init__.py").write_text("")
    (pkg / "defs" / "hello_counts.py").write_text(HANDWRITTEN)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    trap = ProxyTrap()
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINEAGE_")}
    env.update(
        PATH=f"{bin_dir}:/usr/bin:/bin", DAGSTER_HOME=str(home), PYTHONPATH=str(project / "src"),  # dg list defs imports the project
        DAGSTER_DG_UPDATE_CHECK_ENABLED="0", HTTP_PROXY=trap.url, HTTPS_PROXY=trap.url, http_proxy=trap.url, https_proxy=trap.url,
        ALL_PROXY=trap.url, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
    )  # fmt: skip

    def dg(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(bin_dir / "dg"), *args], cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"dg {' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done

    dg("scaffold", "defs", "lineage_defs.LineageDefsComponent", "lineage")
    defs_yaml = (pkg / "defs" / "lineage" / "defs.yaml").read_text()
    assert "type: lineage_defs.LineageDefsComponent" in defs_yaml and "pipelines_dir: pipelines" in defs_yaml
    assert (pkg / "defs" / "lineage" / "pipelines" / "example" / "hello.sql").is_file()  # a first step: the yaml loads as written

    checked = dg("check", "defs")
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr

    listed = json.loads(dg("list", "defs", "--json").stdout)
    assets = {a["asset_key"]: a for a in listed["assets"]}
    assert set(assets) >= {"ducklake/main/hello", "ducklake/main/hello_counts"}
    assert assets["ducklake/main/hello_counts"]["dependency_keys"] == ["ducklake/main/hello"]
    assert assets["ducklake/main/hello"]["source"].endswith("defs/lineage/pipelines/example/hello.sql:1")  # its code reference
    assert {r["name"] for r in listed["resources"]} >= {"lineage", "lineage_duckdb", "lineage_io_manager"}

    # `dg dev`: the webserver loads the project's one code location, the component's assets beside the hand-written one
    port = free_port()
    dev = DagsterDev([str(bin_dir / "dg"), "dev", "--host", "127.0.0.1", "--port", str(port)], project, env, port, tmp_path / "dg-dev.log")
    dev.start()
    try:
        wait_for_location(dev, "shopproj", timeout=300)
        nodes = {"/".join(n["assetKey"]["path"]): n for n in dev.graphql(DEV_ASSETS)["assetNodes"]}
    finally:
        dev.stop()
    assert {"ducklake/main/hello", "ducklake/main/hello_counts"} <= set(nodes)
    assert nodes["ducklake/main/hello_counts"]["dependencyKeys"] == [{"path": ["ducklake", "main", "hello"]}]
    assert nodes["ducklake/main/hello"]["isMaterializable"] and nodes["ducklake/main/hello_counts"]["isMaterializable"]

    # both steps in the run's process (Dagster's in_process executor): not a process per step loading the project again
    launched = dg("launch", "--assets", 'key:"ducklake/main/hello"+', *IN_PROCESS)
    assert "RUN_SUCCESS" in launched.stdout + launched.stderr
    from lineage_defs import LineageSettings
    from lineage_defs.run.substrates import Session

    with Session(LineageSettings(state_dir=str(project / ".lineage"))) as s:  # the component's default state dir
        assert s.conn.execute("SELECT rows, greeting FROM lake.main.hello_counts").fetchall() == [(1, "hello")]
    assert trap.connections == 0, "dg tried to reach the network"
