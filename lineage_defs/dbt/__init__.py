"""dbt projects in the graph (SPEC section 8), all in one room.

Layers, each importing only those above it::

    config         lineage.yml → DbtConfig
    project        DbtProject: paths, profile, manifest (parsed once, cached), target
    manifest       the dbt parse subprocess (parse_main) and the manifest cache
    nodes          manifest → DbtStep specs, relation ↔ asset aliases
    model_lineage  load-time column lineage from model SQL
    load           every project of a pipelines folder, for the plan
    commands       dbt invocations of a run, the lineage pass budget
    index          the static-analysis parquet index reader
    catalog        the built relations' real columns and types (one catalog query)
    lineage_pass   the post-materialization lineage pass
    selection      which models and tests a run selects
    assets         DbtSteps → Dagster multi-assets
    translator     dagster-dbt translator over the plan's keys
    execute        a dbt multi-asset's run: dbt, then the lineage pass
"""
