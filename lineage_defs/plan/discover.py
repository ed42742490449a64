"""Which files of a pipelines folder are scripts, and which pipeline each belongs to."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from lineage_defs.errors import Location, SpecError
from lineage_defs.parse import language_of
from lineage_defs.parse.header import leading_comments

SKIP_DIRS = {"target", "dbt_packages", "logs", "node_modules", "__pycache__", ".venv", "venv"}


def discover(root: Path) -> Iterator[tuple[str, Path]]:
    """(pipeline, file) for every script under each pipeline sub-folder, in path order."""
    if not root.is_dir():
        raise SpecError(f"pipelines folder '{root}' does not exist", Location(str(root)), "set LINEAGE_PIPELINES_DIR or pass the folder")
    for sub in pipeline_folders(root):
        for path in script_files(sub):
            yield sub.name, path


def pipeline_folders(root: Path) -> list[Path]:
    """The sub-folders that are pipelines (asset groups)."""
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in SKIP_DIRS)


def stray_steps(root: Path) -> list[SpecError]:
    """Steps lying directly in the pipelines folder: located errors (a step belongs to a pipeline sub-folder)."""
    out = []
    for path in sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith(".")):
        language = language_of(path.name)
        if language is None:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        comments, _ = leading_comments(text, language)
        line = next((c for c in comments if c.content.split(None, 1)[:1] == ["pipeline"]), None)
        if line is None:
            continue  # not a step (a note, a helper script): nothing to say
        loc = Location(path.name, line.line, line.offset + 1, line.raw, len("pipeline"))
        out.append(SpecError("a step lying directly in the pipelines folder belongs in a pipeline sub-folder", loc,
                             f"move it into the folder of its pipeline (asset group), e.g. shop/{path.name}"))
    return out


def script_files(folder: Path) -> Iterator[Path]:
    """Every script under ``folder`` (sorted, depth first), skipping dot folders, build folders and dbt projects."""
    if (folder / "dbt_project.yml").exists():
        return  # dbt projects are loaded by the dbt integration, not as scripts
    # scandir: an entry's type comes with the listing (a large folder is listed, not stat'ed file by file)
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name.startswith("."):
            continue
        if e.is_dir():
            if e.name not in SKIP_DIRS:
                yield from script_files(folder / e.name)
        elif language_of(e.name):
            yield folder / e.name
