"""Real trigger-side processes for the tests: a Tansu Kafka broker, mosquitto, nats-server, `dagster-daemon run`, the webhook and e-mail receivers.

Each runs under the supervisor of ``tests/webserver.py`` (own process group,
parent-death signal), so a crashed test leaves nothing running, and is
stopped by its process group id — never by name.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lineage_defs.demo.broker import tansu_binary
from lineage_defs.demo.instance import prepare_instance
from webserver import free_port, launch_supervised, live_group_members, stop_group

VENV_BIN = Path(sys.executable).parent
# Put on the PYTHONPATH of the Dagster processes the suite starts: their backfill daemon passes every
# 5 s, not Dagster's fixed 30 s (daemon_site/sitecustomize.py says why).
DAEMON_SITE = str(Path(__file__).resolve().parent / "daemon_site")


# `dagster asset materialize` / `dg launch` run config: the run's steps in its own process (Dagster's
# in_process executor). Without it a run of two or more steps gets a process per step (the code location's
# executor, lineage_defs.assets.executor), each loading the code location again; a test uses this where no
# step's own process is what it checks.
IN_PROCESS = ["--config-json", '{"execution": {"config": {"in_process": {}}}}']


def with_daemon_site(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with DAEMON_SITE first on its PYTHONPATH."""
    rest = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": DAEMON_SITE + (os.pathsep + rest if rest else "")}




def wait_port(port: int, timeout: float, alive: Callable[[], bool] = lambda: True) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise AssertionError(f"the process meant to listen on {port} exited")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                out.append(int(entry))
    return out


class Supervised:
    """One command under the supervisor; ``groups`` remembers every group it ever led (restarts included)."""

    def __init__(self, argv: list[str], cwd: Path, env: Mapping[str, str], log: Path) -> None:
        self.argv, self.cwd, self.env, self.log_path = argv, cwd, dict(env), log
        self.proc: subprocess.Popen[bytes] | None = None
        self.groups: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        out = open(self.log_path, "ab")
        self.proc = launch_supervised(self.argv, self.cwd, self.env, out)
        out.close()
        self.groups.append(self.proc)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def command_pid(self) -> int:
        """The command itself (the supervisor's child)."""
        assert self.proc is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            kids = children(self.proc.pid)
            if kids:
                return kids[0]
            time.sleep(0.05)
        raise AssertionError(f"{self.argv[0]} did not start")

    def kill(self) -> None:
        """SIGKILL the command and its direct children (a crash); grandchildren (runs) live on."""
        pid = self.command_pid
        victims = [pid, *children(pid)]
        for p in victims:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert self.proc is not None
        self.proc.wait(timeout=30)

    def crash(self) -> list[int]:
        """SIGKILL the whole process group at once — the command, its code server, its run workers and
        their step processes, as a real crash (power loss, OOM killer on the cgroup) does; returns the pids killed."""
        assert self.proc is not None
        pgid = self.proc.pid
        victims = live_group_members(pgid)
        os.killpg(pgid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while live_group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not live_group_members(pgid), "the crash left processes of the group running"
        return victims

    def stop(self, grace: float = 3.0) -> None:
        for proc in self.groups:
            if live_group_members(proc.pid) or proc.poll() is None:
                stop_group(proc, grace)

    def log_tail(self, chars: int = 5000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class Tansu(Supervised):
    """A Tansu broker on a free port; S3 storage (restart-safe) when ``s3_env`` is given, else memory."""

    def __init__(self, tmp: Path, s3_env: Mapping[str, str] | None = None, bucket: str | None = None) -> None:
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        storage = f"s3://{bucket}/" if s3_env else "memory://tansu/"
        env = {**os.environ, **(s3_env or {})}
        super().__init__(
            [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", storage],
            tmp, env, tmp / f"tansu-{self.port}.log",
        )
        self.bootstrap = f"127.0.0.1:{self.port}"

    def start(self) -> None:
        super().start()
        wait_port(self.port, 20, self.alive)

    def create_topic(self, topic: str, partitions: int = 2) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
            f.result(timeout=30)

    def produce(self, topic: str, values: list[dict[str, Any]], key: Callable[[dict[str, Any]], str] | None = None) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "message.timeout.ms": 60000})
        for v in values:
            p.produce(topic, value=json.dumps(v).encode(), key=key(v).encode() if key else None)
            p.poll(0)
        left = p.flush(60)
        assert left == 0, f"{left} messages not delivered to {topic}"


class Mosquitto(Supervised):
    """Debian's mosquitto on a free port, with a config of the limits a persistent consumer needs: the default
    ``max_queued_messages 1000`` silently drops what an offline session is sent beyond it, and persistence in a
    directory the broker's user can write (started as root it drops to user ``mosquitto``)."""

    def __init__(self, tmp: Path) -> None:
        import pwd
        import shutil
        import tempfile

        self.port = free_port()
        # straight under /tmp: pytest's tmp dirs are 0700, which the user mosquitto cannot even enter
        data = self.data = Path(tempfile.mkdtemp(prefix="lineage-mosquitto-"))
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("mosquitto")
                shutil.chown(data, "mosquitto", "mosquitto")
            except KeyError:  # no such user: mosquitto keeps running as root
                pass
        conf = tmp / f"mosquitto-{self.port}.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {data}/\n"
            "max_queued_messages 200000\nmax_inflight_messages 1000\nqueue_qos0_messages true\npersistent_client_expiration 1d\n"
            "log_dest stderr\nlog_type error\nlog_type warning\n"
        )
        super().__init__(["/usr/sbin/mosquitto", "-c", str(conf)], tmp, dict(os.environ), tmp / f"mosquitto-{self.port}.log")
        self.url = f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> None:
        super().start()
        wait_port(self.port, 20, self.alive)

    def stop(self, grace: float = 3.0) -> None:
        import shutil

        super().stop(grace)
        shutil.rmtree(self.data, ignore_errors=True)

    def publish(self, topic: str, payloads: list[bytes], client_id: str = "", qos: int = 1) -> None:
        """``payloads`` at ``qos``; at QoS 1 each confirmed by the broker (PUBACK) before this returns."""
        import paho.mqtt.client as mqtt

        p = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
        p.max_inflight_messages_set(1000)
        p.max_queued_messages_set(0)
        p.connect("127.0.0.1", self.port)
        p.loop_start()
        try:
            infos = [p.publish(topic, payload, qos=qos) for payload in payloads]
            for info in infos:
                info.wait_for_publish(30)
                assert info.is_published(), f"the broker did not confirm a message to {topic}"
        finally:
            p.disconnect()
            p.loop_stop()


class NatsServer(Supervised):
    """Debian's nats-server with JetStream (file storage under ``tmp``) on a free port."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        store = tmp / f"nats-{self.port}"
        store.mkdir(parents=True, exist_ok=True)
        super().__init__(["/usr/sbin/nats-server", "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(store)], tmp, dict(os.environ), tmp / f"nats-{self.port}.log")
        self.url = f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        super().start()
        wait_port(self.port, 20, self.alive)

    def run(self, work: Callable[[Any], Any]) -> Any:
        """``await work(js)`` on a fresh connection (JetStream context), closed after."""
        import asyncio

        import nats

        async def go() -> Any:
            nc = await nats.connect(self.url)
            try:
                return await work(nc.jetstream())
            finally:
                await nc.close()

        return asyncio.run(go())

    def add_stream(self, name: str, subjects: list[str]) -> None:
        from nats.js.api import StorageType, StreamConfig

        self.run(lambda js: js.add_stream(StreamConfig(name=name, subjects=subjects, storage=StorageType.FILE)))

    def publish(self, subject: str, payloads: list[bytes]) -> None:
        """``payloads`` on ``subject``, each confirmed by JetStream (PubAck) before this returns."""
        import asyncio

        async def send(js: Any) -> None:
            for i in range(0, len(payloads), 500):
                await asyncio.gather(*(js.publish(subject, p) for p in payloads[i : i + 500]))

        self.run(send)


class Receiver(Supervised):
    """`lineage-defs webhooks serve` for ``pipelines`` on a free port, with ``env`` (credentials, limits) on top."""

    def __init__(self, tmp: Path, pipelines: Path, state: Path, env: Mapping[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full = {**os.environ, "LINEAGE_PIPELINES_DIR": str(pipelines), "LINEAGE_STATE_DIR": str(state), **env}
        super().__init__([str(VENV_BIN / "lineage-defs"), "webhooks", "serve", "--port", str(self.port)], tmp, full, tmp / "receiver.log")

    def start(self) -> None:
        super().start()
        wait_port(self.port, 60, self.alive)


class EmailReceiver(Supervised):
    """`lineage-defs email serve` for ``pipelines`` on a free port, with ``env`` (the size limit) on top."""

    def __init__(self, tmp: Path, pipelines: Path, state: Path, env: Mapping[str, str] | None = None) -> None:
        self.port = free_port()
        full = {**os.environ, "LINEAGE_PIPELINES_DIR": str(pipelines), "LINEAGE_STATE_DIR": str(state), **(env or {})}
        super().__init__([str(VENV_BIN / "lineage-defs"), "email", "serve", "--port", str(self.port)], tmp, full, tmp / "email-receiver.log")

    def start(self) -> None:
        super().start()
        wait_port(self.port, 60, self.alive)


DAGSTER_YAML = """
event_log_storage:  # as dagster_home/dagster.yaml ships it
  module: lineage_defs.dagster_storage
  class: BatchedSqliteEventLogStorage
  config:
    base_dir: {storage}
telemetry:
  enabled: false
run_launcher:  # as dagster_home/dagster.yaml ships it, with a shorter monitoring interval
  module: lineage_defs.dagster_storage
  class: MonitoredRunLauncher
run_monitoring:
  enabled: true
  poll_interval_seconds: 2
  start_timeout_seconds: 60
  max_resume_run_attempts: 0
run_retries:
  enabled: true
  max_retries: 0
run_coordinator:  # as dagster_home/dagster.yaml ships it: a queued run starts within a second, not Dagster's default 5
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
sensors:
  use_threads: true
  num_workers: 4
schedules:
  use_threads: true
"""


class Daemon(Supervised):
    """`dagster-daemon run` on a throwaway instance, loading ``lineage_defs.definitions`` for ``pipelines``."""

    def __init__(self, tmp: Path, pipelines: Path, state: Path, env: Mapping[str, str] | None = None, dagster_yaml: bool = True) -> None:
        """``dagster_yaml=False``: a fresh DAGSTER_HOME as a new Dagster user has it, no dagster.yaml (Dagster's
        defaults: DefaultRunLauncher, no run monitoring, no run retries; telemetry not uploaded)."""
        self.home = tmp / "dagster_home"
        self.home.mkdir(parents=True, exist_ok=True)
        if dagster_yaml:
            (self.home / "dagster.yaml").write_text(DAGSTER_YAML.replace("{storage}", str(self.home / "storage")))
        workspace = tmp / "workspace.yaml"
        workspace.write_text(
            textwrap.dedent(
                """
                load_from:
                  - python_module:
                      module_name: lineage_defs.definitions
                      attribute: defs
                      location_name: lineage_defs
                """
            )
        )
        full = {
            **os.environ,
            "DAGSTER_HOME": str(self.home),
            "LINEAGE_PIPELINES_DIR": str(pipelines),
            "LINEAGE_STATE_DIR": str(state),
            "LINEAGE_SENSOR_INTERVAL": "1",
            "PYTHONUNBUFFERED": "1",
            **({} if dagster_yaml else {"DAGSTER_DISABLE_TELEMETRY": "1"}),
            **(env or {}),
        }
        super().__init__([str(VENV_BIN / "dagster-daemon"), "run", "-w", str(workspace)], tmp, with_daemon_site(full), tmp / "daemon.log")
        # The instance's SQLite storage is made here, once: the daemon and its code server starting
        # together on a fresh home can both stamp its schema ("more than one head present").
        self.instance().dispose()

    def start(self) -> None:
        # the instance's storage is created here, alone: the daemon, its code server and this
        # test process opening a fresh home at once can race in Dagster's SQLite setup
        prepare_instance(self.home)
        super().start()

    def instance(self) -> Any:
        from dagster import DagsterInstance

        return DagsterInstance.from_config(str(self.home))


def wait_for(what: str, probe: Callable[[], Any], timeout: float, logs: Callable[[], str] = lambda: "", interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})\n{logs()}")
