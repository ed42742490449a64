"""One dbt project folder as one object: where it is, its profile, its cached manifest, its targets.

Like dagster-dbt's ``DbtProject``: everything else in this room asks the
project for paths (``project_dir``, ``profiles_dir``, ``manifest_path``, a
run's ``target_path``) and for the flags every dbt invocation gets
(``cli_args``). Frozen data, built once at load (``open_project``) from
``dbt_project.yml``, ``lineage.yml`` and the manifest cache.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lineage_defs import uris
from lineage_defs.dbt.config import DbtConfig, parse_lineage_yml
from lineage_defs.dbt.manifest import PARTIAL_PARSE, own_target, parse_project, partial_parse_fits, partial_parse_profile, profiles_dir, store_partial_parse
from lineage_defs.dbt.relations import ASSET_TYPES, is_asset, model_uri, source_uri
from lineage_defs.errors import LineageDefsError, Location, SpecError
from lineage_defs.settings import LineageSettings


@dataclass(frozen=True)
class DbtProject:
    """One dbt project folder: how to invoke dbt on it and what it builds."""

    path: str  # relative to the pipelines folder (posix)
    pipeline: str
    name: str  # dbt's project name
    profiles_dir: str
    default_profile: bool  # the embedded default (no profiles.yml in the project)
    config: DbtConfig
    manifest_path: str  # slim manifest.json for dagster-dbt
    key: str  # content hash of the project's files
    unique_ids: tuple[str, ...] = ()  # selected models/seeds/snapshots
    test_ids: tuple[str, ...] = field(default=())
    node_uris: tuple[tuple[str, str], ...] = ()  # every model/seed/snapshot/source unique id → asset URI
    # For the lineage pass, fixed at load: SQL declaring the project's own databases to the
    # analysis, and the URIs the analysis gives → asset URIs (other models' relations as scripts
    # name them, and this project's own database's relations).
    lineage_prelude: str = ""
    lineage_aliases: tuple[tuple[str, str], ...] = ()
    # The target's adapter, and its DuckDB files (database name → absolute path) when it has
    # any: what the run's catalog query reads and what scripts attach to read the models.
    adapter: str = "duckdb"
    database_files: tuple[tuple[str, str], ...] = ()

    @property
    def own_databases(self) -> tuple[str, ...]:
        """The databases of a project on its own profile: where its nodes' and sources' relations live."""
        if self.default_profile:
            return ()
        return tuple(sorted({uris.parse(u).authority for _, u in self.node_uris if uris.kind_of(u) == uris.Kind.DBT}))

    def project_dir(self, pipelines_dir: str | Path) -> Path:
        return Path(pipelines_dir) / self.path

    @property
    def op_name(self) -> str:
        """The Dagster op name of the project's multi-asset."""
        return re.sub(r"[^A-Za-z0-9_]", "_", f"{self.pipeline}__dbt__{self.name}")

    def cli_args(self) -> list[str]:
        """The flags every dbt invocation of the project gets (parse, build, compile)."""
        return self.config.cli_args()

    def manifest(self) -> dict[str, Any]:
        """The slim manifest dagster-dbt reads (parsed at load, cached by content hash)."""
        return dict(json.loads(Path(self.manifest_path).read_text()))

    def target_path(self, pipelines_dir: str | Path, run_id: str) -> Path:
        """A target path of one run's own, seeded with the cached partial parse made with this profile (no full re-parse per run)."""
        target = self.project_dir(pipelines_dir) / "target" / f"lineage-{run_id[:8]}-{uuid.uuid4().hex[:8]}"
        target.mkdir(parents=True, exist_ok=True)
        cached = Path(self.manifest_path).parent
        if partial_parse_fits(cached, partial_parse_profile(Path(self.profiles_dir))):
            shutil.copyfile(cached / PARTIAL_PARSE, target / PARTIAL_PARSE)
        return target

    def keep_partial_parse(self, target: Path) -> None:
        """After a build that found no partial parse made with this profile (the manifest cache entry
        is shared by state dirs, whose profiles differ in their paths: the state dir moved, or started
        from a copy of another's cache), dbt's own of that build, for the next ones."""
        cached, profile = Path(self.manifest_path).parent, partial_parse_profile(Path(self.profiles_dir))
        if (target / PARTIAL_PARSE).exists() and not partial_parse_fits(cached, profile):
            store_partial_parse(target / PARTIAL_PARSE, cached, profile)

    def lineage_cache(self, settings: LineageSettings) -> Path | None:
        """Where the lineage pass keeps compiled-SQL analyses of this project."""
        cache = settings.cache_dir
        return cache / "dbt-lineage" / f"{self.path.replace('/', '__')}.json" if cache else None


@dataclass(frozen=True)
class Opened:
    """A project as loaded: the project (None when it could not be), its plan nodes, its problems."""

    project: DbtProject | None
    nodes: dict[str, Any]
    errors: list[LineageDefsError]


def discover(root: Path, skip: set[str]) -> Iterator[tuple[str, Path]]:
    """(pipeline, folder) for every folder holding ``dbt_project.yml`` under a pipeline sub-folder."""
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        if sub.name.startswith(".") or sub.name in skip:
            continue
        stack = [sub]
        while stack:
            folder = stack.pop()
            if (folder / "dbt_project.yml").exists():
                yield sub.name, folder
                continue
            with os.scandir(folder) as it:  # an entry's type comes with the listing: no stat per file
                subs = sorted((e.name for e in it if e.is_dir() and not e.name.startswith(".") and e.name not in skip), reverse=True)
            stack.extend(folder / name for name in subs)


def open_project(root: Path, pipeline: str, folder: Path, settings: LineageSettings) -> Opened:
    """One project: its lineage.yml, the generated default profile if needed, the cached manifest."""
    rel = folder.relative_to(root).as_posix()
    errors: list[LineageDefsError] = []
    config = DbtConfig()
    yml = folder / "lineage.yml"
    if yml.exists():
        config, errs = parse_lineage_yml(f"{rel}/lineage.yml", yml.read_text(encoding="utf-8"))
        errors.extend(errs)
        if errs:
            return Opened(None, {}, errors)
    try:
        profiles, is_default = profiles_dir(folder, settings, config.threads)
    except Exception as e:  # a dbt_project.yml that is not YAML
        return Opened(None, {}, [SpecError(f"cannot read dbt_project.yml: {e}", Location(f"{rel}/dbt_project.yml", 1, 1), "fix the YAML")])
    selection = (config.select, config.exclude, config.selector)
    parsed, errs = parse_project(folder, rel, profiles, config.cli_args(), settings.cache_dir, selection, settings.state_dir if is_default else None)
    errors.extend(errs)
    if parsed is None:
        return Opened(None, {}, errors)
    nodes = parsed.nodes
    selected = nodes.get("selected")
    chosen = set(selected) if selected is not None else None
    ids = tuple(u for u, n in nodes["nodes"].items() if n["resource_type"] in ASSET_TYPES and is_asset(n) and (chosen is None or u in chosen))
    tests = tuple(u for u, n in nodes["nodes"].items() if n["resource_type"] == "test" and (chosen is None or u in chosen))
    node_uris = tuple(
        [(u, model_uri(n)) for u, n in nodes["nodes"].items() if n["resource_type"] in ASSET_TYPES]
        + [(u, source_uri(src, is_default)) for u, src in nodes["sources"].items()]
    )
    target = own_target(folder, config.target) if not is_default else None
    project = DbtProject(
        path=rel,
        pipeline=pipeline,
        name=str(nodes.get("project_name") or folder.name),
        profiles_dir=str(profiles),
        default_profile=is_default,
        config=config,
        manifest_path=parsed.manifest_path,
        key=parsed.key,
        unique_ids=ids,
        test_ids=tests,
        node_uris=node_uris,
        adapter=target.adapter if target else "duckdb",
        database_files=target.files if target else (),
    )
    return Opened(project, nodes, errors)
