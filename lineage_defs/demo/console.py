"""What `make demo`'s terminal shows of `dagster dev`'s output: what a person acts on; all of it goes to a log file.

`dagster dev` prints a line per sensor tick (a skip reason every few seconds
per sensor), every step event of every run at DEBUG and the asset daemon's
and cascade's evaluations at INFO: about 2,000 lines in the eight minutes of
the walkthrough, among which a failed step is easy to miss. The whole output
goes to ``<state dir>/demo/dagster.log``; the terminal gets:

- Dagster's log records at WARNING and above (a failed step or run, a sensor
  or schedule that raised, a step's ``context.log.warning``), each with the
  lines under it — the error and the errors that caused it — but not their
  stack traces, which are left to the log file (one line says where);
- anything printed before the first log record (``dagster dev`` refusing to
  start prints no record).

A line that is not a record belongs to the record above it (Dagster prints a
record's message, and a step's subprocess its output, on the lines that
follow). A stack trace is ``Stack Trace:`` and the indented lines under it.
``NOISE`` lists the warnings Dagster prints on every normal start. Pure: it
decides line by line and keeps only where it is.

Dagster mirrors a step's records to this output through ``tail -F`` and may
miss the last ones of a step (dagster-io/dagster#23336), a failed step's
``STEP_FAILURE`` among them; the run's ``RUN_FAILURE``, written after the
step, carries the same errors, so a failure always shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Dagster's log record: "2026-12-06 01:46:27 +0000 - dagster.daemon.SensorDaemon - INFO - message"
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4} - \S+ - (?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) - ")
SHOWN_LEVELS = frozenset({"WARNING", "ERROR", "CRITICAL"})
# Warnings with nothing to act on: the event log consumer starting on a fresh instance.
NOISE = ("No cursor for event type",)
STACK_TRACE = "Stack Trace:"


def plain(line: str) -> str:
    """The line without terminal colour codes (what the log file keeps)."""
    return ANSI.sub("", line)


@dataclass
class Console:
    """Feeds `dagster dev`'s lines one at a time; ``feed`` returns what to show in the terminal (maybe nothing)."""

    log_path: str
    _shown: bool = True  # the current record is shown (True before the first record: a refusal to start shows)
    _in_trace: bool = False  # within a stack trace of the current record
    _said_where: bool = False  # the current record's "stack traces: <log>" line is out

    def feed(self, line: str) -> list[str]:
        line = line.rstrip("\r\n")
        text = plain(line)
        m = RECORD.match(text)
        if m:
            self._shown = m["level"] in SHOWN_LEVELS and not any(n in text for n in NOISE)
            self._in_trace = self._said_where = False
            return [line] if self._shown else []
        if not self._shown or not text.strip():
            return []
        if text.strip() == STACK_TRACE:
            self._in_trace = True
            if self._said_where:
                return []
            self._said_where = True
            return [f"    (stack traces: {self.log_path})"]
        if self._in_trace and text[:1].isspace():
            return []
        self._in_trace = False
        return [line]
