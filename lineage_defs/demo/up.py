"""`lineage-defs demo up` (what `make demo` runs): the example with every trigger live.

One command starts, in order:

1. the local Dagster instance, set up by this process alone (``demo.instance``);
2. a Kafka-compatible broker (Tansu, in memory) with every topic of the
   folder's ``on kafka`` steps, unless ``LINEAGE_KAFKA_BOOTSTRAP`` names one;
3. the webhook receiver (``lineage-defs webhooks serve``) with a bearer
   token and an HMAC secret per hook (``demo.state.credentials``);
4. the e-mail receiver (``lineage-defs email serve``) for the folder's
   ``on email`` mailboxes;
5. ``dagster dev -w workspace.yaml``: the UI and the daemon, which runs the
   cascade, the schedules, the Kafka, webhook and e-mail sensors, backfills and runs;
   its whole output goes to ``<state dir>/demo/dagster.log`` and what a person acts
   on (warnings and errors) to this terminal too (``demo.console``), as the other
   services' output goes to their own log files there.

Each runs in a process group of its own under a supervisor that kills it if
this process dies (``demo.processes``). Ctrl-C, SIGTERM or ``lineage-defs demo
stop`` (``make demo-stop``) stop them all; so does one of them exiting.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lineage_defs.demo import state
from lineage_defs.demo.broker import create_topics, tansu_argv, wait_port
from lineage_defs.demo.console import Console, plain
from lineage_defs.demo.instance import prepare_instance
from lineage_defs.demo.processes import launch_supervised, stop_group
from lineage_defs.errors import LineageDefsError, ProjectErrors

CASCADE_QUERY = (
    "{ repositoriesOrError { ... on RepositoryConnection { nodes { sensors { name"
    " sensorState { status ticks(limit: 1, statuses: [SKIPPED, SUCCESS]) { id } } } } } } }"
)
LOCATION_QUERY = "{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }"


@dataclass(frozen=True)
class Options:
    host: str = "127.0.0.1"
    port: int = 3000
    kafka_port: int = 9092
    webhook_port: int = 8787
    email_port: int = 2525
    workspace: str = "workspace.yaml"
    ready_timeout: float = 600.0


@dataclass
class Service:
    """One supervised command: its output goes to ``log`` (None: this terminal); with a ``console``, all of it
    to ``log`` and what the console keeps to this terminal too (``demo.console``)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path | None
    grace: float  # seconds between SIGTERM and SIGKILL on stop (0: SIGKILL at once)
    term_group: bool = True  # SIGTERM to the whole group (False: to the command, which stops its children)
    console: Console | None = None
    proc: Any = None
    _out: IO[bytes] | None = field(default=None, repr=False)
    _pump: threading.Thread | None = field(default=None, repr=False)

    def start(self, cwd: Path) -> None:
        if self.log is not None:
            self._out = open(self.log, "ab")
        if self.console is None or self._out is None:
            self.proc = launch_supervised(self.argv, cwd, self.env, self._out)
            return
        self.proc = launch_supervised(self.argv, cwd, self.env, subprocess.PIPE)
        self._pump = threading.Thread(target=self._copy, args=(self.proc.stdout, self._out, self.console), name=f"{self.name}-output", daemon=True)
        self._pump.start()

    @staticmethod
    def _copy(source: IO[bytes], log: IO[bytes], console: Console) -> None:
        """Every line to the log file (without colour codes), what the console keeps to this terminal."""
        for raw in iter(source.readline, b""):
            line = raw.decode(errors="replace")
            log.write(plain(line).encode())
            log.flush()
            shown = console.feed(line)
            if shown:
                sys.stdout.write("".join(s + "\n" for s in shown))
                sys.stdout.flush()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, self.grace, self.term_group)
        if self._pump is not None:
            self._pump.join(timeout=10)  # its last lines, once the group is gone
        if self._out is not None:
            self._out.close()
            self._out = None

    def tail(self, chars: int = 3000) -> str:
        if self.log is None:
            return ""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def graph_url(ui: str, groups: list[str]) -> str:
    """The UI's Lineage page with every group open. It opens on one collapsed box per group; its
    ``expanded`` query names the open ones (as its "Expand all groups" sets it; ids ``global@global:<group>``)."""
    return f"{ui}/asset-groups" + (f"?expanded={','.join(f'global@global:{g}' for g in groups)}" if groups else "")


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _graphql(url: str, query: str) -> dict[str, Any] | None:
    """The webserver's answer to ``query`` (its ``data``); None while it does not answer."""
    req = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read()).get("data") or {}
    except (OSError, ValueError):
        return None


def ui_ready(url: str) -> bool:
    """The webserver answers and the code location is loaded; raises on a load error (waiting is pointless)."""
    data = _graphql(url, LOCATION_QUERY)
    if data is None:
        return False
    ws = data.get("workspaceOrError") or {}
    for entry in ws.get("locationEntries") or []:
        if entry["loadStatus"] != "LOADED":
            return False
        loc = entry.get("locationOrLoadError") or {}
        if loc.get("__typename") == "PythonError":
            raise LineageDefsError(f"the code location {entry['name']} failed to load: {loc.get('message', '')[:2000]}", fix="fix the pipelines (lineage-defs check) and start again")
    return bool(ws.get("locationEntries"))


def cascade_live(url: str) -> bool:
    """Every running cascade sensor finished a tick. Its first tick only takes note of what exists (Dagster's
    ``newly_updated`` compares a tick with the one before), so a step materialized earlier would
    cascade nothing: the demo is ready once the cascade sees updates."""
    from lineage_defs.sensors.cascade import SENSOR_NAME as CASCADE_SENSOR  # dagster: only once the UI is up

    data = _graphql(url, CASCADE_QUERY)
    if data is None:
        return False
    repos = (data.get("repositoriesOrError") or {}).get("nodes") or []
    cascade = [s for r in repos for s in r.get("sensors") or [] if s["name"].startswith(CASCADE_SENSOR)]
    states = [s.get("sensorState") or {} for s in cascade]
    return all(st.get("ticks") for st in states if st.get("status") == "RUNNING")  # one stopped in the UI never ticks


class Demo:
    def __init__(self, options: Options, env: Mapping[str, str], cwd: Path) -> None:
        from lineage_defs.settings import LineageSettings

        self.options, self.cwd = options, cwd
        self.env = dict(env)
        self.settings = LineageSettings.from_env(self.env)
        self.dir = state.demo_dir(self.settings.state_dir)
        self.services: list[Service] = []
        self.groups: list[str] = []  # the folder's pipelines: the graph's groups
        self.stopping = threading.Event()

    def _plan(self) -> tuple[dict[str, list[str]], list[str], list[str]]:
        """The folder's Kafka topics per connection, webhook names and mailboxes; its pipelines (asset groups) in ``groups``."""
        from lineage_defs.parse.model import Kafka
        from lineage_defs.plan.graph import mailboxes, webhooks
        from lineage_defs.project import load_project

        project = load_project(self.settings.pipelines_dir, self.settings)
        if project.errors:
            raise ProjectErrors(project.errors)
        topics: dict[str, list[str]] = {}
        for s in project.scripts:
            for t in s.events:
                if isinstance(t, Kafka):
                    topics.setdefault(t.connection, []).append(t.topic)
        # and Dagster's `default` group: inputs no step produces (and hand-written assets without a group) land there
        self.groups = sorted({s.pipeline for s in project.steps} | {"default"})
        return topics, [name for name, _, _ in webhooks(project.steps)], [name for name, _, _ in mailboxes(project.steps)]

    def up(self) -> int:
        o = self.options
        t0 = time.monotonic()
        if state.load_running(self.settings.state_dir) is not None:
            running = state.load_running(self.settings.state_dir)
            assert running is not None
            raise LineageDefsError(f"a demo is already running (pid {running.pid}, UI {running.ui})", fix="stop it first: make demo-stop (lineage-defs demo stop)")
        home = self.env.get("DAGSTER_HOME")
        if not home:
            raise LineageDefsError("DAGSTER_HOME is not set", fix="make demo sets it to dagster_home/; or export DAGSTER_HOME=<a folder holding dagster.yaml>")
        topics, hooks, boxes = self._plan()
        own_kafka = {c: ts for c, ts in topics.items() if not self.settings.connection("kafka", c)}
        wanted = [("UI", o.port, "PORT")] + ([("Kafka", o.kafka_port, "KAFKA_PORT")] if own_kafka else []) + ([("webhooks", o.webhook_port, "WEBHOOK_PORT")] if hooks else []) + ([("e-mail", o.email_port, "EMAIL_PORT")] if boxes else [])
        for what, port, var in wanted:
            if not _port_free(o.host, port):
                raise LineageDefsError(f"port {port} ({what}) is in use on {o.host}", fix=f"stop what uses it, or pick another: make demo {var}=<port>")
        self.dir.mkdir(parents=True, exist_ok=True)
        bin_dir = Path(sys.executable).parent
        print(f"demo: setting up the Dagster instance in {home}", flush=True)
        prepare_instance(home)

        kafka: dict[str, str] = {}
        if own_kafka:
            bootstrap = f"{o.host}:{o.kafka_port}"
            broker = Service("kafka", tansu_argv(o.kafka_port, o.host), self.env, self.dir / "kafka.log", grace=0)
            self._start(broker)
            wait_port(o.kafka_port, 30, broker.alive, o.host)
            create_topics(bootstrap, [t for ts in own_kafka.values() for t in ts])
            for connection in own_kafka:
                kafka[connection] = bootstrap
                self.env[self.settings.connection_env("kafka", connection)] = bootstrap
            print(f"demo: Kafka broker (Tansu, in memory) on {bootstrap}, topics {', '.join(sorted({t for ts in own_kafka.values() for t in ts}))}", flush=True)
        for connection in topics.keys() - own_kafka.keys():
            kafka[connection] = str(self.settings.connection("kafka", connection))

        webhooks_url = None
        if hooks:
            from lineage_defs.plan.names import hook_env

            for name, cred in state.credentials(self.settings.state_dir, hooks, self.env).items():
                self.env[f"LINEAGE_WEBHOOK_TOKEN_{hook_env(name)}"] = cred.token
                self.env[f"LINEAGE_WEBHOOK_SECRET_{hook_env(name)}"] = cred.secret
            webhooks_url = f"http://{self._receiver('webhooks', o.webhook_port)}"
            print(f"demo: webhook receiver on {webhooks_url} (hooks {', '.join(hooks)}; credentials in {self.dir / 'credentials.json'})", flush=True)

        email_url = None
        if boxes:
            email_url = f"smtp://{self._receiver('email', o.email_port)}"
            print(f"demo: e-mail receiver on {email_url} (mailboxes {', '.join(boxes)}: mail to <mailbox>@ any domain)", flush=True)

        # dagster dev stops its webserver, daemon and code servers itself, in order, on SIGTERM
        # its whole output to dagster.log; here, what a person acts on (demo.console)
        log = self.dir / "dagster.log"
        ui = Service("ui", [str(bin_dir / "dagster"), "dev", "-w", o.workspace, "-h", o.host, "-p", str(o.port)], self._dev_env(), log,
                     grace=30, term_group=False, console=Console(str(log)))  # fmt: skip
        self._start(ui)
        url = f"http://{o.host}:{o.port}"
        print(f"demo: dagster dev (UI and daemon) starting on {url}; its output goes to {log}, its warnings and errors show here too", flush=True)
        state.save_running(self.settings.state_dir, state.Running(
            pid=os.getpid(), ui=url, kafka=kafka, topics=sorted({t for ts in topics.values() for t in ts}),
            webhooks=webhooks_url, hooks=hooks, email=email_url, mailboxes=boxes, groups={s.name: s.proc.pid for s in self.services},
        ))  # fmt: skip
        deadline = time.monotonic() + o.ready_timeout
        while not ((ui_up := ui_ready(url)) and cascade_live(url)):
            self._check_alive()
            if self.stopping.wait(1.0):
                return 130
            if time.monotonic() > deadline:
                if not ui_up:
                    raise LineageDefsError(f"the UI did not come up on {url} within {o.ready_timeout:.0f} s", fix=f"see dagster dev's log: {log}")
                raise LineageDefsError(
                    f"the UI is up on {url}, but the cascade sensor finished no tick within {o.ready_timeout:.0f} s",
                    fix=f"see the daemon's lines in dagster dev's log ({log}), and the sensor's ticks in the UI (Automation → lineage_cascade)",
                )
        print(
            f"\ndemo: ready in {time.monotonic() - t0:.0f} s — UI {url}\n"
            + (f"  Kafka: lineage-defs demo send kafka      (topic {', '.join(sorted({t for ts in topics.values() for t in ts}))})\n" if topics else "")
            + (f"  webhooks: lineage-defs demo send webhook (POST {webhooks_url}/hooks/{hooks[0]})\n" if hooks else "")
            + (f"  e-mail: lineage-defs demo send email   (mail to {boxes[0]}@… at {email_url})\n" if boxes else "")
            + f"  graph: {graph_url(url, self.groups)}\n"
            + f"  log: {log} (all of dagster dev's output; its warnings and errors show here)\n"
            + "  stop: Ctrl-C here, or make demo-stop\n",
            flush=True,
        )
        while not self.stopping.wait(0.5):
            self._check_alive()
        return 0

    def _receiver(self, command: str, port: int) -> str:
        """`lineage-defs <command> serve` (webhooks, email) on ``port``, once it accepts connections: host:port."""
        o = self.options
        argv = [str(Path(sys.executable).parent / "lineage-defs"), command, "serve", "--host", o.host, "--port", str(port)]
        service = Service(command, argv, self.env, self.dir / f"{command}.log", grace=5)
        self._start(service)
        wait_port(port, 120, service.alive, o.host)
        return f"{o.host}:{port}"

    def _dev_env(self) -> dict[str, str]:
        # `dagster dev` warns on every start that `dg dev` supersedes it (dagster-dg-cli, not a
        # dependency here): nothing a demo user can act on. A message filter, for its processes only.
        quiet = "ignore:Function `dev_command` is superseded"
        given = self.env.get("PYTHONWARNINGS")
        return {**self.env, "PYTHONWARNINGS": f"{given},{quiet}" if given else quiet}

    def _start(self, service: Service) -> None:
        self.services.append(service)
        service.start(self.cwd)

    def _check_alive(self) -> None:
        for s in self.services:
            if not s.alive():
                tail = s.tail()
                raise LineageDefsError(f"the demo's {s.name} process exited ({s.proc.returncode if s.proc else '?'})" + (f":\n{tail}" if tail else ""),
                                       fix=f"see its log{' in ' + str(s.log) if s.log else ' above'}; the other services were stopped")

    def stop(self) -> None:
        """Stop every service, the UI first (its runs may still write to the broker's topics or the store)."""
        for s in reversed(self.services):
            s.stop()
        state.clear_running(self.settings.state_dir)


def run(options: Options, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> int:
    demo = Demo(options, os.environ if env is None else env, cwd or Path.cwd())

    def on_signal(signum: int, _frame: Any) -> None:
        if not demo.stopping.is_set():
            print(f"\ndemo: {signal.Signals(signum).name}: stopping every service …", file=sys.stderr, flush=True)
        demo.stopping.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return demo.up()
    except LineageDefsError as e:
        print(f"lineage-defs demo: {e.render()}", file=sys.stderr)
        return 1
    finally:
        demo.stop()
        for s, h in previous.items():
            signal.signal(s, h)
        print("demo: stopped", file=sys.stderr, flush=True)


def stop(state_dir: str, timeout: float = 90) -> int:
    """`make demo-stop`: SIGTERM the running demo (which stops its services), SIGKILL it after ``timeout``."""
    running = state.load_running(state_dir)
    if running is None:
        print("lineage-defs demo stop: no demo is running", file=sys.stderr)
        return 0
    os.kill(running.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while state.is_demo_process(running.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if state.is_demo_process(running.pid):
        os.kill(running.pid, signal.SIGKILL)  # its services die with it (parent-death signal)
        print(f"lineage-defs demo stop: pid {running.pid} did not stop within {timeout:.0f} s: killed", file=sys.stderr)
        state.clear_running(state_dir)
        return 1
    print(f"demo (pid {running.pid}) stopped", file=sys.stderr)
    return 0
