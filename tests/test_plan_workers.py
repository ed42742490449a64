"""Cold loads of many scripts in worker processes: the same results as in-process, located errors included;
a failing or killed worker is a clear error; few files start no worker; the worker imports no Dagster."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lineage_defs.plan import workers
from lineage_defs.plan.cache import PlanCache
from lineage_defs.plan.discover import discover
from lineage_defs.plan.files import FileResult, Pending, load_file
from lineage_defs.plan.workers import WorkerError, load_files
from lineage_defs.project import load_project
from lineage_defs.settings import LineageSettings

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pipelines"
BROKEN = {
    "shop/bad_header.sql": "-- pipeline\n-- materialize ducklake://main/bad keys=id\n-- schedule every tuesday\nSELECT 1 AS x\n",
    "shop/bad_sql.sql": "-- pipeline\n-- materialize ducklake://main/bad_sql\nSELECT a, FROM lake.orders WHERE\n",
    "shop/ambiguous.sql": "-- pipeline\nSELECT id FROM lake.a JOIN lake.b ON a.k = b.k\n",
    "shop/open_quote.sql": "-- pipeline\nSELECT 'unterminated FROM lake.orders\n",
    "shop/not_a_step.sql": "SELECT 1\n",
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = Path(shutil.copytree(EXAMPLE, tmp_path / "pipelines", ignore=shutil.ignore_patterns("dbt")))
    for rel, text in BROKEN.items():
        (root / rel).write_text(text)
    return root


def _paths(root: Path) -> list[Path]:
    return [p for _, p in discover(root)]


def _same(a: list[FileResult], b: list[FileResult]) -> None:
    assert [(r.header, r.analysis, r.text_lines, r.key) for r in a] == [(r.header, r.analysis, r.text_lines, r.key) for r in b]
    assert [[(type(e), e.render(), e.args, vars(e)) for e in r.errors] for r in a] == [[(type(e), e.render(), e.args, vars(e)) for e in r.errors] for r in b]


def test_workers_give_what_this_process_gives(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "CHUNK", 3)  # several chunks each for the worker and this process
    started: list[object] = []
    start = workers._Worker.start
    monkeypatch.setattr(workers._Worker, "start", classmethod(lambda cls: started.append(1) or start()))
    paths = _paths(folder)
    here = [load_file(folder, p, PlanCache(None)) for p in paths]
    there = load_files(folder, paths, PlanCache(None), workers=2, threshold=1)
    assert len(started) == 2
    _same(there, here)
    problems = {r.header.path: r for r in there}
    assert problems["shop/bad_header.sql"].errors and problems["shop/bad_sql.sql"].analysis.problems  # type: ignore[union-attr]
    assert problems["shop/ambiguous.sql"].analysis.problems  # type: ignore[union-attr]


def test_a_project_loads_the_same_with_workers(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    serial = load_project(folder, LineageSettings(state_dir=tmp_path / "a"))
    monkeypatch.setattr(workers, "THRESHOLD", 1)
    monkeypatch.setattr(workers, "CHUNK", 2)
    monkeypatch.setattr(workers, "cpu_count", lambda: 2)
    parallel = load_project(folder, LineageSettings(state_dir=tmp_path / "b"))
    assert parallel.steps == serial.steps and parallel.steps
    assert [e.render() for e in parallel.errors] == [e.render() for e in serial.errors] and serial.errors
    assert [w.render() for w in parallel.warnings] == [w.render() for w in serial.warnings]
    # what the workers computed is cached: the warm load (in-process) equals it
    warm = load_project(folder, LineageSettings(state_dir=tmp_path / "b"))
    assert warm.steps == parallel.steps
    assert any((tmp_path / "b").rglob("plan-*.json"))


def test_few_files_start_no_worker(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers._Worker, "start", classmethod(lambda cls: pytest.fail("a worker was started")))
    paths = _paths(folder)
    assert len(paths) < workers.THRESHOLD
    _same(load_files(folder, paths, PlanCache(None), workers=4), [load_file(folder, p, PlanCache(None)) for p in paths])


def _jobs(root: Path, n: int) -> list[Pending]:
    found = [workers.lookup(root, p, PlanCache(None)) for p in _paths(root)]
    jobs = [f for f in found if isinstance(f, Pending)]
    return (jobs * (n // len(jobs) + 1))[:n]


def _started_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers that have finished starting before the files are shared: the first chunk is surely theirs."""
    start = workers._Worker.start

    def ready(cls: type) -> workers._Worker | None:
        w = start()
        assert w is not None and w.wait_ready()
        return w

    monkeypatch.setattr(workers._Worker, "start", classmethod(ready))


def test_an_exception_in_a_worker_names_the_file_and_the_cause(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "CHUNK", 4)
    _started_ready(monkeypatch)
    good = _jobs(folder, 12)
    bad = Pending("shop/broken.sql", None, "k", good[0].language, None)  # type: ignore[arg-type]  # no text: parse_header raises
    with pytest.raises(WorkerError) as err:
        workers._parallel([bad, *good], (), 1)  # the worker takes the first chunk
    assert "failed at shop/broken.sql (it exited with code 0)" in str(err.value) or "failed at shop/broken.sql (it is still running)" in str(err.value)
    assert "Traceback" in str(err.value) and "Error" in str(err.value)


def test_a_worker_killed_mid_chunk_is_a_clear_error(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "CHUNK", 4)
    _started_ready(monkeypatch)
    send = workers._Worker.send

    def send_and_kill(self: workers._Worker, catalogs: tuple[str, ...], chunk: list[Pending]) -> None:
        send(self, catalogs, chunk)
        os.kill(self.proc.pid, signal.SIGKILL)

    monkeypatch.setattr(workers._Worker, "send", send_and_kill)
    jobs = _jobs(folder, 12)
    with pytest.raises(WorkerError, match=rf"failed at {jobs[0].rel} \(it exited with code -9\): EOFError"):
        workers._parallel(jobs, (), 1)


def test_a_worker_that_cannot_start_is_a_warning_and_this_process_does_its_share(folder: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(workers, "CHUNK", 4)
    start = workers._Worker.start

    def killed(cls: type) -> workers._Worker | None:
        w = start()
        assert w is not None
        os.kill(w.proc.pid, signal.SIGKILL)
        w.proc.wait()
        return w

    monkeypatch.setattr(workers._Worker, "start", classmethod(killed))
    jobs = _jobs(folder, 12)
    results = workers._parallel(jobs, (), 1)
    assert [(h.header, a) for h, a in results] == [(h.header, a) for h, a in (workers.compute(j) for j in jobs)]
    assert "failed while starting (it exited with code -9)" in caplog.text and "analysed in this process instead" in caplog.text


def test_this_process_does_not_wait_for_a_worker_still_starting(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer files than a worker's start is worth: this process computes them all and kills the worker."""
    monkeypatch.setattr(workers, "CHUNK", 4)
    started: list[workers._Worker] = []
    start = workers._Worker.start
    monkeypatch.setattr(workers._Worker, "start", classmethod(lambda cls: started.append(start()) or started[-1]))  # type: ignore[func-returns-value]
    monkeypatch.setattr(workers._Worker, "wait_ready", lambda self: pytest.fail("waited for the worker"))
    monkeypatch.setattr(workers.select, "select", lambda r, w, x, timeout=None: ([], [], []))  # the worker never says it is ready
    jobs = _jobs(folder, 12)
    results = workers._parallel(jobs, (), 1)
    def plain(rs: list[workers.Computed]) -> list[object]:
        return [(h.header, [e.render() for e in h.errors], a) for h, a in rs]

    assert plain(results) == plain([workers.compute(j) for j in jobs])
    assert len(started) == 1 and started[0].proc.returncode == -signal.SIGKILL


def test_the_worker_imports_this_package_whatever_its_working_directory(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -c` puts the working directory first on sys.path: another lineage_defs there is not the worker's."""
    (tmp_path / "elsewhere" / "lineage_defs").mkdir(parents=True)
    (tmp_path / "elsewhere" / "lineage_defs" / "__init__.py").write_text("raise ImportError('the wrong lineage_defs')\n")
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.setattr(workers, "CHUNK", 4)
    _started_ready(monkeypatch)
    jobs = _jobs(folder, 12)
    assert [(h.header, a) for h, a in workers._parallel(jobs, (), 1)] == [(h.header, a) for h, a in (workers.compute(j) for j in jobs)]


def test_the_worker_imports_no_dagster() -> None:
    code = "import sys, lineage_defs.plan.workers; assert 'dagster' not in sys.modules, 'dagster imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
