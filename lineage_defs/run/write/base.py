"""The managed-write interface: a staged slice in, one transaction on the target out.

Each strategy (SPEC section 4) is one module registered in ``STRATEGIES``
(``lineage_defs.run.write.__init__``); the runtime never branches on the name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lineage_defs.plan.spec import PARTITION_COLUMN, SCD2_COLUMNS  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class WriteRequest:
    """What to write where.

    ``slice_table`` is a TEMP table in the session's connection holding exactly
    the rows the step produced for this slice (already staged, already counted).
    """

    uri: str  # target asset URI, `{partition}` already resolved for per-partition objects
    strategy: str  # replace | partition_replace | merge | append | scd2
    slice_table: str
    partition: str | None = None  # the partition key (value of PARTITION_COLUMN)
    key: tuple[str, ...] = ()
    track: tuple[str, ...] = ()  # scd2: columns whose change opens a new version (default: all non-key)
    updated_at: str | None = None  # scd2: a new version when this column increases
    deletes: str = "close"  # scd2: close | ignore rows missing from a full snapshot
    on_schema_change: str = "warn"  # warn | ignore | fail | sync
    valid_at: str | None = None  # scd2: ISO timestamp of this version (partition start or run time)
    slice_rows: int | None = None  # the slice's row count when the caller already knows it (saves a scan)
    # A set-based batch (partition_replace): the slice already carries PARTITION_COLUMN
    # and these partitions are replaced together, in the one transaction.
    partitions: tuple[str, ...] = ()
    # The slice unstaged: ``slice_table`` is the step's SELECT as a subquery ``(...)``,
    # bound with these parameters, and read once — by the strategy's one INSERT /
    # CREATE, which also counts its rows (replace, partition_replace, append).
    slice_params: dict[str, Any] | None = None
    slice_columns: tuple[tuple[str, str], ...] | None = None  # the slice's (name, type), when the caller knows them
    batch: str | None = None  # trigger batch id: recorded with the data; a batch already there is not written again


@dataclass(frozen=True)
class SchemaChange:
    added: tuple[tuple[str, str], ...] = ()
    removed: tuple[tuple[str, str], ...] = ()
    changed: tuple[tuple[str, str, str], ...] = ()  # name, old type, new type

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def describe(self) -> str:
        parts = [f"+{n} {t}" for n, t in self.added]
        parts += [f"-{n} {t}" for n, t in self.removed]
        parts += [f"~{n} {a}→{b}" for n, a, b in self.changed]
        return ", ".join(parts)


@dataclass
class WriteResult:
    rows: int  # rows in the slice
    sql: list[str] = field(default_factory=list)  # every statement run, with $placeholders, never values
    schema: list[tuple[str, str]] = field(default_factory=list)  # target columns after the write
    schema_change: SchemaChange | None = None
    snapshot_id: int | None = None  # DuckLake snapshot after commit
    warnings: list[str] = field(default_factory=list)
    skipped: bool = False  # the request's batch was already in the target: nothing written


# Runs inside the write transaction after the data is written, before COMMIT;
# raising rolls the write back (write–audit–publish).
Audit = Callable[[Any], None]
