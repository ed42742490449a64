"""``spec.Event`` → the OpenLineage client's ``RunEvent`` (openlineage-python's ``event_v2`` and ``facet_v2`` classes)."""

from __future__ import annotations

from typing import Any

from openlineage.client import event_v2 as ol
from openlineage.client.facet_v2 import (
    column_lineage_dataset,
    error_message_run,
    job_type_job,
    nominal_time_run,
    parent_run,
    schema_dataset,
    sql_job,
)

from lineage_defs.openlineage.spec import INTEGRATION, PRODUCER, Dataset, Event, dataset_name


def _facets(d: Dataset, with_lineage: bool) -> dict[str, Any]:
    facets: dict[str, Any] = {}
    if d.columns:
        facets["schema"] = schema_dataset.SchemaDatasetFacet(
            fields=[schema_dataset.SchemaDatasetFacetFields(name=n, type=t, ordinal_position=i + 1) for i, (n, t) in enumerate(d.columns)]
        )
    if with_lineage and d.edges:
        fields, dataset = d.column_lineage()

        def field(f: Any) -> column_lineage_dataset.InputField:
            t = column_lineage_dataset.Transformation(type=f.type, subtype=f.subtype or None, description="", masking=False)
            return column_lineage_dataset.InputField(namespace=f.namespace, name=f.name, field=f.field, transformations=[t])

        facets["columnLineage"] = column_lineage_dataset.ColumnLineageDatasetFacet(
            fields={col: column_lineage_dataset.Fields(inputFields=[field(f) for f in fs]) for col, fs in fields.items()},
            dataset=[field(f) for f in dataset],
        )
    return facets


def run_event(e: Event, namespace: str) -> ol.RunEvent:
    r = e.run
    run_facets: dict[str, Any] = {
        "parent": parent_run.ParentRunFacet(run=parent_run.Run(runId=r.parent_run_id), job=parent_run.Job(namespace=namespace, name=r.parent_job)),
    }
    if r.nominal_start:
        run_facets["nominalTime"] = nominal_time_run.NominalTimeRunFacet(nominalStartTime=r.nominal_start, nominalEndTime=r.nominal_end)
    if e.error is not None:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(message=e.error, programmingLanguage="python", stackTrace=e.stack)
    job_facets: dict[str, Any] = {"jobType": job_type_job.JobTypeJobFacet(processingType="BATCH", integration=INTEGRATION, jobType=r.job_type)}
    if r.sql:
        job_facets["sql"] = sql_job.SQLJobFacet(query=r.sql, dialect=r.dialect)
    done = e.state != "START"
    return ol.RunEvent(
        eventType=getattr(ol.RunState, e.state),
        eventTime=e.time,
        run=ol.Run(runId=r.run_id, facets=run_facets),
        job=ol.Job(namespace=namespace, name=r.job, facets=job_facets),
        inputs=[ol.InputDataset(namespace=ns, name=n, facets=_facets(d, False)) for d in e.inputs for ns, n in [dataset_name(d.uri)]],
        # the columns and their lineage are known once the step has written
        outputs=[ol.OutputDataset(namespace=ns, name=n, facets=_facets(d, done)) for d in e.outputs for ns, n in [dataset_name(d.uri)]],
        producer=PRODUCER,
    )
