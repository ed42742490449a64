"""A dbt project's profile and manifest: the profile generated for the embedded default, the
manifest parsed once by dbt and cached by content hash.

``dbt parse`` costs seconds (tens of seconds for thousands of models) and
every Dagster run process loads the code location again, so the manifest is
keyed by a hash of the project's files, the profile, ``lineage.yml``'s vars
and target and the dbt version, and kept under
``<state>/cache/dbt/<hash>/`` as JSON (data only, never pickle):

- ``manifest.json`` — a slim manifest: the nodes, sources, maps and metadata
  dagster-dbt reads at run time (no raw SQL, no macros, no docs);
- ``nodes.json`` — the same models/sources/tests as the plan needs them,
  with raw SQL for load-time lineage.

A warm load reads ``nodes.json`` only; run processes read ``manifest.json``
when dbt runs. Nothing here imports Dagster or touches a database (``dbt
parse`` does not connect).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lineage_defs.errors import Location, SpecError
from lineage_defs.run.substrates import extension_directory
from lineage_defs.settings import LineageSettings

# Bump when what is kept from the manifest changes.
MANIFEST_CACHE_VERSION = "dbt-v3"  # v2: compiled SQL of models calling macros; v3: the models dbt could not compile
_SKIP = {"target", "logs", ".git", "__pycache__", ".venv", "venv", "node_modules"}
# A project's own DuckDB target usually lives in its folder: the data a build writes is no input of the parse.
_DATA_SUFFIXES = (".duckdb", ".duckdb.wal", ".db", ".db.wal", ".ducklake", ".ducklake.wal")
_NODE_TYPES = ("model", "seed", "snapshot", "test")
_NODE_FIELDS = (
    "unique_id", "resource_type", "name", "package_name", "path", "original_file_path", "fqn", "database",
    "schema", "alias", "relation_name", "depends_on", "description", "columns", "tags", "meta", "group",
    "test_metadata", "attached_node", "column_name", "checksum", "version",
)  # fmt: skip
_CONFIG_FIELDS = (
    "materialized", "incremental_strategy", "event_time", "batch_size", "begin", "lookback", "severity",
    "meta", "tags", "enabled", "unique_key", "concurrent_batches",
)  # fmt: skip
_SOURCE_FIELDS = (
    "unique_id", "resource_type", "name", "source_name", "package_name", "path", "original_file_path", "fqn",
    "database", "schema", "identifier", "relation_name", "description", "columns", "tags", "meta",
)  # fmt: skip


def _setting(settings: LineageSettings, field: str, var: str, default: str) -> str:
    """How the generated profile names one lake setting.

    Set from the environment (the code location's way): dbt reads the variable
    in its own process, so a password never lands in the file. Set in code: the
    value itself, in a file only its owner reads (``profiles_dir``).
    """
    value = getattr(settings, field)
    if value and field not in settings.secret_env:
        return str(value)
    return "{{ env_var('%s', '%s') }}" % (var, default)


def default_profile(profile: str, settings: LineageSettings, threads: int | None = None) -> str:
    """profiles.yml for a project that brings none: dbt-duckdb on ``warehouse.duckdb``, ``main`` DuckLake as ``lake``.

    Offline: extensions load from the duckdb-ext-* wheels, nothing is installed.
    """
    s = settings.replace(state_dir=str(Path(settings.state_dir).resolve()))
    catalog = _setting(s, "ducklake_catalog", "LINEAGE_DUCKLAKE_CATALOG", str(s.lake_catalog))
    data = _setting(s, "ducklake_data_path", "LINEAGE_DUCKLAKE_DATA_PATH", f"{s.lake_data}/")
    output = {
        "type": "duckdb",
        "path": str(s.database_file("warehouse")),
        "database": "warehouse",
        "schema": "main",
        "threads": threads or 1,
        "config_options": {"extension_directory": extension_directory(), "autoinstall_known_extensions": False, "autoload_known_extensions": True},
        "attach": [{"path": f"ducklake:{catalog}", "alias": "lake", "options": {"data_path": data}}],
    }
    return json.dumps({profile: {"target": "lineage", "outputs": {"lineage": output}}}, indent=2, sort_keys=True)  # JSON is YAML


def profile_name(project_dir: Path) -> tuple[str, str]:
    """(dbt project name, profile name) from ``dbt_project.yml``."""
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no types (dbt and dagster depend on it)

    data = yaml.safe_load((project_dir / "dbt_project.yml").read_text(encoding="utf-8")) or {}
    name = str(data.get("name") or project_dir.name)
    return name, str(data.get("profile") or name)


def profiles_dir(project_dir: Path, settings: LineageSettings, threads: int | None = None) -> tuple[Path, bool]:
    """(the folder holding profiles.yml, whether it is the generated default)."""
    if (project_dir / "profiles.yml").exists():
        return project_dir, False
    _, profile = profile_name(project_dir)
    text = default_profile(profile, settings, threads)
    folder = settings.dbt_profiles_dir.resolve() / hashlib.sha256(f"{project_dir.resolve()}\0{text}".encode()).hexdigest()[:16]
    target = folder / "profiles.yml"
    # DuckDB creates the embedded lake's catalog file on first ATTACH, but not its folder
    settings.lake_data.mkdir(parents=True, exist_ok=True)
    if not target.exists() or target.read_text() != text:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        _atomic_write(target, text)
    return folder, True


@dataclass(frozen=True)
class OwnTarget:
    """The target a project's own ``profiles.yml`` selects, as far as lineage_defs can reach it.

    ``files`` are its DuckDB databases (name → absolute path: the main file and
    its ``attach`` entries), which scripts can attach and the run's catalog
    query can read; another adapter (PostgreSQL, Snowflake…) or an in-memory or
    remote DuckDB gives none.
    """

    adapter: str
    files: tuple[tuple[str, str], ...] = ()
    problem: str = ""  # why the target could not be read, if it could not


def own_target(project_dir: Path, target: str | None) -> OwnTarget:
    """What the project's ``profiles.yml`` target is (``env_var`` rendered; relative paths from the project folder, as dbt runs there)."""
    import yaml  # PyYAML ships no types: the ignore on this module's first import covers it

    try:
        _, profile = profile_name(project_dir)
        profiles = yaml.safe_load((project_dir / "profiles.yml").read_text(encoding="utf-8")) or {}
        entry = profiles.get(profile) or {}
        output = (entry.get("outputs") or {}).get(target or entry.get("target") or "dev")
    except (OSError, yaml.YAMLError, AttributeError) as e:
        return OwnTarget("", problem=f"profiles.yml: {e}")
    if not isinstance(output, dict):
        return OwnTarget("", problem=f"profiles.yml has no target {target or entry.get('target')!r} in profile {profile!r}")
    def text(value: Any) -> str:
        if "{" not in str(value):  # plain: no Jinja on a warm load
            return str(value)
        import jinja2

        try:
            return jinja2.Environment().from_string(str(value)).render(env_var=lambda name, default="": os.environ.get(name, default))
        except jinja2.TemplateError:
            return str(value)

    adapter = text(output.get("type", ""))
    if adapter != "duckdb":
        return OwnTarget(adapter)
    files: list[tuple[str, str]] = []
    for path, name in [(output.get("path", ":memory:"), output.get("database")), *((a.get("path", ""), a.get("alias")) for a in output.get("attach") or [] if isinstance(a, dict))]:
        where = text(path)
        if not where or where.startswith((":memory:", "md:", "motherduck:")) or ":" in where.split("/")[0] and not Path(where).is_absolute():
            continue  # in memory, MotherDuck, another extension's URL: not a file scripts can attach
        file = Path(where) if Path(where).is_absolute() else (project_dir / where).resolve()
        files.append((text(name) if name else file.name.split(".")[0], str(file)))
    return OwnTarget(adapter, tuple(files))


def _files(folder: Path) -> Iterator[Path]:
    for p in sorted(folder.iterdir()):
        if p.name in _SKIP or p.name.startswith(".") or p.name.endswith(_DATA_SUFFIXES):
            continue
        if p.is_dir():
            yield from _files(p)
        elif p.is_file():
            yield p


def project_hash(project_dir: Path, profiles: Path, cli_args: list[str], state_dir: str | None = None) -> str:
    """Content hash of everything ``dbt parse`` reads: files, profile, vars/target, dbt version.

    ``state_dir``: the state dir of a generated default profile, whose paths start there: it is
    hashed as ``$STATE``, unless a file of the project reads the target's paths in Jinja
    (``target.path``, ``target.attach``…, ``TARGET_PATHS``). Otherwise the manifest does not depend
    on where the state dir is (parsing never opens the warehouse and lake files), so neither do
    this key and the dbt models' code versions made from it, and the same project parsed for
    another state dir is the same cache entry.
    """
    from importlib.metadata import version

    h = hashlib.sha256()
    for part in (MANIFEST_CACHE_VERSION, version("dbt-core"), version("dbt-duckdb"), json.dumps(cli_args), str(project_dir.resolve())):
        h.update(part.encode() + b"\0")
    reads_paths = False
    for p in _files(project_dir):
        data = p.read_bytes()
        reads_paths = reads_paths or TARGET_PATHS.search(data) is not None
        h.update(p.relative_to(project_dir).as_posix().encode() + b"\0")
        h.update(data + b"\0")
    profile = (profiles / "profiles.yml").read_text(encoding="utf-8")
    if state_dir is not None and not reads_paths:
        profile = profile.replace(str(Path(state_dir).resolve()) + "/", "$STATE/")
    h.update(profile.encode() + b"\0")
    return h.hexdigest()[:32]


# Jinja reading what of dbt's ``target`` holds paths (dbt-duckdb's path, attach, settings…), or any of it by key
TARGET_PATHS = re.compile(rb"\btarget\s*(?:\[|\.\s*get\b|\.\s*(?:path|attach|config_options|settings|external_root|filesystems|plugins|extensions)\b)")


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")  # created 0600
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _slim_node(node: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    out = {k: node[k] for k in fields if k in node}
    cfg = node.get("config") or {}
    out["config"] = {k: cfg[k] for k in _CONFIG_FIELDS if k in cfg}
    return out


_TESTED = re.compile(r"""\b(?:source\(\s*['"]([^'"]+)['"]\s*,\s*['"]([^'"]+)['"]|ref\(\s*['"]([^'"]+)['"])""")


def checked_node(test: Mapping[str, Any], sources: Mapping[str, Any], nodes: Mapping[str, Any]) -> str | None:
    """The unique id of the node (model, seed, snapshot or source) a dbt test checks; None when it checks none alone.

    dbt's ``attached_node`` (a generic test on a model); else the one node it
    reads; else, for a generic test reading several (``relationships`` on a
    source column), the ``source()``/``ref()`` of its ``model`` argument — never
    the order of ``depends_on``, which partial parsing changes. A singular test
    reading several nodes checks none of them (as dagster-dbt reports it).

    >>> src = {"source.p.shop.orders": {"source_name": "shop", "name": "orders"}}
    >>> t = {"depends_on": {"nodes": ["model.p.fct", "source.p.shop.orders"]},
    ...      "test_metadata": {"kwargs": {"model": "{{ get_where_subquery(source('shop', 'orders')) }}"}}}
    >>> checked_node(t, src, {"model.p.fct": {"name": "fct"}})
    'source.p.shop.orders'
    """
    if test.get("attached_node"):
        return str(test["attached_node"])
    upstream = list((test.get("depends_on") or {}).get("nodes") or ())
    if len(upstream) == 1:
        return str(upstream[0])
    named = _TESTED.search(str(((test.get("test_metadata") or {}).get("kwargs") or {}).get("model") or ""))
    if named is None:
        return None
    source, table, ref = named.groups()
    for u in upstream:
        if ref is None and u in sources and (sources[u].get("source_name"), sources[u].get("name")) == (source, table):
            return str(u)
        if ref is not None and u in nodes and nodes[u].get("name") == ref:
            return str(u)
    return None


def _attach_tests(nodes: dict[str, Any], sources: Mapping[str, Any]) -> dict[str, Any]:
    """Each test's ``attached_node`` set to what it checks (dagster-dbt and the plan read it alike)."""
    for n in nodes.values():
        if n.get("resource_type") == "test":
            n["attached_node"] = checked_node(n, sources, nodes)
    return nodes


def slim_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What dagster-dbt reads at run time, without raw SQL, macros and docs."""
    nodes = {u: _slim_node(n, _NODE_FIELDS) for u, n in manifest["nodes"].items() if n.get("resource_type") in _NODE_TYPES}
    _attach_tests(nodes, manifest.get("sources", {}))
    return {
        "metadata": {k: manifest["metadata"].get(k) for k in ("dbt_version", "project_name", "project_id", "adapter_type", "dbt_schema_version")},
        "nodes": nodes,
        "sources": {u: _slim_node(s, _SOURCE_FIELDS) for u, s in manifest.get("sources", {}).items()},
        "child_map": {u: [c for c in cs if c in nodes] for u, cs in manifest.get("child_map", {}).items() if u in nodes or u.startswith("source.")},
        "parent_map": {u: ps for u, ps in manifest.get("parent_map", {}).items() if u in nodes},
        "exposures": {}, "metrics": {}, "groups": {}, "semantic_models": {}, "saved_queries": {}, "unit_tests": {},
        "selectors": manifest.get("selectors", {}),
    }  # fmt: skip


def code_versions(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Model/seed/snapshot → a hash of what decides its output: dbt's checksum of its file, its
    config, and the SQL of every macro it calls (through the macros they call) — dbt's
    ``state:modified`` body, configs and macros."""
    macros: Mapping[str, Any] = manifest.get("macros") or {}
    memo: dict[str, str] = {}

    def digest(uid: str, seen: frozenset[str]) -> str:
        if uid not in memo:
            m = macros.get(uid) or {}
            h = hashlib.sha256(str(m.get("macro_sql") or "").encode())
            for dep in sorted((m.get("depends_on") or {}).get("macros") or ()):
                h.update(digest(dep, seen | {uid}).encode() if dep not in seen else dep.encode())
            memo[uid] = h.hexdigest()[:16]
        return memo[uid]

    out = {}
    for u, n in manifest["nodes"].items():
        if n.get("resource_type") in ("model", "seed", "snapshot"):
            used = sorted((n.get("depends_on") or {}).get("macros") or ())
            body = {"checksum": n.get("checksum"), "config": n.get("config"), "macros": [digest(m, frozenset()) for m in used]}
            out[u] = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:32]
    return out


def plan_nodes(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The plan's view: models/seeds/snapshots/tests/sources with raw SQL and code versions, in a small JSON."""
    versions = code_versions(manifest)
    nodes = {}
    for u, n in manifest["nodes"].items():
        if n.get("resource_type") not in _NODE_TYPES:
            continue
        slim = _slim_node(n, _NODE_FIELDS)
        slim["columns"] = list((n.get("columns") or {}))
        if n.get("resource_type") == "model":
            slim["raw_code"] = n.get("raw_code", "")
            slim["language"] = n.get("language", "sql")
        if u in versions:
            slim["code_version"] = versions[u]
        nodes[u] = slim
    sources = {u: {**_slim_node(s, _SOURCE_FIELDS), "columns": list(s.get("columns") or {})} for u, s in manifest.get("sources", {}).items()}
    _attach_tests(nodes, sources)
    return {"project_name": manifest["metadata"].get("project_name"), "nodes": nodes, "sources": sources}


@dataclass(frozen=True)
class ParsedProject:
    key: str  # the content hash
    manifest_path: str  # slim manifest.json for dagster-dbt
    nodes: dict[str, Any]  # plan_nodes()


_SCRATCH: list[str] = []


def _scratch() -> str:
    """This process' folder for manifests parsed with caching off: they are read for as long as the
    Definitions live, and removed when the process exits (not by a forked child's exit)."""
    if not _SCRATCH:
        path, pid = tempfile.mkdtemp(prefix="lineage-dbt-"), os.getpid()

        def remove() -> None:
            if os.getpid() == pid:
                shutil.rmtree(path, ignore_errors=True)

        atexit.register(remove)
        _SCRATCH.append(path)
    return _SCRATCH[0]


def parse_project(
    project_dir: Path,
    rel: str,
    profiles: Path,
    cli_args: list[str],
    cache_dir: Path | None,
    selected: tuple[str, str, str] = ("fqn:*", "", ""),
    state_dir: str | None = None,
) -> tuple[ParsedProject | None, list[SpecError]]:
    """The project's manifest: from the cache, else ``dbt parse`` once (and the selection with ``dbt ls``).

    ``state_dir``: given for the generated default profile (``project_hash``)."""
    key = project_hash(project_dir, profiles, [*cli_args, *selected], state_dir)
    folder = (cache_dir / "dbt" / key) if cache_dir else Path(tempfile.mkdtemp(dir=_scratch()))
    nodes_file, manifest_file = folder / "nodes.json", folder / "manifest.json"
    if nodes_file.exists() and manifest_file.exists():
        try:
            return ParsedProject(key, str(manifest_file), json.loads(nodes_file.read_text())), []
        except ValueError:  # a torn or foreign file: parse again
            pass
    folder.mkdir(parents=True, exist_ok=True)
    select, exclude, selector = selected
    selection: list[str] = []
    if selector:
        selection = ["--selector", selector]
    elif select not in ("", "fqn:*") or exclude:
        selection = ["--select", select or "fqn:*"] + (["--exclude", exclude] if exclude else [])
    with tempfile.TemporaryDirectory(prefix="lineage-dbt-parse-") as tmp:
        # dbt's own parser (and selection), in a process of its own: dbt keeps global state
        spec = {"project_dir": str(project_dir.resolve()), "profiles_dir": str(profiles.resolve()), "target": tmp, "args": cli_args, "selection": selection}
        done = subprocess.run([sys.executable, "-m", "lineage_defs.dbt.parse_main", json.dumps(spec)], cwd=project_dir,
                              env={**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}, capture_output=True, text=True)  # fmt: skip
        manifest_path = Path(tmp) / "manifest.json"
        if done.returncode != 0 or not manifest_path.exists():
            where = Location(f"{rel}/dbt_project.yml", 1, 1)
            if "No module named 'dbt" in done.stderr:
                return None, [SpecError("dbt-core is not installed", where, "install the dbt extra: pip install 'lineage_defs[dbt]'")]
            return None, [SpecError(_dbt_error(done), where, "fix the dbt project (run `dbt parse` in it to see the full error)")]
        manifest = json.loads(manifest_path.read_text())
        nodes = plan_nodes(manifest)
        nodes["selected"] = json.loads((Path(tmp) / "selected.json").read_text())
        compiled = Path(tmp) / "compiled.json"
        nodes["compiled"] = json.loads(compiled.read_text()) if compiled.exists() else {}
        failed = Path(tmp) / "compile_failed.json"
        nodes["compile_failed"] = json.loads(failed.read_text()) if failed.exists() else {}
        if (Path(tmp) / PARTIAL_PARSE).exists():  # lets every build skip a full re-parse
            store_partial_parse(Path(tmp) / PARTIAL_PARSE, folder, partial_parse_profile(profiles))
    _atomic_write(manifest_file, json.dumps(slim_manifest(manifest)))
    _atomic_write(nodes_file, json.dumps(nodes))
    return ParsedProject(key, str(manifest_file), nodes), []


PARTIAL_PARSE = "partial_parse.msgpack"


def partial_parse_profile(profiles: Path) -> str:
    """The profile a partial parse is made with (dbt rejects one made with other connection values, paths included)."""
    return hashlib.sha256((profiles / "profiles.yml").read_bytes()).hexdigest()[:32]


def store_partial_parse(source: Path, folder: Path, profile: str) -> None:
    """``source``, dbt's partial parse made with ``profile``, as the one of the cache entry ``folder``."""
    fd, part = tempfile.mkstemp(dir=folder, prefix=".msgpack-")
    os.close(fd)
    shutil.copyfile(source, part)
    os.replace(part, folder / PARTIAL_PARSE)
    _atomic_write(folder / "partial_parse.profile", profile)


def partial_parse_fits(folder: Path, profile: str) -> bool:
    """Whether the cache entry ``folder`` holds a partial parse made with ``profile``."""
    try:
        return (folder / PARTIAL_PARSE).exists() and (folder / "partial_parse.profile").read_text() == profile
    except OSError:
        return False


def _dbt_error(done: subprocess.CompletedProcess[str]) -> str:
    text = (done.stdout or "") + "\n" + (done.stderr or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    useful = [ln for ln in lines if "error" in ln.lower() or "Error" in ln]
    return " ".join((useful or lines)[-4:])[:800] or f"exit code {done.returncode}"
