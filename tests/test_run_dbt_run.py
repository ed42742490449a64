"""dbt invocations of a run and the lineage pass's budget: pure functions of the settings and the window."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from lineage_defs.dbt.config import DbtConfig
from lineage_defs.dbt.commands import dbt_commands, pass_budget

UTC = dt.timezone.utc
SEL = ["--select", "fqn:p.m"]


def test_test_behavior_decides_the_commands() -> None:
    cfg = DbtConfig(vars_json='{"a": 1}', target="ci", threads=4)
    common = [*SEL, "--vars", '{"a": 1}', "--target", "ci", "--threads", "4"]
    assert dbt_commands(cfg, None, SEL) == [["build", *common]]
    assert dbt_commands(DbtConfig(test_behavior="after_all", vars_json='{"a": 1}', target="ci", threads=4), None, SEL) == [["run", *common], ["test", *common]]
    assert dbt_commands(DbtConfig(test_behavior="none"), None, SEL) == [["run", *SEL]]


def test_a_window_builds_exactly_its_batches_in_utc() -> None:
    berlin = dt.timezone(dt.timedelta(hours=1))
    window = (dt.datetime(2025, 1, 2, 1, tzinfo=berlin), dt.datetime(2025, 1, 5, 1, tzinfo=berlin))
    run, test = dbt_commands(DbtConfig(test_behavior="after_all"), window, SEL)
    assert run == ["run", "--event-time-start", "2025-01-02 00:00:00", "--event-time-end", "2025-01-05 00:00:00", *SEL]
    assert "--event-time-start" not in test  # tests read the whole model


def test_pass_budget_is_half_of_what_is_left() -> None:
    assert pass_budget(3600.0, 1000.0, 1000.0 + 600.0) == 1500.0
    assert pass_budget(600.0, 0.0, 900.0) == 0.0  # over the run's budget: no time for lineage
    assert pass_budget(100.0, None, 5.0) == 50.0  # no recorded start: the whole budget is left


# -- waves: edges dbt cannot see -------------------------------------------------------------

from lineage_defs.dbt.selection import topological, wave_args, waves  # noqa: E402
from lineage_defs.plan.spec import DbtStep, DbtTest, Dep  # noqa: E402
from lineage_defs.parse.model import Severity  # noqa: E402

W = "dbt://warehouse/main/"


def _step(name: str, deps: tuple[str, ...] = (), tests: tuple[DbtTest, ...] = (), kind: str = "model") -> DbtStep:
    return DbtStep(
        name=name, pipeline="p", path=f"p/dbt/{name}.sql", description="", outputs=(W + name,), deps=tuple(Dep(W + d, False) for d in deps),
        unique_id=f"{kind}.p.{name}", project="p/dbt", relation=f"warehouse.main.{name}", resource_type=kind, materialized="table", tests=tests, fqn=f"p.{name}",
    )  # fmt: skip


# the manifest as dbt sees it: `stg` reads the seed through source('crm', 'seed'), `mart` refs `stg`
NODES: dict[str, dict[str, object]] = {
    "seed.p.seed": {"resource_type": "seed", "depends_on": {"nodes": []}},
    "model.p.stg": {"resource_type": "model", "depends_on": {"nodes": ["source.p.crm.seed"]}, "config": {"materialized": "table"}},
    "model.p.eph": {"resource_type": "model", "depends_on": {"nodes": ["model.p.stg"]}, "config": {"materialized": "ephemeral"}},
    "model.p.mart": {"resource_type": "model", "depends_on": {"nodes": ["model.p.eph"]}, "config": {"materialized": "table"}},
    "test.p.not_null_mart_id": {"resource_type": "test", "depends_on": {"nodes": ["model.p.mart"]}, "fqn": ["p", "not_null_mart_id"]},
    "test.p.source_not_null_crm_seed_id": {"resource_type": "test", "depends_on": {"nodes": ["source.p.crm.seed"]}, "fqn": ["p", "source_not_null_crm_seed_id"]},
}
ON_SOURCE = DbtTest("source_not_null_crm_seed_id", "test.p.source_not_null_crm_seed_id", Severity.ERROR, asset=W + "seed", select="fqn:p.source_not_null_crm_seed_id")
ON_MART = DbtTest("not_null_mart_id", "test.p.not_null_mart_id", Severity.ERROR)


def test_a_source_that_is_a_seed_builds_in_a_later_wave() -> None:
    seed, stg, mart = _step("seed", kind="seed"), _step("stg", ("seed",), (ON_SOURCE,)), _step("mart", ("stg",), (ON_MART,))
    got = waves([mart, stg, seed], [ON_SOURCE, ON_MART], NODES)
    # the seed first; `stg` reads it through a source dbt does not know is the seed; `mart` (through the ephemeral) with `stg`
    assert [([s.uri for s in models], [t.name for t in tests]) for models, tests in got] == [
        ([W + "seed"], []),
        ([W + "mart", W + "stg"], ["source_not_null_crm_seed_id", "not_null_mart_id"]),
    ]
    assert wave_args(*got[1], NODES) == ["--select", "fqn:p.mart fqn:p.stg fqn:p.source_not_null_crm_seed_id fqn:p.not_null_mart_id", "--indirect-selection", "empty"]


def test_edges_dbt_sees_need_one_invocation() -> None:
    nodes = {**NODES, "model.p.stg": {"resource_type": "model", "depends_on": {"nodes": ["seed.p.seed"]}, "config": {}}}  # ref('seed')
    seed, stg = _step("seed", kind="seed"), _step("stg", ("seed",))
    assert len(waves([stg, seed], [], nodes)) == 1


def test_outputs_follow_dependencies() -> None:
    seed, stg, mart = _step("seed", kind="seed"), _step("stg", ("seed",)), _step("mart", ("stg",))
    assert [s.name for s in topological([mart, stg, seed])] == ["seed", "stg", "mart"]
    cyclic = _step("a", ("b",)), _step("b", ("a",))  # reported at load; ordering still ends
    assert sorted(s.name for s in topological(list(cyclic))) == ["a", "b"]


def test_dagster_dbt_gets_the_dbt_version_without_running_dbt_for_the_bundled_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dbt --version` imports all of dbt (seconds of every dbt step): the bundled dbt-core's version is read from its package."""
    import stat
    from importlib.metadata import version

    import dagster_dbt.core.resource as dagster_dbt_resource
    from packaging.version import Version

    from lineage_defs.dbt.execute import DbtCli, bundled_dbt, cli_version

    project = str(Path(__file__).parents[1].joinpath("examples/pipelines/reporting/dbt"))  # read, never built
    cli_version.cache_clear()

    def no_subprocess(*args: object, **kwargs: object) -> bytes:
        raise AssertionError(f"dbt was run: {args}")

    monkeypatch.setattr(dagster_dbt_resource, "check_output", no_subprocess)
    assert DbtCli(project_dir=project, dbt_executable=str(bundled_dbt()))._cli_version == Version(version("dbt-core"))

    # another executable (Fusion, a dbt of another environment) is asked, once per process
    calls = tmp_path / "calls"
    other = tmp_path / "other-dbt"
    other.write_text(f"#!/bin/sh\necho run >> {calls}\necho 'dbt-fusion 2.0.0-preview.45'\n")
    other.chmod(other.stat().st_mode | stat.S_IXUSR)
    for _ in range(2):
        assert DbtCli(project_dir=project, dbt_executable=str(other))._cli_version == Version("2.0.0")
    assert calls.read_text().count("run") == 1
