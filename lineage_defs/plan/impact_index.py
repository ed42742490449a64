"""The column graph of a pipelines folder, kept beside the parse cache for ``lineage-defs impact``.

A warm project load still reads and hashes every file; on a few thousand
steps that is seconds, and ``impact`` should answer in a fraction of one. The
graph (``ColumnGraph.to_data``) is stored in the state dir's cache folder with
a fingerprint of the folder: every file's path, size and modification time
(the folders ``discover`` skips left out), the folder itself, the
``LINEAGE_*``/``DBT_*`` environment and the cache versions. Any change to one
of them plans the project again and rewrites the index.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from lineage_defs.plan.cache import CACHE_VERSION
from lineage_defs.plan.discover import SKIP_DIRS
from lineage_defs.plan.impact import ColumnGraph
from lineage_defs.plan.spec import Project

INDEX_VERSION = "impact-v3"  # v2: a test's unknown line is null, not 0; v3: declared column kinds (copy|mod, default mod)


def _files(folder: str, skip: str) -> Iterator[tuple[str, int, int]]:
    with os.scandir(folder) as it:
        for entry in it:
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIP_DIRS and not entry.name.startswith(".") and entry.path != skip:
                    yield from _files(entry.path, skip)
            elif entry.is_file():
                st = entry.stat()
                yield entry.path, st.st_size, st.st_mtime_ns


def fingerprint(root: Path, state_dir: Path) -> str:
    h = hashlib.sha256(f"{INDEX_VERSION}\0{CACHE_VERSION}\0{root.resolve()}\0".encode())
    for key in sorted(k for k in os.environ if k.startswith(("LINEAGE_", "DBT_"))):
        h.update(f"{key}={os.environ[key]}\0".encode())
    for path, size, mtime in sorted(_files(str(root.resolve()), str(state_dir.resolve()))):
        h.update(f"{path}\0{size}\0{mtime}\0".encode())
    for lib in os.environ.get("LINEAGE_LIBRARY_DIRS", "").split(os.pathsep):  # shared test types: their edits change the plan's errors
        if lib.strip() and os.path.isdir(lib):
            for path, size, mtime in sorted(_files(os.path.abspath(lib), str(state_dir.resolve()))):
                h.update(f"{path}\0{size}\0{mtime}\0".encode())
    return h.hexdigest()


def column_graph(root: Path, cache_dir: Path | None, state_dir: Path, load: Callable[[], Project]) -> tuple[ColumnGraph, list[str]]:
    """The folder's column graph and its planning errors (rendered): from the index when it is current."""
    index = cache_dir / f"{INDEX_VERSION}.json" if cache_dir else None
    fp = fingerprint(root, state_dir) if index else ""
    if index is not None and index.exists():
        try:
            data = json.loads(index.read_text())
            if data.get("fingerprint") == fp:
                return ColumnGraph.from_data(data["graph"]), list(data["errors"])
        except (OSError, ValueError, KeyError, TypeError):  # corrupt or foreign: plan again
            pass
    project = load()
    graph, errors = ColumnGraph.build(project), [e.render() for e in project.errors]
    if index is not None:
        try:
            index.parent.mkdir(parents=True, exist_ok=True)
            tmp = index.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"fingerprint": fp, "errors": errors, "graph": graph.to_data()}, separators=(",", ":")))
            os.replace(tmp, index)
        except OSError:  # a read-only state dir: answer anyway
            pass
    return graph, errors
