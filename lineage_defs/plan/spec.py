"""Stage 2 output, plain frozen data: one step per script or dbt node, one ``Project`` per folder.

Two kinds of step, two types: a ``ScriptStep`` (an annotated SQL, Python or
Bash script) and a ``DbtStep`` (a dbt model, seed or snapshot). Both have
what the graph needs (``Step``'s fields: outputs, deps, partitions, column
lineage); each adds what runs it. The build layer turns them into Dagster
definitions, the run layer executes them. Nothing here imports Dagster,
touches a database or holds logic beyond naming what the data says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple

from lineage_defs.errors import LineageDefsError
from lineage_defs.parse.model import (
    Cascade,
    ColumnDecl,
    DataTest,
    EventTrigger,
    Freshness,
    HookEvent,
    Language,
    Materialize,
    Partitioning,
    Retry,
    Schedule,
    Severity,
)

if TYPE_CHECKING:  # the dbt room builds on this module, never the other way round
    from lineage_defs.dbt.project import DbtProject

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


class Strategy(StrEnum):
    """How a step's output is written (SPEC section 4); the managed ones are ``lineage_defs.run.write.STRATEGIES``."""

    REPLACE = "replace"
    PARTITION_REPLACE = "partition_replace"
    MERGE = "merge"
    APPEND = "append"
    SCD2 = "scd2"
    MANUAL = "manual"  # the script writes its output itself
    DBT = "dbt"  # dbt builds it


class EdgeKind(StrEnum):
    """A column lineage edge (SPEC section 7)."""

    COPY = "copy"  # passed through unchanged
    MOD = "mod"  # transformed
    SCAN = "scan"  # read to produce the row (join key, filter, group by): points at the whole output


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
    kind: EdgeKind
    # A scan's clauses where the analysis knows them (FILTER, JOIN, GROUP_BY, SORT: OpenLineage's
    # INDIRECT subtypes). Detail of the edge, not its identity: edges compare without it.
    subtypes: tuple[str, ...] = field(default=(), compare=False)

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
    kind: EdgeKind
    subtypes: tuple[str, ...] = ()  # a scan's clauses (ColumnEdge.subtypes)


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


@dataclass(frozen=True, kw_only=True)
class Step:
    """What every step of the graph has: the assets it produces and what they are made from."""

    name: str  # unique, a valid Dagster op name
    pipeline: str  # sub-folder = asset group
    path: str  # the script (or dbt file) relative to the pipelines folder (posix)
    description: str
    outputs: tuple[str, ...]  # asset URIs; outputs[0] is the primary one
    deps: tuple[Dep, ...]
    partitioning: Partitioning | None = None
    trigger: Cascade = Cascade.ANY
    debounce: float | None = None
    column_edges: tuple[ColumnEdge, ...] = ()
    output_columns: tuple[str, ...] | None = None
    tags: tuple[str, ...] = ()
    # What decides the output — a script's text and its macro libraries; a dbt model's
    # checksum, config, macros and vars — hashed: the asset's Dagster code version.
    content_hash: str = ""

    @property
    def uri(self) -> str:
        return self.outputs[0]

    @property
    def code_version(self) -> str | None:
        """The Dagster code version of the step's assets (changes exactly when ``content_hash`` does)."""
        return self.content_hash[:16] or None


@dataclass(frozen=True, kw_only=True)
class ScriptStep(Step):
    """An annotated SQL, Python or Bash script."""

    language: Language
    materialize: Materialize | None
    strategy: Strategy
    schedules: tuple[Schedule, ...] = ()
    events: tuple[EventTrigger, ...] = ()  # Kafka, webhooks, … (SPEC section 6)
    tests: tuple[DataTest, ...] = ()
    statements: tuple[Statement, ...] = ()
    uses: tuple[str, ...] = ()  # macro library paths, relative to the pipelines folder
    freshness: Freshness | None = None
    retry: Retry | None = None
    owners: tuple[str, ...] = ()
    pool: str | None = None
    body_line: int = 1
    # (catalog, DuckDB file) of dbt projects' own databases the script reads: attached read-only
    attach: tuple[tuple[str, str], ...] = ()
    # The hash of the script file alone (path and text): a run checks it executes what was planned (run.script).
    file_hash: str = ""
    # The `column` lines as written (their edges are in column_edges): a run checks the written
    # schema has each declared output column (run.declared).
    column_decls: tuple[ColumnDecl, ...] = ()

    @property
    def check_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tests)


@dataclass(frozen=True)
class DbtTest:
    name: str  # the asset check's name (dagster-dbt's convention: the test's name)
    unique_id: str
    severity: Severity
    # a test on a dbt source: the URI of the asset the source is (a script's table) and the
    # selector that makes dbt run the test (a model's selection does not reach it)
    asset: str = ""
    select: str = ""
    column: str = ""  # the column a column-level test reads ("" for a model-level one)
    path: str = ""  # the YAML file declaring it, relative to the pipelines folder
    line: int = 0  # where in it (0: unknown — dbt's manifest records the file, not the line)


@dataclass(frozen=True)
class Microbatch:
    event_time: str
    batch_size: str  # hour | day | month | year
    begin: str
    lookback: int = 1


@dataclass(frozen=True, kw_only=True)
class DbtStep(Step):
    """A dbt model, seed or snapshot: where it comes from and how dbt selects it."""

    unique_id: str
    project: str  # the dbt project folder, relative to the pipelines folder
    relation: str  # database.schema.alias
    resource_type: str  # model | seed | snapshot
    materialized: str
    tests: tuple[DbtTest, ...] = ()
    microbatch: Microbatch | None = None
    sql: str = ""  # raw SQL (jinja) of a model, for load-time lineage
    fqn: str = ""  # dbt's fully qualified name, for selecting it
    default_profile: bool = True

    language = Language.DBT
    strategy = Strategy.DBT

    @property
    def check_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tests)


AnyStep = ScriptStep | DbtStep


@dataclass(frozen=True)
class StepHook:
    """A hook a step (or a hook script) runs on an event: the script resolved to its path in the folder."""

    event: HookEvent
    script: str  # the hook script, relative to the pipelines folder
    after: int = 1  # on_failure: only once this many runs in a row failed


@dataclass(frozen=True)
class HookScript:
    """A script marked ``-- hook`` that some step names: Dagster runs it as a job of its own."""

    path: str  # relative to the pipelines folder
    language: Language
    hooks: tuple[StepHook, ...] = ()  # its own: what runs when a run of this hook fails or recovers

    @property
    def job_name(self) -> str:
        """The Dagster job that runs it: ``lineage_hook__`` and the path, as a valid job name."""
        return "lineage_hook__" + "".join(c if c.isalnum() else "_" for c in self.path)


@dataclass(frozen=True)
class Project:
    """A loaded pipelines folder: the steps, external assets, and every problem found."""

    root: str
    steps: tuple[AnyStep, ...]
    externals: tuple[str, ...]  # upstream URIs that no step produces
    macros: tuple[str, ...] = ()  # macro library paths
    errors: tuple[LineageDefsError, ...] = ()
    warnings: tuple[LineageDefsError, ...] = ()
    invalid_paths: tuple[str, ...] = field(default=())
    dbt_projects: tuple[DbtProject, ...] = ()  # how to invoke dbt for the DbtSteps
    # SPEC section 13: each step's hooks (its own lines and its pipeline's `_pipeline` file), by step name,
    # and the hook scripts they name
    hooks: tuple[tuple[str, tuple[StepHook, ...]], ...] = ()
    hook_scripts: tuple[HookScript, ...] = ()

    @property
    def scripts(self) -> tuple[ScriptStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, ScriptStep))

    @property
    def dbt_steps(self) -> tuple[DbtStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, DbtStep))
