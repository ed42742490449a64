"""Which files of a pipelines folder are scripts, and which pipeline each belongs to."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from lineage_defs.errors import Location, SpecError
from lineage_defs.parse import language_of

SKIP_DIRS = {"target", "dbt_packages", "logs", "node_modules", "__pycache__", ".venv", "venv"}


def discover(root: Path) -> Iterator[tuple[str, Path]]:
    """(pipeline, file) for every script under each pipeline sub-folder, in path order."""
    if not root.is_dir():
        raise SpecError(f"pipelines folder '{root}' does not exist", Location(str(root)), "set LINEAGE_PIPELINES_DIR or pass the folder")
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        if sub.name.startswith(".") or sub.name in SKIP_DIRS:
            continue
        for path in _walk(sub):
            yield sub.name, path


def _walk(folder: Path) -> Iterator[Path]:
    if (folder / "dbt_project.yml").exists():
        return  # dbt projects are loaded by the dbt integration, not as scripts
    for p in sorted(folder.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_dir():
            if p.name not in SKIP_DIRS:
                yield from _walk(p)
        elif language_of(p.name):
            yield p
