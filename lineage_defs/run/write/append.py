"""append: insert the slice, keep everything. The one strategy where a re-run adds rows again."""

from __future__ import annotations

from lineage_defs.run.write.base import PARTITION_COLUMN
from lineage_defs.run.write.context import WriteContext

REPLACES_TARGET = False
MANAGED: tuple[str, ...] = (PARTITION_COLUMN,)


def validate(ctx: WriteContext) -> None:
    """Nothing to check: duplicates are the user's to keep."""


def create(ctx: WriteContext) -> None:
    part, params = ctx.partition_select()
    ctx.create_as(f"SELECT {ctx.select_list()}{part} FROM {ctx.slice}", params)


def apply(ctx: WriteContext) -> None:
    part, params = ctx.partition_select()
    ctx.inserted = ctx.scalar(f"INSERT INTO {ctx.target} BY NAME SELECT {ctx.select_list(cast=True)}{part} FROM {ctx.slice}", params)
