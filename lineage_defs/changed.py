"""``lineage-defs changed``: which assets' code changed, as a Dagster selection (dbt's ``state:modified+``).

An asset's code version (``Step.code_version``) hashes what decides its
output: a script's text and the macro libraries it uses, a dbt model's
checksum, config, macros and vars. Changed means: differs from the code
version of the asset's latest materialization in the Dagster instance
(``$DAGSTER_HOME``), or — with ``--since <git-ref>`` — from the same folder
at that commit. An asset never materialized (or not there at the commit) is
new, and counts as changed.

The selection (``key:"ducklake/main/orders"`` — with ``+``, ``key:"…"+``, the
asset and everything downstream) is printed alone on stdout, for
``dagster asset materialize --select "$(lineage-defs changed +)"`` and the UI's
search box; what changed and why goes to stderr.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lineage_defs import uris
from lineage_defs.errors import RunError
from lineage_defs.plan.spec import Project
from lineage_defs.settings import LineageSettings

CODE_VERSION_TAG = "dagster/code_version"  # Dagster tags every materialization with its asset's code version


@dataclass(frozen=True)
class Change:
    uri: str
    source: str  # the script or dbt file
    reason: str  # "changed" | "new"


def versions(project: Project) -> dict[str, tuple[str, str]]:
    """Output URI → (code version, source path) of every step's assets."""
    return {u: (s.code_version or "", s.path) for s in project.steps for u in s.outputs}


def compare(now: Mapping[str, tuple[str, str]], before: Mapping[str, str | None]) -> list[Change]:
    """The assets whose code version differs from ``before`` (URI → version; None or missing: new)."""
    out = []
    for uri, (version, source) in now.items():
        old = before.get(uri)
        if old is None:
            out.append(Change(uri, source, "new"))
        elif old != version:
            out.append(Change(uri, source, "changed"))
    return out


def downstream(project: Project, roots: Iterable[str]) -> list[str]:
    """Every asset that reads (through any number of steps) one of ``roots``, in plan order, roots excluded."""
    readers: dict[str, list[str]] = {}
    for s in project.steps:
        for d in s.deps:
            readers.setdefault(d.uri, []).extend(s.outputs)
    seen, queue = set(roots), list(roots)
    while queue:
        for r in readers.get(queue.pop(), ()):
            if r not in seen:
                seen.add(r)
                queue.append(r)
    start = set(roots)
    return [u for s in project.steps for u in s.outputs if u in seen and u not in start]


def selection(changed: Iterable[str], plus: bool) -> str:
    """A Dagster asset selection of ``changed`` (and, with ``plus``, everything downstream of them)."""
    return " or ".join(f'key:"{"/".join(uris.key_path(u))}"{"+" if plus else ""}' for u in changed)


def since_instance(project: Project) -> dict[str, str | None]:
    """URI → the code version of its latest materialization in the Dagster instance (None: never materialized)."""
    import os

    from dagster import AssetKey, DagsterInstance

    if not os.environ.get("DAGSTER_HOME"):
        raise RunError("no Dagster instance to compare with: DAGSTER_HOME is not set", fix="set DAGSTER_HOME to the instance's folder, or compare with a commit: --since <git-ref>")
    out: dict[str, str | None] = {}
    with DagsterInstance.get() as instance:
        for uri in versions(project):
            event = instance.get_latest_materialization_event(AssetKey(list(uris.key_path(uri))))
            materialization = event.asset_materialization if event is not None else None
            out[uri] = materialization.tags.get(CODE_VERSION_TAG) if materialization is not None and materialization.tags else None
    return out


def since_git(settings: LineageSettings, ref: str) -> dict[str, str | None]:
    """URI → its code version in the pipelines folder as it was at git ``ref``."""
    from lineage_defs.project import load_project

    folder = Path(settings.pipelines_dir).resolve()
    top = _git(folder, "rev-parse", "--show-toplevel").strip()
    rel = folder.relative_to(Path(top).resolve()).as_posix()
    _git(folder, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", fix=f"'{ref}' is not a commit of the repository at {top}: give a branch, tag or commit")
    with tempfile.TemporaryDirectory(prefix="lineage-changed-") as tmp:
        listing = _git(Path(top), "ls-tree", "-d", "--name-only", ref, "--", rel) if rel != "." else "."
        if not listing.strip():
            return {}  # the folder did not exist then: everything is new
        archive = subprocess.run(["git", "-C", top, "archive", "--format=tar", ref, "--", rel], capture_output=True, check=False)
        if archive.returncode != 0:
            raise RunError(f"git archive {ref} -- {rel} failed: {archive.stderr.decode(errors='replace').strip()}", fix="check the ref and the repository")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        # its own state dir: the caches of the working tree stay as they are
        old = load_project(Path(tmp) / rel, settings.replace(pipelines_dir=str(Path(tmp) / rel), state_dir=str(Path(tmp) / ".state")))
        return {u: v for u, (v, _) in versions(old).items()}


def _git(folder: Path, *args: str, fix: str | None = None) -> str:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise RunError("git is not installed", fix="install git, or compare with the Dagster instance (leave out --since)") from None
    if done.returncode != 0:
        raise RunError(
            f"git {' '.join(args)} failed in {folder}: {done.stderr.strip() or 'exit ' + str(done.returncode)}",
            fix=fix or "run it inside a git repository, or compare with the Dagster instance (leave out --since)",
        )
    return done.stdout


def report(project: Project, before: Mapping[str, str | None], plus: bool) -> tuple[list[str], str]:
    """(lines for stderr, the selection for stdout)."""
    changes = compare(versions(project), before)
    lines = [f"{c.reason:8} {c.uri}  ({c.source})" for c in changes]
    if plus and changes:
        lines += [f"{'below':8} {u}" for u in downstream(project, [c.uri for c in changes])]
    return lines, selection([c.uri for c in changes], plus)

