"""Test types across files: the registry of ``test_type`` scripts, and each ``data_test <type>`` use bound to one.

A test type is declared by a script of the pipelines folder or of a shared
folder listed in ``LINEAGE_LIBRARY_DIRS`` (``LineageSettings.library_dirs``).
A use's arguments are bound to the declared parameters here, positionally and
by name, and checked to convert to the declared types: the run converts the
same text the same way (``parse.test_type.convert``) and binds the values as
parameters, never as SQL text.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lineage_defs.errors import AnnotationError, LineageDefsError, Location, did_you_mean
from lineage_defs.parse import language_of, parse_header
from lineage_defs.parse.header import leading_comments
from lineage_defs.parse.model import BoundArg, DataTest, Language, TestKind, TestParam
from lineage_defs.parse.test_type import BUILT_IN, PARTITION_PARAMS, BadArgument, convert
from lineage_defs.plan.discover import script_files
from lineage_defs.plan.files import FileResult



@dataclass(frozen=True)
class TestType:
    """A declared test type: its name, parameters, and the script that runs it."""

    __test__ = False

    name: str
    params: tuple[TestParam, ...]
    path: str  # relative to the pipelines folder, or absolute for a library folder's
    language: Language
    at: Location | None

    def signature(self) -> str:
        return " ".join(f"{p.name}:{p.type}" for p in self.params)


def registry(root: Path, files: Mapping[str, FileResult], library_dirs: Sequence[str], errors: list[LineageDefsError]) -> dict[str, TestType]:
    """Every test type by name: the pipelines folder's, then each library folder's. A name declared twice is an error at the second."""
    found: dict[str, TestType] = {}

    def add(t: TestType, text: str) -> None:
        errors.extend(script_problems(t, text))
        first = found.get(t.name)
        if first is None:
            found[t.name] = t
            return
        where = f"{first.at.path}:{first.at.line}" if first.at else first.path
        errors.append(AnnotationError(
            f"test type '{t.name}' is declared twice (first at {where})",
            t.at,
            "rename one of them (a test type's name is unique across the pipelines folder and LINEAGE_LIBRARY_DIRS), or drop one folder from LINEAGE_LIBRARY_DIRS",
        ))

    for p, fr in sorted(files.items()):
        decl = fr.header.test_type
        if decl is not None:
            add(TestType(decl.name, decl.params, p, fr.header.language, decl.at), (root / p).read_text(encoding="utf-8", errors="replace"))
    for folder in library_dirs:
        root = Path(folder)
        if not root.is_dir():
            errors.append(AnnotationError(f"library folder '{folder}' does not exist", Location(str(folder)), "fix LINEAGE_LIBRARY_DIRS (folders separated by os.pathsep)"))
            continue
        for path in script_files(root):
            text = path.read_text(encoding="utf-8", errors="replace")
            language = language_of(path.name)
            if language not in (Language.DUCKDB, Language.PYTHON) or "test_type" not in text:
                continue
            comments, _ = leading_comments(text, language)
            if not any(c.content.split(None, 1)[:1] == ["test_type"] for c in comments):
                continue  # not a test type (a package's other modules): none of ours
            header, errs = parse_header(path.resolve().as_posix(), text, language)
            errors.extend(errs)
            if header.test_type is not None and not errs:
                add(TestType(header.test_type.name, header.test_type.params, header.path, header.language, header.test_type.at), text)
    return found


def used_parameters(sql: str) -> set[str]:
    """The ``$name`` parameters a DuckDB statement uses (DuckDB refuses values for names it does not use).

    >>> sorted(used_parameters("SELECT 1 WHERE '$no' <> $min AND x < $max"))
    ['max', 'min']
    """
    from sqlglot.dialects.dialect import Dialect

    out: set[str] = set()
    prev: Any = None
    try:
        toks = Dialect.get_or_raise("duckdb").tokenize(sql)
    except Exception:
        return out  # an open quote: the engine reports it when the test runs
    for tok in toks:
        if prev is not None and prev.token_type.name == "PARAMETER" and tok.start == prev.end + 1:
            out.add(tok.text)
        prev = tok
    return out


# What hides a `$name` from the engine: string literals, quoted names, comments, dollar-quoted strings.
_HIDDEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|\$([A-Za-z_]\w*|)\$.*?\$\1\$", re.S)
_DOLLAR = re.compile(r"\$([A-Za-z_]\w*)")


def _dollar_names(text: str) -> list[tuple[str, int]]:
    """Each ``$name`` of a SQL script outside strings and comments, with its offset (no sqlglot: a warm load stays light)."""
    code = _HIDDEN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return [(m.group(1), m.start()) for m in _DOLLAR.finditer(code)] if code.strip() else [("", -1)]


def script_problems(t: TestType, text: str) -> list[LineageDefsError]:
    """What is wrong with a test type's script itself: a SQL one without SQL or using an
    undeclared ``$name``, a Python one without ``check()``."""
    decl = t.at
    if t.language is Language.PYTHON:
        try:
            tree = ast.parse(text)
        except SyntaxError as e:
            return [AnnotationError(f"test type '{t.name}' is not valid Python: {e.msg}", Location(t.path, e.lineno or 1, e.offset or 1), "fix the syntax")]
        if not any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body):
            return [AnnotationError(f"test type '{t.name}' defines no check()", decl, "define def check(con, table, **args) -> int returning the failing count (0: passes)")]
        return []
    names = _dollar_names(text)
    if names == [("", -1)]:
        return [AnnotationError(f"test type '{t.name}' has no SQL", decl, "write a SELECT returning the failing rows of this, e.g. SELECT * FROM this WHERE amount < $min")]
    declared = {p.name for p in t.params} | set(PARTITION_PARAMS)
    out: list[LineageDefsError] = []
    lines = text.splitlines()
    for name, offset in names:
        if name in declared:
            continue
        line = text.count("\n", 0, offset) + 1
        col = offset - (text.rfind("\n", 0, offset) + 1) + 1
        out.append(AnnotationError(
            f"${name} is not a parameter of test type '{t.name}'",
            Location(t.path, line, col, lines[line - 1] if line <= len(lines) else "", len(name) + 1),
            f"declare it on the test_type line ({name}:<type>), or use one of ${', $'.join(p.name for p in t.params) or 'partition'}",
        ))
    return out


def bind(t: DataTest, types: Mapping[str, TestType], errors: list[LineageDefsError]) -> DataTest:
    """A ``data_test <type> <args>`` use bound to its test type (its script and typed arguments); problems go to ``errors``."""
    name = t.type_name or ""
    tt = types.get(name)
    if tt is None:
        guess = did_you_mean(name, (*BUILT_IN, *sorted(types)))
        errors.append(AnnotationError(
            f"unknown data_test '{name}'",
            t.at,
            f"did you mean '{guess}'?" if guess else f"use {', '.join(BUILT_IN)}, a .sql script path, or a test type: declare one with "
            f"'-- test_type {name} <param>:<type>...' in a script of the pipelines folder or of LINEAGE_LIBRARY_DIRS",
        ))
        return t
    usage = f"write data_test {name} {' '.join(f'<{p.name}>' for p in tt.params)}".rstrip()
    values: dict[str, tuple[str, Location | None]] = {}
    ok = True
    positional = [a for a in t.args if a.name is None]
    if len(positional) > len(tt.params):
        extra = positional[len(tt.params)]
        errors.append(AnnotationError(f"'{name}' takes {_count(len(tt.params))} ({tt.signature() or 'none'}), got {len(positional)}", extra.at or t.at, usage))
        return t
    for p, a in zip(tt.params, positional):
        values[p.name] = (a.text, a.at)
    params = {p.name: p for p in tt.params}
    for a in t.args:
        if a.name is None:
            continue
        if a.name not in params:
            guess = did_you_mean(a.name, params)
            errors.append(AnnotationError(f"'{name}' has no parameter '{a.name}'", a.at or t.at, f"did you mean '{guess}='?" if guess else usage))
            ok = False
        elif a.name in values:
            errors.append(AnnotationError(f"parameter '{a.name}' of '{name}' given twice", a.at or t.at, "give it once: by position or by name"))
            ok = False
        else:
            values[a.name] = (a.text, a.at)
    missing = [p.name for p in tt.params if p.name not in values]
    if ok and missing:
        errors.append(AnnotationError(
            f"'{name}' takes {_count(len(tt.params))} ({tt.signature()}), got {len(values)}: {', '.join(missing)} missing", t.at, usage,
        ))
        ok = False
    for p in tt.params:
        if p.name not in values:
            continue
        text, at = values[p.name]
        try:
            convert(p.type, text)
        except BadArgument as e:
            errors.append(AnnotationError(f"{e} (parameter {p.name}:{p.type} of '{name}')", at or t.at, e.fix))
            ok = False
    if not ok:
        return t
    return dataclasses.replace(t, script=tt.path, bound=tuple(BoundArg(p.name, p.type, values[p.name][0]) for p in tt.params))


def _count(n: int) -> str:
    return f"{n} argument{'s' if n != 1 else ''}"


def bind_all(tests: Sequence[DataTest], types: Mapping[str, TestType], errors: list[LineageDefsError]) -> tuple[DataTest, ...]:
    """A step's tests, each use of a test type bound (the built-in ones as they are)."""
    return tuple(bind(t, types, errors) if t.kind is TestKind.TYPE else t for t in tests)
