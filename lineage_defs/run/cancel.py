"""A cancelled run's SIGINT stops the step's work even when Python loses the interrupt.

Dagster cancels a run by sending its process SIGINT, and its handler raises an interrupt in
whatever Python code runs at that moment. When that code is a garbage-collection callback (at a
step's start, SQLAlchemy's ``_collection_gced`` often is), Python prints "Exception ignored in …"
and the interrupt is gone: a DuckDB query then runs to its end and its write commits after the run
said CANCELED.

While a step works, ``watching()`` puts a handler in front of the one in place that remembers the
signal, interrupts the query of every open DuckDB session of this process and of a PostgreSQL step's
server connection (``track``), runs the callbacks registered with ``on_cancel`` (a Python or Bash
step's process gets the SIGINT too), then calls the previous handler as before. ``raise_if_cancelled()`` runs before every statement of a
step, so a signal whose interrupt was lost before the statement started still stops it.
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

_state: dict[str, Any] = {"cancelled": False, "depth": 0}
# what a cancel interrupts: the DuckDB connection of each open session, a PostgreSQL step's server
# connection (anything with ``interrupt()``); weak, so a session never closed is not kept alive
_sessions: weakref.WeakSet[Any] = weakref.WeakSet()
_callbacks: list[Callable[[], None]] = []


def track(conn: Any) -> None:
    _sessions.add(conn)


def untrack(conn: Any) -> None:
    _sessions.discard(conn)


def cancelled() -> bool:
    """Whether a SIGINT arrived while this process' step was working."""
    return bool(_state["cancelled"])


def raise_if_cancelled() -> None:
    """Stop before a statement starts when the run was cancelled (the interrupt itself may be lost)."""
    if _state["cancelled"]:
        raise KeyboardInterrupt("the run was cancelled")


def interruption_of(e: BaseException) -> BaseException | None:
    """The interruption behind ``e`` (``errors.interruption``); or, when this step was cancelled and the
    interrupt itself was lost, a ``KeyboardInterrupt`` (DuckDB then reports its query as merely interrupted)."""
    found = interruption(e)
    if found is None and _state["cancelled"]:
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
    """Watch for SIGINT while a step works (see the module's docstring). Nested blocks share the outermost's
    handler; a cancellation is remembered until the outermost block ends.

    ``chain_repeats=False``: a repeated SIGINT is remembered but not passed on — a step's own process
    (``run.launch``) gets one from the run worker's handler and one from Dagster's Pipes client.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # no handler can be installed off the main thread (Python runs them there)
        return
    if _state["depth"]:
        _state["depth"] += 1
        try:
            yield
        finally:
            _state["depth"] -= 1
        return
    previous = signal.getsignal(signal.SIGINT)
    # Dagster points SIGTERM at its SIGINT handler (a run worker stopped by Kubernetes, Celery): so do we
    also_term = signal.getsignal(signal.SIGTERM) is previous

    def handler(signum: int, frame: FrameType | None) -> None:
        repeat = _state["cancelled"]
        _state["cancelled"] = True
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

    if previous == signal.SIG_IGN or previous is None:  # SIGINT is ignored here (or not set from Python): keep it so
        yield
        return
    _state["cancelled"] = False
    _state["depth"] = 1
    signal.signal(signal.SIGINT, handler)
    if also_term:
        signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        _state["depth"] = 0
        _state["cancelled"] = False  # (code of this process outside a step's work is never stopped by it)
        # (Dagster swaps its own handlers in and out around each next() of a step: restore only ours)
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) is handler:
                signal.signal(signum, previous)
