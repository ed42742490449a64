"""Checks across scripts: what each step produces, one producer per asset, the
schemas producers promise (for `*` expansion), scd2 `_current` views,
external assets and cycles."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from lineage_defs.errors import LineageDefsError, Location, SpecError
from lineage_defs.parse.model import Email, TestKind, Webhook
from lineage_defs.plan.files import FileResult
from lineage_defs.plan.names import hook_env, hook_name
from lineage_defs.plan.spec import PARTITION_COLUMN, SCD2_COLUMNS, AnyStep, DbtStep, ScriptStep


def outputs_of(step_files: Mapping[str, FileResult], errors: list[LineageDefsError]) -> dict[str, tuple[str, ...]]:
    """Script path → the asset URIs it produces (its `materialize` target first)."""
    outputs: dict[str, tuple[str, ...]] = {}
    for p, fr in step_files.items():
        h = fr.header
        inferred_writes = tuple(fr.analysis.writes if fr.analysis else ())
        if h.materialize:
            outs = (h.materialize.uri, *[w for w in inferred_writes if w != h.materialize.uri and h.materialize.manual])
        else:
            outs = inferred_writes
        if not outs:
            if fr.errors:  # a broken `materialize` line is already reported; don't pile a wrong fix on it
                continue
            errors.append(SpecError("this step produces no asset", fr.loc(1), "add '-- materialize <uri>' (or 'materialize manual <uri>' if the script writes it itself)"))
            continue
        outputs[p] = outs
    return outputs


def producers(outputs: Mapping[str, tuple[str, ...]], step_files: Mapping[str, FileResult], errors: list[LineageDefsError]) -> dict[str, str]:
    """Asset URI → the script producing it; a second producer is an error."""
    producer: dict[str, str] = {}
    for p, outs in outputs.items():
        for uri in outs:
            if uri in producer:
                fr = step_files[p]
                m = fr.header.materialize
                # the URI as written (`ducklake:///x`) may differ from its normal form: use the parsed location
                loc = m.at if m and m.at and m.uri == uri else fr.loc(m.at.line if m and m.at else 1, uri)
                errors.append(SpecError(f"{uri} is already materialized by {producer[uri]}", loc, "each asset has one producer: remove one, or write to another table"))
            else:
                producer[uri] = p
    return producer


def promised_schemas(outputs: Mapping[str, tuple[str, ...]], step_files: Mapping[str, FileResult]) -> dict[str, tuple[str, ...]]:
    """The columns each producer's target will have, managed columns included."""
    schemas: dict[str, tuple[str, ...]] = {}
    for p, outs in outputs.items():
        fr = step_files[p]
        cols = fr.analysis.output_columns if fr.analysis else None
        mat = fr.header.materialize
        if cols and mat and not mat.manual:
            if mat.history:
                managed: tuple[str, ...] = SCD2_COLUMNS
            elif fr.header.partitioned:
                managed = (PARTITION_COLUMN,)
            else:
                managed = ()
            schemas[outs[0]] = (*cols, *managed)
            if mat.history:
                schemas[outs[0] + "_current"] = schemas[outs[0]]  # the view of open versions
        declared = tuple(dict.fromkeys(c.output for c in fr.header.columns))
        if outs[0] not in schemas and declared:
            schemas[outs[0]] = declared
    return schemas


def dbt_producers(dbt_steps: Sequence[DbtStep], aliases: Mapping[str, str], producer: Mapping[str, str], step_files: Mapping[str, FileResult], errors: list[LineageDefsError]) -> dict[str, str]:
    """dbt model URI → its file; a script writing a model's relation (or URI) is a second producer."""
    out = {s.uri: s.path for s in dbt_steps}
    for uri, p in producer.items():
        model = aliases.get(uri, uri)
        if model in out:
            m = step_files[p].header.materialize
            loc = m.at if m and m.at and m.uri == uri else step_files[p].loc(m.at.line if m and m.at else 1, uri)
            errors.append(SpecError(f"{uri} is the relation the dbt model {out[model]} builds", loc, "each asset has one producer: write to another table, or read the model"))
    return out


def current_view_resolver(
    outputs: Mapping[str, tuple[str, ...]], step_files: Mapping[str, FileResult], producer: Mapping[str, str], aliases: Mapping[str, str] | None = None
) -> Callable[[str], str]:
    """scd2 targets keep a `<t>_current` view: reading it is reading `<t>`; reading a dbt model's relation is reading the model."""
    scd2 = {outs[0] for p, outs in outputs.items() if (m := step_files[p].header.materialize) and m.history}
    models = aliases or {}

    def resolve(uri: str) -> str:
        if uri in models:
            return models[uri]
        if uri.endswith("_current") and uri not in producer and uri[: -len("_current")] in scd2:
            return uri[: -len("_current")]
        return uri

    return resolve


def unproduced_warnings(steps: Sequence[AnyStep], step_files: Mapping[str, FileResult], produced: set[str]) -> list[LineageDefsError]:
    """`relationships` targets that no script step produces (a declared column's source is an input
    of its step, checked in ``plan.declared``: an external input like any other)."""
    out: list[LineageDefsError] = []
    fix = "it is treated as external; check the URI if it should be a step's output"
    for s in steps:
        if not isinstance(s, ScriptStep):
            continue
        for t in s.tests:
            if t.kind == TestKind.RELATIONSHIPS and t.ref_uri not in produced and t.at:
                out.append(SpecError(f"relationships target {t.ref_uri} is not produced by any step", t.at, fix, severity="warning"))
    return out


def webhooks(steps: Sequence[AnyStep]) -> list[tuple[str, ScriptStep, Webhook]]:
    """(hook name, step, its `on webhook` line) for every hook of the project, in step order."""
    return [(hook_name(s.name, t.name), s, t) for s in steps if isinstance(s, ScriptStep) for t in s.events if isinstance(t, Webhook)]


def mailboxes(steps: Sequence[AnyStep]) -> list[tuple[str, ScriptStep, Email]]:
    """(mailbox, step, its `on email` line) for every mailbox of the project, in step order."""
    return [(t.name, s, t) for s in steps if isinstance(s, ScriptStep) for t in s.events if isinstance(t, Email)]


def trigger_name_errors(steps: Sequence[AnyStep]) -> list[SpecError]:
    """Each webhook name is claimed by one `on webhook` line (the receiver routes by it), and so is
    each credential variable name it maps to; each mailbox by one `on email` line."""
    out: list[SpecError] = []
    first: dict[str, tuple[str, ScriptStep]] = {}
    for name, s, w in webhooks(steps):
        env = hook_env(name)
        if env in first:
            other, by = first[env]
            what = f"webhook '{name}' is declared twice" if other == name else f"webhooks '{name}' and '{other}' share the credentials LINEAGE_WEBHOOK_*_{env}"
            out.append(SpecError(f"{what} (also by {by.path})", w.at, "give one of them another name= (each hook feeds one step)"))
        else:
            first[env] = (name, s)
    boxes: dict[str, ScriptStep] = {}
    for box, s, m in mailboxes(steps):
        if box in boxes:
            out.append(SpecError(f"mailbox '{box}' is declared twice (also by {boxes[box].path})", m.at, "give one of them another name= (each mailbox feeds one step)"))
        else:
            boxes[box] = s
    return out


def cycles(steps: Sequence[AnyStep], files: Mapping[str, FileResult]) -> list[SpecError]:
    by_uri = {u: s for s in steps for u in s.outputs}
    graph = {s.name: [by_uri[d.uri].name for d in s.deps if d.uri in by_uri] for s in steps}
    by_name = {s.name: s for s in steps}
    out: list[SpecError] = []
    color: dict[str, int] = {}
    seen_cycles: set[frozenset[str]] = set()
    for start in graph:
        if color.get(start):
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(graph[start]))]
        path = [start]
        color[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
                path.pop()
                continue
            if color.get(nxt) == 1:
                cyc = path[path.index(nxt):]
                if frozenset(cyc) not in seen_cycles:
                    seen_cycles.add(frozenset(cyc))
                    first = by_name[cyc[0]]
                    chain = " → ".join(by_name[n].path for n in [*cyc, cyc[0]])
                    nxt_uri = by_name[cyc[1 % len(cyc)]].uri
                    dep = next((d for d in first.deps if d.uri in by_name[cyc[1 % len(cyc)]].outputs), None)
                    fr = files.get(first.path)  # None for a dbt model
                    loc = fr.loc(dep.line, nxt_uri) if fr and dep and dep.line else Location(first.path, 1)
                    out.append(SpecError(f"dependency cycle: {chain}", loc, "break the cycle: add 'mute <uri>' for a read that must not be an edge"))
            elif not color.get(nxt):
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(graph[nxt])))
    return out
