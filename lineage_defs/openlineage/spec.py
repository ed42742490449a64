"""What an OpenLineage event says, as plain data (no OpenLineage import): ``events`` turns it into the client's classes.

Datasets are named from asset URIs — namespace ``<kind>://<authority>``, name
the path (``ducklake://main/orders`` → ``ducklake://main`` + ``orders``;
default object storage has the key's ``_default`` bucket) — so a dataset's
namespace and name put back together are its URI. Column edges map to
OpenLineage transformations: ``copy`` → DIRECT/IDENTITY, ``mod`` →
DIRECT/TRANSFORMATION, ``scan`` → INDIRECT with the clause that read the
column (FILTER, JOIN, GROUP_BY, SORT) where the analysis knows it, listed
once for the whole dataset (a scan decides which rows exist, not a value).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lineage_defs import uris
from lineage_defs.plan.spec import ColumnEdge, EdgeKind

PRODUCER = "urn:python:lineage_defs"
INTEGRATION = "LINEAGE_DEFS"
TRANSFORMATIONS: Mapping[EdgeKind, tuple[str, str]] = {
    EdgeKind.COPY: ("DIRECT", "IDENTITY"),
    EdgeKind.MOD: ("DIRECT", "TRANSFORMATION"),
    EdgeKind.SCAN: ("INDIRECT", ""),
}


def dataset_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of an asset URI.

    >>> dataset_name("ducklake://main/orders"), dataset_name("s3:///raw/{partition}.csv")
    (('ducklake://main', 'orders'), ('s3://_default', 'raw/{partition}.csv'))
    """
    u = uris.parse(uri)
    return f"{u.kind}://{u.authority or uris.DEFAULT_BUCKET}", "/".join(u.path)


@dataclass(frozen=True)
class InputField:
    """One upstream column of an output column (or, for ``fields`` of None, of the whole dataset)."""

    namespace: str
    name: str
    field: str
    type: str  # DIRECT | INDIRECT
    subtype: str  # IDENTITY | TRANSFORMATION | FILTER | JOIN | GROUP_BY | SORT | "" (unknown)


@dataclass(frozen=True)
class Dataset:
    uri: str
    columns: tuple[tuple[str, str | None], ...] = ()  # (name, type) in order; the schema facet
    edges: tuple[ColumnEdge, ...] = ()  # column edges into this dataset; the columnLineage facet

    def column_lineage(self) -> tuple[dict[str, list[InputField]], list[InputField]]:
        """(per output column its direct inputs, the dataset-wide indirect inputs)."""
        fields: dict[str, list[InputField]] = {}
        dataset: list[InputField] = []
        prefix = self.uri + "."
        for e in self.edges:
            ns, name = dataset_name(e.source_uri)
            kind, sub = TRANSFORMATIONS[e.kind]
            if e.kind is EdgeKind.SCAN:
                subtypes = getattr(e, "subtypes", ()) or ("",)
                dataset.extend(InputField(ns, name, e.source_column, kind, s) for s in subtypes)
            elif e.target.startswith(prefix):
                fields.setdefault(e.target[len(prefix) :], []).append(InputField(ns, name, e.source_column, kind, sub))
        return fields, list(dict.fromkeys(dataset))


@dataclass(frozen=True)
class RunInfo:
    run_id: str  # this step's OpenLineage run (a UUID)
    job: str  # the script or dbt model file: the job's name
    job_type: str  # SCRIPT | DBT_MODEL
    parent_run_id: str  # the Dagster run
    parent_job: str  # the Dagster job
    sql: str | None = None
    dialect: str | None = None
    nominal_start: str | None = None  # the partition window, for time partitions
    nominal_end: str | None = None


@dataclass(frozen=True)
class Event:
    state: str  # START | COMPLETE | FAIL | ABORT
    time: str  # ISO 8601 with time zone
    run: RunInfo
    inputs: tuple[Dataset, ...] = ()
    outputs: tuple[Dataset, ...] = ()
    error: str | None = None
    stack: str | None = None


def output_dataset(uri: str, columns: Sequence[tuple[str, str | None]], edges: Sequence[ColumnEdge]) -> Dataset:
    return Dataset(uri, tuple(columns), tuple(e for e in edges if e.target == uri or e.target.startswith(uri + ".")))
