"""Code versions: what decides an asset's output, hashed; ``lineage-defs changed [+]`` as a Dagster selection.

Editing one script changes that asset's code version only; a macro library
changes the versions of the steps that use it; a dbt model's edit changes
that model's. ``changed`` compares with a git commit or with the latest
materializations in the Dagster instance, and ``+`` selects everything
downstream — resolved by Dagster's own selection grammar.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from lineage_defs import LineageSettings, build_definitions, load_project
from lineage_defs.changed import downstream, selection

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pipelines"


def _versions(folder: Path, state: Path) -> dict[str, str | None]:
    return {u: s.code_version for s in load_project(folder, LineageSettings(state_dir=str(state))).steps for u in s.outputs}


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    """The example without its dbt project (a dbt parse per load is slow; dbt has its own test)."""
    return Path(shutil.copytree(EXAMPLE, tmp_path / "pipelines", ignore=shutil.ignore_patterns("dbt")))


def _edit(path: Path, line: str = "-- edited\n") -> None:
    path.write_text(path.read_text() + line)


def test_editing_a_script_changes_only_its_code_version(scripts: Path, tmp_path: Path) -> None:
    before = _versions(scripts, tmp_path / "state")
    assert all(before.values()) and len(set(before.values())) == len(before)  # every asset has its own
    _edit(scripts / "shop" / "products.sql")
    after = _versions(scripts, tmp_path / "state")
    assert {u for u in before if before[u] != after[u]} == {"ducklake://main/products"}

    # a macro library is part of the code of every step that uses it
    users = {s.uri for s in load_project(scripts).steps if "shop/macros/money.sql" in getattr(s, "uses", ())}
    assert {"ducklake://main/orders", "ducklake://main/daily_revenue"} <= users
    _edit(scripts / "shop" / "macros" / "money.sql")
    again = _versions(scripts, tmp_path / "state")
    assert {u for u in after if after[u] != again[u]} == users

    defs = build_definitions(scripts, settings=LineageSettings(state_dir=str(tmp_path / "state")))
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey(["ducklake", "main", "products"])).code_version == again["ducklake://main/products"]


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lineage_defs.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _resolve(defs: dg.Definitions, text: str) -> set[str]:
    return {k.to_user_string() for k in dg.AssetSelection.from_string(text).resolve(defs.resolve_asset_graph())}


def test_changed_since_a_commit_and_everything_downstream(scripts: Path, tmp_path: Path) -> None:
    repo = scripts.parent
    env = {**os.environ, "LINEAGE_STATE_DIR": str(tmp_path / "state"), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "pipelines"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)
    nothing = _cli("changed", str(scripts), "--since", "HEAD", cwd=repo, env=env)
    assert nothing.returncode == 0 and nothing.stdout == "" and "no asset changed" in nothing.stderr

    _edit(scripts / "shop" / "orders.sql")
    only = _cli("changed", str(scripts), "--since", "HEAD", cwd=repo, env=env)
    assert only.returncode == 0 and only.stdout.strip() == 'key:"ducklake/main/orders"'
    assert "changed  ducklake://main/orders  (shop/orders.sql)" in only.stderr

    plus = _cli("changed", str(scripts), "+", "--since", "HEAD", cwd=repo, env=env)
    assert plus.returncode == 0 and plus.stdout.strip() == 'key:"ducklake/main/orders"+'
    defs = build_definitions(scripts, settings=LineageSettings(state_dir=str(tmp_path / "state")))
    project = load_project(scripts)
    below = downstream(project, ["ducklake://main/orders"])
    assert {"ducklake://main/daily_revenue", "ducklake://main/monthly_revenue", "duckdb://warehouse/customer_ltv"} <= set(below)
    expected = {"/".join(["ducklake", "main", "orders"])} | {"/".join(u.replace("://", "/").split("/")) for u in below}
    assert _resolve(defs, plus.stdout.strip()) == expected  # Dagster's own grammar finds the same downstream
    assert all(f"below    {u}" in plus.stderr for u in below)

    (scripts / "shop" / "new_step.sql").write_text("-- pipeline\n-- materialize ducklake://main/new_step\nSELECT 1 AS x\n")
    new = _cli("changed", str(scripts), "--since", "HEAD", cwd=repo, env=env)
    assert set(new.stdout.strip().split(" or ")) == {'key:"ducklake/main/orders"', 'key:"ducklake/main/new_step"'}
    assert "new      ducklake://main/new_step  (shop/new_step.sql)" in new.stderr

    bad = _cli("changed", str(scripts), "--since", "no-such-ref", cwd=repo, env=env)
    assert bad.returncode == 1 and "'no-such-ref' is not a commit" in bad.stderr


def test_changed_against_the_latest_materializations(tmp_path: Path) -> None:
    folder = tmp_path / "pipelines" / "shop"
    folder.mkdir(parents=True)
    (folder / "a.sql").write_text("-- pipeline\n-- materialize ducklake://main/a\nSELECT 1 AS x\n")
    (folder / "b.sql").write_text("-- pipeline\n-- materialize ducklake://main/b\nSELECT x FROM lake.main.a\n")
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "LINEAGE_STATE_DIR": str(tmp_path / "state")}
    pipelines = str(tmp_path / "pipelines")

    never = _cli("changed", pipelines, cwd=tmp_path, env=env)
    assert set(never.stdout.split()) == {'key:"ducklake/main/a"', "or", 'key:"ducklake/main/b"'}  # never materialized: new

    settings = LineageSettings(state_dir=str(tmp_path / "state"))
    defs = build_definitions(pipelines, settings=settings)
    keys = [dg.AssetKey(["ducklake", "main", "a"]), dg.AssetKey(["ducklake", "main", "b"])]
    job = defs.resolve_implicit_job_def_def_for_assets(keys)
    assert job is not None
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert job.execute_in_process(asset_selection=keys, instance=instance).success
    synced = _cli("changed", pipelines, cwd=tmp_path, env=env)
    assert synced.returncode == 0 and synced.stdout == "", synced.stderr

    _edit(folder / "a.sql")
    edited = _cli("changed", pipelines, "+", cwd=tmp_path, env=env)
    assert edited.stdout.strip() == 'key:"ducklake/main/a"+'
    assert "changed  ducklake://main/a  (shop/a.sql)" in edited.stderr and "below    ducklake://main/b" in edited.stderr
    # the UI's view: the edited asset's code version is no longer the one it was materialized with
    defs = build_definitions(pipelines, settings=settings)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(keys[0])
        assert event is not None and event.asset_materialization is not None
        assert event.asset_materialization.tags["dagster/code_version"] != defs.resolve_asset_graph().get(keys[0]).code_version
        event = instance.get_latest_materialization_event(keys[1])
        assert event is not None and event.asset_materialization is not None
        assert event.asset_materialization.tags["dagster/code_version"] == defs.resolve_asset_graph().get(keys[1]).code_version

    unset = _cli("changed", pipelines, cwd=tmp_path, env={k: v for k, v in env.items() if k != "DAGSTER_HOME"})
    assert unset.returncode == 1 and "DAGSTER_HOME is not set" in unset.stderr and "--since" in unset.stderr


@pytest.mark.dbt
def test_a_dbt_models_code_version_is_its_own(tmp_path: Path) -> None:
    project = Path(shutil.copytree(EXAMPLE / "reporting", tmp_path / "pipelines" / "reporting"))
    state = tmp_path / "state"
    before = _versions(project.parent, state)
    stg, mart = "dbt://warehouse/main/stg_orders", "dbt://warehouse/main/store_daily"
    assert before[stg] and before[mart] and before[stg] != before[mart]
    _edit(project / "dbt" / "models" / "marts" / "store_daily.sql", "-- edited\n")
    after = _versions(project.parent, state)
    assert {u for u in before if before[u] != after[u]} == {mart}
    # a macro the model calls is part of its code
    (project / "dbt" / "macros").mkdir()
    (project / "dbt" / "macros" / "cents.sql").write_text("{% macro eur(x) %}({{ x }} / 100.0){% endmacro %}\n")
    stg_sql = project / "dbt" / "models" / "staging" / "stg_orders.sql"
    stg_sql.write_text(stg_sql.read_text().replace("select\n", "select\n    {{ eur('1') }} AS one_eur,\n", 1))
    assert "eur('1')" in stg_sql.read_text()
    with_macro = _versions(project.parent, state)
    (project / "dbt" / "macros" / "cents.sql").write_text("{% macro eur(x) %}({{ x }} / 100){% endmacro %}\n")
    macro_edited = _versions(project.parent, state)
    assert {u for u in with_macro if with_macro[u] != macro_edited[u]} == {stg}
    assert selection([stg], True) == 'key:"dbt/warehouse/main/stg_orders"+'
