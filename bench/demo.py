"""Demo start-up benchmark: seconds from `make demo` to a usable UI with every service running.

    .venv/bin/python bench/demo.py [--rounds 2]

`make demo` is `make install` (up to date: a no-op `compileall`) then
`lineage-defs demo up`: the instance set up alone, a Tansu broker with the
example's topic, the webhook receiver, then `dagster dev -w workspace.yaml`.
"Usable" is what `demo up` waits for before it prints `demo: ready`: the
webserver answers GraphQL with the code location loaded, the broker and the
receivers accept connections, and the cascade sensor has finished its first
tick (before it, a materialization cascades nothing). Each round starts it on
a fresh Dagster home and state dir (first start: every SQLite storage created,
the example parsed and its dbt project's manifest built, caches empty), stops
it (`demo stop`), and starts it again on the same ones (second start). The
peer is plain `dagster dev -w workspace.yaml` on a fresh home — what `make
demo` ran before — timed to the same GraphQL answers (location loaded,
cascade ticked). Ports are free ones; nothing is left running.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO))

from lineage_defs.demo.processes import launch_supervised, stop_group  # noqa: E402
from lineage_defs.demo.up import cascade_live, ui_ready  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loaded(port: int) -> bool:
    """What `demo: ready` waits for on the webserver: the location loaded, the cascade sensor ticked once."""
    url = f"http://127.0.0.1:{port}"
    return ui_ready(url) and cascade_live(url)


def environment(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LINEAGE_", "DAGSTER_"))}
    env.update(LINEAGE_PIPELINES_DIR=str(REPO / "examples" / "pipelines"), LINEAGE_STATE_DIR=str(root / "state"),
               DAGSTER_HOME=str(root / "home"), DAGSTER_EVENT_BATCH_SIZE="1000")
    return env


def fresh(root: Path) -> None:
    (root / "home").mkdir(parents=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", root / "home" / "dagster.yaml")


def time_demo(root: Path) -> float:
    """`lineage-defs demo up` until it prints `demo: ready`; then `demo stop`."""
    port = free_port()
    argv = [str(BIN / "lineage-defs"), "demo", "up", "--port", str(port), "--kafka-port", str(free_port()), "--webhook-port", str(free_port())]
    log = open(root / "demo.log", "ab")
    start = log.tell()  # the second start appends to the first's log: look only at its own lines
    t0 = time.monotonic()
    proc = launch_supervised(argv, REPO, environment(root), log)
    try:
        while b"demo: ready" not in (root / "demo.log").read_bytes()[start:]:
            if proc.poll() is not None:
                raise SystemExit(f"demo up exited:\n{(root / 'demo.log').read_text()[-3000:]}")
            time.sleep(0.2)
        seconds = time.monotonic() - t0
        assert loaded(port)
        subprocess.run([str(BIN / "lineage-defs"), "demo", "stop"], env=environment(root), cwd=REPO, check=True, capture_output=True, timeout=180)
        proc.wait(timeout=60)
        return seconds
    finally:
        stop_group(proc, 30)
        log.close()


def time_dagster_dev(root: Path) -> float:
    port = free_port()
    log = open(root / "dev.log", "ab")
    t0 = time.monotonic()
    proc = launch_supervised([str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-p", str(port)], REPO, environment(root), log)
    try:
        while not loaded(port):
            if proc.poll() is not None:
                raise SystemExit(f"dagster dev exited:\n{(root / 'dev.log').read_text()[-3000:]}")
            time.sleep(0.2)
        return time.monotonic() - t0
    finally:
        stop_group(proc, 30, whole_group=False)
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lineage-bench-demo-") as tmp:
        for i in range(args.rounds):
            demo, peer = Path(tmp) / f"demo{i}", Path(tmp) / f"dev{i}"
            fresh(demo)
            first = time_demo(demo)
            second = time_demo(demo)
            fresh(peer)
            plain = time_dagster_dev(peer)
            print(f"round {i + 1}: make demo (lineage-defs demo up) to a usable UI, every service running: "
                  f"first start {first:.1f} s, second start {second:.1f} s; plain `dagster dev` on a fresh home {plain:.1f} s "
                  f"({first / plain:.2f}x / {second / plain:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
