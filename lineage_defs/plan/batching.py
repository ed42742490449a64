"""Can a step's range run set-based? (``partitioned ... time_column=``, SPEC section 4).

A set-based batch binds ``$partition_start``/``$partition_end`` to the whole
batch's window and runs the body once, so a body that names ONE partition —
``$partition``, the ``'{partition}'`` token, or a ``{partition}`` object path
— cannot be batched. That is a load-time error at the ``time_column`` option.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lineage_defs.errors import AnnotationError
from lineage_defs.parse.grammar import option_at
from lineage_defs.parse.model import Partitioning
from lineage_defs.plan.spec import Statement

# Cheap pre-filter: only bodies that mention a partition at all are tokenized.
_MENTION = re.compile(r"\$partition(?![_A-Za-z0-9])|\{partition\}")


def partition_uses(sql: str, dialect: str) -> list[str]:
    """How one statement names a single partition: ``$partition`` / ``'{partition}'`` / a ``{partition}`` path.

    >>> partition_uses("SELECT * FROM t WHERE d = $partition AND ts >= $partition_start", "duckdb")
    ['$partition']
    >>> partition_uses("-- $partition in a comment\\nSELECT '{partition}'", "duckdb")
    ["'{partition}'"]
    """
    if not _MENTION.search(sql):
        return []
    from sqlglot.dialects.dialect import Dialect

    try:
        tokens = list(Dialect.get_or_raise("postgres" if dialect == "postgres" else "duckdb").tokenize(sql))
    except Exception:  # the engine reports what sqlglot cannot tokenize; fall back to the text
        return sorted(set(_MENTION.findall(sql)))
    out: list[str] = []
    prev = None
    for t in tokens:
        if t.token_type.name == "STRING" and "{partition}" in t.text:
            out.append(f"'{t.text}'")
        elif prev is not None and prev.token_type.name == "PARAMETER" and t.start == prev.end + 1 and t.text == "partition":
            out.append("$partition")
        prev = t
    return out


def batching_errors(path: str, partitioning: Partitioning | None, statements: Sequence[Statement], dialect: str) -> list[AnnotationError]:
    """One error at ``time_column=`` when the body names a single partition (none otherwise)."""
    if partitioning is None or not partitioning.time_column:
        return []
    for st in statements:
        uses = partition_uses(st.sql, dialect)
        if uses:
            col = partitioning.time_column
            if uses[0].startswith("'") and uses[0] != "'{partition}'":
                how = f"read the batch's objects with a glob (e.g. {uses[0].replace('{partition}', '*')}) and filter on {col}"
            else:
                how = f"filter on the batch window instead (WHERE {col} >= $partition_start::TIMESTAMP AND {col} < $partition_end::TIMESTAMP)"
            return [
                AnnotationError(
                    f"'time_column=' runs the body once per batch of partitions, but line {st.line} names one partition ({uses[0]})",
                    option_at(partitioning.at, "time_column"),
                    f"{how}, or drop time_column= to run partitions one by one",
                )
            ]
    return []
