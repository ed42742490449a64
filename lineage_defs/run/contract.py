"""The contract between a step's Dagster op and the Python or Bash process it starts.

One variable, ``LINEAGE_STEP_CONTEXT``, names a JSON file the parent writes:
the step exactly as the parent planned it (encoded with ``plan.codec``, so
the child never re-parses the script's header), the script it must run (with
the content hash it was planned from), the partition, and the files it
reports through. The child answers in ``result_file`` (a ``SliceReport`` of
its managed write) and, when it fails, ``error_file`` (its own ``file:line``).
Connections reach the child the public way, as ``LINEAGE_*`` variables
(``LineageSettings.to_env``), and so does what a script may read itself
(``script_env``: the partition, the object to write, the trigger's batch).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lineage_defs.plan.codec import decode, encode
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.run.checks import CheckOutcome
from lineage_defs.run.context import PartitionWindow

CONTEXT_ENV = "LINEAGE_STEP_CONTEXT"


@dataclass(frozen=True)
class StepContext:
    """What the child process of one step run is given."""

    step: ScriptStep
    script: str  # absolute path of the script to run
    result_file: str
    error_file: str
    partition: str | None = None
    partition_start: str | None = None  # ISO 8601
    partition_end: str | None = None
    events_file: str | None = None  # the run's trigger batch (``runtime.events()``)
    batch: str | None = None  # its id, recorded with a managed write
    output_path: str | None = None  # where an s3:// target's object is written

    @property
    def window(self) -> PartitionWindow | None:
        if self.partition is None:
            return None
        start = dt.datetime.fromisoformat(self.partition_start) if self.partition_start else None
        end = dt.datetime.fromisoformat(self.partition_end) if self.partition_end else None
        return PartitionWindow(self.partition, start, end)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(encode(self, StepContext)))

    @classmethod
    def load(cls, path: str | Path) -> StepContext:
        ctx: StepContext = decode(json.loads(Path(path).read_text()), StepContext)
        return ctx


def script_env(ctx: StepContext, context_file: Path, python: str) -> dict[str, str]:
    """The environment of a step's process: the context file, and the documented variables a
    Python or Bash script may read (SPEC section 4; docs/annotations.md)."""
    env = {CONTEXT_ENV: str(context_file), "LINEAGE_PYTHON": python}  # the interpreter that has pyarrow, for Bash
    for var, value in (
        ("PARTITION", ctx.partition), ("PARTITION_START", ctx.partition_start), ("PARTITION_END", ctx.partition_end),
        ("LINEAGE_OUTPUT_PATH", ctx.output_path), ("LINEAGE_EVENTS_FILE", ctx.events_file), ("LINEAGE_BATCH", ctx.batch),
    ):  # fmt: skip
        if value is not None:
            env[var] = value
    return env


_PIPES: dict[str, Any] = {}  # the Dagster Pipes context, when the step runs under Dagster (set by ``launch``)


def use_pipes(pipes: Any) -> None:
    """Called by the step launcher: ``runtime.log`` goes to Dagster through this Pipes context."""
    _PIPES["pipes"] = pipes


def pipes() -> Any:
    """The Pipes context ``use_pipes`` set, or None (the script runs outside Dagster)."""
    return _PIPES.get("pipes")


def current() -> StepContext | None:
    """The context this process was started with; None outside a step run."""
    path = os.environ.get(CONTEXT_ENV)
    return _load(path) if path else None


@functools.lru_cache(maxsize=2)
def _load(path: str) -> StepContext:
    return StepContext.load(path)


@dataclass(frozen=True)
class SliceReport:
    """What one written partition (or the whole unpartitioned target) reports: the materialization's facts."""

    target: str  # the asset URI written, partition token resolved
    partition: str | None = None
    rows: int | None = None
    sql: tuple[str, ...] = ()  # every statement run, with $placeholders
    schema: tuple[tuple[str, str], ...] | None = None  # the target's columns after the write
    snapshot_id: int | None = None
    schema_change: str | None = None
    warnings: tuple[str, ...] = ()
    skipped: bool = False  # the trigger batch was already written: nothing new
    seconds: float | None = None
    checks: tuple[CheckOutcome, ...] = ()
    batch: str | None = None
    reported: dict[str, Any] = dataclasses.field(default_factory=dict)  # ``runtime.report(...)`` of a Python step
    observe_error: str | None = None  # why a manual step's target could not be observed

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), default=str)

    @classmethod
    def from_json(cls, text: str) -> SliceReport:
        d = json.loads(text)
        d["sql"] = tuple(d.get("sql") or ())
        d["schema"] = tuple(tuple(c) for c in d["schema"]) if d.get("schema") is not None else None
        d["warnings"] = tuple(d.get("warnings") or ())
        d["checks"] = tuple(CheckOutcome(**c) for c in d.get("checks") or ())
        return cls(**d)
