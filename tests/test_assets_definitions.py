"""``build_definitions``: on_invalid, external assets, mute, relationships edges, translator."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import AssetKey, Definitions

from lineage_defs import LineageSettings, LineageTranslator, build_definitions
from lineage_defs.errors import ProjectErrors
from lineage_defs.plan.spec import AnyStep


def key(name: str) -> AssetKey:
    return AssetKey(["ducklake", "main", name])


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def sql(materialize: str, body: str, *extra: str) -> str:
    return "\n".join(["-- pipeline", f"-- materialize {materialize}", *extra, body, ""])


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LineageSettings:
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(tmp_path / "state"))
    return LineageSettings(state_dir=str(tmp_path / "state"))


def build(root: Path, settings: LineageSettings, **kw: object) -> Definitions:
    return build_definitions(root, settings=settings, **kw)  # type: ignore[arg-type]


BROKEN = {
    "p/ok.sql": sql("ducklake://main/ok", "SELECT 1 AS id"),
    "p/bad_keyword.sql": "-- pipeline\n-- partitoned daily\n-- materialize ducklake://main/b1\nSELECT 1 AS id\n",
    "p/bad_option.sql": sql("ducklake://main/b2 keys=id", "SELECT 1 AS id"),
    "p/reader.sql": sql("ducklake://main/reader", "SELECT id FROM lake.main.b1"),
}


def test_raise_lists_every_error(tmp_path: Path, settings: LineageSettings) -> None:
    root = write(tmp_path / "pipelines", BROKEN)
    with pytest.raises(ProjectErrors) as info:
        build(root, settings)
    errors = info.value.errors
    assert {e.path for e in errors} == {"p/bad_keyword.sql", "p/bad_option.sql"}
    message = str(info.value)
    assert message.startswith(f"{len(errors)} errors in the pipelines folder:")
    assert "p/bad_keyword.sql:2:" in message and "did you mean 'partitioned'" in message
    assert "p/bad_option.sql:2:" in message and "did you mean 'key'" in message


def test_skip_loads_the_valid_scripts_only(tmp_path: Path, settings: LineageSettings) -> None:
    root = write(tmp_path / "pipelines", BROKEN)
    skip = LineageSettings(on_invalid="skip", state_dir=settings.state_dir)
    graph = build(root, skip).resolve_asset_graph()
    assert graph.get_all_asset_keys() == {key("ok"), key("reader"), key("b1")}
    # the broken producer is gone: what it would have made is now external
    b1 = graph.get(key("b1"))
    assert not b1.is_materializable and b1.metadata["lineage/uri"] == "ducklake://main/b1"
    assert graph.get(key("reader")).parent_keys == {key("b1")}


def test_unknown_table_is_an_external_asset(tmp_path: Path, settings: LineageSettings) -> None:
    root = write(tmp_path / "pipelines", {"p/a.sql": sql("ducklake://main/a", "SELECT id FROM lake.main.vendor_feed")})
    graph = build(root, settings).resolve_asset_graph()
    node = graph.get(key("vendor_feed"))
    # no spec of ours (a user's asset with this key would clash): Dagster draws it from the dependency
    assert not node.is_materializable and node.is_external
    assert node.metadata["lineage/uri"] == "ducklake://main/vendor_feed" and node.metadata["lineage/external"] is True
    assert node.metadata["dagster/io_manager_key"] == "lineage_io_manager"
    assert graph.get(key("a")).parent_keys == {key("vendor_feed")}
    assert graph.get(key("a")).group_name == "p"


MUTE = {
    "p/ref.sql": sql("ducklake://main/ref", "SELECT 1 AS id"),
    "p/facts.sql": sql("ducklake://main/facts", "SELECT 1 AS id"),
    "p/report.sql": sql("ducklake://main/report", "SELECT f.id FROM lake.main.facts AS f JOIN lake.main.ref AS r ON r.id = f.id", "-- mute ducklake://main/ref"),
}


def test_mute_removes_an_inferred_edge(tmp_path: Path, settings: LineageSettings) -> None:
    root = write(tmp_path / "pipelines", MUTE)
    graph = build(root, settings).resolve_asset_graph()
    assert graph.get(key("report")).parent_keys == {key("facts")}

    unmuted = write(tmp_path / "unmuted", {**MUTE, "p/report.sql": MUTE["p/report.sql"].replace("-- mute ducklake://main/ref\n", "")})
    assert build(unmuted, settings).resolve_asset_graph().get(key("report")).parent_keys == {key("facts"), key("ref")}

    mute_all = write(tmp_path / "all", {**MUTE, "p/report.sql": MUTE["p/report.sql"].replace("mute ducklake://main/ref", "mute all")})
    assert build(mute_all, settings).resolve_asset_graph().get(key("report")).parent_keys == set()


def test_relationships_adds_the_edge_to_the_producer(tmp_path: Path, settings: LineageSettings) -> None:
    root = write(
        tmp_path / "pipelines",
        {
            "p/customers.sql": sql("ducklake://main/customers", "SELECT 1 AS id"),
            "p/orders.sql": sql(
                "ducklake://main/orders",
                "SELECT 10 AS order_id, 1 AS customer_id",
                "-- data_test relationships customer_id -> ducklake://main/customers.id",
            ),
        },
    )
    defs = build(root, settings)
    graph = defs.resolve_asset_graph()
    assert graph.get(key("orders")).parent_keys == {key("customers")}  # the body never reads it
    (check,) = [c for a in defs.assets if hasattr(a, "check_specs") for c in a.check_specs if c.asset_key == key("orders")]  # type: ignore[union-attr]
    assert check.name == "relationships_customer_id"
    assert {d.asset_key for d in check.additional_deps} == {key("customers")}


class TeamGroups(LineageTranslator):
    def group_name(self, step: AnyStep) -> str:
        return f"team_{step.pipeline}"



def test_translator_subclass_changes_group_names(tmp_path: Path, settings: LineageSettings) -> None:
    root = write(
        tmp_path / "pipelines",
        {
            "sales/a.sql": sql("ducklake://main/a", "SELECT id FROM lake.main.vendor_feed"),
            "ops/b.sql": sql("ducklake://main/b", "SELECT id FROM lake.main.a"),
        },
    )
    graph = build(root, settings, translator=TeamGroups()).resolve_asset_graph()
    groups = {k.path[-1]: graph.get(k).group_name for k in graph.get_all_asset_keys()}
    assert groups == {"a": "team_sales", "b": "team_ops", "vendor_feed": "default"}  # Dagster's node for an input nobody produces
    # the default translator: the pipeline folder
    graph = build(root, settings).resolve_asset_graph()
    assert {k.path[-1]: graph.get(k).group_name for k in graph.get_all_asset_keys()} == {"a": "sales", "b": "ops", "vendor_feed": "default"}
