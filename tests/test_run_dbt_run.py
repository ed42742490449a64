"""dbt invocations of a run and the lineage pass's budget: pure functions of the settings and the window."""

from __future__ import annotations

import datetime as dt

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
