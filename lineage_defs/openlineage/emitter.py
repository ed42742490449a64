"""Send events in the background, within a time budget per run: lineage never fails or holds up a run for long.

The client is the user's, configured its standard way (``OpenLineageClient()``),
so its transport may wait seconds per event (the HTTP transport's defaults: a
5 s timeout, 5 retries with backoff). Two things keep a dead or silent
endpoint cheap:

- **no retries on a connection that fails**: each HTTP transport's connect
  retries are set to 0 (its other retry settings stay the user's), so a
  refused connection costs milliseconds, not the 9 s of backoff;
- **one budget per run**: a daemon thread sends the events while the step
  works; at the step's end ``close`` waits at most ``budget`` seconds for
  what is left. When the endpoint cannot be reached (a connection error), or
  does not answer within the budget, the run *gives up* on it: what is still
  queued is dropped, and the run's later steps (``given_up``) send nothing
  and do not wait. A silent endpoint costs a run the budget once, not per
  step or per event; the next run tries again.

Importing the client takes a good part of a second, so the code location
starts that import in the background (``prepare``) when it builds the
definitions, long before a step runs.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from lineage_defs.openlineage.spec import PRODUCER, Event

_STOP = object()
_KEPT_RUNS = 1024  # runs this process remembers giving up on (a long-lived process runs many)
_given_up: OrderedDict[str, str] = OrderedDict()  # Dagster run id → why its endpoint was given up
_lock = threading.Lock()


def prepare() -> None:
    """Import the client in a daemon thread (it takes a good part of a second; a step then finds it loaded)."""
    threading.Thread(target=_import, name="openlineage-import", daemon=True).start()


def _import() -> None:
    try:
        import lineage_defs.openlineage.events  # noqa: F401  (the client's classes and transports)
    except Exception:  # not installed: the step says so when it emits
        pass


def given_up(run_id: str | None) -> str | None:
    """Why this process gave up on the endpoint for this run (None: it did not)."""
    if run_id is None:
        return None
    with _lock:
        return _given_up.get(run_id)


def give_up(run_id: str | None, reason: str) -> bool:
    """Remember that this run's endpoint is given up; True if this call did it (the first reason wins)."""
    if run_id is None:
        return False
    with _lock:
        if run_id in _given_up:
            return False
        _given_up[run_id] = reason
        while len(_given_up) > _KEPT_RUNS:
            _given_up.popitem(last=False)
        return True


def _client() -> Any:
    """``OpenLineageClient()``, configured its standard way, leaving the environment as it was.

    The client copies ``OPENLINEAGE_URL`` into ``OPENLINEAGE__TRANSPORT__…``
    variables of the process and, once they are there, ignores
    ``OPENLINEAGE_URL``: undone, so the next step's client reads the
    configuration the user gave (and nothing else in the process sees ours).
    """
    from openlineage.client import OpenLineageClient

    saved = {k: v for k, v in os.environ.items() if k.startswith("OPENLINEAGE__")}
    try:
        client = OpenLineageClient()
    finally:
        for k in [k for k in os.environ if k.startswith("OPENLINEAGE__") and k not in saved]:
            os.environ.pop(k, None)
        os.environ.update(saved)
    _no_connect_retries(getattr(client, "transport", None))
    return client


def _no_connect_retries(transport: Any) -> None:
    """Each HTTP transport (a composite's too) fails at once on a connection error instead of retrying with backoff.

    The user's other retry settings (reads, statuses) stay; a transport given
    its own ``adapter`` is left alone.
    """
    for inner in getattr(transport, "transports", None) or ():
        _no_connect_retries(inner)
    config = getattr(transport, "config", None)
    retry = getattr(config, "retry", None)
    if not isinstance(retry, dict) or getattr(config, "adapter", None) is not None or not hasattr(transport, "session"):
        return
    import urllib3.util
    from requests.adapters import HTTPAdapter

    transport.session.mount(transport.url, HTTPAdapter(max_retries=urllib3.util.Retry(**{**retry, "connect": 0})))


def _unreachable(e: BaseException) -> bool:
    """A network failure (refused, reset, timed out), not an answer the endpoint gave (an HTTP error has a response)."""
    return isinstance(e, OSError) and getattr(e, "response", None) is None


def _describe(e: BaseException) -> str:
    """``Type: message`` of what went wrong: for requests' wrapper of urllib3's retries, the failure under it."""
    reason = getattr(e.args[0], "reason", None) if e.args else None
    inner = reason if isinstance(reason, BaseException) else e
    return f"{type(inner).__name__}: {str(inner)[:300]}"


@dataclass
class Outcome:
    sent: int = 0
    failed: list[str] = field(default_factory=list)  # one line per event that could not be sent
    pending: int = 0  # dropped: still queued or being sent when the run gave up on the endpoint
    waited: float = 0.0  # seconds close() waited
    gave_up: str | None = None  # why this step gave up on the endpoint for the rest of the run (None: it did not)


class Emitter:
    """One step's sender. ``emit`` never blocks; ``close`` returns within ``budget`` seconds.

    ``run_id``: the Dagster run whose steps share the give-up (None: this emitter alone).
    """

    def __init__(self, namespace: str, budget: float, run_id: str | None = None) -> None:
        self.namespace = namespace
        self.budget = budget
        self.run_id = run_id
        self.queue: queue.Queue[Any] = queue.Queue()
        self.outcome = Outcome()
        self.abandoned = threading.Event()
        self.giving_up = threading.Lock()
        self.queued = 0
        self.thread = threading.Thread(target=self._work, name="openlineage-emit", daemon=True)
        self.thread.start()

    def emit(self, event: Event) -> None:
        self.queued += 1
        self.queue.put(event)

    def close(self) -> Outcome:
        started = time.monotonic()
        self.queue.put(_STOP)
        self.thread.join(self.budget)
        self.outcome.waited = time.monotonic() - started
        if self.thread.is_alive():
            self._give_up(f"the endpoint did not answer within {self.budget:g} s")
        # A snapshot: the sender may still finish an event after the give-up, and records nothing then
        # (``_record``), so sent + failed + pending is what was queued.
        with self.giving_up:
            if self.abandoned.is_set():
                self.outcome.pending = self.queued - self.outcome.sent - len(self.outcome.failed)
            return replace(self.outcome, failed=list(self.outcome.failed))

    def _record(self, failure: str | None) -> bool:
        """Count one event sent (``failure`` None) or failed; False, counting nothing, once the step gave up on the endpoint."""
        with self.giving_up:
            if self.abandoned.is_set():
                return False
            if failure is None:
                self.outcome.sent += 1
            else:
                self.outcome.failed.append(failure)
            return True

    def _give_up(self, reason: str) -> None:
        """Drop what is still queued (never sent late); the run's later steps send nothing."""
        with self.giving_up:
            if self.abandoned.is_set():
                return
            self.abandoned.set()
            if give_up(self.run_id, reason) or self.run_id is None:
                self.outcome.gave_up = reason

    def _work(self) -> None:
        client = None
        try:
            from openlineage.client.facet_v2 import set_producer

            from lineage_defs.openlineage.events import run_event

            set_producer(PRODUCER)
            client = _client()
        except Exception as e:  # not installed, or a configuration the client rejects
            reason = f"the OpenLineage client is unavailable: {type(e).__name__}: {e}"
            while (item := self.queue.get()) is not _STOP:
                self._record(reason)
            return
        while (item := self.queue.get()) is not _STOP:
            if self.abandoned.is_set():
                continue
            try:
                client.emit(run_event(item, self.namespace))
                self._record(None)
            except Exception as e:  # best effort: a transport error loses this event, never the run
                line = f"{item.state} of {item.run.job}: {_describe(e)}"
                if self._record(line) and _unreachable(e):
                    self._give_up(f"the endpoint could not be reached: {line}")
        try:
            close = getattr(client, "close", None)  # asynchronous transports flush here
            if close is not None and not self.abandoned.is_set():
                close(self.budget)
        except Exception as e:
            self._record(f"closing the client: {type(e).__name__}: {e}")
