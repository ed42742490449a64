"""OpenLineage emission cost per run: a two-step run with the client unconfigured, sending to a live
local receiver, to a dead port (connection refused) and to a silent endpoint (accepts, never answers).

    .venv/bin/python bench/openlineage_emit.py [--runs 10]

Each run is a real Dagster run of two SQL steps, the second reading the first
(``execute_in_process``), the modes interleaved run by run so machine load
hits them alike; medians are reported, and the difference to the
unconfigured run is the cost of emission. The dead and silent endpoints use
the client's defaults for a plain ``OPENLINEAGE_URL`` (5 s timeout, 5
retries), except that a failed connection is not retried; a step waits at
most the budget (``LINEAGE_OPENLINEAGE_TIMEOUT``, default 1 s) at its end,
and a run that waits it out (or cannot connect) gives the endpoint up for
its later steps. Also printed: how long the steps waited at their end for
their events, per step.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.openlineage import observe

TESTS = Path(__file__).resolve().parents[1] / "tests"
# The live endpoint is a process of its own, as a lineage server is: one line per event received.
RECEIVER = f"""
import sys, time
sys.path.insert(0, {str(TESTS)!r})
from openlineage_support import Receiver
r = Receiver()
print(r.url, flush=True)
seen = 0
while True:
    while seen < len(r.events):
        seen += 1
        print("event", flush=True)
    time.sleep(0.05)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    logging.getLogger("dagster").setLevel(logging.ERROR)
    tmp = Path(tempfile.mkdtemp(prefix="bench-openlineage-"))
    folder = tmp / "pipelines" / "shop"
    folder.mkdir(parents=True)
    (folder / "orders.sql").write_text(
        "-- pipeline\n-- materialize ducklake://main/orders\n"
        "SELECT i AS order_id, i % 7 AS customer_id, i * 1.5 AS amount FROM range(1000) t(i) WHERE i % 3 <> 0\n"
    )
    (folder / "totals.sql").write_text(
        "-- pipeline\n-- materialize ducklake://main/totals\n"
        "SELECT customer_id, sum(amount) AS amount FROM lake.main.orders GROUP BY customer_id\n"
    )
    live = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    assert live.stdout is not None
    live_url = live.stdout.readline().strip()
    dead_sock = socket.socket()
    dead_sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{dead_sock.getsockname()[1]}"
    dead_sock.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(512)
    modes = {"off": None, "live": live_url, "dead": dead, "silent": f"http://127.0.0.1:{silent.getsockname()[1]}"}
    os.environ["OPENLINEAGE_URL"] = live_url  # built configured: the client's import starts in the background, as in a code location
    defs = build_definitions(tmp / "pipelines", settings=LineageSettings(state_dir=str(tmp / "state")))
    keys = [dg.AssetKey(["ducklake", "main", "orders"]), dg.AssetKey(["ducklake", "main", "totals"])]
    job = defs.resolve_implicit_job_def_def_for_assets(keys)
    assert job is not None
    instance = dg.DagsterInstance.ephemeral()

    waits: dict[str, list[float]] = {m: [] for m in modes}
    close = observe.Emitter.close

    def timed_close(self: observe.Emitter) -> observe.Outcome:
        outcome = close(self)
        waits[current].append(outcome.waited)
        return outcome

    observe.Emitter.close = timed_close  # type: ignore[method-assign]
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    for i in range(args.runs + 1):
        for current, url in modes.items():
            if url is None:
                os.environ.pop("OPENLINEAGE_URL", None)
            else:
                os.environ["OPENLINEAGE_URL"] = url
            start = time.perf_counter()
            assert job.execute_in_process(asset_selection=keys, instance=instance).success
            if i:  # the first round warms every path
                seconds[current].append(time.perf_counter() - start)
    base = statistics.median(seconds["off"])
    print(f"two-step run, median of {args.runs} (interleaved), budget 1 s:")
    for m in modes:
        med = statistics.median(seconds[m])
        wait = f", a step waited at its end {statistics.median(waits[m]) * 1000:.0f} ms (max {max(waits[m]) * 1000:.0f}, {len(waits[m])} steps)" if waits[m] else ""
        print(f"  {m:7s} {med:6.3f} s  ({(med - base) * 1000:+6.0f} ms vs unconfigured){wait}")
    time.sleep(1)
    live.terminate()
    received = live.communicate()[0].count("event")
    print(f"  events received by the live endpoint: {received} (4 per run)")
    silent.close()


if __name__ == "__main__":
    main()
