"""The pipelines folder as a Dagster Component (``defs.yaml``) gives the same assets as ``build_definitions``."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
from dagster.components.testing import create_defs_folder_sandbox

from conftest import with_example_parse
from lineage_defs import LineageSettings, build_definitions
from lineage_defs.component import LineageDefsComponent

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pipelines"
TYPE = "lineage_defs.component.LineageDefsComponent"


def _keys(defs) -> set[str]:  # type: ignore[no-untyped-def]
    return {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    state = with_example_parse(tmp_path_factory.mktemp("state"))
    return _keys(build_definitions(EXAMPLE, settings=LineageSettings(state_dir=str(state))))


def test_component_with_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, expected: set[str]) -> None:
    state = with_example_parse(tmp_path / "state")
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(state))
    with warnings.catch_warnings(), create_defs_folder_sandbox() as sandbox:
        warnings.simplefilter("ignore")  # Dagster's beta warnings about code references
        path = sandbox.scaffold_component(
            LineageDefsComponent,
            defs_path="lineage",
            defs_yaml_contents={"type": TYPE, "attributes": {"pipelines_dir": str(EXAMPLE), "state_dir": str(state)}},
        )
        with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
            assert isinstance(component, LineageDefsComponent)
            assert _keys(defs) == expected
            assert len(expected) == 20  # 17 scripts, 2 dbt models, 1 external (the hand-written order_sizes)
    assert list((state / "cache").glob("plan-*.json"))  # the component's state (its parse cache) went where it was told


def test_component_resolves_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, expected: set[str]) -> None:
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(tmp_path / "unused"))
    with warnings.catch_warnings(), create_defs_folder_sandbox() as sandbox:
        warnings.simplefilter("ignore")
        path = sandbox.scaffold_component(
            LineageDefsComponent,
            defs_path="lineage",
            defs_yaml_contents={"type": TYPE, "attributes": {"pipelines_dir": "pipelines", "state_dir": ".lineage"}},
        )
        shutil.rmtree(path / "pipelines")  # the scaffolder's first step: replaced by the example
        shutil.copytree(EXAMPLE, path / "pipelines")  # relative to the defs folder
        with sandbox.build_all_defs() as defs:
            assert _keys(defs) == expected
        assert (sandbox.project_root / ".lineage" / "cache").is_dir()  # relative to the project root
    assert not (tmp_path / "unused").exists()


def test_component_takes_connections_from_the_same_settings_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINEAGE_PG_DSN", "host=db password=hunter2")
    monkeypatch.setenv("LINEAGE_S3_BUCKET", "my-bucket")
    with_example_parse(tmp_path)
    with warnings.catch_warnings(), create_defs_folder_sandbox() as sandbox:
        warnings.simplefilter("ignore")
        path = sandbox.scaffold_component(
            LineageDefsComponent,
            defs_path="lineage",
            defs_yaml_contents={"type": TYPE, "attributes": {"pipelines_dir": str(EXAMPLE), "state_dir": str(tmp_path)}},
        )
        with sandbox.load_component_and_build_defs(defs_path=path) as (_, defs):
            resource = defs.resources["lineage"]
            assert resource.postgres_dsn == "LINEAGE_PG_DSN"  # an EnvVar, resolved in the run process
            assert resource.s3_bucket == "my-bucket"
            assert resource.state_dir == str(tmp_path) and resource.pipelines_dir == str(EXAMPLE)


def test_component_library_dirs_are_relative_to_the_defs_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LINEAGE_LIBRARY_DIRS", raising=False)
    step = "-- pipeline\n-- materialize ducklake://main/t\n-- data_test no_label r1\nSELECT 1 AS id, 'ok' AS label\n"
    test_type = "-- test_type no_label label\nSELECT * FROM this WHERE label = $label\n"
    with warnings.catch_warnings(), create_defs_folder_sandbox() as sandbox:
        warnings.simplefilter("ignore")
        path = sandbox.scaffold_component(
            LineageDefsComponent,
            defs_path="lineage",
            defs_yaml_contents={"type": TYPE, "attributes": {"pipelines_dir": "pipelines", "state_dir": str(tmp_path), "library_dirs": ["checks"]}},
        )
        shutil.rmtree(path / "pipelines")
        (path / "pipelines" / "x").mkdir(parents=True)
        (path / "pipelines" / "x" / "t.sql").write_text(step)
        (path / "checks").mkdir()
        (path / "checks" / "no_label.sql").write_text(test_type)
        with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
            assert component.library_dirs == ["checks"]
            checks = {k.to_user_string() for k in defs.resolve_asset_graph().asset_check_keys}
            assert checks == {"ducklake/main/t:no_label_r1"}
        # without the attribute (and no LINEAGE_LIBRARY_DIRS) the type is unknown: the load fails, located
        (path / "defs.yaml").write_text(f"type: {TYPE}\nattributes:\n  pipelines_dir: pipelines\n  state_dir: {tmp_path}\n")
        with pytest.raises(Exception) as failed:
            with sandbox.load_component_and_build_defs(defs_path=path):
                pass
        chain, exc = [], failed.value  # Dagster wraps the component's own error
        while exc is not None:
            chain.append(str(exc))
            exc = exc.__cause__ or exc.__context__
        assert any("x/t.sql:3:14: unknown data_test 'no_label'" in m for m in chain), chain
