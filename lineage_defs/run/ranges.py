"""A SQL step's partitions in one run: one by one (``sql_step``) or set-based (``batch``)."""

from __future__ import annotations

from collections.abc import Iterator

from lineage_defs.plan.spec import ScriptStep
from lineage_defs.run.batch import run_batches
from lineage_defs.run.context import PartitionWindow
from lineage_defs.run.events import RunBatch
from lineage_defs.run.sql_step import SliceResult, StepRunner
from lineage_defs.settings import LineageSettings


def run_windows(settings: LineageSettings, step: ScriptStep, windows: list[PartitionWindow | None], batch: RunBatch | None = None) -> Iterator[SliceResult]:
    """Run the partitions in order on one session; each result carries its own error.

    A step with ``time_column`` runs set-based; a trigger batch (``batch``) is
    always one partition, run as usual.
    """
    if batch is None and step.partitioning is not None and step.partitioning.time_column and None not in windows:
        yield from run_batches(settings, step, [w for w in windows if w is not None])
        return
    with StepRunner(settings, step, batch=batch) as runner:
        for w in windows:
            yield runner.run(w)
