"""On the PYTHONPATH of the Dagster processes the suite starts (tests/services.py ``DAEMON_SITE``):
Dagster's backfill daemon passes every 5 s instead of every 30 s.

Dagster fixes that interval in code (``dagster._daemon.controller.DEFAULT_DAEMON_INTERVAL_SECONDS``,
no dagster.yaml setting). A backfill of a graph, and the cascade's runs (an automation sensor's
request of several partitions is a backfill), start one level per pass: at 30 s a test waits up to
half a minute per level for nothing but the clock. Python imports this module at startup in every
process with the folder on its path; it only wraps the import of that one Dagster module, so any
other process (a step, a CLI call) is unchanged. (The asset daemon's legacy auto-materialize pass
defaults to the same constant; the suite's automation runs through sensors, whose intervals are their own.)
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

BACKFILL_INTERVAL_SECONDS = 5
MODULE = "dagster._daemon.controller"


class _ShorterBackfillInterval(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if name != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            load(module)
            module.DEFAULT_DAEMON_INTERVAL_SECONDS = BACKFILL_INTERVAL_SECONDS  # type: ignore[attr-defined]

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _ShorterBackfillInterval())
