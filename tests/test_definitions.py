"""The code location module: environment read when `defs` is asked for, secrets kept out of the UI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import with_example_parse
from lineage_defs.assets.resources import LineageResource
from lineage_defs.settings import LineageSettings
from services import IN_PROCESS

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pipelines"


def test_secrets_reach_the_resource_as_env_vars(tmp_path: Path) -> None:
    env = {
        "LINEAGE_PIPELINES_DIR": str(EXAMPLE),
        "LINEAGE_STATE_DIR": str(tmp_path),
        "LINEAGE_PG_DSN": "host=db password=hunter2-main",
        "LINEAGE_PG_DSN_CRM": "host=crm password=hunter2-crm",
        "LINEAGE_DUCKLAKE_CATALOG": "postgres:host=lake password=hunter2-lake",
        "AWS_ACCESS_KEY_ID": "AKIA-hunter2",
        "AWS_SECRET_ACCESS_KEY": "hunter2-secret",
        "LINEAGE_S3_BUCKET": "my-bucket",
        "LINEAGE_EVENTS_DSN": "host=events password=hunter2-events",
    }
    settings = LineageSettings.from_env(env)
    resource = LineageResource.for_settings(settings)
    assert settings.pipelines_dir == str(EXAMPLE) and settings.state_dir == str(tmp_path)
    shown = resource.get_resource_definition().config_schema.default_value_as_json_str  # what the UI lists
    assert "hunter2" not in shown
    values = json.loads(shown)
    assert values["postgres_dsn"] == {"env": "LINEAGE_PG_DSN"}
    assert values["postgres_dsns"] == {"crm": {"env": "LINEAGE_PG_DSN_CRM"}}
    assert values["ducklake_catalog"] == {"env": "LINEAGE_DUCKLAKE_CATALOG"}
    assert values["s3_secret_access_key"] == {"env": "AWS_SECRET_ACCESS_KEY"}
    assert values["s3_bucket"] == "my-bucket"  # not a secret: shown as is
    assert values["events_dsn"] == {"env": "LINEAGE_EVENTS_DSN"}  # runs open the same event store, by the variable
    assert settings.events_location == "host=events password=hunter2-events" and "hunter2" not in settings.events_where
    # dagster-duckdb's resource and I/O manager carry the same settings, as config nested in theirs
    from lineage_defs.location import resources

    for key, bound in resources(settings).items():
        shown = bound.get_resource_definition().config_schema.default_value_as_json_str
        assert "hunter2" not in shown, key
        nested = json.loads(shown) if key == "lineage" else json.loads(shown)["lineage"]
        assert nested["postgres_dsns"] == {"crm": {"env": "LINEAGE_PG_DSN_CRM"}}, key


def test_an_events_dsn_that_is_no_dsn_is_refused_with_the_fix(tmp_path: Path) -> None:
    import pytest

    from lineage_defs.errors import RunError

    assert LineageSettings.from_env({"LINEAGE_STATE_DIR": str(tmp_path)}).events_location == tmp_path / "events" / "events.sqlite"
    with pytest.raises(RunError, match="LINEAGE_EVENTS_DSN") as e:
        LineageSettings.from_env({"LINEAGE_EVENTS_DSN": "events-db"})
    assert "host=db" in str(e.value)
    with pytest.raises(RunError, match="events_dsn"):
        LineageSettings(events_dsn="/data/events.sqlite")  # set in code: the same check


def test_importing_the_code_location_reads_nothing() -> None:
    code = "import lineage_defs.definitions as d; print('imported'); d.defs"
    env = {**os.environ, "LINEAGE_PIPELINES_DIR": "/nonexistent/pipelines"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.strip() == "imported"  # the import itself did no work
    assert r.returncode != 0 and "pipelines folder '/nonexistent/pipelines' does not exist" in r.stderr


@pytest.mark.daemon
def test_every_dagster_entry_form_loads_the_example(tmp_path: Path) -> None:
    """`-m` with and without `-a defs` (autodiscovery lists the lazy `defs`), `workspace.yaml`, and a
    real run through `-m`; the example's hand-written assets (LINEAGE_DEFINITIONS) come along."""
    from lineage_defs import build_definitions

    root = EXAMPLE.parents[1]
    env = {
        **os.environ,
        "LINEAGE_PIPELINES_DIR": str(EXAMPLE),
        "LINEAGE_STATE_DIR": str(tmp_path / "state"),
        "LINEAGE_DEFINITIONS": str(root / "examples" / "python_assets.py"),
    }

    def home(name: str) -> dict[str, str]:
        """A Dagster instance per form: processes creating one instance's SQLite tables at once race."""
        path = tmp_path / ("home_" + "".join(c if c.isalnum() else "_" for c in name))
        path.mkdir()
        (path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        return {**env, "DAGSTER_HOME": str(path)}
    build_definitions(EXAMPLE, settings=LineageSettings(state_dir=str(with_example_parse(tmp_path / "state"))))  # parse caches warm: the forms load alike
    dagster = str(Path(sys.executable).parent / "dagster")
    forms = {
        "-m": [dagster, "asset", "list", "-m", "lineage_defs.definitions"],
        "-m -a defs": [dagster, "asset", "list", "-m", "lineage_defs.definitions", "-a", "defs"],
        "validate -m": [dagster, "definitions", "validate", "-m", "lineage_defs.definitions"],  # the failing command
        "workspace.yaml": [dagster, "definitions", "validate", "-w", str(root / "workspace.yaml")],
        # its one step in the run's process (a process per step, loading the code location again, is
        # test_duckdb_io's test_the_example_under_dagster_asset_materialize)
        "materialize -m": [dagster, "asset", "materialize", "-m", "lineage_defs.definitions", "--select", 'key:"ducklake/main/products"',
                           *IN_PROCESS],
    }
    running = {name: subprocess.Popen(cmd, cwd=tmp_path, env=home(name), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name, cmd in forms.items()}
    done: dict[str, tuple[int, str, str]] = {}
    for name, p in running.items():
        out, err = p.communicate(timeout=600)  # reads as it waits: a full pipe never blocks a form
        done[name] = (p.returncode, out, err)
    for name, (rc, out, err) in done.items():
        assert rc == 0, f"{name}: {err[-2000:]}"
    for name in ("-m", "-m -a defs"):
        keys = set(done[name][1].split())
        assert {"ducklake/main/orders", "dbt/warehouse/main/store_daily", "ducklake/main/order_sizes"} <= keys, name
    for name in ("validate -m", "workspace.yaml"):
        assert "Validation successful" in done[name][1] + done[name][2], name
    assert "RUN_SUCCESS" in done["materialize -m"][2]


def test_lineage_definitions_names_a_module_or_file_and_says_what_is_wrong(tmp_path: Path) -> None:
    import pytest
    from dagster import Definitions

    from lineage_defs.definitions import user_definitions
    from lineage_defs.errors import RunError

    good = tmp_path / "mine.py"
    good.write_text("import dagster as dg\n\nother = dg.Definitions()\n")
    assert isinstance(user_definitions(f"{good}:other"), Definitions)
    with pytest.raises(RunError) as e:
        user_definitions(str(good))  # no `defs`
    assert "has no Definitions named 'defs'" in str(e.value) and f"{good}:<name>" in str(e.value)
    with pytest.raises(RunError) as e:
        user_definitions("no_such_package.assets")
    assert "cannot import no_such_package.assets" in str(e.value) and "PYTHONPATH" in str(e.value)
    with pytest.raises(RunError) as e:
        user_definitions(str(tmp_path / "missing.py"))
    assert "no Python file" in str(e.value)
    assert LineageSettings.from_env({"LINEAGE_DEFINITIONS": f"a.b, {good}:other"}).definitions == ("a.b", f"{good}:other")


LOAD_AND_LOOK = """
import gc, sys
from lineage_defs import LineageSettings, build_definitions
if sys.argv[3] == "off":
    gc.disable()
frozen = gc.get_freeze_count()
defs = build_definitions(sys.argv[1], settings=LineageSettings(state_dir=sys.argv[2]))
walked = {id(o) for o in gc.get_objects()}  # the collector's generations
specs = list(defs.resolve_all_asset_specs())
frozen, before = gc.get_freeze_count() - frozen, gc.get_freeze_count()
again = build_definitions(sys.argv[1], settings=LineageSettings(state_dir=sys.argv[2]))
print(gc.isenabled(), frozen, id(defs) in walked, any(id(s) in walked for s in specs), len(specs), gc.get_freeze_count() - before)
"""


def test_a_load_leaves_nothing_for_the_collector_to_walk_again(tmp_path: Path) -> None:
    """The definitions a load made live as long as its process: they are moved out of the cyclic
    collector's generations (``gc.freeze``), so its next passes do not walk them; the collector is on
    again afterwards. A second load in the same process freezes nothing (what a freeze holds is never
    collected). A caller that turned the collector off keeps it off, and nothing is frozen."""
    folder = tmp_path / "pipelines"
    (folder / "p").mkdir(parents=True)
    for i in range(3):
        (folder / "p" / f"t{i}.sql").write_text(f"-- pipeline\n-- materialize ducklake://main/t{i}\nSELECT {i} AS n\n")
    on = subprocess.run([sys.executable, "-c", LOAD_AND_LOOK, str(folder), str(tmp_path / "state"), "on"],
                        capture_output=True, text=True, timeout=120)
    enabled, frozen, defs_walked, specs_walked, n, second = on.stdout.split()
    assert (enabled, defs_walked, specs_walked, n) == ("True", "False", "False", "3"), on.stdout + on.stderr
    assert int(frozen) > 1000 and int(second) <= 0, on.stdout
    off = subprocess.run([sys.executable, "-c", LOAD_AND_LOOK, str(folder), str(tmp_path / "state"), "off"],
                         capture_output=True, text=True, timeout=120)
    enabled, frozen, defs_walked, _, _, _ = off.stdout.split()
    assert (enabled, frozen, defs_walked) == ("False", "0", "True"), off.stdout + off.stderr
