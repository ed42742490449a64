"""One script → its header, errors and body analysis, both cached by content hash.

The header (what the step is: its target, tests, partitions, triggers) and
its errors are cached under the file's content hash (path and text) and the
parser's own fingerprint (``parser_fingerprint``: a hash of the parser's
source files), so an edited script or an edited parser parses again. The body analysis (reads, writes, column lineage, the
statement split) is sqlglot's for SQL and URI constants for Python and Bash;
a warm load takes it from the cache when its statements are still the
file's own, else analyses again. A run never executes SQL from the cache
either: it splits the script file it was planned from (``run.script``).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lineage_defs import uris
from lineage_defs.errors import AnnotationError, Location
from lineage_defs.parse import Header, language_of, parse_header
from lineage_defs.parse.header import body_from, split_body
from lineage_defs.parse.model import Language
from lineage_defs.plan.cache import PlanCache, content_hash
from lineage_defs.plan.refs import bash_uris, python_uris
from lineage_defs.plan.spec import Analysis


@dataclass(frozen=True)
class FileResult:
    header: Header
    errors: tuple[AnnotationError, ...]
    analysis: Analysis | None
    text_lines: tuple[str, ...]  # the header's lines, for error carets in cross-file checks
    key: str = ""  # content hash

    def loc(self, line: int, needle: str = "") -> Location:
        """``line`` of this file, the caret under ``needle`` when the line holds it."""
        text = self.text_lines[line - 1] if 0 < line <= len(self.text_lines) else ""
        col = text.find(needle) + 1 if needle and needle in text else 1
        return Location(self.header.path, line, col, text, len(needle) if needle and needle in text else 1)


# What a header's parse depends on besides the file: the grammar, the trigger sources' rows
# (``on <keyword>`` lines), URI normalisation and the error types.
_PARSER_SOURCES = ("parse/*.py", "triggers/source.py", "triggers/sources.py", "triggers/*/source.py", "uris.py", "errors.py")


@dataclass(frozen=True)
class ParsedHeader:
    """What ``parse_header`` gives for one file, as the plan cache holds it."""

    header: Header
    errors: tuple[AnnotationError, ...]


@functools.cache
def parser_fingerprint() -> str:
    """A hash of the parser's source files: a cached header is used only by the parser that wrote it."""
    package = Path(uris.__file__).parent
    h = hashlib.sha256()
    for pattern in _PARSER_SOURCES:
        for f in sorted(package.glob(pattern)):
            h.update(f.relative_to(package).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:32]


def analyze(header: Header, body: str, pg_connection: str, schemas: Mapping[str, Sequence[str]] | None = None, dbt_catalogs: Sequence[str] = ()) -> Analysis:
    if header.language.is_sql:
        from lineage_defs.plan.sql import analyze_sql  # sqlglot: a warm load takes the analysis from the cache

        catalogs = dbt_catalogs if header.language is Language.DUCKDB else ()
        return analyze_sql(body, header.language, body_line=header.body_line, pg_connection=pg_connection, schemas=schemas, dbt_catalogs=catalogs)
    if header.language is Language.PYTHON:
        reads, templates = python_uris(body)
        return Analysis(reads=reads, read_templates=templates)
    return Analysis(reads=bash_uris(body))


def pg_connection(header: Header) -> str:
    """The PostgreSQL connection a .pg.sql body's unqualified tables live in."""
    m = header.materialize
    if m and uris.kind_of(m.uri) is uris.Kind.DATATABLE:
        return uris.parse(m.uri).authority
    return "default"


def statements_match(analysis: Analysis, body: str) -> bool:
    """Whether every statement of a cached analysis is the body's own text, in order (else: analyse again)."""
    pos = 0
    for st in analysis.statements:
        at = body.find(st.sql, pos)
        if at < 0 or not st.sql.strip():
            return False
        pos = at + len(st.sql)
    return True


@dataclass(frozen=True)
class Pending:
    """A file whose header or body analysis is not in the cache: what ``compute`` needs (sent to a worker as is)."""

    rel: str
    text: str
    key: str  # content hash
    language: Language
    parsed: ParsedHeader | None  # the cached header, when only the analysis is missing
    cached: Analysis | None = None  # without a cached header: the cached analysis, used if the body still fits it


def lookup(root: Path, path: Path, cache: PlanCache, dbt_catalogs: Sequence[str] = ()) -> FileResult | Pending:
    """The file from the cache (header and analysis both there and fitting), else what is left to compute."""
    rel = path.relative_to(root).as_posix()
    text = path.read_text(encoding="utf-8", errors="replace")
    key = content_hash(rel, text)
    language = language_of(path.name) or Language.DUCKDB
    hit = cache.get(_header_key(key, language), ParsedHeader)
    if hit is None or hit.header.path != rel or hit.header.language is not language:  # (a changed parser: the body's analysis may still be there)
        return Pending(rel, text, key, language, None, cache.get(_analysis_key(key, dbt_catalogs), Analysis))
    analysis = None
    if hit.header.is_step:
        analysis = cache.get(_analysis_key(key, dbt_catalogs), Analysis)
        if analysis is None or not statements_match(analysis, body_from(text, hit.header.body_line)):
            return Pending(rel, text, key, language, hit)
    return _result(hit, analysis, text, key)


def compute(job: Pending, dbt_catalogs: Sequence[str] = ()) -> tuple[ParsedHeader, Analysis | None]:
    """Parse the header (unless cached) and analyse the body of a step. Pure: no cache, no file access."""
    parsed = job.parsed
    if parsed is None:
        header, errs = parse_header(job.rel, job.text, job.language)
        parsed = ParsedHeader(header, tuple(errs))
    header = parsed.header
    if not header.is_step:
        return parsed, None
    body = body_from(job.text, header.body_line)
    if job.cached is not None and statements_match(job.cached, body):
        return parsed, job.cached
    return parsed, analyze(header, body, pg_connection(header), dbt_catalogs=dbt_catalogs)


def finish(job: Pending, parsed: ParsedHeader, analysis: Analysis | None, cache: PlanCache, dbt_catalogs: Sequence[str] = ()) -> FileResult:
    """Store what ``compute`` gave in the cache; the file's result."""
    if job.parsed is None:
        cache.put(_header_key(job.key, job.language), parsed)
    if analysis is not None and analysis != job.cached:
        cache.put(_analysis_key(job.key, dbt_catalogs), analysis)
    return _result(parsed, analysis, job.text, job.key)


def load_file(root: Path, path: Path, cache: PlanCache, dbt_catalogs: Sequence[str] = ()) -> FileResult:
    """Parse one script under ``root``; its body analysis (``dbt_catalogs`` as ``analyze_sql`` takes them)
    from the cache when it is there and fits. The result's key hashes the file itself (path and text)."""
    found = lookup(root, path, cache, dbt_catalogs)
    if isinstance(found, FileResult):
        return found
    return finish(found, *compute(found, dbt_catalogs), cache, dbt_catalogs)


def _header_key(key: str, language: Language) -> str:
    return content_hash("header", key, language.value, parser_fingerprint())


def _analysis_key(key: str, dbt_catalogs: Sequence[str]) -> str:
    return content_hash(key, *dbt_catalogs) if dbt_catalogs else key


def _result(parsed: ParsedHeader, analysis: Analysis | None, text: str, key: str) -> FileResult:
    return FileResult(parsed.header, parsed.errors, analysis, tuple(text.splitlines()[: parsed.header.body_line]), key)


def with_schemas(root: Path, fr: FileResult, known: Mapping[str, Sequence[str]], cache: PlanCache, dbt_catalogs: Sequence[str] = ()) -> FileResult:
    """The file analysed again knowing upstream columns (for `*` and ambiguous names), cached."""
    key = content_hash("schemas", fr.key, *dbt_catalogs, repr(sorted((k, tuple(v)) for k, v in known.items())))
    text = (root / fr.header.path).read_text(encoding="utf-8", errors="replace")
    body = split_body(text, fr.header.language)[0]
    hit = cache.get(key, Analysis)
    if hit is None or not statements_match(hit, body):
        hit = analyze(fr.header, body, pg_connection(fr.header), known, dbt_catalogs)
        cache.put(key, hit)
    return FileResult(fr.header, fr.errors, hit, fr.text_lines, fr.key)
