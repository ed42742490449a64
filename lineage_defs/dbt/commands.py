"""How a dbt project is invoked for a run: commands, the partition window, the lineage pass's budget. Pure."""

from __future__ import annotations

import datetime as dt

from lineage_defs.dbt.config import DbtConfig, TestBehavior

MAX_RUNTIME_TAG = "dagster/max_runtime"  # Dagster's run monitoring ends a run that exceeds it


def dbt_commands(config: DbtConfig, window: tuple[dt.datetime, dt.datetime] | None = None, selection: list[str] | None = None) -> list[list[str]]:
    """The dbt invocations of one run, by ``test_behavior``; a window builds exactly its batches.

    >>> dbt_commands(DbtConfig(test_behavior=TestBehavior.AFTER_ALL, threads=2))
    [['run', '--threads', '2'], ['test', '--threads', '2']]
    >>> w = (dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(2025, 1, 4, tzinfo=dt.timezone.utc))
    >>> dbt_commands(DbtConfig(), w)[0][1:]
    ['--event-time-start', '2025-01-01 00:00:00', '--event-time-end', '2025-01-04 00:00:00']
    """
    common = [*(selection or []), *config.cli_args(), *(["--threads", str(config.threads)] if config.threads else [])]
    event_time = ["--event-time-start", _utc(window[0]), "--event-time-end", _utc(window[1])] if window else []
    if config.test_behavior == TestBehavior.BUILD:
        return [["build", *event_time, *common]]
    if config.test_behavior == TestBehavior.AFTER_ALL:
        return [["run", *event_time, *common], ["test", *common]]
    return [["run", *event_time, *common]]


def _utc(t: dt.datetime) -> str:
    """dbt's --event-time-* take a naive timestamp (UTC)."""
    if t.tzinfo is not None:
        t = t.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return t.strftime("%Y-%m-%d %H:%M:%S")


def pass_budget(run_timeout: float, run_started: float | None, now: float) -> float:
    """The lineage pass's budget: half of what is left of the run's (seconds, never negative).

    >>> pass_budget(600.0, 1000.0, 1400.0)
    100.0
    """
    elapsed = now - run_started if run_started is not None else 0.0
    return max(run_timeout - elapsed, 0.0) / 2
