"""``dbt parse`` (and ``dbt ls`` for a selection) in a process of its own: dbt keeps global state.

Invoked by ``manifest.parse_project`` as
``python -m lineage_defs.dbt.parse_main '<json spec>'``; writes into the spec's
``target``: ``manifest.json``, ``partial_parse.msgpack`` (dbt's own
artifacts), ``selected.json`` (unique ids, or null for everything) and
``compiled.json``: the SQL dbt compiles for the models that call macros the
load-time renderer does not have (``adapter.dispatch``, ``dbt.date_trunc``…),
so their load-time lineage needs no build.

That compile runs against an in-memory DuckDB of its own (the manifest as
parsed, so relation names stay the project's): it takes no lock on the
warehouse a run may be writing, and a macro that queries the warehouse
(introspection is off) just leaves its model to the post-build pass: that
model is compiled without (the rest are compiled again) and named in
``compile_failed.json`` (unique id → dbt's reason), a warning of the load.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, cast


def main(spec: dict[str, object]) -> int:
    from dbt.cli.main import dbtRunner
    from dbt.contracts.graph.manifest import Manifest

    target = str(spec["target"])
    common = ["--project-dir", str(spec["project_dir"]), "--profiles-dir", str(spec["profiles_dir"]), "--target-path", target, "--log-path", target]
    extra = [str(a) for a in spec["args"]]  # type: ignore[attr-defined]
    parsed = dbtRunner().invoke(["parse", "--quiet", *common, *extra])
    if not parsed.success:
        print(f"dbt parse failed: {parsed.exception or 'see the dbt log above'}", file=sys.stderr)
        return 1
    manifest = cast(Manifest, parsed.result)
    selected = None
    selection = [str(a) for a in spec["selection"]]  # type: ignore[attr-defined]
    if selection:
        listed = dbtRunner(manifest=manifest).invoke(["ls", "--quiet", *common, *extra, *selection, "--output", "json", "--output-keys", "unique_id"])
        if not listed.success:
            print(f"dbt ls failed for the selection {selection}: {listed.exception}", file=sys.stderr)
            return 1
        selected = [json.loads(line)["unique_id"] for line in cast("list[str]", listed.result or [])]
    Path(target, "selected.json").write_text(json.dumps(selected))
    compiled, failed = _compile(manifest, spec, extra)
    Path(target, "compiled.json").write_text(json.dumps(compiled))
    Path(target, "compile_failed.json").write_text(json.dumps(failed))
    return 0


def _compile(manifest: Any, spec: dict[str, object], extra: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """unique id → compiled SQL of each model the load-time renderer cannot render, and unique id → why dbt could not compile it.

    One ``dbt compile`` for all of them; a model whose macro queries the database
    (``run_query``, ``statement``: no connection, introspection is off) aborts that
    whole invocation, so it is compiled again without the model that failed, until
    the rest compile (or model by model, when dbt does not name the model).
    """
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no types

    from dbt.cli.main import dbtRunner

    from lineage_defs.dbt.model_lineage import render
    from lineage_defs.dbt.relations import relation_of

    if manifest.metadata.adapter_type != "duckdb":
        return {}, {}  # another adapter's dispatch would pick other macros than an in-memory DuckDB
    data = json.loads(Path(str(spec["target"]), "manifest.json").read_text())  # what `dbt parse` wrote
    nodes = data["nodes"]
    models = {u: n for u, n in nodes.items() if n["resource_type"] == "model" and n.get("language", "sql") == "sql"}
    refs = {n["name"]: n["relation_name"] for n in nodes.values() if n.get("relation_name")}
    sources = {(s["source_name"], s["name"]): s["relation_name"] for s in data["sources"].values() if s.get("relation_name")}
    ephemerals = {n["name"]: n["raw_code"] for n in models.values() if (n.get("config") or {}).get("materialized") == "ephemeral"}
    args = list(extra)
    dbt_vars = json.loads(args[args.index("--vars") + 1]) if "--vars" in args else {}
    if "--target" in args:  # the scratch profile has one target of its own
        i = args.index("--target")
        del args[i : i + 2]
    wanted = {
        u: ".".join(n["fqn"]) for u, n in models.items()
        if (n.get("config") or {}).get("materialized") != "ephemeral" and render(n["raw_code"], relation_of(n), refs, sources, dbt_vars, ephemerals) is None
    }  # fmt: skip
    if not wanted:
        return {}, {}
    scratch = Path(str(spec["target"]), "compile")
    scratch.mkdir(parents=True, exist_ok=True)
    profile = _profile(Path(str(spec["project_dir"])))
    output = {"type": "duckdb", "path": ":memory:", "threads": 1, "config_options": {"autoinstall_known_extensions": False, "autoload_known_extensions": False}}
    (scratch / "profiles.yml").write_text(yaml.safe_dump({profile: {"target": "lineage_compile", "outputs": {"lineage_compile": output}}}))
    common = ["--project-dir", str(spec["project_dir"]), "--profiles-dir", str(scratch), "--target-path", str(scratch), "--log-path", str(scratch)]

    def invoke(ids: list[str]) -> Any:
        select = " ".join(f"fqn:{wanted[u]}" for u in ids)
        return dbtRunner(manifest=manifest).invoke(["compile", "--quiet", *common, *args, "--no-introspect", "--no-populate-cache", "--select", select])

    out: dict[str, str] = {}
    failed: dict[str, str] = {}
    todo = list(wanted)
    one_by_one = False
    for _ in range(len(wanted) + 1):  # each pass settles at least one model, or is the last
        batch = todo[:1] if one_by_one else todo
        before = len(out) + len(failed)
        done = invoke(batch)
        for r in getattr(done.result, "results", None) or []:
            code = getattr(r.node, "compiled_code", None)
            status = str(getattr(r, "status", "")).lower()
            if code and status == "success":
                out[r.node.unique_id] = code
            elif status == "error":
                failed[r.node.unique_id] = _reason(str(getattr(r, "message", "") or "dbt compile failed"))
        if done.exception is not None:
            culprit = str(getattr(getattr(done.exception, "node", None), "unique_id", ""))
            if culprit in wanted and culprit not in failed:
                failed[culprit] = _reason(str(done.exception))
            elif len(batch) == 1:
                failed[batch[0]] = _reason(str(done.exception))
            else:
                one_by_one = True  # dbt named no model: compile each to find the one(s) failing
        elif one_by_one and batch[0] not in out and batch[0] not in failed:
            failed[batch[0]] = "dbt compile returned no SQL"
        todo = [u for u in todo if u not in out and u not in failed]
        # done: all settled; or a batch that ran to the end settled nothing more (the rest were skipped)
        if not todo or (len(out) + len(failed) == before and not one_by_one):
            break
    return out, failed


def _reason(message: str) -> str:
    """dbt's error without its "Runtime Error in model …" heading: the reason, on one line."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.lower().startswith(("runtime error", "compilation error", "database error"))]
    # dbt-adapters' "connection never acquired for thread (pid, tid), have [...]": the thread ids say nothing to a reader
    return re.sub(r" for thread \(.*$", "", " ".join(useful or lines))[:300]


def _profile(project_dir: Path) -> str:
    from lineage_defs.dbt.manifest import profile_name

    return profile_name(project_dir)[1]


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
