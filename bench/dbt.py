"""dbt benchmark: a generated project of 3,000 dbt models and 500 SQL scripts.

    .venv/bin/python bench/dbt.py [--models 3000] [--scripts 500] [--slice 300] [--repeat 3]

(a) Definitions load, each in a fresh process after `import dagster` (paid by
    both sides), ending with the asset graph built:
    - lineage_defs cold: empty state dir (dbt parse of the project, every script
      parsed, load-time lineage of every model);
    - lineage_defs warm: the manifest and parse caches are there (what every
      Dagster run process pays);
    - dagster-dbt alone: `@dbt_assets` on the same project's full manifest.json
      (3,000 models only, no scripts).
(b) Column lineage after a build:
    - lineage_defs' pass (sqlglot over the compiled SQL of all models; dbt-core
      1.x has no static analysis), CPU cold (empty cache) and warm (cached by
      compiled-SQL hash);
    - dagster-dbt's `fetch_column_metadata()` on a slice of the project built
      on dbt-duckdb through Dagster: the same build with and without it, the
      difference is its cost.
(c) The same slice built through lineage_defs (Dagster, dbt, the catalog query,
    the pass), metadata read back from the instance; the slice's schema.yml
    declares one column of each model and a third of it passes `a.*` through,
    so `*` must be expanded against the built relations:
    - edge recall: the share of fetch_column_metadata()'s edges (all copy or
      mod: it draws no scans) that lineage_defs finds too, with our kinds;
    - the cost of real column types: the one catalog query over the built
      relations and their upstreams, run again alone, per model.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# This file is named dbt.py: its folder on sys.path would shadow the dbt package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]


def generate(root: Path, models: int, scripts: int, slice_n: int) -> Path:
    """pipelines/bench/: `raw.sql`, `s<j>.sql` scripts and a dbt project `dbt/` of `m<i>` models."""
    rng = random.Random(7)
    pipelines = root / "pipelines"
    project = pipelines / "bench" / "dbt"
    (project / "models").mkdir(parents=True)
    (project / "dbt_project.yml").write_text("name: bench_dbt\nversion: '1.0'\nprofile: bench_dbt\nmodels:\n  bench_dbt:\n    +materialized: view\n")
    (project / "models" / "sources.yml").write_text("version: 2\nsources:\n  - name: lake\n    database: lake\n    schema: main\n    tables:\n      - name: raw\n")
    for i in range(models):
        tag = "{{ config(tags=['slice']) }}\n" if i < slice_n else ""
        if i < 50:
            body = f"select id, name, amount, ts, status from {{{{ source('lake', 'raw') }}}} where id % 50 = {i}"
        else:
            a, b = rng.randrange(i if i < slice_n else i), rng.randrange(i)
            if i < slice_n:
                b = rng.randrange(i)  # the slice only refs the slice (models below slice_n)
            # a third of the slice passes its upstream through as `a.*` (dbt-style staging), the rest names columns
            projection = "a.*" if i < slice_n and i % 3 == 0 else "a.id, upper(a.name) as name, a.amount + coalesce(b.amount, 0) as amount, a.ts, a.status"
            body = textwrap.dedent(f"""
                with a as (select * from {{{{ ref('m{a}') }}}}), b as (select id, amount from {{{{ ref('m{b}') }}}})
                select {projection}
                from a left join b on a.id = b.id
                where a.status <> 'cancelled'
            """).strip()
        (project / "models" / f"m{i}.sql").write_text(tag + body + "\n")
    # as people write them: the slice's schema.yml declares one of each model's five columns, so `select *`
    # must be expanded against the built relations (fetch_column_metadata() reads them too), not the yml
    (project / "models" / "schema.yml").write_text(
        "version: 2\nmodels:\n" + "".join(f"  - name: m{i}\n    columns:\n      - name: id\n" for i in range(min(slice_n, models)))
    )
    (pipelines / "bench" / "raw.sql").write_text(
        "-- pipeline\n-- materialize ducklake://main/raw\n"
        "SELECT range AS id, 'n' || range AS name, range * 1.5 AS amount, TIMESTAMP '2025-01-01' + to_minutes(range) AS ts,\n"
        "       ['placed', 'shipped', 'cancelled'][1 + range % 3] AS status\nFROM range(2000)\n"
    )
    for j in range(scripts):
        m = rng.randrange(models)
        (pipelines / "bench" / f"s{j}.sql").write_text(textwrap.dedent(f"""
            -- Daily amounts of model m{m}, read from its relation.
            -- pipeline
            -- materialize ducklake://main/s{j}
            -- data_test not_null day
            WITH days AS (
                SELECT CAST(ts AS DATE) AS day, status, amount FROM warehouse.main.m{m}
            )
            SELECT day, status, sum(amount) AS amount, count(*) AS n FROM days GROUP BY day, status
        """).lstrip())
    return pipelines


def in_fresh_process(code: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"benchmark process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def load_ours(pipelines: Path, state: Path) -> float:
    return in_fresh_process(f"""
        import json, time
        import dagster
        t = time.perf_counter()
        from lineage_defs import LineageSettings, build_definitions
        defs = build_definitions({str(pipelines)!r}, settings=LineageSettings(state_dir={str(state)!r}))
        defs.get_repository_def()
        print(json.dumps({{"seconds": time.perf_counter() - t}}))
    """)["seconds"]


def load_dagster_dbt(manifest: Path, project: Path) -> float:
    return in_fresh_process(f"""
        import json, sys, time
        from pathlib import Path
        import dagster
        t = time.perf_counter()
        from dagster_dbt import DbtCliResource, dbt_assets
        manifest = json.loads(Path({str(manifest)!r}).read_text())

        @dbt_assets(manifest=manifest)
        def bench_dbt(context, dbt: DbtCliResource):
            yield from dbt.cli(["build"], context=context).stream()

        dbt = DbtCliResource(project_dir={str(project)!r}, dbt_executable=str(Path(sys.executable).parent / "dbt"))
        dagster.Definitions(assets=[bench_dbt], resources={{"dbt": dbt}}).get_repository_def()
        print(json.dumps({{"seconds": time.perf_counter() - t}}))
    """)["seconds"]


def our_pass(pipelines: Path, state: Path, target: Path, cache: Path) -> tuple[float, float, int, int]:
    """CPU seconds of the lineage pass over every model's compiled SQL: (cold, warm, models, edges)."""
    from lineage_defs.dbt.lineage_pass import BuiltModel, LineagePass, detect_engine
    from lineage_defs.dbt.nodes import relation_aliases
    from lineage_defs.project import load_project
    from lineage_defs.settings import LineageSettings

    plan = load_project(pipelines, LineageSettings(state_dir=str(state)))
    project = plan.dbt_projects[0]
    steps = plan.dbt_steps
    aliases = relation_aliases(steps)
    back = {v: k for k, v in aliases.items()}
    columns = {s.uri: s.output_columns for s in plan.steps if s.output_columns}
    models = [
        BuiltModel(s.unique_id, s.uri, s.path[len(project.path) + 1 :], {back.get(d.uri, d.uri): columns[d.uri] for d in s.deps if d.uri in columns})
        for s in steps
    ]
    lineage = LineagePass(detect_engine(None), target, project.name, dict(project.node_uris), aliases, cache_file=cache)
    times = []
    edges = 0
    for _ in range(2):  # cold, then warm
        t = time.process_time()
        r = lineage.run(models, 3600)
        times.append(time.process_time() - t)
        assert r.note is None, r.note
        edges = sum(len(e) for e in r.edges.values())
    return times[0], times[1], len(models), edges


Edge = tuple[str, str, str, str]  # (upstream asset URI, column, model URI, column)


def ours_slice(pipelines: Path, state: Path, slice_n: int) -> tuple[dict[Edge, str], dict[str, list[tuple[str, str]]], float, float, int]:
    """The slice built through lineage_defs (with `raw`): edges with kinds and typed columns read back
    from the instance, and the cost of the types (the one catalog query, run again alone: wall, CPU)."""
    from dagster import AssetKey, DagsterInstance

    from lineage_defs import LineageSettings, build_definitions
    from lineage_defs.dbt.catalog import build_columns, relations_to_read
    from lineage_defs.project import load_project

    settings = LineageSettings(state_dir=str(state))
    defs = build_definitions(pipelines, settings=settings)
    keys = [AssetKey(["ducklake", "main", "raw"])] + [AssetKey(["dbt", "warehouse", "main", f"m{i}"]) for i in range(slice_n)]
    job = defs.resolve_implicit_job_def_def_for_assets(keys)
    assert job is not None
    instance = DagsterInstance.ephemeral()
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    result = job.execute_in_process(instance=instance, asset_selection=keys, run_config=quiet, raise_on_error=False)
    assert result.success, [e.event_specific_data.error.to_string() for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    edges: dict[Edge, str] = {}
    columns: dict[str, list[tuple[str, str]]] = {}
    for key in keys[1:]:
        ev = instance.get_latest_materialization_event(key)
        assert ev is not None and ev.asset_materialization is not None
        meta = ev.asset_materialization.metadata
        for e in meta["lineage/column_edges"].value if "lineage/column_edges" in meta else []:
            if e["kind"] != "scan":
                up, col = e["from"].rsplit(".", 1)
                down, dcol = e["to"].rsplit(".", 1)
                edges[(up, col, down, dcol)] = e["kind"]
        columns["dbt://" + "/".join(key.path[1:])] = [(c.name, c.type) for c in meta["dagster/column_schema"].value.columns]
    plan = load_project(pipelines, settings)
    project = plan.dbt_projects[0]
    built, manifest = [s for s in plan.dbt_steps if s.uri in columns], project.manifest()
    w, t = time.perf_counter(), time.process_time()  # what a run does after dbt: which relations, then the one query
    relations, known = relations_to_read(built, manifest, project, {s.uri for s in plan.steps}, settings)
    typed, note = build_columns(project, settings, relations, known)
    wall, cpu = time.perf_counter() - w, time.process_time() - t
    assert note is None and len(typed) == len(relations), note
    return edges, columns, wall, cpu, len(columns)


def dagster_dbt_slice(manifest: Path, project: Path, profiles: Path, state: Path, theirs: dict[Edge, None] | None = None) -> tuple[float, float, float, float, int]:
    """(CPU, wall) of building the slice through dagster-dbt without, then with fetch_column_metadata();
    ``theirs`` receives the edges fetch_column_metadata() found (all of them copy or mod: it has no scans)."""
    from dagster import DagsterInstance, materialize
    from dagster_dbt import DbtCliResource, dbt_assets

    from lineage_defs.settings import LineageSettings
    from lineage_defs.run.substrates import Session

    with Session(LineageSettings(state_dir=str(state))) as s:  # the scripts' table the slice reads
        s.conn.execute("CREATE OR REPLACE TABLE lake.main.raw AS SELECT range AS id, 'n' || range AS name, range * 1.5 AS amount, "
                       "TIMESTAMP '2025-01-01' + to_minutes(range) AS ts, ['placed', 'shipped', 'cancelled'][1 + range % 3] AS status FROM range(2000)")  # fmt: skip
    data = json.loads(manifest.read_text())
    dbt = DbtCliResource(project_dir=str(project), profiles_dir=str(profiles), dbt_executable=str(Path(sys.executable).parent / "dbt"))
    out = []
    for fetch in (False, True):

        @dbt_assets(manifest=data, select="tag:slice", name=f"slice_{int(fetch)}", required_resource_keys={"dbt"})
        def slice_assets(context):  # type: ignore[no-untyped-def]
            stream = context.resources.dbt.cli(["build"], context=context).stream()
            yield from (stream.fetch_column_metadata() if fetch else stream)

        t, w = time.process_time(), time.perf_counter()
        quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
        result = materialize([slice_assets], resources={"dbt": dbt}, instance=DagsterInstance.ephemeral(), run_config=quiet)
        out += [time.process_time() - t, time.perf_counter() - w]
        assert result.success
        n = len(result.get_asset_materialization_events())
        if fetch and theirs is not None:
            for ev in result.get_asset_materialization_events():
                mat = ev.event_specific_data.materialization
                lineage = mat.metadata.get("dagster/column_lineage")
                for col, deps in (lineage.value.deps_by_column.items() if lineage else []):
                    for d in deps:
                        theirs[(_uri_of(d.asset_key.path), d.column_name, _uri_of(mat.asset_key.path), col)] = None
    return out[0], out[1], out[2], out[3], n


def _uri_of(path: list[str]) -> str:
    """dagster-dbt's default keys (`m3`; a source `lake/raw`) → lineage_defs' URIs."""
    return "ducklake://main/raw" if path == ["lake", "raw"] else f"dbt://warehouse/main/{path[-1]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=3000)
    ap.add_argument("--scripts", type=int, default=500)
    ap.add_argument("--slice", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lineage-bench-dbt-"))
    try:
        pipelines = generate(root, args.models, args.scripts, args.slice)
        state = root / "state"
        project = pipelines / "bench" / "dbt"
        print(f"generated {args.models:,} dbt models and {args.scripts + 1:,} scripts in {root}")

        # (a) Definitions load
        cold = load_ours(pipelines, state)
        warm = statistics.median(load_ours(pipelines, state) for _ in range(args.repeat))
        profiles = next((state / "dbt" / "profiles").iterdir())
        target = root / "target"
        t = time.perf_counter()
        done = subprocess.run([str(Path(sys.executable).parent / "dbt"), "compile", "--project-dir", str(project), "--profiles-dir", str(profiles),
                               "--target-path", str(target), "--quiet"], capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"dbt compile failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        compile_s = time.perf_counter() - t
        alone = statistics.median(load_dagster_dbt(target / "manifest.json", project) for _ in range(args.repeat))
        print(f"\n(a) Definitions load, {args.models:,} dbt models (+ {args.scripts + 1:,} scripts for lineage_defs), fresh process after `import dagster`:")
        print(f"    lineage_defs cold (dbt parse + every script + load-time lineage): {cold:7.2f} s")
        print(f"    lineage_defs warm (manifest and parse caches):                    {warm:7.2f} s")
        print(f"    dagster-dbt alone (@dbt_assets on the same manifest.json):        {alone:7.2f} s")
        print(f"    warm / dagster-dbt alone = {warm / alone:.2f}x   (target: <= 1.00x)")
        print(f"    (for reference: `dbt compile` of the project took {compile_s:.1f} s)")

        # (b) the lineage pass vs fetch_column_metadata()
        ours_cold, ours_warm, n_models, n_edges = our_pass(pipelines, state, target, root / "pass-cache.json")
        # lineage_defs' slice first: fetch_column_metadata() leaves dbt-duckdb's connection (with the lake
        # attached) open in this process, and DuckDB refuses a second attach of the same lake file
        edges, typed, types_wall, types_cpu, n_ours = ours_slice(pipelines, state, args.slice)
        theirs: dict[Edge, None] = {}
        base_cpu, base_wall, fetch_cpu, fetch_wall, n_slice = dagster_dbt_slice(target / "manifest.json", project, profiles, state, theirs)
        fetch_edges = list(theirs)
        theirs = max(fetch_cpu - base_cpu, 1e-9)
        ours_per = ours_cold / n_models
        print(f"\n(b) Column lineage after a build:")
        print(f"    lineage_defs pass, {n_models:,} models ({n_edges:,} edges): cold {ours_cold:6.2f} s CPU = {ours_per * 1000:5.2f} ms/model;"
              f" warm {ours_warm:6.3f} s = {ours_warm / n_models * 1000:5.3f} ms/model")  # fmt: skip
        print(f"    dagster-dbt, {n_slice} models built through Dagster: plain {base_cpu:6.2f} s CPU ({base_wall:.1f} s wall),"
              f" with fetch_column_metadata() {fetch_cpu:6.2f} s CPU ({fetch_wall:.1f} s wall)")  # fmt: skip
        print(f"    fetch_column_metadata() costs {theirs:6.2f} s CPU = {theirs / n_slice * 1000:6.2f} ms/model, {fetch_wall - base_wall:+.1f} s wall")
        print(f"    per model: dagster-dbt / lineage_defs cold = {theirs / n_slice / ours_per:.1f}x cheaper (target: >= 20x; <= 3 ms/model cold)")

        # (c) the slice built through lineage_defs: edge recall against fetch_column_metadata(), real types
        found = [e for e in fetch_edges if e in edges]
        missing = [e for e in fetch_edges if e not in edges]
        kinds = {k: sum(1 for e in found if edges[e] == k) for k in ("copy", "mod")}
        n_cols = sum(len(c) for c in typed.values())
        unknown = sum(1 for cs in typed.values() for _, t in cs if t == "unknown")
        print(f"\n(c) The slice ({n_ours} models) built through lineage_defs, read back from the instance:")
        print(f"    edge recall vs fetch_column_metadata(): {len(found)}/{len(fetch_edges)} of its edges = {len(found) / max(len(fetch_edges), 1):.1%}"
              f" (target: 100%); ours as copy {kinds['copy']}, mod {kinds['mod']}; lineage_defs has {len(edges)} copy/mod edges")  # fmt: skip
        for e in missing[:5]:
            print(f"      missing: {e[0]}.{e[1]} -> {e[2]}.{e[3]}")
        print(f"    column types: {n_cols - unknown}/{n_cols} columns typed; the catalog query: {types_wall * 1000:.1f} ms wall,"
              f" {types_cpu * 1000:.1f} ms CPU = {types_wall / n_ours * 1000:.3f} ms/model (target: <= 1 ms/model)")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
