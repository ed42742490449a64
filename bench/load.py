"""Load-time benchmark: Definitions from N annotated SQL scripts vs N plain Dagster @assets.

    .venv/bin/python bench/load.py [--n 500 2000] [--repeat 3]

Generates N scripts with realistic headers (partitions, merge keys, tests,
freshness, owners) and bodies (CTEs, joins, aggregates, a window function),
each reading 1–3 earlier scripts' tables. Measures, each in a fresh process
after `import dagster` (paid by both sides):
- cold: no parse cache (every file parsed and analysed with sqlglot);
- warm: the state dir holds the last load's plan and the parse cache (what every run process pays);
- warm, one script saved a moment ago: the last plan is not used, every script comes from the parse cache;
- plain: Dagster building N `@asset`s with the same keys, deps and partitions;
- plain with checks: the same `@asset`s, each with the same asset checks as the
  script's data tests (the second peer: Dagster's own cost of the checks).
Both sides end with `Definitions(...).get_repository_def()` (asset graph built), then
allocate 100,000 small objects as the process goes on: the cyclic collector's passes
over what the load left behind are part of what the load costs.
Rounds interleave every kind of load. Printed: the median of each kind, the
median of each round's own ratios, and the best (least disturbed) load of each kind.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent


def script(i: int, rng: random.Random, pipelines: int) -> tuple[str, str, list[int], bool]:
    ups = sorted(rng.sample(range(i), k=min(i, rng.randint(1, 3)))) if i else []
    partitioned = i % 3 != 0
    name = f"t{i}"
    lines = [
        f"-- Step {i}: revenue and orders per customer, built from {len(ups)} upstream tables.",
        "-- Owned by the analytics team; refreshed daily.",
        "-- pipeline",
    ]
    if partitioned:
        lines.append("-- partitioned daily start=2025-01-01")
    key = " key=customer_id" if i % 4 == 1 else ""
    lines += [
        f"-- materialize ducklake://main/{name}{key}",
        "-- data_test not_null customer_id",
        "-- data_test accepted_values status = placed,shipped,\"on hold\"",
        "-- freshness 1d warn=12h",
        "-- owner team:analytics",
        f"-- tag tier{i % 3}",
    ]
    if i % 4 == 1:
        lines.append("-- data_test unique customer_id")
    checks = ["not_null_customer_id", "accepted_values_status"] + (["unique_customer_id"] if i % 4 == 1 else [])
    src = [f"lake.t{u}" for u in ups] or ["lake.raw_orders"]
    body = f"""
        WITH base AS (
            SELECT o.customer_id, o.status, o.amount, o.ts
            FROM {src[0]} AS o
            WHERE o.amount > 0
        ), joined AS (
            SELECT b.customer_id, b.status, b.amount, b.ts{', x.amount AS other_amount' if len(src) > 1 else ''}
            FROM base AS b
            {f'LEFT JOIN {src[1]} AS x ON x.customer_id = b.customer_id' if len(src) > 1 else ''}
        )
        SELECT
            customer_id,
            status,
            sum(amount) AS amount,
            count(*) AS orders,
            max(ts) AS ts,
            row_number() OVER (PARTITION BY status ORDER BY sum(amount) DESC) AS rank
        FROM joined
        {'WHERE ts >= $partition_start::TIMESTAMP AND ts < $partition_end::TIMESTAMP' if partitioned else ''}
        GROUP BY customer_id, status
    """
    text = "\n".join(lines) + "\n" + textwrap.dedent(body).strip() + "\n"
    return f"p{i % pipelines}/{name}.sql", text, ups, partitioned, checks


def generate(root: Path, n: int) -> list[dict]:
    rng = random.Random(n)
    meta = []
    for i in range(n):
        rel, text, ups, part, checks = script(i, rng, pipelines=max(1, n // 100))
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        meta.append({"name": f"t{i}", "ups": ups, "partitioned": part, "group": rel.split("/")[0], "checks": checks})
    return meta


# Both sides then go on as a code server or run worker does, allocating (100,000 small objects):
# the cyclic collector's passes over what the load left in its young generations land in the
# window, whichever side they fall to.
AFTER = """
after = [[i] for i in range(100_000)]
print(time.perf_counter() - t)
"""

OURS = """
import sys, time
import dagster
t = time.perf_counter()
from lineage_defs import build_definitions, LineageSettings
defs = build_definitions(sys.argv[1], settings=LineageSettings(state_dir=sys.argv[2]))
defs.get_repository_def()
""" + AFTER


PLAIN = """
import json, sys, time
import dagster as dg
t = time.perf_counter()
meta = json.load(open(sys.argv[1]))
daily = dg.DailyPartitionsDefinition(start_date="2025-01-01")
assets = [dg.AssetSpec(["ducklake", "main", "raw_orders"])]
for m in meta:
    deps = [dg.AssetKey(["ducklake", "main", f"t{u}"]) for u in m["ups"]] or [dg.AssetKey(["ducklake", "main", "raw_orders"])]
    key = dg.AssetKey(["ducklake", "main", m["name"]])
    checks = [dg.AssetCheckSpec(c, asset=key) for c in m["checks"]] if sys.argv[2:] == ["checks"] else None
    @dg.asset(key=key, deps=deps, group_name=m["group"], check_specs=checks,
              partitions_def=daily if m["partitioned"] else None)
    def _a():
        return None
    assets.append(_a)
defs = dg.Definitions(assets=assets)
defs.get_repository_def()
""" + AFTER



def run(code: str, *args: str) -> float:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"benchmark process failed:\n{out.stderr[-3000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[500, 2000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    results = {}
    for n in args.n:
        with tempfile.TemporaryDirectory(prefix="lineage-bench-") as tmp:
            root, state = Path(tmp) / "pipelines", Path(tmp) / "state"
            meta = generate(root, n)
            (Path(tmp) / "meta.json").write_text(json.dumps(meta))
            cold, warm, plain, checked, edited = [], [], [], [], []
            touched = root / "p0" / "t0.sql"
            for _ in range(args.repeat):
                shutil.rmtree(state, ignore_errors=True)
                # plain first: the scripts are then older than the 2 s within which a load keeps no plan (plan.snapshot)
                plain.append(run(PLAIN, str(Path(tmp) / "meta.json")))
                checked.append(run(PLAIN, str(Path(tmp) / "meta.json"), "checks"))
                cold.append(run(OURS, str(root), str(state)))
                warm.append(run(OURS, str(root), str(state)))
                touched.touch()  # one script saved a moment ago: the last plan is not used, every file comes from the parse cache
                edited.append(run(OURS, str(root), str(state)))
            c, w, p, k, e = (statistics.median(x) for x in (cold, warm, plain, checked, edited))
            results[n] = (c, w, p)
            print(f"N={n:5d}  cold {c:6.2f}s ({c / p:4.2f}x plain)  warm {w:6.2f}s ({w / p:4.2f}x plain)  plain dagster {p:6.2f}s"
                  f"  | per asset: cold {1000 * c / n:.2f} ms, warm {1000 * w / n:.2f} ms, plain {1000 * p / n:.2f} ms")
            # each round's loads run back to back: its own ratios do not move with the machine's speed between rounds
            pc = [x / y for x, y in zip(cold, plain)]
            pw = [x / y for x, y in zip(warm, plain)]
            print(f"         per round: cold {statistics.median(pc):4.2f}x plain (rounds {', '.join(f'{r:.2f}' for r in pc)}),"
                  f" warm {statistics.median(pw):4.2f}x plain (rounds {', '.join(f'{r:.2f}' for r in pw)})")
            # the second peer: the same plain assets with the same asset checks (one per data test) —
            # how much of warm is Dagster's own cost of the checks
            kw = [x / y for x, y in zip(warm, checked)]
            print(f"         plain dagster with the same {sum(len(m['checks']) for m in meta)} asset checks {k:6.2f}s ({k / p:4.2f}x plain);"
                  f" warm {statistics.median(kw):4.2f}x it (rounds {', '.join(f'{r:.2f}' for r in kw)})")
            # the least disturbed load of each kind (a VM's neighbours only ever add time)
            bc, bw, bp, bk = min(cold), min(warm), min(plain), min(checked)
            print(f"         best of {args.repeat}: cold {bc:6.2f}s ({bc / bp:4.2f}x plain)  warm {bw:6.2f}s ({bw / bp:4.2f}x plain,"
                  f" {bw / bk:4.2f}x plain with checks)  plain {bp:6.2f}s  plain with checks {bk:6.2f}s")
            pe = [x / y for x, y in zip(edited, plain)]
            print(f"         warm with one script saved a moment ago (no kept plan: every file from the parse cache) {e:6.2f}s,"
                  f" {statistics.median(pe):4.2f}x plain (rounds {', '.join(f'{r:.2f}' for r in pe)})")
    if len(results) >= 2:
        (n1, r1), (n2, r2) = sorted(results.items())[0], sorted(results.items())[-1]
        growth = [(b / a) / (n2 / n1) for a, b in zip(r1, r2)]
        print(f"growth {n1}→{n2} relative to linear (1.0 = linear): cold {growth[0]:.2f}, warm {growth[1]:.2f}, plain {growth[2]:.2f}")


if __name__ == "__main__":
    main()
