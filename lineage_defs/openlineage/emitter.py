"""Send events in the background, within a time budget: lineage never fails or holds up a run for long.

The client is the user's, configured its standard way (``OpenLineageClient()``),
so its transport may wait seconds per event (the HTTP transport's defaults: a
5 s timeout, 5 retries). A daemon thread builds and sends the events while
the step works; at the step's end ``close`` waits at most ``budget`` seconds
for what is left, then gives up on it (with a warning): a dead endpoint costs
a run at most the budget. Importing the client takes a good part of a
second, so the code location starts that import in the background
(``prepare``) when it builds the definitions, long before a step runs.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lineage_defs.openlineage.spec import PRODUCER, Event

_STOP = object()


def prepare() -> None:
    """Import the client in a daemon thread (it takes a good part of a second; a step then finds it loaded)."""
    threading.Thread(target=_import, name="openlineage-import", daemon=True).start()


def _import() -> None:
    try:
        import lineage_defs.openlineage.events  # noqa: F401  (the client's classes and transports)
    except Exception:  # not installed: the step says so when it emits
        pass


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
        return OpenLineageClient()
    finally:
        for k in [k for k in os.environ if k.startswith("OPENLINEAGE__") and k not in saved]:
            os.environ.pop(k, None)
        os.environ.update(saved)


@dataclass
class Outcome:
    sent: int = 0
    failed: list[str] = field(default_factory=list)  # one line per event that could not be sent
    pending: int = 0  # still queued or being sent when the budget ran out
    waited: float = 0.0  # seconds close() waited


class Emitter:
    """One step's sender. ``emit`` never blocks; ``close`` returns within ``budget`` seconds."""

    def __init__(self, namespace: str, budget: float) -> None:
        self.namespace = namespace
        self.budget = budget
        self.queue: queue.Queue[Any] = queue.Queue()
        self.outcome = Outcome()
        self.abandoned = threading.Event()
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
            self.abandoned.set()  # what is still queued is dropped, not sent late
            self.outcome.pending = self.queued - self.outcome.sent - len(self.outcome.failed)
        return self.outcome

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
                self.outcome.failed.append(reason)
            return
        while (item := self.queue.get()) is not _STOP:
            if self.abandoned.is_set():
                continue
            try:
                client.emit(run_event(item, self.namespace))
                self.outcome.sent += 1
            except Exception as e:  # best effort: a transport error loses this event, never the run
                self.outcome.failed.append(f"{item.state} of {item.run.job}: {type(e).__name__}: {str(e)[:300]}")
        try:
            close = getattr(client, "close", None)  # asynchronous transports flush here
            if close is not None:
                close(self.budget)
        except Exception as e:
            self.outcome.failed.append(f"closing the client: {type(e).__name__}: {e}")
