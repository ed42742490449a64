"""What a script header says, as frozen data. No Dagster, no databases."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Union

from lineage_defs.errors import Location

# The event triggers (SPEC section 6): each source's record is defined in its folder
# (``lineage_defs.triggers.<source>.source``) and listed in ``lineage_defs.triggers.sources``;
# the existing names stay importable from here.
from lineage_defs.triggers.email.source import Email
from lineage_defs.triggers.kafka.source import Kafka
from lineage_defs.triggers.mqtt.source import Mqtt
from lineage_defs.triggers.nats.source import Nats
from lineage_defs.triggers.postgres.source import Postgres
from lineage_defs.triggers.sources import RECORDS
from lineage_defs.triggers.sqs.source import Sqs
from lineage_defs.triggers.webhook.source import Webhook


class Language(StrEnum):
    """What runs a step: the script's extension (``.sql``, ``.pg.sql``, ``.py``, ``.sh``), or dbt."""

    DUCKDB = "duckdb"
    POSTGRES = "postgres"
    PYTHON = "python"
    BASH = "bash"
    DBT = "dbt"

    @property
    def is_sql(self) -> bool:
        return self in (Language.DUCKDB, Language.POSTGRES)


class Cascade(StrEnum):
    """``trigger any|all|manual``: when a step re-runs after its inputs update."""

    ANY = "any"
    ALL = "all"
    MANUAL = "manual"


class Severity(StrEnum):
    """A data test's severity: ``error`` blocks the write, ``warn`` records the failure."""

    WARN = "warn"
    ERROR = "error"


class TestKind(StrEnum):
    """The built-in data tests, and a custom test script."""

    __test__ = False  # not a pytest class

    UNIQUE = "unique"
    NOT_NULL = "not_null"
    ACCEPTED_VALUES = "accepted_values"
    RELATIONSHIPS = "relationships"
    ROW_COUNT = "row_count"
    CUSTOM = "custom"
    TYPE = "type"  # a use of a `test_type` script (``lineage_defs.plan.test_types``)


# The types a `test_type` parameter may declare (untyped: text).
PARAM_TYPES = ("text", "int", "float", "bool", "date")


@dataclass(frozen=True)
class TestParam:
    """One declared parameter of a test type: ``min:int``."""

    __test__ = False

    name: str
    type: str = "text"


@dataclass(frozen=True)
class TestTypeDecl:
    """A ``test_type <name> <param>...`` line: the script is a reusable data test, not an asset."""

    __test__ = False

    name: str
    params: tuple[TestParam, ...] = ()
    at: Location | None = field(default=None, compare=False)


@dataclass(frozen=True)
class TestArg:
    """One argument of a ``data_test <type> ...`` use, as written (``name`` for ``name=value``)."""

    __test__ = False

    text: str
    name: str | None = None
    at: Location | None = field(default=None, compare=False)


@dataclass(frozen=True)
class BoundArg:
    """An argument bound to its declared parameter (the plan checked that ``text`` converts to ``type``)."""

    name: str
    type: str
    text: str


@dataclass(frozen=True)
class Upstream:
    uri: str
    debounce: float | None
    at: Location


@dataclass(frozen=True)
class Schedule:
    cron: str
    tz: str | None
    at: Location


# One parsed ``on <source>`` line: a union of the table's records at run time (the plan's
# codec reads it to store headers), the records' common protocol for the type checker.
if TYPE_CHECKING:
    from lineage_defs.triggers.source import Trigger as EventTrigger
else:
    EventTrigger = Union[RECORDS]  # noqa: UP007 (a union built from the table)

class PartitionKind(StrEnum):
    HOURLY = "hourly"
    DAILY = "daily"
    WEEKLY = "weekly"
    MONTHLY = "monthly"
    DYNAMIC = "dynamic"  # keys from trigger payloads (``key="$.json.path"``)


@dataclass(frozen=True)
class Partitioning:
    kind: PartitionKind
    tz: str | None = None
    format: str | None = None
    start: str | None = None
    key: str | None = None  # dynamic: JSON path into the trigger payload
    time_column: str | None = None  # the rows' own time: range runs go set-based (SPEC section 4)
    batch: int | None = None  # partitions per set-based batch (None: the whole range)
    at: Location | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Materialize:
    uri: str
    manual: bool = False
    key: tuple[str, ...] = ()
    append: bool = False
    history: bool = False  # `history` or `scd2`
    track: tuple[str, ...] = ()
    updated_at: str | None = None
    deletes: str = "close"
    on_schema_change: str = "warn"
    at: Location | None = field(default=None, compare=False)


@dataclass(frozen=True)
class DataTest:
    kind: TestKind
    column: str | None = None
    values: tuple[str, ...] = ()
    ref_uri: str | None = None
    ref_column: str | None = None
    min: int | None = None
    max: int | None = None
    script: str | None = None
    severity: Severity = Severity.ERROR
    at: Location | None = field(default=None, compare=False)
    type_name: str | None = None  # TYPE: the test type used, its arguments as written,
    args: tuple[TestArg, ...] = ()
    bound: tuple[BoundArg, ...] = ()  # and (once planned) bound to its parameters; `script` is its file

    @property
    def name(self) -> str:
        """The asset check name: stable, readable, unique within a step."""
        if self.kind is TestKind.CUSTOM:
            stem = (self.script or "").rsplit("/", 1)[-1].split(".", 1)[0]
            return "".join(c if c.isalnum() else "_" for c in stem)
        if self.kind is TestKind.ROW_COUNT:
            return "row_count"
        if self.kind is TestKind.TYPE:
            return type_check_name(self.type_name or "", self.args)
        return f"{self.kind}_{self.column}"


# The kinds a ``column`` line may declare (``plan.spec.EdgeKind`` without ``scan``), the default first.
COLUMN_KINDS = ("mod", "copy")


def type_check_name(type_name: str, args: tuple[TestArg, ...]) -> str:
    """``rows_between`` + its arguments as written: ``data_test rows_between 1 10`` → ``rows_between_1_10``.

    Two uses of a type on one step differ in their arguments, so their checks differ in name.

    >>> type_check_name("rows_between", (TestArg("1"), TestArg("1e3", "max")))
    'rows_between_1_max_1e3'
    """
    words = [w for a in args for w in (a.name, a.text) if w]
    slug = re.sub(r"[^0-9A-Za-z]+", "_", "_".join(words)).strip("_").lower()
    if len(slug) > 40:  # long text arguments: a readable start, and a digest that keeps them apart
        slug = slug[:30].rstrip("_") + "_" + hashlib.sha1("\x00".join(words).encode()).hexdigest()[:8]
    return f"{type_name}_{slug}" if slug else type_name


@dataclass(frozen=True)
class ColumnSource:
    uri: str
    column: str
    at: Location | None = field(default=None, compare=False)  # the ``<uri>.<col>`` word on its line


@dataclass(frozen=True)
class ColumnDecl:
    """One ``column <out> <- <uri>.<col>[, …] [copy|mod]`` line; an output may have several lines."""

    output: str
    sources: tuple[ColumnSource, ...]
    at: Location | None = field(default=None, compare=False)
    kind: str = "mod"  # one of COLUMN_KINDS: every source of the line reaches ``output`` this way


@dataclass(frozen=True)
class Freshness:
    fail_after: float
    warn_after: float | None


@dataclass(frozen=True)
class Retry:
    max_retries: int
    delay: float | None
    exponential: bool


class HookEvent(StrEnum):
    """What a hook reacts to (``on_failure``, ``on_success``, ``on_recovery``): the annotation's keyword."""

    FAILURE = "on_failure"
    SUCCESS = "on_success"
    RECOVERY = "on_recovery"


@dataclass(frozen=True)
class HookRef:
    """One ``on_failure|on_success|on_recovery <script> [after=<n>]`` line: the hook script as written."""

    event: HookEvent
    script: str  # relative to the script's folder, then to the pipelines folder
    after: int = 1  # on_failure: only once this many runs of the step in a row failed
    at: Location | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Header:
    """Everything the leading comment block of one script declares."""

    path: str
    language: Language  # never DBT: a script
    is_step: bool = False
    description: str = ""
    upstreams: tuple[Upstream, ...] = ()
    schedules: tuple[Schedule, ...] = ()
    events: tuple[EventTrigger, ...] = ()
    mutes: tuple[str, ...] = ()
    mute_all: bool = False
    trigger: Cascade = Cascade.ANY
    debounce: float | None = None
    partitioned: Partitioning | None = None
    materialize: Materialize | None = None
    tests: tuple[DataTest, ...] = ()
    columns: tuple[ColumnDecl, ...] = ()
    is_macros: bool = False
    uses: tuple[str, ...] = ()
    freshness: Freshness | None = None
    retry: Retry | None = None
    tags: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()
    pool: str | None = None
    body_line: int = 1  # first line of code (1-based)
    breaking_ok: tuple[str, ...] = ()  # `breaking ok <column>`: lineage-defs diff accepts a breaking change of these
    is_hook: bool = False  # `-- hook`: a hook script (SPEC section 13), run by hook jobs, never an asset
    hooks: tuple[HookRef, ...] = ()  # its on_failure / on_success / on_recovery lines
    hook_at: Location | None = field(default=None, compare=False)  # where `-- hook` is
    test_type: TestTypeDecl | None = None  # `test_type <name> <param>...`: a reusable data test, not an asset
