"""The webhook receiver (`lineage-defs webhooks serve`) and its sensor, as real processes under `dagster-daemon`.

The bad-input table: every refused request gets its status and leaves
nothing in the store and no run. The end-to-end: accepted posts (with
repeated Idempotency-Keys) become rows exactly once, across a daemon SIGKILL,
a receiver restart and a re-executed run.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import hmac
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services import Daemon, Receiver, wait_for
from triggers_support import finished, reexecute, runs, stored, table_rows, write_steps

pytestmark = pytest.mark.daemon

TOKEN, SECRET, REGION_SECRET = "t0ken-orders", "s3cret-orders", "s3cret-regions"
ROWS = "duckdb://warehouse/wh_rows"
REGION_ROWS = "duckdb://warehouse/region_rows"

STEPS = {
    "hooks/wh_rows.sql": f"""-- pipeline
-- on webhook name=orders
-- materialize {ROWS} append
SELECT CAST(json_extract_string(value, '$.n') AS BIGINT) AS n, key AS idempotency_key FROM _events
""",
    "hooks/region_rows.sql": f"""-- pipeline
-- partitioned dynamic key="$.region"
-- on webhook name=regions
-- materialize {REGION_ROWS} append
SELECT json_extract_string(value, '$.region') AS region, CAST(json_extract_string(value, '$.n') AS BIGINT) AS n FROM _events
""",
    "hooks/open_rows.sql": """-- pipeline
-- on webhook name=open
-- materialize duckdb://warehouse/open_rows append
SELECT value FROM _events
""",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("webhooks-e2e")
    pipelines = write_steps(tmp / "pipelines", STEPS)
    state = tmp / "state"
    env = {
        "LINEAGE_WEBHOOK_TOKEN_ORDERS": TOKEN,
        "LINEAGE_WEBHOOK_SECRET_ORDERS": SECRET,
        "LINEAGE_WEBHOOK_SECRET_REGIONS": REGION_SECRET,
        "LINEAGE_WEBHOOK_MAX_BYTES": "4096",
    }
    receiver = Receiver(tmp, pipelines, state, env)
    receiver.start()
    daemon = Daemon(tmp, pipelines, state)
    try:
        yield {"tmp": tmp, "state": state, "url": receiver.url, "port": receiver.port, "receiver": receiver, "daemon": daemon, "pipelines": pipelines}
    finally:
        daemon.stop()
        receiver.stop()


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **(headers or {})}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def signed(body: bytes, secret: str = SECRET, token: str | None = TOKEN, **extra: str) -> dict[str, str]:
    h = {"X-Lineage-Signature": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(), **extra}
    if token:
        h["Authorization"] = f"Bearer {token}"
    return h


def chunked_post(port: int, path: str, chunks: list[bytes], headers: dict[str, str]) -> int:
    """A POST without Content-Length (chunked): the limit must hold while reading."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        s.sendall(head.encode())
        try:
            for c in chunks:
                s.sendall(f"{len(c):x}\r\n".encode() + c + b"\r\n")
            s.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed before the rest: that is the point
        data = s.recv(65536)
    return int(data.split(b" ", 2)[1])


def test_receiver_refuses_bad_input_and_stores_nothing(world: dict[str, Any]) -> None:
    url, state = world["url"], world["state"]
    good = json.dumps({"n": 1}).encode()
    big = json.dumps({"n": 1, "pad": "x" * 5000}).encode()
    cases = [
        ("no credentials", f"{url}/hooks/orders", good, {}, 401),
        ("wrong bearer", f"{url}/hooks/orders", good, signed(good, token="nope"), 401),
        ("bearer but no signature", f"{url}/hooks/orders", good, {"Authorization": f"Bearer {TOKEN}"}, 401),
        ("wrong signature", f"{url}/hooks/orders", good, signed(good, secret="other"), 401),
        ("signature of another body", f"{url}/hooks/orders", good, signed(b'{"n": 2}'), 401),
        ("unknown hook", f"{url}/hooks/nope", good, signed(good), 404),
        ("hook without credentials", f"{url}/hooks/open", good, signed(good), 401),
        ("oversize (Content-Length)", f"{url}/hooks/orders", big, signed(big), 413),
        ("not JSON", f"{url}/hooks/orders", b"{not json", signed(b"{not json"), 400),
        ("empty body", f"{url}/hooks/orders", b"", signed(b""), 400),
    ]
    for region in ["../../etc/passwd", "a'b; DROP TABLE x", "line\nbreak", "ctl\x01", "", "x" * 200, "..", "a/b"]:
        body = json.dumps({"region": region, "n": 1}).encode()
        cases.append((f"hostile partition {region[:12]!r}", f"{url}/hooks/regions", body, signed(body, REGION_SECRET, None), 400))
    body = json.dumps({"n": 1}).encode()
    cases.append(("no partition value", f"{url}/hooks/regions", body, signed(body, REGION_SECRET, None), 400))
    for name, target, data, headers, want in cases:
        status, answer = post(target, data, headers)
        assert status == want, f"{name}: {status} {answer}"
    assert chunked_post(world["port"], "/hooks/orders", [b'{"pad": "' + b"x" * 1000] * 6 + [b'"}'], {"Authorization": f"Bearer {TOKEN}"}) == 413
    for stream in ("webhook:orders", "webhook:regions", "webhook:open"):
        assert stored(state, stream) == 0, f"{stream}: a refused request was stored"

    # the sensors run over the empty store: nothing executes
    world["daemon"].start()
    instance = world["daemon"].instance()
    wait_for("a few sensor ticks", lambda: len(instance.get_ticks(_origin_id(instance, "hooks__wh_rows__webhook_orders"), _selector_id(instance, "hooks__wh_rows__webhook_orders"))) >= 2, 120, world["daemon"].log_tail)
    assert runs(instance) == []

    # a well-formed partition value is accepted, makes its dynamic partition, and runs
    body = json.dumps({"region": "eu-west", "n": 7}).encode()
    status, answer = post(f"{url}/hooks/regions", body, signed(body, REGION_SECRET, None))
    assert status == 202 and answer["id"]
    wait_for("the region row", lambda: table_rows(state, REGION_ROWS, "region, n, _partition") == [("eu-west", 7, "eu-west")], 120, world["daemon"].log_tail)
    assert instance.get_dynamic_partitions("hooks__region_rows") == ["eu-west"]


def _origin_id(instance: Any, name: str) -> str:
    states = [s for s in instance.all_instigator_state() if s.name == name]
    return states[0].instigator_origin_id if states else ""


def _selector_id(instance: Any, name: str) -> str:
    states = [s for s in instance.all_instigator_state() if s.name == name]
    return states[0].selector_id if states else ""


def test_posts_become_rows_once_across_duplicates_daemon_kill_and_reexecution(world: dict[str, Any]) -> None:
    url, state, daemon, receiver = world["url"], world["state"], world["daemon"], world["receiver"]
    if not daemon.alive():
        daemon.start()

    def send(i: int) -> tuple[int, str]:
        body = json.dumps({"n": i}).encode()
        status, answer = post(f"{url}/hooks/orders", body, signed(body, **{"Idempotency-Key": f"order-{i}"}))
        assert status == 202, answer
        return i, answer["id"]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        ids = dict(pool.map(send, range(150)))
        repeat = dict(pool.map(send, range(0, 150, 3)))  # the same keys again: the first ids, nothing stored
    assert all(repeat[i] == ids[i] for i in repeat)
    assert len(set(ids.values())) == 150
    daemon.kill()
    receiver.kill()  # the receiver dies too: what it answered 202 for is on disk
    receiver.start()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        more = dict(pool.map(send, range(150, 250)))
        again = dict(pool.map(send, range(140, 160)))
    assert all(again[i] == (ids.get(i) or more.get(i)) for i in again)
    daemon.start()
    wait_for("250 rows", lambda: len(table_rows(state, ROWS)) >= 250, 180, daemon.log_tail)
    instance = daemon.instance()
    wait_for("all runs finished", lambda: finished(instance), 120, daemon.log_tail)
    assert sorted(r[0] for r in table_rows(state, ROWS, "n")) == list(range(250))
    assert stored(state, "webhook:orders") == 250

    run = next(r for r in runs(instance, **{"dagster/sensor_name": "hooks__wh_rows__webhook_orders"}) if r.status.value == "SUCCESS")
    reexecute(instance, run.run_id, world["tmp"] / "workspace.yaml", {"LINEAGE_PIPELINES_DIR": str(world["pipelines"]), "LINEAGE_STATE_DIR": str(state)})
    assert len(table_rows(state, ROWS)) == 250
