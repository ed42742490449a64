"""A cancelled run's SIGINT stops the step's work even when Python loses the interrupt.

Dagster cancels a run by sending its process SIGINT, and its handler raises an interrupt in
whatever Python code runs at that moment. When that code is a garbage-collection callback (at a
step's start, SQLAlchemy's ``_collection_gced`` often is), Python prints "Exception ignored in …"
and the interrupt is gone: a DuckDB query then runs to its end and its write commits after the run
said CANCELED.

While a step works, ``watching()`` puts a handler in front of the one in place that remembers the
signal, interrupts the query of every open DuckDB session of this process and of a PostgreSQL step's
server connection (``track``), runs the callbacks registered with ``on_cancel`` (a Python or Bash
step's process gets the SIGINT too), then calls the previous handler as before.
``raise_if_cancelled()`` runs before every statement of a step, so a signal whose interrupt was lost
before the statement started still stops it.
"""

from __future__ import annotations

import signal
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from lineage_defs.errors import interruption


class _Watch:
    """One step's work, from the outermost ``watching()`` block: whether a cancel arrived during it."""

    def __init__(self, outer: _Watch | None) -> None:
        self.outer = outer  # the watch this one started inside of, if its block is still open
        self.cancelled = False
        self.open = True


_current: list[_Watch | None] = [None]
# what a cancel interrupts: the DuckDB connection of each open session, a PostgreSQL step's server
# connection (anything with ``interrupt()``); weak, so a session never closed is not kept alive
_sessions: weakref.WeakSet[Any] = weakref.WeakSet()
_callbacks: list[Callable[[], None]] = []


def track(conn: Any) -> None:
    _sessions.add(conn)


def untrack(conn: Any) -> None:
    _sessions.discard(conn)


def cancelled() -> bool:
    """Whether a SIGINT arrived during the step's work that runs now."""
    watch = _current[0]
    while watch is not None and watch.open:
        if watch.cancelled:
            return True
        watch = watch.outer
    return False


def raise_if_cancelled() -> None:
    """Stop before a statement starts when the run was cancelled (the interrupt itself may be lost)."""
    if cancelled():
        raise KeyboardInterrupt("the run was cancelled")


def interruption_of(e: BaseException) -> BaseException | None:
    """The interruption behind ``e`` (``errors.interruption``); or, when this step was cancelled and the
    interrupt itself was lost, a ``KeyboardInterrupt`` (DuckDB then reports its query as merely interrupted)."""
    found = interruption(e)
    if found is None and cancelled():
        found = KeyboardInterrupt("the run was cancelled")
        found.__cause__ = e
    return found


@contextmanager
def on_cancel(callback: Callable[[], None]) -> Iterator[None]:
    """Run ``callback`` too when a SIGINT arrives inside ``watching()`` while this block runs."""
    _callbacks.append(callback)
    try:
        yield
    finally:
        _callbacks.remove(callback)


@contextmanager
def watching(chain_repeats: bool = True) -> Iterator[None]:
    """Watch for SIGINT while a step works (see the module's docstring). A block entered while the
    handler of another is in place is part of that one's work; a cancellation is remembered until the
    block that installed the handler ends.

    ``chain_repeats=False``: a repeated SIGINT is remembered but not passed on — a step's own process
    (``run.launch``) gets one from the run worker's handler and one from Dagster's Pipes client.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # no handler can be installed off the main thread (Python runs them there)
        return
    previous = signal.getsignal(signal.SIGINT)
    if getattr(previous, "lineage_watch", None) is not None or previous in (signal.SIG_IGN, None):
        # inside a watched block (a step's runner within the step); or SIGINT is ignored here, or
        # handled outside Python: left so
        yield
        return
    # Dagster points SIGTERM at its SIGINT handler (a run worker stopped by Kubernetes, Celery): so do we
    also_term = signal.getsignal(signal.SIGTERM) is previous
    outer = _current[0]
    watch = _Watch(outer if outer is not None and outer.open else None)

    def handler(signum: int, frame: FrameType | None) -> None:
        repeat = watch.cancelled
        watch.cancelled = True
        for conn in list(_sessions):
            try:
                conn.interrupt()  # the query running now stops (a no-op on an idle connection)
            except Exception:
                pass
        for callback in list(_callbacks):
            try:
                callback()
            except Exception:
                pass
        if repeat and not chain_repeats:
            return
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt

    handler.lineage_watch = watch  # type: ignore[attr-defined]
    _current[0] = watch
    signal.signal(signal.SIGINT, handler)
    if also_term:
        signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        # A block left open (a step's generator Dagster never finished) ends whenever it is collected:
        # it then changes nothing of the work running at that time.
        watch.open = False
        if _current[0] is watch:
            _current[0] = watch.outer if watch.outer is not None and watch.outer.open else None
        # (Dagster swaps its own handlers in and out around each next() of a step: restore only ours)
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) is handler:
                signal.signal(signum, previous)
