"""Column impact and lineage explorer benchmark: `lineage-defs impact` and `docs build` on 3,000 dbt models + 500 SQL scripts.

    .venv/bin/python bench/lineage_docs.py [--models 3000] [--scripts 500] [--repeat 3] [--no-browser]

The project is bench/dbt.py's generator (a dbt project of `m<i>` models, each
reading one or two earlier ones, a `raw` script under them and `s<j>` scripts
reading model relations). One cold load fills the state dir (dbt parse,
every script and model analysed); then, warm:
- `lineage-defs impact ... --json` end to end, each in a fresh process (what a
  user waits for: interpreter start, warm project load, graph, walk, JSON);
- in one process, after the warm load: building the column graph, and the
  walk, for the widest column (`raw.amount`: every model's amount is made
  from it) and for a script's column upstream.
- `lineage-defs docs build` end to end in a fresh process (warm project load,
  the column graph, one JSON file per asset), and the site's build alone in
  process (CPU);
- the site served (`lineage-defs docs serve`'s server) and opened in headless
  Chromium (tests/browser.py): the first render of an asset page — from the
  navigation's start until its details, the search box and its column graph
  are drawn (the page's own `performance.now()` then) — for a model deep in
  the project and for the raw table all 3,000 models read; and the click on
  `raw.amount` (3,000 columns downstream, each asset's file fetched once)
  until its highlighted lineage is drawn.
Prints the numbers (medians of --repeat).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLI = Path(sys.executable).parent / "lineage-defs"


def _generator():  # type: ignore[no-untyped-def]
    """bench/dbt.py's generate(), loaded by path (its module name would shadow the dbt package)."""
    spec = importlib.util.spec_from_file_location("bench_dbt_project", HERE / "dbt.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=int, default=3000)
    p.add_argument("--scripts", type=int, default=500)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", help="generate into (or reuse) this folder instead of a temporary one")
    p.add_argument("--no-browser", action="store_true", help="skip the first-render measurement in Chromium")
    args = p.parse_args()

    from lineage_defs.plan.impact import ColumnGraph
    from lineage_defs.project import load_project
    from lineage_defs.settings import LineageSettings

    with tempfile.TemporaryDirectory(prefix="bench-impact-") as scratch:
        tmp = Path(args.dir) if args.dir else Path(scratch)
        pipelines = tmp / "pipelines"
        if not pipelines.exists():
            _generator()(tmp, args.models, args.scripts, min(300, args.models))
        state = tmp / "state"
        settings = LineageSettings(state_dir=str(state))
        fresh = not state.exists()
        t = time.perf_counter()
        project = load_project(pipelines, settings)
        cold = time.perf_counter() - t
        assert not project.errors, [e.render() for e in project.errors[:5]]
        edges = sum(len(s.column_edges) for s in project.steps)
        print(f"project: {len(project.dbt_steps)} dbt models, {len(project.scripts)} scripts, {edges} column edges; {'cold' if fresh else 'first (state reused)'} load {cold:.1f} s")

        script = next(s for s in project.scripts if s.uri.endswith("/s0"))
        questions = [("ducklake://main/raw.amount", False), (f"{script.uri}.amount", True)]
        env = {"LINEAGE_STATE_DIR": str(state), "PATH": str(Path(sys.executable).parent)}
        for spec, upstream in questions:
            cmd = [str(CLI), "impact", spec, "--json", "--folder", str(pipelines), *(["--upstream"] if upstream else [])]
            runs, cpu, answer, size = [], [], {}, 0
            subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT, check=True)  # the first answer writes the index
            for _ in range(args.repeat):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
                runs.append(time.perf_counter() - t)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                answer, size = json.loads(out.stdout), len(out.stdout)
            print(
                f"impact {spec}{' --upstream' if upstream else ''}: {len(answer['columns'])} columns ({size / 1e6:.1f} MB of JSON); "
                f"CLI warm, fresh process: {statistics.median(runs):.2f} s wall, {statistics.median(cpu):.2f} s CPU (medians of {args.repeat})"
            )

        loads, builds, walks = [], [], []
        for _ in range(args.repeat):  # CPU time (process_time): the machine may be shared
            t = time.process_time()
            project = load_project(pipelines, settings)
            loads.append(time.process_time() - t)
            t = time.process_time()
            graph = ColumnGraph.build(project)
            builds.append(time.process_time() - t)
            t = time.process_time()
            for spec, upstream in questions:
                graph.walk(*graph.resolve(spec), upstream=upstream)
            walks.append((time.process_time() - t) / len(questions))
        print(
            f"in process, CPU: warm project load (what the index saves) {statistics.median(loads):.2f} s, column graph {statistics.median(builds) * 1000:.0f} ms, "
            f"one walk {statistics.median(walks) * 1000:.0f} ms (medians of {args.repeat})"
        )

        docs_build(pipelines, tmp / "site", env, args.repeat)
        if not args.no_browser:
            first_render(tmp / "site", args.models, args.repeat)


def docs_build(pipelines: Path, site: Path, env: dict[str, str], repeat: int) -> None:
    from lineage_defs.explorer.build import build_site
    from lineage_defs.project import load_project
    from lineage_defs.settings import LineageSettings

    cmd = [str(CLI), "docs", "build", str(site), "--folder", str(pipelines)]
    runs, cpu = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT, check=True)
        runs.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    files = sum(1 for _ in (site / "data" / "a").iterdir())  # shards of a few assets each
    size = sum(f.stat().st_size for f in (site / "data").rglob("*.json"))
    index = (site / "data" / "index.json").stat().st_size
    settings = LineageSettings(state_dir=env["LINEAGE_STATE_DIR"], pipelines_dir=str(pipelines))
    project = load_project(pipelines, settings)
    alone = []
    for _ in range(repeat):
        t = time.process_time()
        build_site(project, site, settings)
        alone.append(time.process_time() - t)
    print(
        f"docs build: {files} asset files, {size / 1e6:.1f} MB of JSON (search index {index / 1e6:.2f} MB); CLI warm, fresh process: "
        f"{statistics.median(runs):.2f} s wall, {statistics.median(cpu):.2f} s CPU; the site alone, in process: {statistics.median(alone):.2f} s CPU (medians of {repeat})"
    )


def first_render(site: Path, models: int, repeat: int) -> None:
    import threading
    from functools import partial
    from http.server import ThreadingHTTPServer
    from urllib.parse import quote

    from lineage_defs.explorer.serve import _Quiet

    sys.path.insert(0, str(ROOT / "tests"))
    from browser import Browser  # the suite's headless Chromium

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(site)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    browser = Browser(f"http://127.0.0.1:{server.server_address[1]}")
    ready = "return document.body.dataset.state === 'ready' && !!window.cy && !!document.getElementById('search')"
    try:
        listed = [a[0] for a in json.loads((site / "data" / "index.json").read_text())["assets"]]
        deep = next(u for u in listed if u.endswith(f"/m{models - 1}"))
        for label, uri in ((f"model m{models - 1}", deep), ("raw (read by every model)", "ducklake://main/raw")):
            page, wall = [], []
            for _ in range(repeat):
                browser.open("/about:blank")
                t = time.perf_counter()
                browser.open(f"/#/asset/{quote(uri, safe='')}")
                browser.wait(f"{uri} drawn", lambda: browser.driver.execute_script(ready), timeout=60, interval=0.02)
                wall.append(time.perf_counter() - t)
                page.append(float(browser.driver.execute_script("return window.explorerRendered")) / 1000)
            print(f"first render of {label}'s page in headless Chromium: {statistics.median(page):.2f} s (page's clock), {statistics.median(wall):.2f} s wall (medians of {repeat})")
        clicks: list[float] = []
        split: list[list[float]] = []
        for _ in range(repeat):
            browser.open("/about:blank")  # a fresh page: no file fetched yet
            browser.open(f"/#/asset/{quote('ducklake://main/raw', safe='')}")
            browser.wait("raw drawn", lambda: browser.driver.execute_script(ready), timeout=60, interval=0.02)
            t = time.perf_counter()
            browser.driver.execute_script("location.hash = arguments[0]", f"#/asset/{quote('ducklake://main/raw', safe='')}/column/{quote('ducklake://main/raw.amount', safe='')}")
            browser.wait("raw.amount's lineage", lambda: browser.driver.execute_script("return document.body.dataset.selection === 'ducklake://main/raw.amount'"), timeout=300, interval=0.05)
            clicks.append(time.perf_counter() - t)
            down = browser.driver.execute_script("return document.querySelectorAll('#downstream li').length")
            split.append(browser.driver.execute_script("return [explorer.state.timing.walk, explorer.state.timing.draw]"))
        walk_ms, draw_ms = (statistics.median(x[i] for x in split) for i in (0, 1))
        print(
            f"click raw.amount: {down} columns downstream listed, the nearest 250 drawn, in {statistics.median(clicks):.2f} s "
            f"(the walk {walk_ms / 1000:.2f} s, drawing {draw_ms / 1000:.2f} s; medians of {repeat})"
        )
    finally:
        browser.close()
        server.shutdown()


if __name__ == "__main__":
    main()
