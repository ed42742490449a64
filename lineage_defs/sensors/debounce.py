"""A debounce for Declarative Automation: "an upstream partition updated within the last N seconds".

Dagster has no time-since-update operand, so this is a small custom
AutomationCondition (a public extension point). The cascade negates it per
input: a step whose inputs changed runs only once none of them changed for
the debounce window — a burst of updates yields one run after the burst.

Evaluated on the upstream asset (inside ``any_deps_match``), so it sees the
upstream partitions mapped to each downstream candidate: a monthly step fed
by days waits until no day of its month changed for the window. Custom
conditions are evaluated in the code server, so the cascade sensor sets
``use_user_code_server=True``.
"""

from __future__ import annotations

from typing import Any

from dagster import AutomationCondition, AutomationResult


class UpdatedWithin(AutomationCondition):
    """True for the candidate partitions whose latest materialization is younger than ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)

    @property
    def requires_cursor(self) -> bool:
        return False

    @property
    def name(self) -> str:
        return f"updated_within_{self.seconds:g}s"

    @property
    def description(self) -> str:
        return f"Materialized within the last {self.seconds:g} seconds"

    def evaluate(self, context: Any) -> AutomationResult:
        candidates = context.candidate_subset
        if candidates.is_empty:
            return AutomationResult(context, context.get_empty_subset())
        cutoff = context.evaluation_time.timestamp() - self.seconds
        recent = context.get_empty_subset()
        for ts, subset in context.asset_graph_view.compute_subsets_by_latest_materialization_timestamp(candidates).items():
            if ts >= cutoff:
                recent = recent.compute_union(subset)
        return AutomationResult(context, candidates.compute_intersection(recent))
