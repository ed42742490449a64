"""What a script header says, as frozen data. No Dagster, no databases."""

from __future__ import annotations

from dataclasses import dataclass, field

from lineage_defs.errors import Location


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
    topic: str
    connection: str
    group: str | None
    partition_from: str | None
    max_batch: int | None
    at: Location


@dataclass(frozen=True)
class Webhook:
    name: str | None
    partition_from: str | None
    at: Location


@dataclass(frozen=True)
class Partitioning:
    kind: str  # daily | hourly | weekly | monthly | dynamic
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
    kind: str  # unique | not_null | accepted_values | relationships | row_count | custom
    column: str | None = None
    values: tuple[str, ...] = ()
    ref_uri: str | None = None
    ref_column: str | None = None
    min: int | None = None
    max: int | None = None
    script: str | None = None
    severity: str = "error"
    at: Location | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """The asset check name: stable, readable, unique within a step."""
        if self.kind == "custom":
            stem = (self.script or "").rsplit("/", 1)[-1].split(".", 1)[0]
            return "".join(c if c.isalnum() else "_" for c in stem)
        if self.kind == "row_count":
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
    language: str  # duckdb | postgres | python | bash
    is_step: bool = False
    description: str = ""
    upstreams: tuple[Upstream, ...] = ()
    schedules: tuple[Schedule, ...] = ()
    kafka: tuple[Kafka, ...] = ()
    webhooks: tuple[Webhook, ...] = ()
    mutes: tuple[str, ...] = ()
    mute_all: bool = False
    trigger: str = "any"
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
