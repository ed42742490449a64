"""dbt projects in the plan: the manifest cache, producers and cycles across the script/dbt boundary,
and dbt's own errors located."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dbt_projects import settled, write_files
from lineage_defs.dbt import manifest as dbt_manifest
from lineage_defs.dbt.config import parse_lineage_yml
from lineage_defs.project import load_project
from lineage_defs.settings import LineageSettings

SMALL = {
    "p/raw.sql": "-- pipeline\n-- materialize ducklake://main/raw\nSELECT 1 AS id, 2.5 AS amount\n",
    "p/dbt/dbt_project.yml": "name: small\nversion: '1.0'\nprofile: small\n",
    "p/dbt/models/sources.yml": "version: 2\nsources:\n  - name: lake\n    database: lake\n    schema: main\n    tables:\n      - name: raw\n",
    "p/dbt/models/stg.sql": "select id, amount * 2 as doubled from {{ source('lake', 'raw') }}\n",
    "p/dbt/models/everything.sql": "select * from {{ ref('stg') }}\n",
}


@pytest.mark.dbt
def test_warm_load_runs_no_dbt_and_renders_nothing(tmp_path: Path) -> None:
    root, cache = settled(write_files(tmp_path / "pipelines", SMALL)), tmp_path / "state" / "cache"
    cold = load_project(root, LineageSettings(state_dir=str(cache.parent)))
    assert not cold.errors, [e.render() for e in cold.errors]
    steps = {s.uri: s for s in cold.steps}
    # `*` over an upstream model expands through the load-time lineage of that model
    assert steps["dbt://warehouse/main/everything"].output_columns == ("id", "doubled")
    keys = sorted(p.name for p in (cache / "dbt").iterdir())
    assert len(keys) == 1 and (cache / "dbt" / keys[0] / "partial_parse.msgpack").exists()

    # a fresh process, as every Dagster run process is: no dbt, no sqlglot, no Jinja, and the plan
    # the last load kept (its key, the dbt part's fingerprint included, is the same in every process)
    code = (
        "import json, sys\nfrom pathlib import Path\nimport lineage_defs.project as lp\nfrom lineage_defs.project import load_project\nfrom lineage_defs.settings import LineageSettings\n"
        "def planned(*a, **k):\n    raise SystemExit('planned again')\n"
        "lp.plan_folder = lp.load_files = planned\n"
        f"p = load_project(Path({str(root)!r}), LineageSettings(state_dir={str(cache.parent)!r}))\n"
        "print(json.dumps({'steps': len(p.steps), 'errors': len(p.errors), "
        "'imported': sorted(m for m in ('dbt', 'sqlglot', 'jinja2', 'dagster', 'dagster_dbt') if m in sys.modules)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"steps": 3, "errors": 0, "imported": []}

    (root / "p" / "dbt" / "models" / "stg.sql").write_text("select id, amount as doubled from {{ source('lake', 'raw') }}\n")
    changed = load_project(root, LineageSettings(state_dir=str(cache.parent)))
    assert len(list((cache / "dbt").iterdir())) == 2  # a changed model is a new manifest
    edges = {(e.source, e.target, e.kind) for e in changed.steps[0].column_edges + changed.steps[1].column_edges}
    assert ("ducklake://main/raw.amount", "dbt://warehouse/main/stg.doubled", "copy") in edges


@pytest.mark.dbt
def test_with_caching_off_the_manifest_lives_as_long_as_its_process(tmp_path: Path) -> None:
    """No cache dir: the parse goes to a folder of the process, read while it runs, gone after it exits."""
    root, tmp = write_files(tmp_path / "pipelines", SMALL), tmp_path / "tmp"
    tmp.mkdir()
    code = (
        "import json, os\nfrom pathlib import Path\nfrom lineage_defs.project import load_project\n"
        f"p = load_project(Path({str(root)!r}))\n"  # no settings: caching off
        "print(json.dumps({'steps': len(p.steps), 'errors': [e.render() for e in p.errors], 'manifests': [str(m) for m in Path(os.environ['TMPDIR']).rglob('manifest.json')]}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": str(tmp)})
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["steps"] == 3 and not seen["errors"], seen
    assert len(seen["manifests"]) == 1, seen  # the manifest was there while the process ran
    assert not list(tmp.glob("lineage-dbt-*")), list(tmp.iterdir())


@pytest.mark.dbt
def test_the_parse_cache_and_code_versions_do_not_depend_on_where_the_state_dir_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_files(tmp_path / "pipelines", SMALL)
    first = load_project(root, LineageSettings(state_dir=str(tmp_path / "one")))
    key = {p.name for p in (tmp_path / "one" / "cache" / "dbt").iterdir()}
    # another state dir starting from the first one's parse cache: the same entry, no dbt parse
    shutil.copytree(tmp_path / "one" / "cache" / "dbt", tmp_path / "two" / "cache" / "dbt")
    monkeypatch.setattr(dbt_manifest.subprocess, "run", lambda *a, **k: pytest.fail(f"dbt parsed again: {a}"))
    second = load_project(root, LineageSettings(state_dir=str(tmp_path / "two")))
    monkeypatch.undo()
    assert not second.errors and {p.name for p in (tmp_path / "two" / "cache" / "dbt").iterdir()} == key
    assert [(s.uri, s.content_hash) for s in second.steps] == [(s.uri, s.content_hash) for s in first.steps]
    # a build starts from the cached partial parse only with the profile dbt made it with (dbt would
    # reject it, paths included); a build that found none leaves dbt's own for the next ones
    (one,), (two,) = first.dbt_projects, second.dbt_projects
    assert (one.target_path(root, "r1") / "partial_parse.msgpack").exists()
    built = two.target_path(root, "r2")
    assert not (built / "partial_parse.msgpack").exists()
    (built / "partial_parse.msgpack").write_bytes(b"dbt's own, made with the second profile")
    two.keep_partial_parse(built)
    assert (two.target_path(root, "r3") / "partial_parse.msgpack").read_bytes() == b"dbt's own, made with the second profile"
    assert (one.target_path(root, "r4") / "partial_parse.msgpack").read_bytes() != b"dbt's own, made with the second profile"  # each state dir's own entry
    # unless the project's Jinja reads the target's paths: then where the state dir is counts
    folder = root / "p" / "dbt"
    one, two = (next((tmp_path / s / "dbt" / "profiles").iterdir()) for s in ("one", "two"))
    assert dbt_manifest.project_hash(folder, one, [], str(tmp_path / "one")) == dbt_manifest.project_hash(folder, two, [], str(tmp_path / "two"))
    (folder / "macros").mkdir()
    (folder / "macros" / "where.sql").write_text("{% macro where() %}{{ target.path }}{% endmacro %}\n")
    assert dbt_manifest.project_hash(folder, one, [], str(tmp_path / "one")) != dbt_manifest.project_hash(folder, two, [], str(tmp_path / "two"))
    (folder / "macros" / "where.sql").unlink()
    # what the parse does see still counts: more threads in the generated profile is another entry
    (root / "p" / "dbt" / "lineage.yml").write_text("threads: 4\n")
    load_project(root, LineageSettings(state_dir=str(tmp_path / "two")))
    assert len(list((tmp_path / "two" / "cache" / "dbt").iterdir())) == 2


@pytest.mark.dbt
def test_producers_and_cycles_cross_the_boundary(tmp_path: Path) -> None:
    files = {
        **SMALL,
        # a script writing the relation a model builds: a second producer of the same asset
        "p/clash.sql": "-- pipeline\n-- materialize duckdb://warehouse/stg\nSELECT 1 AS id\n",
        # script → model → script: raw2 is read by a model whose relation raw2 reads
        "p/raw2.sql": "-- pipeline\n-- materialize ducklake://main/raw2\nSELECT id FROM warehouse.main.loop\n",
        "p/dbt/models/loop.sql": "select id from {{ source('lake', 'raw2') }}\n",
        "p/dbt/models/more_sources.yml": "version: 2\nsources:\n  - name: lake2\n    database: lake\n    schema: main\n    tables:\n      - name: raw2\n",
    }
    files["p/dbt/models/loop.sql"] = "select id from {{ source('lake2', 'raw2') }}\n"
    project = load_project(write_files(tmp_path / "pipelines", files), LineageSettings(state_dir=str(tmp_path)))
    rendered = [e.render() for e in project.errors]
    assert any(r.startswith("p/clash.sql:2:16: duckdb://warehouse/stg is the relation the dbt model p/dbt/models/stg.sql builds") for r in rendered), rendered
    cycle = [r for r in rendered if "dependency cycle" in r]
    assert len(cycle) == 1 and "p/dbt/models/loop.sql" in cycle[0] and "p/raw2.sql" in cycle[0], rendered


@pytest.mark.dbt
def test_dbt_parse_error_is_located(tmp_path: Path) -> None:
    files = {**SMALL, "p/dbt/models/broken.sql": "select {{ ref( }}\n"}
    project = load_project(write_files(tmp_path / "pipelines", files), LineageSettings(state_dir=str(tmp_path)))
    errors = [e for e in project.errors if e.path == "p/dbt/dbt_project.yml"]
    assert len(errors) == 1 and "broken.sql" in errors[0].message, [e.render() for e in project.errors]
    assert errors[0].fix and "dbt parse" in errors[0].fix
    assert [s.uri for s in project.steps] == ["ducklake://main/raw"]  # the scripts still load


def test_default_profile_names_no_secret(tmp_path: Path) -> None:
    text = dbt_manifest.default_profile("p", LineageSettings(state_dir=str(tmp_path)))
    out = json.loads(text)["p"]["outputs"]["lineage"]
    assert out["path"] == str(tmp_path.resolve() / "warehouse.duckdb") and out["database"] == "warehouse"
    attach = out["attach"][0]
    assert attach["alias"] == "lake" and "env_var('LINEAGE_DUCKLAKE_CATALOG'" in attach["path"]
    assert out["config_options"]["autoinstall_known_extensions"] is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("select: tag:a\nexclude: b\nvars: {x: 1}\ntarget: ci\nthreads: 3\ntest_behavior: after_all\ncolumn_lineage: false\n",
         {"select": "tag:a", "exclude": "b", "vars_json": '{"x": 1}', "target": "ci", "threads": 3, "test_behavior": "after_all", "column_lineage": False}),
        ("", {"select": "fqn:*", "test_behavior": "build", "column_lineage": True}),
    ],
)  # fmt: skip
def test_lineage_yml_values(text: str, expected: dict[str, object]) -> None:
    cfg, errors = parse_lineage_yml("x/lineage.yml", text)
    assert not errors
    assert {k: getattr(cfg, k) for k in expected} == expected


@pytest.mark.dbt
def test_project_with_its_own_profile(tmp_path: Path) -> None:
    files = {
        "p/proj/dbt_project.yml": "name: own\nversion: '1.0'\nprofile: own\n",
        "p/proj/profiles.yml": f"own:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n      path: {tmp_path / 'own.duckdb'}\n",
        "p/proj/models/sources.yml": "version: 2\nsources:\n  - name: crm\n    schema: raw\n    tables:\n      - name: people\n",
        "p/proj/models/base.sql": "select id, name from {{ source('crm', 'people') }}\n",
        "p/proj/models/top.sql": "select id, upper(name) as name from {{ ref('base') }}\n",
    }
    root = write_files(tmp_path / "pipelines", files)
    project = load_project(root, LineageSettings(state_dir=str(tmp_path / "state")))
    assert not project.errors, [e.render() for e in project.errors]
    assert not (tmp_path / "state" / "dbt" / "profiles").exists()  # the project's own profile is used as it is
    steps = {s.uri: s for s in project.steps}
    assert set(steps) == {"dbt://own/main/base", "dbt://own/main/top"}
    assert [d.uri for d in steps["dbt://own/main/base"].deps] == ["dbt://own/raw/people"]  # a source of its own database
    assert project.externals == ("dbt://own/raw/people",)
    edges = {(e.source, e.target, e.kind) for e in steps["dbt://own/main/top"].column_edges}
    assert edges == {("dbt://own/main/base.id", "dbt://own/main/top.id", "copy"), ("dbt://own/main/base.name", "dbt://own/main/top.name", "mod")}
    base_edges = {(e.source, e.target) for e in steps["dbt://own/main/base"].column_edges}
    assert ("dbt://own/raw/people.name", "dbt://own/main/base.name") in base_edges


@pytest.mark.dbt
def test_own_profile_target_names_its_duckdb_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lineage_defs.dbt.manifest import own_target

    project = write_files(tmp_path, {
        "dbt_project.yml": "name: shop\nversion: '1.0'\nprofile: shop_profile\n",
        "profiles.yml": (
            "shop_profile:\n  target: dev\n  outputs:\n"
            "    dev:\n      type: duckdb\n      path: \"{{ env_var('SHOP_DB', 'shop.duckdb') }}\"\n"
            "      attach:\n        - path: /data/ref.duckdb\n        - path: 'md:cloud'\n          alias: cloud\n"
            "    prod:\n      type: postgres\n      host: db\n    mem:\n      type: duckdb\n      path: ':memory:'\n"
        ),
    })  # fmt: skip
    # relative to the project folder (dbt runs there); env_var rendered; MotherDuck is no file
    assert own_target(project, None).files == (("shop", str((project / "shop.duckdb").resolve())), ("ref", "/data/ref.duckdb"))
    monkeypatch.setenv("SHOP_DB", "/abs/other.duckdb")
    assert own_target(project, "dev").files[0] == ("other", "/abs/other.duckdb")
    assert own_target(project, "prod").adapter == "postgres" and not own_target(project, "prod").files
    assert own_target(project, "mem").files == ()
    assert "no target 'qa'" in own_target(project, "qa").problem
