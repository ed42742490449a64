"""``lineage-defs``: check, graph, new, changed, impact, diff, docs, backfill, webhooks serve, email serve, events, demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from lineage_defs.definitions import webserver_url_from_env
from lineage_defs.plan.spec import Project
from lineage_defs.settings import LineageSettings


def _settings(folder: str | None, use_cache: bool = True) -> LineageSettings:
    """The environment's settings (as the code location reads them), with the folder given on the command line."""
    settings = LineageSettings.from_env().replace(use_cache=use_cache)
    return settings.replace(pipelines_dir=folder) if folder else settings


def _folder(arg: str | None) -> Path:
    return Path(_settings(arg).pipelines_dir)


def _load(settings: LineageSettings) -> Project:
    from lineage_defs.project import load_project

    return load_project(settings.pipelines_dir, settings)


def cmd_check(args: argparse.Namespace) -> int:
    from lineage_defs.deploy import dead_run_warnings, local_state_warnings
    from lineage_defs.plan.schemas import column_warnings, reference_schemas

    settings = _settings(args.folder, use_cache=not args.no_cache)
    project = _load(settings)
    warnings = [*project.warnings, *column_warnings(project, reference_schemas(settings, project)), *local_state_warnings(project, settings), *dead_run_warnings(project)]
    for warning in warnings:
        print(warning.render(), file=sys.stderr)
    for e in project.errors:
        print(e.render(), file=sys.stderr)
    n, w = len(project.errors), len(warnings)
    print(f"{len(project.steps)} steps, {n} error{'s' * (n != 1)}, {w} warning{'s' * (w != 1)}")
    if args.against_instance and not project.errors:  # `lineage-defs diff --against-instance`'s rules
        from lineage_defs.diff import breaking_against_instance

        return breaking_against_instance(project, settings)
    return 1 if project.errors else 0


def graph_json(project: Project) -> dict[str, Any]:
    """SPEC section 9's shape."""
    from lineage_defs import uris

    assets = []
    for s in project.steps:
        for uri in s.outputs:
            p = s.partitioning
            assets.append(
                {
                    "uri": uri,
                    "key": list(uris.key_path(uri)),
                    "source": s.path,
                    "upstream": [d.uri for d in s.deps],
                    "partitions": {"kind": p.kind, "start": p.start, "tz": p.tz} if p else None,
                    "strategy": s.strategy,
                    "checks": list(s.check_names),
                }
            )
    for uri in project.externals:
        assets.append({"uri": uri, "key": list(uris.key_path(uri)), "source": None, "upstream": [], "partitions": None, "strategy": None, "checks": []})
    edges = [{"from": e.source, "to": e.target, "kind": e.kind} for s in project.steps for e in s.column_edges]
    return {"assets": assets, "column_edges": edges}


def cmd_graph(args: argparse.Namespace) -> int:
    project = _load(_settings(args.folder))
    if project.errors:
        for e in project.errors:
            print(e.render(), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(graph_json(project), indent=2))
        return 0
    for s in project.steps:
        part = f" [{s.partitioning.kind}]" if s.partitioning else ""
        print(f"{s.uri}  ({s.path}, {s.strategy}{part})")
        for d in s.deps:
            print(f"    ← {d.uri}{'' if d.explicit else '  (inferred)'}")
        if args.columns:
            for edge in s.column_edges:
                print(f"      {edge.target.removeprefix(s.uri) or '(row)'} ← {edge.source}  [{edge.kind}]")
    for uri in project.externals:
        print(f"{uri}  (external)")
    return 0


_TEMPLATES = {
    "duckdb": "-- {title}\n-- pipeline\n{part}{mat}\nSELECT\n    1 AS id\n{where}",
    "postgres": "-- {title}\n-- pipeline\n{part}{mat}\nSELECT\n    1 AS id\n{where}",
    "python": '# {title}\n# pipeline\n{part}{mat}\nimport pandas as pd\n\nfrom lineage_defs import runtime\n\ndf = pd.DataFrame({{"id": [1]}})\n{write}',
    "bash": '#!/usr/bin/env bash\n# {title}\n# pipeline\n{part}{mat}\nset -euo pipefail\n{write}',
}
_OUTPUTS = {
    "ducklake": "ducklake://main/{name}",
    "duckdb": "duckdb://warehouse/{name}",
    "datatable": "datatable://default/{name}",
    "s3_parquet": "s3:///{pipeline}/{name}{part}.parquet",
}
_EXT = {"duckdb": ".sql", "postgres": ".pg.sql", "python": ".py", "bash": ".sh"}


def cmd_new(args: argparse.Namespace) -> int:
    pipeline, _, name = args.step.partition("/")
    if not pipeline or not name or "/" in name:
        print(f"lineage-defs new: '{args.step}' must be <pipeline>/<name>", file=sys.stderr)
        return 2
    folder = _folder(args.folder)
    c = "--" if args.lang in ("duckdb", "postgres") else "#"
    path = folder / pipeline / f"{name}{_EXT[args.lang]}"
    if path.exists():
        print(f"lineage-defs new: {path} exists; not overwriting", file=sys.stderr)
        return 1
    part = f"{c} partitioned {args.partitioned} start=2025-01-01\n" if args.partitioned else ""
    manual = args.lang == "bash" and args.output != "none"
    if args.output == "none":
        mat = f"{c} materialize manual ducklake://main/{name}"
    else:
        uri = _OUTPUTS[args.output].format(name=name, pipeline=pipeline, part="/{partition}" if args.partitioned and args.output == "s3_parquet" else "")
        mat = f"{c} materialize {'manual ' if manual else ''}{uri}"
    where = "-- WHERE ts >= $partition_start::TIMESTAMP AND ts < $partition_end::TIMESTAMP\n" if args.partitioned else ""
    write = {
        # runtime.write() refuses a `materialize manual` target: with no managed output the script writes it itself
        "python": "runtime.write(df)\n" if args.output != "none" else "# write the target here\n",
        "bash": (
            '# $LINEAGE_OUTPUT_PATH is a local file; the runtime uploads it when object storage is S3.\n'
            '"$LINEAGE_PYTHON" -c \'import os, pyarrow as pa, pyarrow.parquet as pq; '
            'pq.write_table(pa.table({"id": [1]}), os.environ["LINEAGE_OUTPUT_PATH"])\'\n'
        )
        if args.output == "s3_parquet"
        else "# write the target here\n",
    }.get(args.lang, "")
    text = _TEMPLATES[args.lang].format(title=f"{name.replace('_', ' ').capitalize()}.", part=part, mat=mat, where=where, write=write)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(path)
    return 0


def cmd_changed(args: argparse.Namespace) -> int:
    from lineage_defs import changed
    from lineage_defs.errors import LineageDefsError

    plus = "+" in args.args
    folders = [a for a in args.args if a != "+"]
    if len(folders) > 1:
        print(f"lineage-defs changed: one folder at most, got {folders}", file=sys.stderr)
        return 2
    settings = _settings(folders[0] if folders else None)
    project = _load(settings)
    for e in project.errors:
        print(e.render(), file=sys.stderr)
    try:
        before = changed.since_git(settings, args.since) if args.since else changed.since_instance(project)
    except LineageDefsError as e:
        print(e.render(), file=sys.stderr)
        return 1
    lines, selection = changed.report(project, before, plus)
    for line in lines:
        print(line, file=sys.stderr)
    if selection:
        print(selection)
    else:
        print("no asset changed", file=sys.stderr)
    return 1 if project.errors else 0


def cmd_impact(args: argparse.Namespace) -> int:
    from lineage_defs.errors import LineageDefsError
    from lineage_defs.plan.impact import as_json, render
    from lineage_defs.plan.impact_index import column_graph

    settings = _settings(args.folder)
    graph, errors = column_graph(Path(settings.pipelines_dir), settings.cache_dir, settings.state, lambda: _load(settings))
    for e in errors:
        print(e, file=sys.stderr)
    try:
        asset, column = graph.resolve(args.column)
    except LineageDefsError as e:
        print(f"lineage-defs impact: {e.render()}", file=sys.stderr)
        return 2
    found = graph.walk(asset, column, upstream=args.upstream)
    if args.json:
        # indented for a terminal; one line for a pipe (json's C encoder: an answer of thousands of columns stays fast)
        print(json.dumps(as_json(graph, asset, column, args.upstream, found), indent=2 if sys.stdout.isatty() else None))
    else:
        print("\n".join(render(graph, asset, column, args.upstream, found)))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from lineage_defs.diff import run_diff

    return run_diff(_settings(args.folder), args.since, args.against_instance, args.json)


def _docs_build(settings: LineageSettings, out: Path) -> int:
    from lineage_defs.explorer.build import build_site
    from lineage_defs.explorer.instance import last_runs

    project = _load(settings)
    for e in project.errors:
        print(e.render(), file=sys.stderr)
    built = build_site(project, out, settings, last_runs([u for s in project.steps for u in s.outputs]))
    print(f"{built.assets} assets, {built.columns} columns, {built.edges} column edges → {out} ({built.seconds:.1f} s)", file=sys.stderr)
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    import tempfile

    from lineage_defs.errors import LineageDefsError
    from lineage_defs.explorer.serve import serve

    settings = _settings(args.folder)
    try:
        if args.docs_command == "build":
            return _docs_build(settings, Path(args.dir))
        with tempfile.TemporaryDirectory(prefix="lineage-docs-") as tmp:
            site = Path(args.dir) if args.dir else Path(tmp) / "site"
            _docs_build(settings, site)
            return serve(site, args.port)
    except LineageDefsError as e:
        print(f"lineage-defs docs {args.docs_command}: {e.render()}", file=sys.stderr)
        return 1


def cmd_backfill(args: argparse.Namespace) -> int:
    from lineage_defs.backfill import launch_backfill

    return launch_backfill(args.asset, args.from_, args.to, args.concurrency, args.url, args.wait)


def cmd_webhooks_serve(args: argparse.Namespace) -> int:
    from lineage_defs.definitions import webhook_env
    from lineage_defs.errors import LineageDefsError
    from lineage_defs.triggers.webhook.serve import serve

    try:
        return serve(args.host, args.port, webhook_env(), args.folder)
    except LineageDefsError as e:
        print(e.render(), file=sys.stderr)
        return 1


def cmd_email_serve(args: argparse.Namespace) -> int:
    from lineage_defs.errors import LineageDefsError
    from lineage_defs.triggers.email.serve import serve

    try:
        return serve(args.host, args.port, os.environ, args.folder)
    except LineageDefsError as e:
        print(e.render(), file=sys.stderr)
        return 1


def cmd_demo_up(args: argparse.Namespace) -> int:
    from lineage_defs.demo.up import Options, run

    return run(Options(host=args.host, port=args.port, kafka_port=args.kafka_port, webhook_port=args.webhook_port, email_port=args.email_port, workspace=args.workspace))


def cmd_demo_stop(args: argparse.Namespace) -> int:
    from lineage_defs.demo.up import stop

    return stop(LineageSettings.from_env().state_dir)


def cmd_demo_send(args: argparse.Namespace) -> int:
    from lineage_defs.demo.send import send_email, send_kafka, send_webhook
    from lineage_defs.errors import LineageDefsError

    state_dir = LineageSettings.from_env().state_dir
    try:
        if args.what == "kafka":
            return send_kafka(state_dir, args.count, args.topic, args.value, args.day)
        if args.what == "email":
            return send_email(state_dir, args.count, args.mailbox, args.day)
        return send_webhook(state_dir, args.count, args.hook, args.body, args.day, os.environ)
    except LineageDefsError as e:
        print(f"lineage-defs demo send {args.what}: {e.render()}", file=sys.stderr)
        return 1
def _instance() -> Any:
    """The Dagster instance of ``DAGSTER_HOME`` (None when it is not set: the listing then shows no run states)."""
    import os

    if not os.environ.get("DAGSTER_HOME"):
        return None
    from dagster import DagsterInstance

    return DagsterInstance.get()


def cmd_events(args: argparse.Namespace) -> int:
    from lineage_defs.triggers.report import listing, replay

    settings = _settings(None)
    if args.events_command == "replay":
        code, message = replay(settings, args.batch)
        print(message, file=sys.stderr if code else sys.stdout)
        return code
    instance = _instance()
    try:
        for line in listing(settings, instance, args.stream, args.limit):
            print(line)
    finally:
        if instance is not None:
            instance.dispose()
    if instance is None:
        print("(set DAGSTER_HOME to see what the runs of open batches are doing)", file=sys.stderr)
    return 0


def _folder_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--folder", help="pipelines folder (default $LINEAGE_PIPELINES_DIR or pipelines)")


def main(argv: list[str] | None = None) -> int:
    from lineage_defs.demo.send import EXAMPLE_DAY

    p = argparse.ArgumentParser(prog="lineage-defs", description="Annotated scripts as one Dagster asset graph.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="report every annotation and contract error; exit 1 if any")
    c.add_argument("folder", nargs="?")
    c.add_argument("--no-cache", action="store_true", help="parse everything again")
    c.add_argument("--against-instance", action="store_true", help="also fail on breaking column changes against the last materializations in $DAGSTER_HOME (docs/impact.md)")
    c.set_defaults(fn=cmd_check)
    g = sub.add_parser("graph", help="asset (and column) lineage as text or JSON")
    g.add_argument("folder", nargs="?")
    g.add_argument("--columns", action="store_true")
    g.add_argument("--json", action="store_true")
    g.set_defaults(fn=cmd_graph)
    n = sub.add_parser("new", help="scaffold a step")
    n.add_argument("step", help="<pipeline>/<name>")
    n.add_argument("--lang", choices=list(_EXT), required=True)
    n.add_argument("--output", choices=[*_OUTPUTS, "none"], required=True)
    n.add_argument("--partitioned", choices=["daily", "hourly", "weekly", "monthly"])
    _folder_arg(n)
    n.set_defaults(fn=cmd_new)
    ch = sub.add_parser("changed", help="assets whose code changed, as a Dagster selection (with +, and everything downstream)")
    ch.add_argument("args", nargs="*", metavar="[folder] [+]", help="the pipelines folder; '+' adds everything downstream")
    ch.add_argument("--since", metavar="GIT_REF", help="compare with the folder at this commit (default: each asset's latest materialization in $DAGSTER_HOME)")
    ch.set_defaults(fn=cmd_changed)
    im = sub.add_parser("impact", help="every column downstream (or upstream) of one column, with the path of edges to it")
    im.add_argument("column", metavar="ASSET_URI.COLUMN", help="e.g. ducklake://main/orders.amount_eur")
    im.add_argument("--upstream", action="store_true", help="where the column comes from instead of where it goes")
    im.add_argument("--json", action="store_true", help="the answer as JSON (docs/impact.md)")
    _folder_arg(im)
    im.set_defaults(fn=cmd_impact)
    df = sub.add_parser("diff", help="changed steps' output columns, classified breaking / non-breaking / metadata only; exit 1 on breaking")
    since = df.add_mutually_exclusive_group(required=True)
    since.add_argument("--since", metavar="GIT_REF", help="compare with the plan of the pipelines folder at this commit")
    since.add_argument("--against-instance", action="store_true", help="compare with each asset's last materialized dagster/column_schema in $DAGSTER_HOME")
    df.add_argument("--json", action="store_true", help="the changes as JSON (docs/impact.md)")
    _folder_arg(df)
    df.set_defaults(fn=cmd_diff)
    dc = sub.add_parser("docs", help="the lineage explorer: a static site of every asset and its column lineage")
    dcsub = dc.add_subparsers(dest="docs_command", required=True)
    db = dcsub.add_parser("build", help="write the site into a folder (open it with any static file server)")
    db.add_argument("dir", help="the folder to write (created; a previous build there is replaced)")
    db.add_argument("--folder", help="pipelines folder (default $LINEAGE_PIPELINES_DIR or pipelines)")
    db.set_defaults(fn=cmd_docs)
    dv = dcsub.add_parser("serve", help="build the site and serve it on 127.0.0.1")
    dv.add_argument("--port", type=int, default=8080, help="default %(default)s")
    dv.add_argument("--folder", help="pipelines folder (default $LINEAGE_PIPELINES_DIR or pipelines)")
    dv.add_argument("--dir", help="build into this folder (default: a temporary one, removed on exit)")
    dv.set_defaults(fn=cmd_docs)
    b = sub.add_parser("backfill", help="launch a partition backfill on a running instance")
    b.add_argument("asset", help="asset URI, e.g. ducklake://main/orders")
    b.add_argument("--from", dest="from_", required=True)
    b.add_argument("--to", required=True)
    b.add_argument("--concurrency", type=int, default=None, help="cap parallel runs of the step's pool for this backfill (waits, then restores the limit)")
    b.add_argument("--wait", action="store_true", help="show each partition's progress until the backfill ends; exit 1 if any failed")
    b.add_argument("--url", default=webserver_url_from_env(), help="the Dagster webserver (default: $DAGSTER_WEBSERVER_URL or %(default)s)")
    b.set_defaults(fn=cmd_backfill)
    w = sub.add_parser("webhooks", help="the webhook receiver")
    wsub = w.add_subparsers(dest="webhooks_command", required=True)
    ws = wsub.add_parser("serve", help="receive POST /hooks/<name> for the folder's `on webhook` steps")
    ws.add_argument("--host", default="127.0.0.1")
    ws.add_argument("--port", type=int, default=8787)
    _folder_arg(ws)
    ws.set_defaults(fn=cmd_webhooks_serve)
    em = sub.add_parser("email", help="the e-mail receiver")
    emsub = em.add_subparsers(dest="email_command", required=True)
    es = emsub.add_parser("serve", help="receive mail (SMTP) for the folder's `on email` mailboxes")
    es.add_argument("--host", default="127.0.0.1")
    es.add_argument("--port", type=int, default=2525)
    _folder_arg(es)
    es.set_defaults(fn=cmd_email_serve)
    d = sub.add_parser("demo", help="the example with every trigger live (make demo)")
    dsub = d.add_subparsers(dest="demo_command", required=True)
    du = dsub.add_parser("up", help="start the UI and daemon, a Kafka broker and the webhook and e-mail receivers; Ctrl-C stops them all")
    du.add_argument("--host", default="127.0.0.1")
    du.add_argument("--port", type=int, default=3000, help="the UI (default %(default)s)")
    du.add_argument("--kafka-port", type=int, default=9092, help="the Kafka broker (default %(default)s)")
    du.add_argument("--webhook-port", type=int, default=8787, help="the webhook receiver (default %(default)s)")
    du.add_argument("--email-port", type=int, default=2525, help="the e-mail receiver (default %(default)s)")
    du.add_argument("--workspace", default="workspace.yaml", help="the Dagster workspace file (default %(default)s)")
    du.set_defaults(fn=cmd_demo_up)
    dsub.add_parser("stop", help="stop the running demo (make demo-stop)").set_defaults(fn=cmd_demo_stop)
    ds = dsub.add_parser("send", help="produce to the demo's Kafka topic, post to its webhook or mail its mailbox")
    ds.add_argument("what", choices=["kafka", "webhook", "email"])
    ds.add_argument("--count", type=int, default=3, help="messages, posts or mails (default %(default)s)")
    ds.add_argument("--day", default=EXAMPLE_DAY, help="the day of the example's orders and payments (default %(default)s)")
    ds.add_argument("--topic", help="kafka: the topic (default: the folder's only one)")
    ds.add_argument("--value", help="kafka: this JSON as each message's value instead of an order event")
    ds.add_argument("--hook", help="webhook: the hook (default: the folder's only one)")
    ds.add_argument("--body", help="webhook: this JSON as the body instead of a payment")
    ds.add_argument("--mailbox", help="email: the mailbox (default: the folder's only one)")
    ds.set_defaults(fn=cmd_demo_send)
    e = sub.add_parser("events", help="the event store: per stream what was stored, rejected and batched, and each batch's state")
    e.add_argument("--stream", help="one stream (e.g. webhook:payments, kafka:<step>:<topic>)")
    e.add_argument("--limit", type=int, default=10, help="batches and rejected events shown per stream (default %(default)s)")
    e.set_defaults(fn=cmd_events, events_command="list")
    esub = e.add_subparsers(dest="events_command")
    er = esub.add_parser("replay", help="run a failed batch again (a fresh series of attempts)")
    er.add_argument("batch", help="the batch id, as `lineage-defs events` lists it")
    er.set_defaults(fn=cmd_events)
    args = p.parse_args(argv)
    try:
        code = int(args.fn(args))
        sys.stdout.flush()  # a reader that went away shows up here, not at interpreter exit
        return code
    except BrokenPipeError:
        # `lineage-defs graph | head`: the reader stopped reading, as Unix tools expect.
        # Python would print a traceback, and another one flushing stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # what a shell reports for a command killed by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
