"""replace: the slice becomes the whole table, atomically.

``CREATE OR REPLACE TABLE`` inside the write's transaction: readers see the old
table until COMMIT, and a failure leaves it as it was. The schema follows the
slice (``on_schema_change=fail`` still refuses a different one).
"""

from __future__ import annotations

from lineage_defs.run.write.base import PARTITION_COLUMN
from lineage_defs.run.write.context import WriteContext

REPLACES_TARGET = True
MANAGED: tuple[str, ...] = (PARTITION_COLUMN,)


def validate(ctx: WriteContext) -> None:
    """Nothing to check: any slice can replace the table."""


def create(ctx: WriteContext) -> None:
    ctx.create_as(f"SELECT {ctx.select_list()} FROM {ctx.slice}")


def apply(ctx: WriteContext) -> None:
    ctx.create_as(f"SELECT {ctx.select_list()} FROM {ctx.slice}", replace=True)
