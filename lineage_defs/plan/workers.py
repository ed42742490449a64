"""Many uncached scripts → their headers and analyses, computed in this process and in worker processes at once.

A cold load (no plan cache: a fresh state dir, a new parser) spends nearly all
its time on per-file work that shares nothing: parsing the header and
analysing the body with sqlglot. With at least ``THRESHOLD`` such files and
more than one CPU, ``load_files`` starts CPU count − 1 workers
(``workers.main`` in ``python -c``, which imports neither Dagster nor the
caller's main module, unlike a multiprocessing spawn) and shares the
files with them in chunks: the workers take chunks from the front, this
process from the back, so nobody waits while a worker starts. A worker gets
each chunk as a pickle on its stdin and answers on its stdout; the results are
the very objects ``files.compute`` gives in-process. Only this process touches
the plan cache, in the files' order.

A worker that fails (an exception, a crash, a kill) while it holds files fails
the load with a ``WorkerError`` naming the file it was at and the worker's own
message; one that cannot start (no usable ``sys.executable``, an import error)
is a logged warning, and this process analyses its share.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from lineage_defs.plan.cache import PlanCache
from lineage_defs.plan.files import FileResult, ParsedHeader, Pending, compute, finish, lookup
from lineage_defs.plan.spec import Analysis

# Below this many files to compute, a worker's start (~0.4 s of CPU: Python and sqlglot's import) costs more than it saves.
THRESHOLD = 200
CHUNK = 32  # files per message: ~50 ms of work, so a chunk's round trip is noise
Computed = tuple[ParsedHeader, Analysis | None]
log = logging.getLogger("lineage_defs")
# The worker imports `lineage_defs` from where this process did (not from its working directory, which
# `python -c` and `-m` put first on sys.path), nothing else: not Dagster, not this process' main module.
_WORKER = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); from lineage_defs.plan.workers import main; main()"


class WorkerError(RuntimeError):
    """A worker process analysing scripts failed: a bug or a crash, never a user's error (those are results)."""


def cpu_count() -> int:
    """The CPUs this process may run on (1 on Windows, where ``select`` takes no pipes: no workers)."""
    if sys.platform == "win32":
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def load_files(root: Path, paths: Sequence[Path], cache: PlanCache, dbt_catalogs: Sequence[str] = (), workers: int | None = None, threshold: int | None = None) -> list[FileResult]:
    """``files.load_file`` for each path, in order; the files not in the cache computed in parallel when there are many.

    ``workers``: how many worker processes at most (default: CPU count − 1); 0 computes everything here.
    ``threshold``: how many files to compute start workers (default: ``THRESHOLD``).
    """
    found = [lookup(root, p, cache, dbt_catalogs) for p in paths]
    jobs = [f for f in found if isinstance(f, Pending)]
    n = cpu_count() - 1 if workers is None else workers
    results = _parallel(jobs, dbt_catalogs, n) if n > 0 and len(jobs) >= max(THRESHOLD if threshold is None else threshold, 1) else [compute(j, dbt_catalogs) for j in jobs]
    done = iter(results)
    return [finish(f, *next(done), cache, dbt_catalogs) if isinstance(f, Pending) else f for f in found]


def _parallel(jobs: list[Pending], dbt_catalogs: Sequence[str], n: int) -> list[Computed]:
    """Workers take CHUNK files at a time from the front, this process one at a time from the back.

    No threads: between two files of its own this process collects the answers that are ready and
    hands out the next chunks, so a worker never waits longer than one file's analysis. A worker
    gets its first chunk once it says it is ready (its imports done): when this process is through
    first, a worker still starting is killed, not waited for."""
    results: list[Computed | None] = [None] * len(jobs)
    lo, hi = 0, len(jobs)  # jobs[lo:hi] are not handed out yet
    catalogs = tuple(dbt_catalogs)
    workers = {w.fd: w for w in (_Worker.start() for _ in range(min(n, (len(jobs) - 1) // CHUNK))) if w is not None}
    ok = False
    try:
        while lo < hi or any(w.chunk for w in workers.values()):
            listen = [fd for fd, w in workers.items() if w.chunk or (lo < hi and not w.ready)]
            for fd in select.select(listen, [], [], 0 if lo < hi else None)[0] if listen else ():
                w = workers[fd]
                if w.chunk:
                    start, chunk = w.chunk
                    results[start : start + len(chunk)] = w.receive(chunk[0].rel)
                    w.chunk = None
                elif not w.wait_ready():  # it could not start: this process does its share
                    w.stop(kill=True)
                    del workers[fd]
            for w in workers.values():
                if w.ready and not w.chunk and lo < hi:
                    w.chunk = (lo, jobs[lo : min(lo + CHUNK, hi)])
                    w.send(catalogs, w.chunk[1])
                    lo += len(w.chunk[1])
            if lo < hi:
                hi -= 1
                results[hi] = compute(jobs[hi], catalogs)
        ok = True
    finally:
        for w in workers.values():
            w.stop(kill=not (ok and w.ready))
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


class _Worker:
    def __init__(self, proc: subprocess.Popen[bytes], stderr: IO[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc, self.stdin, self.fd, self.stderr = proc, proc.stdin, proc.stdout.fileno(), stderr
        self.ready = False  # its imports are done
        self.chunk: tuple[int, list[Pending]] | None = None  # what it is computing: the first index, the jobs

    @classmethod
    def start(cls) -> _Worker | None:
        """A worker process, or None when none can be started (this process then does all the work)."""
        stderr = tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        except OSError:
            stderr.close()
            return None
        return cls(proc, stderr)

    def send(self, dbt_catalogs: tuple[str, ...], chunk: list[Pending]) -> None:
        try:
            _write(self.stdin, pickle.dumps((dbt_catalogs, chunk), protocol=pickle.HIGHEST_PROTOCOL))
        except OSError as exc:
            raise self._failed(f"at {chunk[0].rel}", f"{type(exc).__name__}: {exc}") from None

    def wait_ready(self) -> bool:
        """Read its "ready"; False (and a warning) when it died starting (this process then does the work)."""
        try:
            _read(self.fd)
        except (OSError, EOFError) as exc:
            log.warning("%s; the scripts are analysed in this process instead", self._failed("while starting", f"{type(exc).__name__}: {exc}"))
            return False
        self.ready = True
        return True

    def receive(self, rel: str) -> list[Computed]:
        try:
            status, value = pickle.loads(_read(self.fd))
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            raise self._failed(f"at {rel}", f"{type(exc).__name__}: {exc}") from None
        if status != "ok":
            raise self._failed(f"at {rel}", str(value))
        return value  # type: ignore[no-any-return]

    def _failed(self, where: str, what: str) -> WorkerError:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.stderr.seek(0)
        tail = self.stderr.read()[-4000:].decode(errors="replace").strip()
        exited = f"it exited with code {code}" if code is not None else "it is still running"
        return WorkerError(
            f"analysing scripts in a worker process failed {where} ({exited}): {what}" + (f"\n{tail}" if tail else "")
            + "\n(a script's own problems come back as its errors, never like this: this is a bug, or the worker was killed)"
        )

    def stop(self, kill: bool = False) -> None:
        """End the worker: at the end of its input it exits; killed after a failure here (it may be mid-chunk)."""
        if kill:
            self.proc.kill()
        try:
            self.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr.close()


def _write(out: IO[bytes], data: bytes) -> None:
    out.write(len(data).to_bytes(8, "little") + data)
    out.flush()


def _read(fd: int) -> bytes:
    """One message (its length first) from a pipe; EOFError when the writer is gone."""
    size = int.from_bytes(_exactly(fd, 8), "little")
    return _exactly(fd, size)


def _exactly(fd: int, n: int) -> bytes:
    parts: list[bytes] = []
    while n:
        part = os.read(fd, min(n, 1 << 20))
        if not part:
            raise EOFError("the worker closed its output")
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def main() -> None:
    """The worker: says it is ready (an empty message), then answers (dbt catalogs, jobs) on stdin with
    ("ok", results) or ("error", traceback) on stdout, each a pickle."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints must not mix with the answers
    sys.stdout = sys.stderr
    import lineage_defs.plan.sql  # noqa: F401  (sqlglot: most of a worker's start)

    _write(out, b"")  # ready
    source = sys.stdin.fileno()
    while True:
        try:
            dbt_catalogs, chunk = pickle.loads(_read(source))
        except EOFError:
            return
        answer: tuple[str, Any]
        try:
            answer = ("ok", [compute(j, dbt_catalogs) for j in chunk])
        except Exception:
            answer = ("error", traceback.format_exc())
        _write(out, pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
