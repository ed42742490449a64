"""Hooks (SPEC section 13) without a daemon: the lines, the checks, the Dagster definitions, running a hook
script, and which hook runs a finished run asks for (the daemon tests are tests/test_hooks_daemon.py)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, DagsterInstance, DefaultSensorStatus

from lineage_defs.errors import RunError
from lineage_defs.location import build_definitions
from lineage_defs.parse import parse_header
from lineage_defs.parse.model import HookEvent, Language
from lineage_defs.project import load_project
from lineage_defs.run.hook import run_hook
from lineage_defs.sensors.hooks import FAILURE_SENSOR, SUCCESS_SENSOR, Subject, Watch
from lineage_defs.settings import LineageSettings
from triggers_support import write_steps

ROOT = Path(__file__).resolve().parents[1]
STEP = "-- pipeline\n-- materialize duckdb://warehouse/{name}\n{hooks}SELECT * FROM read_json_auto('{data}')\n"


def _errors(text: str, path: str = "p/x.sql") -> list[str]:
    return [e.render() for e in parse_header(path, text, Language.DUCKDB)[1]]


def test_hook_lines_parse() -> None:
    h, errs = parse_header("p/x.sql", "-- pipeline\n-- on_failure hooks/a.py after=3\n-- on_success b.sh\n-- on_recovery c.sql\nSELECT 1", Language.DUCKDB)
    assert errs == []
    assert [(r.event, r.script, r.after) for r in h.hooks] == [(HookEvent.FAILURE, "hooks/a.py", 3), (HookEvent.SUCCESS, "b.sh", 1), (HookEvent.RECOVERY, "c.sql", 1)]
    assert parse_header("p/n.py", "# hook\nprint(1)", Language.PYTHON)[0].is_hook


@pytest.mark.parametrize(
    ("line", "message", "where"),
    [
        ("-- on_failure", "'on_failure' needs the hook script's path", "2:14"),  # just past the line's end
        ("-- on_failure a.py after=0", "after=0 never fires", "2:26"),  # at the value
        ("-- on_failure a.py after=x", "'x' is not a whole number", "2:26"),
        ("-- on_success a.py after=2", "'on_success' takes only the script's path", "2:20"),
        ("-- on_recovery notes.txt", "'notes.txt' is not a script path", "2:16"),
        ("-- on_failure a.py\n-- on_failure a.py", "'on_failure a.py' given twice", "3:15"),
        ("-- hook now", "'hook' takes no arguments", "2:9"),
        ("-- on_falure a.py", "did you mean 'on_failure'?", "2:4"),
    ],
)
def test_bad_hook_lines_are_located_errors(line: str, message: str, where: str) -> None:
    errs = _errors(f"-- pipeline\n{line}\nSELECT 1")
    assert len(errs) == 1 and message in errs[0] and errs[0].startswith(f"p/x.sql:{where}: "), errs


def _project(tmp_path: Path, files: dict[str, str]) -> Any:
    return load_project(write_steps(tmp_path / "p", files))


def test_step_and_pipeline_hooks_resolve_to_hook_scripts(tmp_path: Path) -> None:
    p = _project(tmp_path, {
        "shop/a.sql": STEP.format(name="a", data="x.json", hooks="-- on_failure hooks/alert.py after=2\n"),
        "shop/sub/b.sql": STEP.format(name="b", data="x.json", hooks="-- on_success audit.sql\n"),
        "shop/sub/audit.sql": "-- hook\nSELECT 1\n",
        "shop/hooks/alert.py": "# hook\nprint(1)\n",
        "shop/_pipeline.sql": "-- every step of shop\n-- on_failure shop/hooks/alert.py after=2\n-- on_recovery shop/hooks/alert.py\n",
        "other/c.sql": STEP.format(name="c", data="x.json", hooks=""),
    })  # fmt: skip
    assert p.errors == ()
    hooks = {name: [(h.event.value, h.script, h.after) for h in hs] for name, hs in p.hooks}
    assert hooks == {
        "shop__a": [("on_failure", "shop/hooks/alert.py", 2), ("on_recovery", "shop/hooks/alert.py", 1)],  # the same line twice is one hook
        "shop__sub_b": [("on_success", "shop/sub/audit.sql", 1), ("on_failure", "shop/hooks/alert.py", 2), ("on_recovery", "shop/hooks/alert.py", 1)],
    }
    assert [(h.path, h.language) for h in p.hook_scripts] == [("shop/hooks/alert.py", Language.PYTHON), ("shop/sub/audit.sql", Language.DUCKDB)]
    assert {s.name for s in p.steps} == {"shop__a", "shop__sub_b", "other__c"}  # hooks and _pipeline are no steps


def test_check_reports_bad_hook_references_located(tmp_path: Path) -> None:
    p = _project(tmp_path, {
        "shop/a.sql": STEP.format(name="a", data="x.json", hooks="-- on_failure hooks/gone.py\n-- on_success plain.py\n"),
        "shop/plain.py": "print('not marked')\n",
        "shop/both.sql": "-- pipeline\n-- hook\n-- materialize duckdb://warehouse/both\nSELECT 1 AS x\n",
        "shop/ping.py": "# hook\n# on_failure pong.py\nprint(1)\n",
        "shop/pong.py": "# hook\n# on_failure ping.py\nprint(1)\n",
        "shop/c.sql": STEP.format(name="c", data="x.json", hooks="-- on_failure ping.py\n-- on_recovery pg.pg.sql\n"),
        "shop/pg.pg.sql": "-- hook\nSELECT 1\n",
        "shop/_pipeline.py": "# on_success ping.py\n# tag nope\n",
    })  # fmt: skip
    rendered = sorted(e.render().splitlines()[0] for e in p.errors)
    assert rendered == sorted([
        "shop/a.sql:3:15: on_failure script 'hooks/gone.py' not found — the path is relative to shop/ or the pipelines folder",
        "shop/a.sql:4:15: 'shop/plain.py' is not a hook script — add a '-- hook' line to shop/plain.py's header",
        "shop/both.sql:2:4: a hook script is not an asset: it has both 'hook' and 'pipeline' — drop '-- pipeline' (a hook runs on a step's events) or drop '-- hook'",
        "shop/pong.py:2:14: hooks name each other in a circle: shop/ping.py → shop/pong.py → shop/ping.py — a hook's own hooks must not lead back to it: drop one of these lines",
        "shop/c.sql:4:16: 'shop/pg.pg.sql': hooks run in DuckDB SQL, Python or Bash — write the hook as a .sql (DuckDB), .py or .sh script",
        "shop/_pipeline.py:1:1: a _pipeline file holds only hook lines (on_failure, on_success, on_recovery) — move the other annotations into a step's script",
    ]), rendered  # fmt: skip


def test_the_check_command_fails_on_a_missing_hook(tmp_path: Path) -> None:
    folder = write_steps(tmp_path / "p", {"shop/a.sql": STEP.format(name="a", data="x.json", hooks="-- on_failure alert.py\n")})
    r = subprocess.run([str(Path(sys.executable).parent / "lineage-defs"), "check", str(folder)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "LINEAGE_STATE_DIR": str(tmp_path / "s")})  # fmt: skip
    assert r.returncode != 0 and "shop/a.sql:3:15: on_failure script 'alert.py' not found" in r.stdout + r.stderr, r.stdout + r.stderr


def _folder(tmp_path: Path, out: Path) -> Path:
    return write_steps(tmp_path / "p", {
        "shop/a.sql": STEP.format(name="a", data=tmp_path / "a.json", hooks="-- on_failure hooks/rec.py after=2\n-- on_recovery hooks/rec.py\n-- on_success hooks/log.sql\n"),
        "shop/hooks/rec.py": f"# hook\nimport os\nopen({str(out)!r}, 'a').write(os.environ['LINEAGE_HOOK_CONTEXT'] + '\\n')\n",
        "shop/hooks/log.sql": "-- hook\nCREATE TABLE IF NOT EXISTS warehouse.main.hook_log AS SELECT * FROM hook WHERE false;\nINSERT INTO warehouse.main.hook_log SELECT * FROM hook;\n",
    })  # fmt: skip


def test_definitions_have_a_job_per_hook_and_running_run_status_sensors(tmp_path: Path) -> None:
    folder = _folder(tmp_path, tmp_path / "out.jsonl")
    defs = build_definitions(settings=LineageSettings(pipelines_dir=str(folder), state_dir=str(tmp_path / "s")))
    repo = defs.get_repository_def()
    repo.load_all_definitions()  # op names unique across the hook jobs
    assert {j.name for j in repo.get_all_jobs()} >= {"lineage_hook__shop_hooks_rec_py", "lineage_hook__shop_hooks_log_sql"}
    sensors = {s.name: s for s in repo.sensor_defs}
    assert {FAILURE_SENSOR, SUCCESS_SENSOR} <= set(sensors)
    assert all(sensors[n].default_status is DefaultSensorStatus.RUNNING for n in (FAILURE_SENSOR, SUCCESS_SENSOR))
    plain = write_steps(tmp_path / "q", {"shop/a.sql": STEP.format(name="a", data="x.json", hooks="")})
    assert not any(s.name.startswith("lineage_hooks") for s in build_definitions(settings=LineageSettings(pipelines_dir=str(plain), state_dir=str(tmp_path / "s2"))).get_repository_def().sensor_defs)


def test_which_hook_runs_a_finished_run_asks_for(tmp_path: Path) -> None:
    """after=2 waits for the second failure in a row, on_recovery needs a failure before, the run keys are unique per event."""
    out = tmp_path / "out.jsonl"
    folder = _folder(tmp_path, out)
    settings = LineageSettings(pipelines_dir=str(folder), state_dir=str(tmp_path / "s"), ui_url="http://ui:3000")
    defs = build_definitions(settings=settings)
    project = load_project(folder)
    key = AssetKey(["duckdb", "warehouse", "a"])
    watch = Watch([Subject("shop__a", "shop/a.sql", "shop", (key,), dict(project.hooks)["shop__a"])], {h.path: h.job_name for h in project.hook_scripts}, settings.ui_url)
    instance = DagsterInstance.ephemeral()

    def run(failed: bool) -> tuple[Any, list[Any]]:
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(instance=instance, asset_selection=[key], raise_on_error=False)
        assert result.success is not failed
        r = instance.get_run_by_id(result.run_id)
        return r, list(watch.requests(instance, r, failed, None))

    _, asked = run(failed=True)
    assert asked == []  # after=2: one failure is not enough
    second, asked = run(failed=True)
    assert [r.run_key for r in asked] == [f"shop/hooks/rec.py:on_failure:shop__a:{second.run_id}"]
    ctx = json.loads(next(iter(asked[0].run_config["ops"].values()))["config"]["context"])
    assert ctx["failures_in_a_row"] == 2 and ctx["ui_url"] == f"http://ui:3000/runs/{second.run_id}" and "No files found" in ctx["error"]
    (tmp_path / "a.json").write_text('[{"x": 1}]')
    ok, asked = run(failed=False)
    assert sorted(r.run_key for r in asked) == sorted([f"shop/hooks/rec.py:on_recovery:shop__a:{ok.run_id}", f"shop/hooks/log.sql:on_success:shop__a:{ok.run_id}"])
    _, asked = run(failed=False)
    assert [r.tags["lineage/hook_event"] for r in asked] == ["on_success"]  # no second recovery
    # the hook jobs run what the sensor asked for: the SQL hook reads its context from the `hook` relation
    for request in asked:
        assert defs.get_job_def(request.job_name).execute_in_process(run_config=request.run_config, instance=instance).success


def test_run_hook_gives_python_the_context_and_sql_a_bound_relation(tmp_path: Path) -> None:
    folder = write_steps(tmp_path / "p", {
        "h/rec.py": f"# hook\nimport os\nopen({str(tmp_path / 'ctx.json')!r}, 'w').write(os.environ['LINEAGE_HOOK_CONTEXT'])\n",
        "h/log.sql": "-- hook\nCREATE TABLE warehouse.main.seen AS SELECT step, error, asset_keys, attempt, context->>'run_id' AS run_id FROM hook;\n",
        "h/bad.sh": "# hook\necho broken >&2\nexit 4\n",
    })  # fmt: skip
    settings = LineageSettings(pipelines_dir=str(folder), state_dir=str(tmp_path / "s"))
    hostile = "it's'; DROP TABLE x; --"
    context = {"step": "s", "error": hostile, "asset_keys": ["a/b"], "attempt": 2, "run_id": "r1", "partitions": [], "failed_checks": []}
    run_hook(settings, "h/rec.py", Language.PYTHON, context, lambda _: None)
    assert json.loads((tmp_path / "ctx.json").read_text()) == context
    run_hook(settings, "h/log.sql", Language.DUCKDB, context, lambda _: None)
    import duckdb

    with duckdb.connect(str(settings.database_file("warehouse")), read_only=True) as c:
        assert c.execute("SELECT * FROM main.seen").fetchall() == [("s", hostile, ["a/b"], 2, "r1")]
    with pytest.raises(RunError, match="hook h/bad.sh exited with 4: broken"):
        run_hook(settings, "h/bad.sh", Language.BASH, context, lambda _: None)


class _Receiver(BaseHTTPRequestHandler):
    got: list[tuple[bytes, str]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Receiver.got.append((body, self.headers.get("X-Lineage-Signature", "")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_the_example_notify_hook_signs_its_post_and_only_logs_without_a_url(tmp_path: Path) -> None:
    notify = ROOT / "examples" / "pipelines" / "shop" / "hooks" / "notify.py"
    context = json.dumps({"event": "failure", "step": "shop__payments", "run_id": "r1"})
    quiet = subprocess.run([sys.executable, str(notify)], env={**os.environ, "LINEAGE_HOOK_CONTEXT": context, "LINEAGE_NOTIFY_URL": ""}, capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0 and "LINEAGE_NOTIFY_URL is not set" in quiet.stdout
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {**os.environ, "LINEAGE_HOOK_CONTEXT": context, "LINEAGE_NOTIFY_URL": f"http://127.0.0.1:{server.server_port}/alerts", "LINEAGE_NOTIFY_SECRET": "s3cret"}
        sent = subprocess.run([sys.executable, str(notify)], env=env, capture_output=True, text=True, timeout=60)
        assert sent.returncode == 0, sent.stderr
        unsigned = subprocess.run([sys.executable, str(notify)], env={**env, "LINEAGE_NOTIFY_SECRET": ""}, capture_output=True, text=True, timeout=60)
        assert unsigned.returncode != 0 and "LINEAGE_NOTIFY_SECRET is not" in unsigned.stderr
    finally:
        server.shutdown()
    [(body, signature)] = _Receiver.got
    assert signature == "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert json.loads(body)["context"]["step"] == "shop__payments"
