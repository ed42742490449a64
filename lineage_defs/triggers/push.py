"""What the push sources (``webhook``, ``email``) share: the receiver's writer into the event store.

A receiver answers its client (``202``, ``250``) only after the event is
committed; many clients at once share one commit (one fsync for the lot).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lineage_defs.events.store import EventStore, NewEvent
from lineage_defs.plan.spec import Project, ScriptStep
from lineage_defs.settings import LineageSettings


def receiver_project(env: Mapping[str, str], folder: str | None = None) -> tuple[LineageSettings, Project]:
    """A receiver's settings and the project it serves (``--folder`` over ``LINEAGE_PIPELINES_DIR``);
    a project with errors stops the receiver with them."""
    from lineage_defs.errors import ProjectErrors
    from lineage_defs.project import load_project

    settings = LineageSettings.from_env(env)
    if folder:
        settings = settings.replace(pipelines_dir=folder)
    project = load_project(settings.pipelines_dir, settings)
    if project.errors:
        raise ProjectErrors(project.errors)
    return settings, project


def partition_rule(step: ScriptStep, partition_from: str | None) -> tuple[str | None, Callable[[str], str] | None]:
    """A receiver's ``partition_from=`` (as written, or what the step's partitioning implies) and raw value →
    partition key (raises PartitionValueError); (…, None) when the step takes no partition."""
    from lineage_defs.assets.partitions import partitions_def
    from lineage_defs.triggers.keys import default_source, partition_key

    pdef = partitions_def(step.partitioning, step.name, live=True)
    source = default_source(step.partitioning, partition_from)
    if pdef is None or source is None:
        return source, None

    def to_key(raw: str) -> str:
        return partition_key(raw, pdef)

    return source, to_key


class GroupWriter:
    """One thread owns the store connection; concurrent requests (HTTP posts, SMTP sessions) share commits.

    Each request queues its event and awaits a future; the thread takes
    everything queued, stores it in one transaction (one fsync for the lot)
    and resolves the futures after COMMIT returned.
    """

    def __init__(self, path: str | Path, max_group: int = 512, name: str = "lineage-event-writer") -> None:
        self.path = path
        self.max_group = max_group
        self.queue: queue.Queue[Any] = queue.Queue()
        self.store = EventStore(path)  # created here so a bad path fails at start, not on the first request
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    async def submit(self, stream: str, event: NewEvent) -> tuple[int, bool]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, bool]] = loop.create_future()
        self.queue.put((stream, event, loop, fut))
        return await fut

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join(timeout=10)
        self.store.close()

    def _loop(self) -> None:
        while True:
            first = self.queue.get()
            if first is None:
                return
            group = [first]
            while len(group) < self.max_group:
                try:
                    item = self.queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self.queue.put(None)
                    break
                group.append(item)
            try:
                results = self.store.add_many([(s, e) for s, e, _, _ in group])
            except BaseException as e:  # nothing of the group was stored: every request gets the error
                for _, _, loop, fut in group:
                    loop.call_soon_threadsafe(_fail, fut, e)
                continue
            for (_, _, loop, fut), r in zip(group, results):
                loop.call_soon_threadsafe(_done, fut, r)


def _done(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _fail(fut: asyncio.Future[Any], error: BaseException) -> None:
    if not fut.done():
        fut.set_exception(error)
