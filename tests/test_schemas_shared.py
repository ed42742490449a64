"""Captured schemas off local disk: the reference is the last materialization's column schema in the
Dagster instance, so a process with an empty state dir compares against what another process wrote.

Two "machines" share Dagster's PostgreSQL storage and a DuckLake (PostgreSQL catalog, data in a folder
neither state dir holds); each has its own state dir.
"""

from __future__ import annotations

import subprocess
import textwrap
import uuid
from pathlib import Path

import pytest

from scale_support import DAGSTER, LINEAGE_DEFS, create_database, dagster_home, files_under, machine_env
from services import IN_PROCESS

pytestmark = pytest.mark.daemon


def _write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(textwrap.dedent(text).lstrip())


def _materialize(env: dict[str, str], cwd: Path, asset: str) -> subprocess.CompletedProcess[str]:
    cmd = [DAGSTER, "asset", "materialize", "-m", "lineage_defs.definitions", "-a", "defs", "--select", asset, *IN_PROCESS]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def _check(env: dict[str, str], cwd: Path) -> str:
    p = subprocess.run([LINEAGE_DEFS, "check"], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stderr


def test_a_schema_recorded_by_one_process_is_the_reference_for_another(tmp_path: Path, pg_dsn: str) -> None:
    tag = uuid.uuid4().hex[:8]
    home = dagster_home(tmp_path / "dagster_home", pg_dsn, f"dagster_{tag}")
    lake_dsn = create_database(pg_dsn, f"lake_{tag}")
    root = tmp_path / "pipelines"
    shared = {
        "DAGSTER_HOME": str(home),
        "LINEAGE_PIPELINES_DIR": str(root),
        "LINEAGE_DUCKLAKE_CATALOG": f"postgres:{lake_dsn}",
        "LINEAGE_DUCKLAKE_DATA_PATH": str(tmp_path / "lake-data") + "/",  # shared storage, in neither state dir
    }
    state_a, state_b = tmp_path / "state-a", tmp_path / "state-b"
    env_a, env_b = machine_env(shared, state_a), machine_env(shared, state_b)
    _write(root, "x/up.sql", """
        -- pipeline
        -- materialize ducklake://main/up on_schema_change=fail
        SELECT 1 AS id, 'a' AS name
    """)
    _write(root, "x/down.sql", """
        -- pipeline
        -- materialize ducklake://main/down
        SELECT id,
               nam AS name
        FROM lake.main.up
    """)
    # machine A materializes `up`; its own state dir keeps a copy of the schema
    done = _materialize(env_a, tmp_path, "ducklake/main/up")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert any(f.startswith("schemas/") for f in files_under(state_a))

    # machine B, empty state dir: the instance's last materialization is the reference
    headline = "x/down.sql:4:8: warning: ducklake://main/up has no column 'nam' in its last materialization — did you mean 'name'?"
    assert headline in _check(env_b, tmp_path)
    # offline (no instance), B has only its own captures: none, so no reference and no warning
    offline = {k: v for k, v in env_b.items() if k != "DAGSTER_HOME"}
    assert "has no column 'nam'" not in _check(offline, tmp_path)

    # on_schema_change=fail fires on B against the table A wrote
    _write(root, "x/up.sql", """
        -- pipeline
        -- materialize ducklake://main/up on_schema_change=fail
        SELECT 1 AS id, 'a' AS name, 2 AS extra
    """)
    failed = _materialize(env_b, tmp_path, "ducklake/main/up")
    assert failed.returncode != 0
    assert "schema of ducklake://main/up differs from the slice: +extra INTEGER" in failed.stdout + failed.stderr, (failed.stdout + failed.stderr)[-4000:]

    # A syncs the new schema (id, nam): B's reference follows the instance, not anything on its disk
    _write(root, "x/up.sql", """
        -- pipeline
        -- materialize ducklake://main/up on_schema_change=sync
        SELECT 1 AS id, 'a' AS nam
    """)
    done = _materialize(env_a, tmp_path, "ducklake/main/up")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "has no column 'nam'" not in _check(env_b, tmp_path)
    # B never recorded a schema of its own: its state dir holds caches only
    assert not [f for f in files_under(state_b) if not f.startswith("cache/")], files_under(state_b)
