"""Pull sources drained into the event store: events/s for PostgreSQL changes, SQS, MQTT and NATS messages.

    .venv/bin/python bench/pull_sources.py [--rows 100000] [--txn 10] [--messages 500] [--mqtt 20000] [--nats 20000]
        [--only postgres|sqs|mqtt|nats]

Each source's backlog is made first (not timed), then drained the way its
sensor does (``pull.drain``: read a chunk, store it with one committed SQLite
transaction, acknowledge it) until it is empty. Target (issue 17): >= 5,000
events/s per pull source.

PostgreSQL: a throwaway Debian PostgreSQL 15 cluster (wal_level=logical) on a
free port; --rows inserts in transactions of --txn rows into a table with a
primary key, then the step's slot is drained (peek pgoutput → store →
advance). SQS: moto's server as its own process; --messages are sent in
batches of 10, then drained (receive 10 → store → delete_message_batch). moto
is O(queue length) per call, so the script also prints the server's own
ceiling: the same receive/delete loop with no store at all. MQTT: Debian's
mosquitto (limits raised as docs/annotations.md says) with --mqtt messages
queued for the step's persistent session while no tick runs, then drained
(receive up to 500 → store → PUBACK, MQTT 3.1.1); the peer is the broker alone: a bare
paho client on the same backlog that PUBACKs each message as it arrives, no
store. NATS: Debian's nats-server with JetStream (file storage), --nats
messages published to a stream, then drained from the step's durable pull
consumer (pull 1,000 → store → ack); the peer is the server alone: nats-py's
own ``fetch`` of 1,000 + ack on a second consumer of the same stream, no store.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from events import free_port, start, stop, wait_port  # noqa: E402

from lineage_defs.events.store import EventStore  # noqa: E402
from lineage_defs.triggers.pull import drain  # noqa: E402

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _as_postgres(*cmd: str) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else list(cmd)


def bench_postgres(tmp: Path, rows: int, txn: int) -> float:
    import psycopg

    from lineage_defs.triggers.postgres.reader import PgReader, PgSource

    root = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = free_port()
    subprocess.run(_as_postgres(str(PG_BIN / "initdb"), "-D", str(root / "data"), "-U", "postgres", "-A", "trust", "--no-sync"), check=True, capture_output=True)
    opts = f"-c listen_addresses=127.0.0.1 -p {port} -c fsync=off -c unix_socket_directories={root} -c wal_level=logical"
    subprocess.run(_as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(root / "data"), "-o", opts, "-l", str(root / "log"), "-w", "start"), check=True, capture_output=True)
    dsn = f"host=127.0.0.1 port={port} dbname=postgres user=postgres"
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE TABLE public.orders (id int PRIMARY KEY, amount int, note text)")
        source = PgSource(dsn, "public.orders", "lineage_bench")
        with EventStore(tmp / "pg.sqlite") as store:
            drain(store, "pg", PgReader(source), max_messages=1, budget_seconds=5)  # first use: publication and slot
            t0 = time.perf_counter()
            with psycopg.connect(dsn) as c, c.cursor() as cur:
                for start_at in range(0, rows, txn):
                    cur.executemany("INSERT INTO public.orders VALUES (%s, %s, 'x')", [(i, i) for i in range(start_at, min(start_at + txn, rows))])
                    c.commit()
            print(f"postgres: {rows:,} rows inserted in transactions of {txn} in {time.perf_counter() - t0:.1f} s (not timed below)")
            t0 = time.perf_counter()
            got, ticks = 0, 0
            while got < rows:
                r = drain(store, "pg", PgReader(source), max_messages=200_000, budget_seconds=60)
                got, ticks = got + r.stored, ticks + 1
                if not r.consumed:
                    break
            dt = time.perf_counter() - t0
            assert store.counts("pg")["events"] == rows, store.counts("pg")
        rate = rows / dt
        print(f"postgres: drained {rows:,} changes in {ticks} ticks, {dt:.2f} s -> {rate:,.0f} events/s (target 5,000: {rate / 5000:.1f}x)")
        return rate
    finally:
        subprocess.run(_as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(root / "data"), "stop", "-m", "immediate"), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def bench_sqs(tmp: Path, messages: int) -> float:
    import boto3

    from lineage_defs.triggers.sqs.reader import SqsReader, SqsSource

    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
    port = free_port()
    moto = start([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], dict(os.environ), tmp / "moto.log")
    try:
        wait_port(port)
        url = f"http://127.0.0.1:{port}"
        client = boto3.client("sqs", endpoint_url=url)

        def fill(name: str) -> str:
            q = str(client.create_queue(QueueName=name)["QueueUrl"])
            for i in range(0, messages, 10):
                client.send_message_batch(QueueUrl=q, Entries=[{"Id": str(j), "MessageBody": json.dumps({"n": i + j})} for j in range(10)])
            return q

        q = fill("ceiling")
        t0 = time.perf_counter()
        n = 0
        while True:
            got = client.receive_message(QueueUrl=q, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=120).get("Messages", [])
            if not got:
                break
            client.delete_message_batch(QueueUrl=q, Entries=[{"Id": str(j), "ReceiptHandle": m["ReceiptHandle"]} for j, m in enumerate(got)])
            n += len(got)
        ceiling = n / (time.perf_counter() - t0)
        print(f"sqs: moto alone (receive 10 + delete 10, no store): {n:,} messages -> {ceiling:,.0f} messages/s")

        fill("bench")
        with EventStore(tmp / "sqs.sqlite") as store:
            t0 = time.perf_counter()
            total = 0
            while total < messages:
                r = drain(store, "sqs", SqsReader(SqsSource("bench", url, budget_seconds=60)), max_messages=200_000, budget_seconds=60)
                total += r.stored
                if not r.consumed:
                    break
            dt = time.perf_counter() - t0
            assert store.counts("sqs")["events"] == messages, store.counts("sqs")
        rate = messages / dt
        print(f"sqs: drained {messages:,} messages in {dt:.2f} s -> {rate:,.0f} events/s ({rate / ceiling:.2f} of moto's own ceiling; target 5,000: {rate / 5000:.2f}x)")
        return rate
    finally:
        stop(moto)


def _mosquitto(tmp: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    port = free_port()
    data = Path(tempfile.mkdtemp(prefix="bench-mosquitto-"))  # under /tmp: the broker's user must reach it
    if os.geteuid() == 0:
        shutil.chown(data, "mosquitto", "mosquitto")
    conf = tmp / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {data}/\n"
        "max_queued_messages 1000000\nmax_inflight_messages 1000\nqueue_qos0_messages true\n"
    )
    return start(["/usr/sbin/mosquitto", "-c", str(conf)], dict(os.environ), tmp / "mosquitto.log"), port, data


def _publish(port: int, topic: str, n: int) -> None:
    import paho.mqtt.client as mqtt

    p = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    p.max_inflight_messages_set(1000)
    p.max_queued_messages_set(0)
    p.connect("127.0.0.1", port)
    p.loop_start()
    infos = [p.publish(topic, json.dumps({"n": i, "region": "eu"}), qos=1) for i in range(n)]
    for info in infos:
        info.wait_for_publish(60)
    p.disconnect()
    p.loop_stop()


def bench_mqtt(tmp: Path, messages: int) -> float:
    import paho.mqtt.client as mqtt

    from lineage_defs.triggers.mqtt.reader import MqttReader, MqttSource

    broker, port, data = _mosquitto(tmp)
    try:
        wait_port(port)
        url = f"mqtt://127.0.0.1:{port}"

        # the broker alone: a bare session draining the same backlog, PUBACK on arrival, no store
        def bare() -> mqtt.Client:
            c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-ceiling", clean_session=False, protocol=mqtt.MQTTv311)
            c.connect("127.0.0.1", port)
            return c

        c = bare()
        c.subscribe("bench/ceiling", qos=1)
        c.loop(1)
        c.disconnect()
        _publish(port, "bench/ceiling", messages)
        got = [0]
        c = bare()
        c.on_message = lambda *_: got.__setitem__(0, got[0] + 1)
        t0 = time.perf_counter()
        while got[0] < messages and time.perf_counter() - t0 < 300:
            c.loop(0.05)
            for _ in range(1000):  # what the socket holds, without a select() per packet (as the reader does)
                n = got[0]
                c.loop_read()
                if got[0] == n:
                    break
        ceiling = got[0] / (time.perf_counter() - t0)
        c.disconnect()
        print(f"mqtt: mosquitto + paho alone (PUBACK on arrival, no store): {got[0]:,} messages -> {ceiling:,.0f} messages/s")

        source = MqttSource(url, "bench/orders", "bench-step")
        with EventStore(tmp / "mqtt.sqlite") as store:
            drain(store, "mqtt", MqttReader(source), max_messages=1, budget_seconds=5)  # first tick: the session
            _publish(port, "bench/orders", messages)
            t0 = time.perf_counter()
            total = 0
            while total < messages:
                r = drain(store, "mqtt", MqttReader(source), max_messages=200_000, budget_seconds=60)
                total += r.stored
                if not r.consumed:
                    break
            dt = time.perf_counter() - t0
            assert store.counts("mqtt")["events"] == messages, store.counts("mqtt")
        rate = messages / dt
        print(f"mqtt: drained {messages:,} messages in {dt:.2f} s (incl. the 0.25 s lull that ends a tick) -> {rate:,.0f} events/s "
              f"({rate / ceiling:.2f} of the broker alone; target 5,000: {rate / 5000:.2f}x)")
        return rate
    finally:
        stop(broker)
        shutil.rmtree(data, ignore_errors=True)


def bench_nats(tmp: Path, messages: int) -> float:
    import asyncio

    import nats
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

    from lineage_defs.triggers.nats.reader import MAX_ACK_PENDING, NatsReader, NatsSource

    port = free_port()
    data = tmp / "nats"
    data.mkdir()
    server = start(["/usr/sbin/nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(data)], dict(os.environ), tmp / "nats.log")
    url = f"nats://127.0.0.1:{port}"
    try:
        wait_port(port)

        async def fill() -> None:
            nc = await nats.connect(url)
            js = nc.jetstream()
            await js.add_stream(StreamConfig(name="BENCH", subjects=["bench.>"], storage=StorageType.FILE))
            for i in range(0, messages, 1000):
                await asyncio.gather(*(js.publish("bench.orders", json.dumps({"n": j, "region": "eu"}).encode()) for j in range(i, min(i + 1000, messages))))
            await nc.close()

        async def alone() -> int:
            nc = await nats.connect(url)
            js = nc.jetstream()
            await js.add_consumer("BENCH", ConsumerConfig(durable_name="ceiling", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=MAX_ACK_PENDING))
            sub = await js.pull_subscribe_bind("ceiling", stream="BENCH")
            n = 0
            while n < messages:
                try:
                    msgs = await sub.fetch(batch=1000, timeout=1)
                except (NatsTimeout, asyncio.TimeoutError):
                    break
                for m in msgs:
                    await m.ack()
                await nc.flush()
                n += len(msgs)
            await nc.close()
            return n

        asyncio.run(fill())
        t0 = time.perf_counter()
        n = asyncio.run(alone())
        ceiling = n / (time.perf_counter() - t0)
        print(f"nats: nats-server + nats-py alone (fetch 1,000 + ack, no store): {n:,} messages -> {ceiling:,.0f} messages/s")

        source = NatsSource(url, "BENCH", "bench.orders", "bench_step")
        with EventStore(tmp / "nats.sqlite") as store:
            t0 = time.perf_counter()
            total = 0
            while total < messages:
                r = drain(store, "nats", NatsReader(source), max_messages=200_000, budget_seconds=60)
                total += r.stored
                if not r.consumed:
                    break
            dt = time.perf_counter() - t0
            assert store.counts("nats")["events"] == messages, store.counts("nats")
        rate = messages / dt
        print(f"nats: drained {messages:,} messages in {dt:.2f} s (incl. the 1 s pull that ends a tick) -> {rate:,.0f} events/s "
              f"({rate / ceiling:.2f} of the server alone; target 5,000: {rate / 5000:.2f}x)")
        return rate
    finally:
        stop(server)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--txn", type=int, default=10)
    ap.add_argument("--messages", type=int, default=500, help="SQS: moto slows down with the queue's length (2,000 take minutes)")
    ap.add_argument("--mqtt", type=int, default=20_000, help="MQTT: messages queued for the step's session")
    ap.add_argument("--nats", type=int, default=20_000, help="NATS: messages in the stream")
    ap.add_argument("--only", choices=("postgres", "sqs", "mqtt", "nats"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pull-") as d:
        if a.only in (None, "postgres"):
            bench_postgres(Path(d), a.rows, a.txn)
        if a.only in (None, "sqs"):
            bench_sqs(Path(d), a.messages)
        if a.only in (None, "mqtt"):
            bench_mqtt(Path(d), a.mqtt)
        if a.only in (None, "nats"):
            bench_nats(Path(d), a.nats)


if __name__ == "__main__":
    main()
