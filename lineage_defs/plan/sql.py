"""A SQL body → its statements, the assets it reads and writes, and the column lineage of its trailing query.

Pure: no Dagster, no database. The body is tokenized and parsed once; nothing
raises — syntax errors and lineage ambiguities come back as ``problems``.

>>> a = analyze_sql("SELECT id, amount * 2 AS doubled FROM lake.orders WHERE paid", "duckdb")
>>> a.reads, a.output_columns
(('ducklake://main/orders',), ('id', 'doubled'))
>>> [(e.source_column, e.target_column, e.kind) for e in a.edges]
[('amount', 'doubled', 'mod'), ('id', 'id', 'copy'), ('paid', None, 'scan')]
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.parser import Parser
from sqlglot import Token, TokenType

from lineage_defs import uris
from lineage_defs.plan.column_lineage import COPY, MOD, SCAN, VIRTUAL, Catalog, Feed, QueryLineage, Virtual
from lineage_defs.plan.spec import EVENTS_TABLE, Analysis, EdgeKind, Problem, RawEdge, Statement


# What the analysis returns is the plan's own plain data (cached without sqlglot objects).
SqlAnalysis = Analysis
SqlProblem = Problem
SQLGLOT_META = "sqlglot.meta"  # a comment holding it sets node meta (`case_sensitive` exempts names from normalization)


def analyze_sql(
    text: str,
    dialect: str,
    *,
    body_line: int = 1,
    pg_connection: str = "default",
    schemas: Mapping[str, Sequence[str]] | None = None,
    dbt_catalogs: Sequence[str] = (),
) -> SqlAnalysis:
    """Analyze the body of a ``.sql`` script; ``dialect`` is "duckdb" or "postgres".

    ``body_line`` is the file line where ``text`` starts. ``schemas`` maps upstream
    asset URIs to their column names, for ``*`` and unqualified columns in joins.
    ``dbt_catalogs`` are the databases of dbt projects with their own profile:
    ``shop.main.customers`` then reads ``dbt://shop/main/customers``.
    """
    problems: list[SqlProblem] = []
    statements: list[Statement] = []
    trees: list[exp.Expr | None] = []
    try:
        _parse(text, dialect, body_line, statements, trees, problems)
    except Exception as exc:  # sqlglot must never take the code location down
        problems.append(SqlProblem(f"could not parse the SQL: {exc}", body_line, 0, None))
    body = _Body(dialect, pg_connection, {k: list(v) for k, v in (schemas or {}).items()}, SQLGLOT_META in text)
    body.catalogs.update({c.lower(): ("dbt", c) for c in dbt_catalogs if c.lower() not in body.catalogs})
    for statement, tree in zip(statements, trees):
        try:
            body.statement(tree) if tree is not None else None
        except Exception as exc:
            problems.append(SqlProblem(f"could not resolve the tables of this statement: {exc}", statement.line, 0, None))
    trailing = bool(statements) and statements[-1].kind == "query"
    columns: tuple[str, ...] | None = None
    edges: set[tuple[str, str, str | None, str]] = set()
    needs: set[str] = set()
    if trailing and trees[-1] is not None:
        try:
            columns = body.trace(trees[-1], edges, needs)
        except Exception as exc:
            problems.append(SqlProblem(f"could not trace column lineage: {exc}", statements[-1].line, 0, None))
            edges.clear()
        for message, line, col, fix in dict.fromkeys(p for ql in body.traced for p in ql.problems):
            problems.append(SqlProblem(message, line + body_line - 1 if line else statements[-1].line, col, fix))
    return SqlAnalysis(
        statements=tuple(statements),
        reads=tuple(sorted(body.reads)),
        writes=tuple(sorted(body.writes)),
        trailing_select=trailing,
        output_columns=columns,
        edges=_edges(edges, body.clauses),
        needs_schemas=tuple(sorted(needs)),
        problems=tuple(problems),
    )


def split_statements(text: str, dialect: str, body_line: int = 1) -> tuple[Statement, ...]:
    """The statements of a body with their file lines and kinds, without the read/write/lineage analysis.

    What the run layer needs of a macro library or a custom data test.
    """
    statements: list[Statement] = []
    problems: list[Problem] = []
    try:
        _parse(text, dialect, body_line, statements, [], problems)
    except Exception as exc:
        problems.append(Problem(str(exc), body_line, 0, None))
    if problems and not statements:  # not even split (an open quote): the engine reports it
        return (Statement(text, body_line, "invalid"),)
    return tuple(statements)


def _edges(raw: set[tuple[str, str, str | None, str]], clauses: Mapping[tuple[str, str], set[str]]) -> tuple[RawEdge, ...]:
    # A column copied in one UNION branch and modified in another is modified.
    mods = {e[:3] for e in raw if e[3] == MOD}
    kept = [e for e in raw if not (e[3] == COPY and e[:3] in mods) and not e[0].startswith(VIRTUAL)]
    return tuple(
        RawEdge(e[0], e[1], e[2], EdgeKind(e[3]), tuple(sorted(clauses.get((e[0], e[1]), ()))) if e[2] is None else ())
        for e in sorted(kept, key=lambda e: (e[0], e[1], e[2] is None, e[2] or "", e[3]))
    )


# -- 1. statements -----------------------------------------------------------------------

_CLASS_IN_MESSAGE = re.compile(r"<class '[\w.]+\.(\w+)'>")
_TOKEN_IN_MESSAGE = re.compile(r"<Token token_type: [\w.]+, text: (.*?), line: \d+, col: \d+, start: \d+, end: \d+, comments: \[.*?\]>")
_KINDS: dict[type, str] = {
    exp.Insert: "insert", exp.Merge: "merge", exp.Delete: "delete", exp.Update: "update", exp.Copy: "copy",
    exp.Attach: "attach", exp.Detach: "detach", exp.Set: "set", exp.Drop: "drop", exp.Use: "use",
}  # fmt: skip


def _parse(text: str, dialect: str, body_line: int, statements: list[Statement], trees: list[exp.Expr | None], problems: list[SqlProblem]) -> None:
    """Split on semicolon tokens (strings and comments are respected) and parse each statement."""
    engine = Dialect.get_or_raise(dialect)
    try:
        tokens = engine.tokenize(text)
    except TokenError as exc:
        start = getattr(exc, "start", 0) or 0
        line = body_line + text.count("\n", 0, min(start + 50, len(text)) if start else 0)
        problems.append(SqlProblem("SQL syntax error: unterminated string, quoted name or comment", line, 0, "close every string, quoted name and block comment"))
        return
    chunks: list[list[Token]] = [[]]
    semicolon = TokenType.SEMICOLON
    for token in tokens:
        if token.token_type == semicolon:
            chunks.append([])
        else:
            chunks[-1].append(token)
    parser = engine.parser()
    line, pos = body_line, 0
    for chunk in filter(None, chunks):
        start, end = chunk[0].start, chunk[-1].end
        line, pos = line + text.count("\n", pos, start), start
        tree: exp.Expr | None = None
        try:
            tree = parser.parse(chunk, text)[0]
            if isinstance(tree, exp.Command):
                tree = _without_on_commit(parser, chunk, text) or tree
        except ParseError as exc:
            problems.append(_parse_problem(exc, body_line, line))
        except Exception as exc:
            problems.append(SqlProblem(f"SQL syntax error: {exc}", line, 0, None))
        statements.append(Statement(text[start : end + 1], line, _kind(tree)))
        trees.append(tree)


def _without_on_commit(parser: Parser, chunk: list[Token], text: str) -> exp.Expr | None:
    """sqlglot falls back to a raw Command on PostgreSQL's `ON COMMIT DROP`, which changes no lineage."""
    words = [t.text.upper() for t in chunk]
    for i in range(len(words) - 2):
        if words[i : i + 3] == ["ON", "COMMIT", "DROP"]:
            tree = parser.parse(chunk[:i] + chunk[i + 3 :], text)[0]
            return None if isinstance(tree, exp.Command) else tree
    return None


def _parse_problem(exc: ParseError, body_line: int, line: int) -> SqlProblem:
    err = exc.errors[0] if exc.errors else {}
    message = _TOKEN_IN_MESSAGE.sub(lambda m: f"'{m.group(1)}'", str(err.get("description") or exc))
    message = _CLASS_IN_MESSAGE.sub(lambda m: m.group(1), message)
    highlight, col = str(err.get("highlight") or ""), int(err.get("col") or 0)
    if col and highlight and "\n" not in highlight:
        col = max(col - len(highlight) + 1, 1)  # sqlglot reports where the token ends
    where = int(err["line"]) + body_line - 1 if err.get("line") else line
    return SqlProblem(f"SQL syntax error: {message}", where, col, f"check the SQL near '{highlight}'" if highlight else None)


def _kind(tree: exp.Expr | None) -> str:
    if tree is None:
        return "invalid"
    if isinstance(tree, (exp.Query, exp.Values)):
        return "create" if isinstance(tree, exp.Select) and tree.args.get("into") else "query"
    if isinstance(tree, exp.Create):
        kind = str(tree.args.get("kind") or "").upper()
        if kind in ("TABLE", "VIEW"):
            return "create_temp" if _is_temp(tree) else "create"
        return "macro" if kind in ("MACRO", "FUNCTION") else "other"
    return _KINDS.get(type(tree), "other")


def _is_temp(create: exp.Create) -> bool:
    props = create.args.get("properties")
    if props is not None and any(isinstance(p, exp.TemporaryProperty) for p in props.expressions):
        return True
    table = _target(create.this)
    db = table.text("db").lower() if table is not None else ""
    return db == "temp" or db.startswith("pg_temp")


def _target(node: exp.Expr | None) -> exp.Table | None:
    node = node.this if isinstance(node, exp.Schema) else node
    return node if isinstance(node, exp.Table) else None


# -- 2. names → assets ---------------------------------------------------------------------

_READERS = {
    "read_parquet", "parquet_scan", "read_csv", "read_csv_auto", "read_json", "read_json_auto",
    "read_ndjson", "read_ndjson_auto", "read_json_objects", "read_text", "read_blob", "delta_scan", "iceberg_scan",
}  # fmt: skip
_PATH = re.compile(r"(://|/|\.(parquet|csv|tsv|json|jsonl|ndjson|txt|gz|zst)$)", re.IGNORECASE)
_NOT_ASSETS = {"information_schema", "pg_catalog", "system", "memory"}


def _substrate(text: str) -> tuple[str, str] | None:
    """An ATTACH string naming an asset substrate — ('ducklake', 'main'), ('datatable', 'crm') — or None."""
    text = text.strip()
    if text in uris.DEFAULT_AUTHORITY:
        return text, uris.DEFAULT_AUTHORITY[text]
    kind, sep, rest = text.partition("://")
    if not sep or not uris.is_table(text):
        return None
    authority = rest.rstrip("/") or uris.DEFAULT_AUTHORITY.get(kind, "")
    return (kind, authority) if authority and "/" not in authority else None


def _uri(kind: str, authority: str, schema: str | None, name: str) -> str | None:
    if kind == uris.Kind.DBT:  # a dbt project's own database: its relations are its nodes' assets
        return uris.normalize(f"dbt://{authority}/{schema or 'main'}/{name}")
    if kind == uris.Kind.DATATABLE:
        path = name if schema in (None, "public") else f"{schema}/{name}"
    else:
        path = name if schema in (None, "main") else f"{schema}.{name}"
    try:
        return uris.normalize(f"{kind}://{authority}/{path}")
    except uris.UriError:
        return None


def _s3(text: str) -> str | None:
    try:
        return uris.normalize(text) if text.startswith("s3://") else None  # a local path is no asset
    except uris.UriError:
        return None


def _reader_uris(func: exp.Func) -> list[str]:
    """The s3 objects a file-reading table function reads."""
    name = func.name if isinstance(func, exp.Anonymous) else func.sql_name()
    if name.lower() not in _READERS:
        return []
    args = [a for a in [func.args.get("this"), *func.expressions] if isinstance(a, exp.Expr)]
    first = next((a for a in args if not isinstance(a, (exp.EQ, exp.PropertyEQ, exp.Kwarg))), None)
    literals = first.expressions if isinstance(first, exp.Array) else [first]
    return [u for u in (_s3(e.name) for e in literals if isinstance(e, exp.Literal) and e.is_string) if u]


class _Body:
    """The statements in order: attached catalogs, temp tables, reads, writes, relations to trace through."""

    def __init__(self, dialect: str, pg_connection: str, schemas: dict[str, list[str]], meta_comments: bool = True) -> None:
        self.dialect, self.pg_connection = dialect, pg_connection
        self.catalogs: dict[str, tuple[str, str] | None] = {a: (s.partition("://")[0], s.partition("://")[2]) for a, s in uris.DEFAULT_CATALOGS.items()}
        self.default: tuple[str, str | None] = ("warehouse", None)  # USE changes it
        # `_events` is the runtime's TEMP table of a triggered run's batch, never an asset
        self.temps: set[str] = {EVENTS_TABLE}  # a triggered run's batch, in DuckDB and PostgreSQL steps alike
        self.reads: set[str] = set()
        self.writes: set[str] = set()
        self.created: dict[str, str] = {}  # URI or "temp:<name>" -> virtual key
        self.catalog = Catalog(dialect, schemas, meta_comments)
        self.traced: list[QueryLineage] = []
        self.clauses: dict[tuple[str, str], set[str]] = {}  # a scanned (URI, column) → the clauses reading it

    def fold(self, ident: exp.Expr | None) -> str | None:
        if ident is None or not ident.name:
            return None
        quoted = self.dialect == "postgres" and isinstance(ident, exp.Identifier) and ident.quoted
        return ident.name if quoted else ident.name.lower()

    def resolve(self, table: exp.Table) -> str | None:
        """The asset URI, "temp:<name>", or None (not an asset) for a relation name."""
        this = table.this
        if isinstance(this, exp.Identifier) and this.quoted and _PATH.search(this.name):
            return _s3(this.name)  # DuckDB replacement scan: FROM 's3://…/x.parquet'
        catalog, db, name = (self.fold(table.args.get(k)) for k in ("catalog", "db", "this"))
        if not isinstance(this, exp.Identifier) or name is None:
            return None
        if db is None and catalog is None and name in self.temps:
            return f"temp:{name}"
        if self.dialect == "postgres":
            if db is not None and (db.startswith("pg_temp") or db in _NOT_ASSETS):
                return f"temp:{name}" if db.startswith("pg_temp") else None
            return _uri("datatable", self.pg_connection, db, name)
        if "temp" in (catalog, db):
            return f"temp:{name}"
        if catalog is None and db is None:
            catalog, db = self.default
        elif catalog is None and (db in self.catalogs or db in _NOT_ASSETS):
            catalog, db = db, None  # `lake.t`: a catalog, not a schema
        elif catalog is None:
            catalog = self.default[0]
        substrate = self.catalogs.get(catalog or "")
        return _uri(*substrate, db, name) if substrate else None

    def _is_cte(self, table: exp.Table) -> bool:
        if table.args.get("db") or not isinstance(table.this, exp.Identifier):
            return False
        name, node = self.fold(table.this), table.parent
        while node is not None:
            with_ = node.args.get("with_")
            if with_ is not None and any(self.fold(c.args["alias"].this) == name for c in with_.expressions if c.args.get("alias")):
                return True
            node = node.parent
        return False

    def statement(self, tree: exp.Expr) -> None:
        if isinstance(tree, exp.Attach):
            if isinstance(tree.this, exp.Alias) and isinstance(tree.this.this, exp.Literal):
                self.catalogs[tree.this.alias.lower()] = _substrate(tree.this.this.name)
        elif isinstance(tree, exp.Detach):
            self.catalogs.pop(self.fold(tree.this) or "", None)
        elif isinstance(tree, exp.Use) and isinstance(tree.this, exp.Table):
            db, name = self.fold(tree.this.args.get("db")), self.fold(tree.this.this)
            if name is not None:  # USE catalog | USE catalog.schema | USE schema
                self.default = (db, name) if db else (name, None) if name in self.catalogs else (self.default[0], name)
        elif isinstance(tree, exp.Drop) and str(tree.args.get("kind") or "").upper() in ("TABLE", "VIEW"):
            ref = self.resolve(tree.this) if isinstance(tree.this, exp.Table) else None
            self.created.pop(ref or "", None)
            self.temps.discard(ref[5:] if ref and ref.startswith("temp:") else "")
        elif isinstance(tree, exp.Create) and str(tree.args.get("kind") or "").upper() in ("TABLE", "VIEW"):
            self._create(tree)
        elif isinstance(tree, (exp.Insert, exp.Merge, exp.Delete, exp.Update)):
            self._dml(tree)
        elif isinstance(tree, exp.Copy):
            objects = [u for u in (_s3(f.name) for f in tree.args.get("files") or [] if isinstance(f, exp.Literal)) if u]
            if tree.args.get("kind"):  # COPY t FROM 's3://…'
                self.reads.update(o for o in objects if o not in self.writes)
                self._write(self.resolve(tree.this) if isinstance(tree.this, exp.Table) else None)
            else:  # COPY t | (query) TO 's3://…'
                self._bind(tree)
                self.writes.update(objects)
        elif isinstance(tree, exp.Select) and tree.args.get("into") is not None:  # SELECT … INTO t
            target = _target(tree.args["into"].this)
            self._bind(tree, skip=target)
            self._write(self.resolve(target) if target is not None else None)
        elif isinstance(tree, (exp.Query, exp.Values)):
            self._bind(tree)

    def _create(self, tree: exp.Create) -> None:
        table = _target(tree.this)
        if table is None:
            return
        self._bind(tree, skip=table)  # before registering: CREATE OR REPLACE t AS SELECT … FROM t reads the old t
        if _is_temp(tree):
            name = self.fold(table.this) or ""
            self.temps.add(name)
            ref: str | None = f"temp:{name}"
        else:
            ref = self.resolve(table)
            self._write(ref)
        if ref is None:
            return
        declared = [c.name for c in tree.this.expressions if isinstance(c, exp.ColumnDef)] if isinstance(tree.this, exp.Schema) else []
        virtual = self._virtual(Virtual("", declared or None))
        if isinstance(tree.expression, (exp.Query, exp.Values)):
            virtual.feeds.append(Feed(tree.expression))
        self.created[ref] = virtual.key

    def _dml(self, tree: exp.Expr) -> None:
        table = _target(tree.this)
        ref = self.resolve(table) if table is not None else None
        self._bind(tree, skip=table, target=ref)
        self._write(ref)
        query, vkey = tree.expression, self.created.get(ref or "")
        if isinstance(tree, exp.Insert) and vkey and isinstance(query, (exp.Query, exp.Values)):
            with_ = tree.args.get("with_")
            if with_ is not None and isinstance(query, exp.Query) and query.args.get("with_") is None:
                query.set("with_", with_.pop())  # WITH … INSERT: the CTEs belong to the query
            targets = [i.name for i in tree.this.expressions] if isinstance(tree.this, exp.Schema) else None
            self.catalog.virtuals[vkey].feeds.append(Feed(query, targets, bool(tree.args.get("by_name"))))

    def _write(self, ref: str | None) -> None:
        if ref and not ref.startswith("temp:"):
            self.writes.add(ref)

    def _virtual(self, virtual: Virtual) -> Virtual:
        virtual.key = f"{VIRTUAL}{len(self.catalog.virtuals) + 1}"
        self.catalog.virtuals[virtual.key] = virtual
        return virtual

    def _bind(self, tree: exp.Expr, skip: exp.Table | None = None, target: str | None = None) -> None:
        """Record a statement's reads and bind each relation to its lineage key."""
        for table in tree.find_all(exp.Table):
            if table is skip or self._is_cte(table):
                continue
            key: str | None = None
            if isinstance(table.this, exp.Func):
                objects = _reader_uris(table.this)
                self.reads.update(o for o in objects if o not in self.writes)
                key = self._virtual(Virtual("", union=objects)).key if len(objects) > 1 else next(iter(objects), None)
            else:
                ref = self.resolve(table)
                key = self.created.get(ref or "")
                if ref and key is None and not ref.startswith("temp:"):
                    key = ref
                    if ref not in self.writes and ref != target:
                        self.reads.add(ref)
            table.meta["lin_key"] = key

    def trace(self, tree: exp.Expr, edges: set[tuple[str, str, str | None, str]], needs: set[str]) -> tuple[str, ...] | None:
        """Column lineage of the trailing query, through the relations earlier statements created."""
        if isinstance(tree, exp.Values):  # DuckDB names VALUES columns col0, col1, …
            first = tree.expressions[0] if tree.expressions else None
            return tuple(f"col{i}" for i in range(len(first.expressions) if isinstance(first, exp.Tuple) else 1))
        ql = self.catalog.lineage(tree)
        names, complete, missing = ql.columns()
        for name, srcs in ql.named_sources():
            edges.update((k, c, name, kind) for k, c, kind in self.catalog.expand(srcs))
        scans = self.catalog.query_scans(ql)
        edges.update((k, c, None, SCAN) for k, c, _ in scans)
        for k, c, clause in scans:
            if clause:
                self.clauses.setdefault((k, c), set()).add(clause)
        self.traced = [ql, *self.catalog.feeds()]
        needs.update(missing if not complete else ())
        needs.update(k for q in self.traced for k in q.needs)
        needs.difference_update([k for k in needs if k.startswith(VIRTUAL)])
        return tuple(names) if complete else None
