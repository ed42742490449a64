"""Stage 2 output: one frozen ``StepSpec`` per script, one ``Project`` per folder.

Plain data: the build layer turns it into Dagster definitions, the run layer
executes it. Nothing here imports Dagster or touches a database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from lineage_defs.errors import LineageDefsError
from lineage_defs.parse.model import (
    DataTest,
    Freshness,
    Kafka,
    Materialize,
    Partitioning,
    Retry,
    Schedule,
    Webhook,
)

if TYPE_CHECKING:
    from lineage_defs.plan.dbt import DbtNode, DbtProject

# Columns the runtime manages in targets (plan knows them for `*` expansion).
PARTITION_COLUMN = "_partition"  # the partition key of partitioned managed targets
SCD2_COLUMNS = ("valid_from", "valid_to", "is_current")
MANAGED_DESCRIPTIONS = {
    PARTITION_COLUMN: "managed by lineage_defs: the partition key the row was written for",
    "valid_from": "managed by lineage_defs (scd2): when this version became current",
    "valid_to": "managed by lineage_defs (scd2): when a newer version replaced it (NULL while current)",
    "is_current": "managed by lineage_defs (scd2): true for the open version of each key",
}
# The TEMP table a triggered run's SQL reads its batch of events from (SPEC section 6).
EVENTS_TABLE = "_events"

STRATEGIES = ("replace", "partition_replace", "merge", "append", "scd2", "manual", "dbt")


@dataclass(frozen=True)
class Dep:
    uri: str
    explicit: bool  # from an `on` line (else inferred from the body)
    debounce: float | None = None
    line: int = 0  # where the read is declared or made


@dataclass(frozen=True)
class ColumnEdge:
    source: str  # "<uri>.<col>"
    target: str  # "<uri>.<col>", or "<uri>" for a scan edge
    kind: str  # copy | mod | scan

    @property
    def source_uri(self) -> str:
        return self.source.rsplit(".", 1)[0]

    @property
    def source_column(self) -> str:
        return self.source.rsplit(".", 1)[1]


@dataclass(frozen=True)
class Statement:
    sql: str  # the statement's text, without its semicolon
    line: int  # 1-based line in the file where it starts
    kind: str  # query create create_temp insert merge delete update copy attach detach set drop use macro other invalid


class RawEdge(NamedTuple):
    source_uri: str
    source_column: str
    target_column: str | None  # None: a scan edge (the whole output)
    kind: str


class Problem(NamedTuple):
    """Something sqlglot could not parse or trace (a warning: the engine decides)."""

    message: str
    line: int  # 1-based line in the file
    col: int  # 1-based, 0 if unknown
    fix: str | None


@dataclass(frozen=True)
class Analysis:
    """What a script body reads, writes and how its columns flow — plain data.

    The parse cache stores this (not sqlglot's objects), so a warm load never
    imports sqlglot.
    """

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    trailing_select: bool = True
    output_columns: tuple[str, ...] | None = None
    edges: tuple[RawEdge, ...] = ()
    needs_schemas: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()
    statements: tuple[Statement, ...] = ()
    read_templates: tuple[str, ...] = ()  # Python: URIs built at run time, `{*}` where a value goes


@dataclass(frozen=True)
class StepSpec:
    """Everything needed to define and run one step's asset."""

    name: str  # unique, a valid Dagster op name
    pipeline: str  # sub-folder = asset group
    path: str  # script path relative to the pipelines folder (posix)
    language: str  # duckdb | postgres | python | bash
    description: str
    outputs: tuple[str, ...]  # asset URIs; outputs[0] is the primary one
    materialize: Materialize | None
    strategy: str
    deps: tuple[Dep, ...]
    partitioning: Partitioning | None
    trigger: str = "any"
    debounce: float | None = None
    schedules: tuple[Schedule, ...] = ()
    kafka: tuple[Kafka, ...] = ()
    webhooks: tuple[Webhook, ...] = ()
    tests: tuple[DataTest, ...] = ()
    column_edges: tuple[ColumnEdge, ...] = ()
    output_columns: tuple[str, ...] | None = None
    statements: tuple[Statement, ...] = ()
    uses: tuple[str, ...] = ()  # macro library paths, relative to the pipelines folder
    freshness: Freshness | None = None
    retry: Retry | None = None
    tags: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()
    pool: str | None = None
    body_line: int = 1
    content_hash: str = ""
    dbt: DbtNode | None = None  # a dbt model/seed/snapshot (language "dbt")

    @property
    def uri(self) -> str:
        return self.outputs[0]

    @property
    def check_names(self) -> tuple[str, ...]:
        """The asset checks of this step: its data tests, or a dbt node's tests."""
        if self.dbt is not None:
            return tuple(t.name for t in self.dbt.tests)
        return tuple(t.name for t in self.tests)

    @property
    def kinds(self) -> tuple[str, ...]:
        """Dagster kinds: the engine that runs it plus the substrate it writes."""
        engine = {"duckdb": "duckdb", "postgres": "postgres", "python": "python", "bash": "bash", "dbt": "dbt"}[self.language]
        out = [engine]
        for uri in self.outputs:
            kind = uri.split("://", 1)[0]
            out.append({"datatable": "postgres"}.get(kind, kind))
        return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Project:
    """A loaded pipelines folder: the steps, external assets, and every problem found."""

    root: str
    steps: tuple[StepSpec, ...]
    externals: tuple[str, ...]  # upstream URIs that no step produces
    macros: tuple[str, ...] = ()  # macro library paths
    errors: tuple[LineageDefsError, ...] = ()
    warnings: tuple[LineageDefsError, ...] = ()
    invalid_paths: tuple[str, ...] = field(default=())
    dbt_projects: tuple[DbtProject, ...] = ()  # how to invoke dbt for the steps of language "dbt"


def strategy_of(m: Materialize | None, partitioned: bool) -> str:
    """SPEC section 4: the first row that applies wins."""
    if m is None or m.manual:
        return "manual"
    if m.history:
        return "scd2"
    if m.append:
        return "append"
    if m.key:
        return "merge"
    if partitioned:
        return "partition_replace"
    return "replace"
