"""What a script header says, as frozen data. No Dagster, no databases."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from lineage_defs.errors import Location


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


@dataclass(frozen=True)
class Kafka:
    """``on kafka topic=…``."""

    topic: str
    connection: str
    group: str | None
    partition_from: str | None
    max_batch: int | None
    at: Location


@dataclass(frozen=True)
class Webhook:
    """``on webhook [name=…]``."""

    name: str | None
    partition_from: str | None
    at: Location


@dataclass(frozen=True)
class Sqs:
    """``on sqs queue=<name-or-url> [connection=…]``."""

    queue: str  # a queue name, or its https:// URL
    connection: str
    partition_from: str | None
    max_batch: int | None
    at: Location

    @property
    def queue_name(self) -> str:
        """The name alone (the last path segment of a URL)."""
        return self.queue.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Postgres:
    """``on postgres table=<schema>.<table> [connection=…] [events=insert,update,delete]``."""

    table: str  # schema.table
    connection: str
    events: tuple[str, ...]  # of insert, update, delete
    partition_from: str | None
    max_batch: int | None
    at: Location


@dataclass(frozen=True)
class Mqtt:
    """``on mqtt topic=<filter> [connection=…]``."""

    topic: str  # a topic filter: levels split by /, + for one whole level, # as the last
    connection: str
    partition_from: str | None
    max_batch: int | None
    at: Location


@dataclass(frozen=True)
class Nats:
    """``on nats subject=<subject> stream=<stream> [connection=…]``."""

    subject: str  # tokens split by ., * for one whole token, > as the last
    stream: str  # the JetStream stream holding the subject
    connection: str
    partition_from: str | None
    max_batch: int | None
    at: Location


@dataclass(frozen=True)
class Email:
    """``on email name=<mailbox>``: mail to ``<mailbox>@…`` received by ``lineage-defs email serve``."""

    name: str  # the mailbox: the recipient's local part, lower case
    partition_from: str | None
    at: Location


# The event triggers (SPEC section 6): each kind a type of its own, built into sensors by
# the table in ``lineage_defs.triggers``.
EventTrigger = Kafka | Webhook | Sqs | Postgres | Mqtt | Nats | Email


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

    @property
    def name(self) -> str:
        """The asset check name: stable, readable, unique within a step."""
        if self.kind is TestKind.CUSTOM:
            stem = (self.script or "").rsplit("/", 1)[-1].split(".", 1)[0]
            return "".join(c if c.isalnum() else "_" for c in stem)
        if self.kind is TestKind.ROW_COUNT:
            return "row_count"
        return f"{self.kind}_{self.column}"


@dataclass(frozen=True)
class ColumnSource:
    uri: str
    column: str


@dataclass(frozen=True)
class ColumnDecl:
    output: str
    sources: tuple[ColumnSource, ...]
    at: Location | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Freshness:
    fail_after: float
    warn_after: float | None


@dataclass(frozen=True)
class Retry:
    max_retries: int
    delay: float | None
    exponential: bool


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
