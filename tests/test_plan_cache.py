"""The plan cache: warm loads equal cold ones, only changed files (or a changed parser) are parsed and analysed again, corrupt
caches are cold starts, tampered statements are not run (runs execute the files), no sqlglot when warm."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dbt_projects import settled
from lineage_defs.plan import files as project_mod
from lineage_defs.plan import snapshot
from lineage_defs.plan.cache import CACHE_VERSION
from lineage_defs.project import load_project
from lineage_defs.settings import LineageSettings
from lineage_defs.plan.spec import Project

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pipelines"


@pytest.fixture
def pipelines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(tmp_path / "state"))
    # without the dbt project (its parse cache is tested in test_plan_dbt.py): a dbt parse per test is slow
    return Path(shutil.copytree(EXAMPLE, tmp_path / "pipelines", ignore=shutil.ignore_patterns("dbt")))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, Counter[str]]:
    """Counts of parse_header / analyze calls per script path."""
    counts: dict[str, Counter[str]] = {"parse": Counter(), "analyze": Counter()}
    parse, analyze = project_mod.parse_header, project_mod.analyze

    def spy_parse(rel, text, language):  # type: ignore[no-untyped-def]
        counts["parse"][rel] += 1
        return parse(rel, text, language)

    def spy_analyze(header, *args, **kwargs):  # type: ignore[no-untyped-def]
        counts["analyze"][header.path] += 1
        return analyze(header, *args, **kwargs)

    monkeypatch.setattr(project_mod, "parse_header", spy_parse)
    monkeypatch.setattr(project_mod, "analyze", spy_analyze)
    return counts


def assert_same(a: Project, b: Project) -> None:
    assert a.steps == b.steps
    assert (a.root, a.externals, a.macros, a.invalid_paths) == (b.root, b.externals, b.macros, b.invalid_paths)
    assert [e.render() for e in a.errors] == [e.render() for e in b.errors]
    assert [w.render() for w in a.warnings] == [w.render() for w in b.warnings]


def test_warm_load_equals_cold_load(pipelines: Path, tmp_path: Path, calls: dict[str, Counter[str]]) -> None:
    cache = tmp_path / "cache"
    cold = load_project(pipelines, LineageSettings(state_dir=str(cache.parent)))
    assert len(cold.steps) == 17 and not cold.errors
    assert (cache / f"{CACHE_VERSION}.json").is_file()
    assert sum(calls["parse"].values()) == 21  # every script, the macro library, the custom test, the test type and the notify hook included
    n_parsed = sum(calls["parse"].values())
    n_analysed = sum(calls["analyze"].values())
    assert n_analysed == 17  # the steps' bodies (not the macro library's, not the custom test's)

    warm = load_project(pipelines, LineageSettings(state_dir=str(cache.parent)))
    assert sum(calls["analyze"].values()) == n_analysed, "a warm load analysed again"
    assert sum(calls["parse"].values()) == n_parsed, "a warm load parsed a header again"
    assert_same(cold, warm)
    assert_same(cold, load_project(pipelines))


def test_changing_one_file_reparses_only_that_file(pipelines: Path, tmp_path: Path, calls: dict[str, Counter[str]]) -> None:
    cache = tmp_path / "cache"
    load_project(pipelines, LineageSettings(state_dir=str(cache.parent)))
    changed = pipelines / "shop" / "products.sql"
    changed.write_text(changed.read_text().replace("ORDER BY product_id", "ORDER BY product_id DESC"))
    for c in calls.values():
        c.clear()

    after = load_project(pipelines, LineageSettings(state_dir=str(cache.parent)))
    assert calls["analyze"] == Counter({"shop/products.sql": 1})
    assert calls["parse"] == Counter({"shop/products.sql": 1})
    assert_same(after, load_project(pipelines))  # nothing stale from the cache

    for c in calls.values():
        c.clear()
    load_project(pipelines, LineageSettings(state_dir=str(cache.parent)))
    assert not calls["analyze"] and not calls["parse"]


def test_a_changed_parser_parses_every_header_again(pipelines: Path, tmp_path: Path, calls: dict[str, Counter[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached header is keyed by the parser's own source: a header parsed by another version of the grammar is not used."""
    settings = LineageSettings(state_dir=str(tmp_path))
    before = project_mod.parser_fingerprint()
    cold = load_project(pipelines, settings)
    n_files = sum(calls["parse"].values())
    grammar = Path(project_mod.__file__).parents[1] / "parse" / "grammar.py"
    project_mod.parser_fingerprint.cache_clear()
    monkeypatch.setattr(Path, "read_bytes", lambda self, real=Path.read_bytes: real(self) + (b"# edited" if self == grammar else b""))
    assert project_mod.parser_fingerprint() != before
    for c in calls.values():
        c.clear()
    assert_same(load_project(pipelines, settings), cold)
    assert sum(calls["parse"].values()) == n_files and not calls["analyze"]  # the bodies' analyses are still the files' own
    monkeypatch.undo()
    project_mod.parser_fingerprint.cache_clear()
    assert project_mod.parser_fingerprint() == before


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json at all",
        b'{"version": "plan-v4", "entries": {"k"',
        b'["a", "list"]',
        b"null",
        pickle.dumps({"k": 1}),
        b"[" * 100_000 + b"]" * 100_000,
        b'{"version": "plan-v5", "entries": {"k": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}",
    ],
    ids=["empty", "garbage", "truncated", "foreign-list", "foreign-none", "a-pickle", "deep-nesting", "deep-entry"],
)
def test_corrupt_cache_is_treated_as_empty(pipelines: Path, tmp_path: Path, calls: dict[str, Counter[str]], content: bytes) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"{CACHE_VERSION}.json").write_bytes(content)
    project = load_project(pipelines, LineageSettings(state_dir=str(cache.parent)))
    assert_same(project, load_project(pipelines))
    assert sum(calls["analyze"].values()) == 2 * 17  # every step analysed, twice: the corrupt cache held nothing

    # and it was replaced by a good one
    for c in calls.values():
        c.clear()
    assert_same(load_project(pipelines, LineageSettings(state_dir=str(cache.parent))), project)
    assert not calls["analyze"]


_LOAD = """
import json, sys
from pathlib import Path
from lineage_defs.project import load_project
from lineage_defs.settings import LineageSettings
p = load_project(Path(sys.argv[1]), LineageSettings(state_dir=str(Path(sys.argv[2]).parent)))
print(json.dumps({
    "steps": len(p.steps),
    "sqlglot": any(m == "sqlglot" or m.startswith("sqlglot.") for m in sys.modules),
    "dagster": "dagster" in sys.modules,
}))
"""


def test_warm_load_does_not_import_sqlglot(pipelines: Path, tmp_path: Path) -> None:
    env = {**os.environ, "LINEAGE_STATE_DIR": str(tmp_path / "state")}

    def load() -> dict[str, object]:
        r = subprocess.run([sys.executable, "-c", _LOAD, str(pipelines), str(tmp_path / "cache")], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    cold, warm = load(), load()
    assert cold == {"steps": 17, "sqlglot": True, "dagster": False}
    assert warm == {"steps": 17, "sqlglot": False, "dagster": False}


class _Payload:
    """Unpickling this runs a command: what an attacker with write access to the state dir would plant."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_nothing_in_the_state_dir_is_unpickled(pipelines: Path, tmp_path: Path) -> None:
    from lineage_defs.plan.schemas import captured_schemas, record_schema

    state = tmp_path / "state"
    cache = state / "cache"
    cache.mkdir(parents=True)
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Payload(marker))
    for name in (f"{CACHE_VERSION}.json", "plan-v2.pickle", "schemas-index.json", "schemas-index.pickle"):
        (cache / name).write_bytes(payload)
    settings = LineageSettings(state_dir=str(state))
    record_schema(settings, "ducklake://main/orders", [("order_id", "BIGINT")])
    (state / "schemas" / "planted.json").write_bytes(payload)

    project = load_project(pipelines, settings)
    assert captured_schemas(settings) == {"ducklake://main/orders": ["order_id"]}
    assert len(project.steps) == 17
    assert not marker.exists()
    data = json.loads((cache / f"{CACHE_VERSION}.json").read_text())
    assert data["version"] == CACHE_VERSION and data["entries"]
    index = json.loads((cache / "schemas-index.json").read_text())
    assert index["version"] == 1 and index["schemas"] == {"ducklake://main/orders": ["order_id"]}


def test_an_entry_of_the_wrong_shape_is_a_miss(pipelines: Path, tmp_path: Path, calls: dict[str, Counter[str]]) -> None:
    cache = tmp_path / "cache"
    good = load_project(pipelines, LineageSettings(state_dir=str(cache.parent)))
    path = cache / f"{CACHE_VERSION}.json"
    data = json.loads(path.read_text())
    key = next(k for k, e in data["entries"].items() if _is_analysis(e))
    entry = data["entries"][key]
    entry[0] = 42  # the reads: a number where a list belongs
    path.write_text(json.dumps(data))
    (cache / snapshot.FILE_NAME).unlink(missing_ok=True)  # the whole plan of the last load would spare the files' entries
    for c in calls.values():
        c.clear()
    assert_same(load_project(pipelines, LineageSettings(state_dir=str(cache.parent))), good)
    assert sum(calls["analyze"].values()) == 1  # only the damaged entry was analysed again


def _is_analysis(entry: object) -> bool:
    from lineage_defs.plan.codec import CodecError, decode
    from lineage_defs.plan.spec import Analysis

    try:
        decode(entry, Analysis)
    except CodecError:
        return False
    return True


def _tamper(cache: Path, edit: object) -> None:
    """Apply ``edit(entry)`` to every analysis entry of the plan cache (what someone with write access to the state dir could do)."""
    path = cache / f"{CACHE_VERSION}.json"
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        if _is_analysis(entry):
            edit(entry)  # type: ignore[operator]
    path.write_text(json.dumps(data))
    (cache / snapshot.FILE_NAME).unlink(missing_ok=True)  # the files' entries, not the last load's whole plan


def test_an_edited_cache_does_not_change_what_a_step_runs(pipelines: Path, tmp_path: Path) -> None:
    """Cached statements that are not the file's own are not used (the state dir is trusted like the warehouse: docs/security.md)."""
    import dataclasses

    from lineage_defs.plan.spec import Analysis, Statement
    from lineage_defs.plan.codec import decode, encode

    cache = tmp_path / "cache"
    good = load_project(pipelines, LineageSettings(state_dir=str(cache.parent)))
    planted = "DROP TABLE lake.main.orders"

    def edit(entry: object) -> None:
        a = decode(entry, Analysis)
        statements = tuple(dataclasses.replace(st, sql=planted) for st in a.statements) or (Statement(planted, 1, "drop"),)
        entry[:] = encode(dataclasses.replace(a, statements=statements, reads=()), Analysis)  # type: ignore[index]

    _tamper(cache, edit)
    again = load_project(pipelines, LineageSettings(state_dir=str(cache.parent)))
    assert_same(again, good)
    assert not any(planted in st.sql for s in again.steps for st in getattr(s, "statements", ()))
    orders = next(s for s in again.steps if s.path == "shop/orders.sql")
    assert orders.tests == next(s for s in good.steps if s.path == "shop/orders.sql").tests and orders.tests  # type: ignore[union-attr]


def test_a_run_executes_the_script_file_it_was_planned_from(pipelines: Path, tmp_path: Path) -> None:
    import dataclasses

    from lineage_defs.errors import RunError
    from lineage_defs.plan.spec import Statement
    from lineage_defs.run.script import checked_step

    settings = LineageSettings(state_dir=str(tmp_path / "state"), pipelines_dir=str(pipelines))
    project = load_project(pipelines, settings)
    step = next(s for s in project.steps if s.path == "shop/products.sql")
    forged = dataclasses.replace(step, statements=(Statement("DROP TABLE lake.main.orders", 1, "drop"),))  # type: ignore[type-var]
    assert checked_step(settings, forged).statements == step.statements  # the file's statements, whatever the plan held
    (pipelines / step.path).write_text((pipelines / step.path).read_text() + "\n-- edited after the load\n")
    with pytest.raises(RunError) as e:
        checked_step(settings, step)
    assert "changed after this run's code location was loaded" in e.value.message and e.value.location.path == step.path  # type: ignore[union-attr]


def test_state_files_are_private(pipelines: Path, tmp_path: Path) -> None:
    import stat

    from lineage_defs.plan.schemas import captured_schemas, record_schema

    cache = tmp_path / "cache"
    settings = LineageSettings(state_dir=str(cache.parent))
    load_project(pipelines, settings)
    record_schema(settings, "ducklake://main/orders", [("order_id", "BIGINT")])
    captured_schemas(settings)
    files = [cache / f"{CACHE_VERSION}.json", cache / "schemas-index.json", *settings.schemas_dir.glob("*.json")]
    assert len(files) == 3
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}


def _no_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    import lineage_defs.project

    def planned(*args: object, **kwargs: object) -> None:
        raise AssertionError("the folder was planned again")

    monkeypatch.setattr(lineage_defs.project, "plan_folder", planned)
    monkeypatch.setattr(lineage_defs.project, "load_files", planned)


@pytest.fixture
def trusted_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file's stat stands for its content from the moment it changed: no waiting out the margin (what it guards is tested on its own)."""
    monkeypatch.setattr(snapshot, "TRUST_AFTER_NS", 0)


def test_an_unchanged_folder_loads_the_last_plan_whole(pipelines: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trusted_now: None) -> None:
    settings = LineageSettings(state_dir=str(tmp_path / "state"))
    cold = load_project(pipelines, settings)
    assert settings.cache_dir and (settings.cache_dir / snapshot.FILE_NAME).is_file()
    with monkeypatch.context() as m:
        _no_planning(m)
        warm = load_project(pipelines, settings)
    assert_same(warm, cold)
    assert (warm.hooks, warm.hook_scripts, warm.dbt_projects) == (cold.hooks, cold.hook_scripts, cold.dbt_projects) and warm.hooks
    # anything that changes the plan's inputs is planned again: a new script, a removed one, a library folder
    new = pipelines / "shop" / "extra.sql"
    new.write_text("-- pipeline\n-- materialize ducklake://main/extra\nSELECT 1 AS x\n")
    added = load_project(pipelines, settings)
    assert "ducklake://main/extra" in {s.uri for s in added.steps}
    new.unlink()
    assert_same(load_project(pipelines, settings), cold)
    with monkeypatch.context() as m:
        _no_planning(m)
        with pytest.raises(AssertionError, match="planned again"):
            load_project(pipelines, settings.replace(library_dirs=(str(tmp_path / "lib"),)))


def test_an_edit_that_keeps_size_and_mtime_is_seen(pipelines: Path, tmp_path: Path, calls: dict[str, Counter[str]], trusted_now: None) -> None:
    """What a script's stat keeps of an edit is its ctime: no tool sets it back."""
    settings = LineageSettings(state_dir=str(tmp_path / "state"))
    load_project(pipelines, settings)
    f = pipelines / "shop" / "products.sql"
    before = f.stat()
    f.write_text(f.read_text().replace("ORDER BY product_id", "order by product_id"))
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (f.stat().st_size, f.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    for c in calls.values():
        c.clear()
    after = load_project(pipelines, settings)
    assert calls["parse"] == Counter({"shop/products.sql": 1})
    products = next(s for s in after.steps if s.path == "shop/products.sql")
    assert any("order by product_id" in st.sql for st in products.statements)  # type: ignore[union-attr]


def test_a_folder_changed_a_moment_ago_keeps_no_plan(pipelines: Path, tmp_path: Path) -> None:
    """A change within the clock's granularity of a load leaves the stat as it was: no plan is kept (nor read) until every file is older."""
    settings = LineageSettings(state_dir=str(tmp_path / "state"))
    load_project(pipelines, settings)  # the copied folder's files changed a moment ago
    assert settings.cache_dir and not (settings.cache_dir / snapshot.FILE_NAME).exists()
    load_project(settled(pipelines), settings)
    assert (settings.cache_dir / snapshot.FILE_NAME).is_file()
    (pipelines / "shop" / "products.sql").touch()
    assert snapshot.read(settings.cache_dir, snapshot.key([pipelines / "shop" / "products.sql"], "x")) is None


def test_a_snapshot_is_read_by_another_process(pipelines: Path, tmp_path: Path) -> None:
    """Each process hashes strings its own way: the key is the same in every process (a Dagster run process reads what the code server kept)."""
    state = tmp_path / "state"
    cold = load_project(settled(pipelines), LineageSettings(state_dir=str(state)))
    code = (
        "import sys\nfrom pathlib import Path\nimport lineage_defs.project as lp\nfrom lineage_defs.settings import LineageSettings\n"
        "def planned(*a, **k):\n    raise SystemExit('planned again')\n"
        "lp.plan_folder = lp.load_files = planned\n"
        "print(len(lp.load_project(Path(sys.argv[1]), LineageSettings(state_dir=sys.argv[2])).steps))\n"
    )
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code, str(pipelines), str(state)], capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.returncode == 0, out.stderr
        assert int(out.stdout) == len(cold.steps)


def test_a_snapshot_that_does_not_decode_is_a_miss(pipelines: Path, tmp_path: Path, trusted_now: None) -> None:
    settings = LineageSettings(state_dir=str(tmp_path / "state"))
    cold = load_project(pipelines, settings)
    assert settings.cache_dir
    path = settings.cache_dir / snapshot.FILE_NAME
    header, plan = path.read_text().split("\n", 1)
    data = json.loads(plan)
    data[0][0] = 42  # the first step: a number where a tagged step belongs
    path.write_text(header + "\n" + json.dumps(data))
    assert_same(load_project(pipelines, settings), cold)
    assert json.loads(path.read_text().split("\n", 1)[1])[0][0] != 42  # planned again and kept again


def test_the_plan_of_another_key_is_not_parsed(pipelines: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trusted_now: None) -> None:
    """The first load after an edit reads the kept plan's key line only."""
    settings = LineageSettings(state_dir=str(tmp_path / "state"))
    load_project(pipelines, settings)
    parsed: list[int] = []
    real = snapshot.json.loads
    monkeypatch.setattr(snapshot.json, "loads", lambda b: parsed.append(len(b)) or real(b))
    assert snapshot.read(settings.cache_dir, snapshot.Key("another", trusted=True)) is None
    assert len(parsed) == 1 and parsed[0] < 200  # the header line alone


def test_the_codec_checks_every_field_of_a_record_and_round_trips_each_kind() -> None:
    """Records decode through generated code: exact scalars, optional ones, nested records, NamedTuples, enums."""
    from lineage_defs.plan.codec import CodecError, decode, encode
    from lineage_defs.plan.spec import Analysis, ColumnEdge, EdgeKind, Problem, RawEdge, Statement

    a = Analysis(
        reads=("ducklake://main/a",),
        output_columns=None,
        edges=(RawEdge("ducklake://main/a", "x", None, EdgeKind.SCAN, ("where",)), RawEdge("ducklake://main/a", "x", "y", EdgeKind.COPY)),
        problems=(Problem("bad", 3, 0, None),),
        statements=(Statement("SELECT 1", 2, "query"),),
    )
    back = decode(encode(a, Analysis), Analysis)
    assert back == a and type(back.edges[0]) is RawEdge and back.edges[0].subtypes == ("where",)
    edge = ColumnEdge("a://x/t.c", "a://x/u.c", EdgeKind.MOD, ("agg",))
    assert decode(encode(edge, ColumnEdge), ColumnEdge).subtypes == ("agg",)
    good = encode(a, Analysis)
    for path, value in [
        ((6, 0, 1), "7"),  # Problem.line: a str where an int belongs
        ((6, 0, 1), True),  # a bool is no int
        ((6, 0, 3), 5),  # Problem.fix: str | None
        ((4, 0, 3), "sideways"),  # not an EdgeKind
        ((4, 0), ["too", "short"]),  # a RawEdge of two values
        ((0,), ["ducklake://main/a", 1]),  # tuple[str, ...] with a number in it
        ((0,), "ducklake://main/a"),  # tuple[str, ...]: a string is no list
        ((4,), {"edges": []}),  # a tuple of records: a dict is no list
        ((4, 0, 3), ["copy"]),  # an EdgeKind: a list (unhashable) is no value of it
        ((4, 0, 4), "where"),  # RawEdge.subtypes: a string is no list
    ]:
        bad = json.loads(json.dumps(good))
        *outer, last = path
        target = bad
        for i in outer:
            target = target[i]
        target[last] = value
        with pytest.raises(CodecError):
            decode(bad, Analysis)
