"""Column lineage of one query, walked over sqlglot's scope tree.

Every ``exp.Table`` of the query carries ``meta["lin_key"]``: the asset URI it
reads, a virtual key (a relation an earlier statement of the script created,
see ``Catalog``) or None (not an asset: a local file, ``range(10)``…). Sources
come out as ``(key, column, kind)``, kind ``copy`` (the value passes through
unchanged) or ``mod``; scans (columns that decide which rows exist) as
``(key, column, clause)``, the clause one of ``CLAUSES``' values (OpenLineage's
INDIRECT subtypes) or "" where no clause names it (an UNNEST).

Why not ``qualify`` + ``lineage()``: ``qualify`` raises on a DuckDB alias
reference (``SELECT a AS b … WHERE b > 0``) when an upstream schema is
unknown, rewrites a ``USING`` column to ``COALESCE`` (a copy would read as a
modification) and leaves ambiguous columns silently unqualified; ``lineage()``
re-qualifies the query once per column. The scope tree and the small resolver
below do it all in one pass, memoized per scope.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.optimizer.scope import Scope, build_scope

from lineage_defs.plan.spec import EdgeKind

COPY, MOD, SCAN = EdgeKind.COPY, EdgeKind.MOD, EdgeKind.SCAN
VIRTUAL = "\x00"  # prefix of virtual keys: never a URI
Src = tuple[str, str, str]  # (key, column, copy|mod)
Scan = tuple[str, str, str]  # (key, column, clause)
# The clause a scanned column is read in → its name in OpenLineage's INDIRECT subtypes
# (DISTINCT ON keys and an ORDER BY under a LIMIT both decide by sorting).
CLAUSES = {"where": "FILTER", "having": "FILTER", "qualify": "FILTER", "join": "JOIN", "group": "GROUP_BY", "order": "SORT"}
Problem = tuple[str, int, int, "str | None"]  # message, line, col (in the parsed text; 0 = unknown), fix
Cols = tuple[list[str], bool, frozenset[str]]  # names, complete?, URIs whose schemas would complete them
ColumnsOf = Callable[[str], Cols]
_UNKNOWN: Cols = ([], False, frozenset())


def _mod(srcs: Iterable[Src]) -> set[Src]:
    return {(k, c, MOD) for k, c, _ in srcs}


def _kind(a: str, b: str) -> str:
    return COPY if a == COPY and b == COPY else MOD


@dataclass
class _Item:
    """One output column of a SELECT: an expression, a star-expanded column, or a star of unknown width."""

    name: str | None
    expr: exp.Expr | None = None
    star: tuple[str, str | None] | None = None  # (source alias, column; None = columns unknown)
    bare: bool = False  # unaliased column reference: DuckDB names it after the column it binds to


class _Memo:
    dialect: str

    def __init__(self) -> None:
        self._memo: dict[object, object] = {}
        self._busy: set[object] = set()

    def fold(self, name: str) -> str:
        """Compare names as the engine does: DuckDB ignores case; PostgreSQL's are normalized already."""
        return name.lower() if self.dialect == "duckdb" else name

    def _cached(self, key: object, compute: Callable[[], object], empty: object) -> object:
        """Memoize; a cycle (recursive CTE, self-referring alias) sees `empty`."""
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:
            return empty
        self._busy.add(key)
        try:
            value = self._memo[key] = compute()
        finally:
            self._busy.discard(key)
        return value


def _keep_output_names(selects: Iterable[exp.Select]) -> None:
    """Record each projection's output name as written (``meta["lin_name"]``), before normalization lowercases it."""
    for select in selects:
        for proj in select.expressions:
            proj.meta["lin_name"] = proj.output_name


class QueryLineage(_Memo):
    """Output columns, per-column sources and scans of one query; everything resolves lazily.

    ``columns_of(key)`` gives an upstream's columns. The query is normalized in place.
    """

    def __init__(self, query: exp.Expr, dialect: str, columns_of: ColumnsOf, meta_comments: bool = True) -> None:
        super().__init__()
        self.query, self.dialect, self.columns_of = query, dialect, columns_of
        self.problems: list[Problem] = []
        self.needs: set[str] = set()
        names = dialect == "duckdb"  # DuckDB returns output names as written; normalization lowercases them
        if meta_comments:  # `/* sqlglot.meta case_sensitive */` exempts a subtree: sqlglot's own walk honours it
            if names:
                _keep_output_names(query.find_all(exp.Select))
            normalize_identifiers(query, dialect=dialect)
        else:  # the same in one walk, identifier by identifier, without the per-node check
            normalize = Dialect.get_or_raise(dialect).normalize_identifier
            for node in query.walk():  # a parent before its children: a SELECT's names are read before they are normalized
                if isinstance(node, exp.Identifier):
                    normalize(node)
                elif names and isinstance(node, exp.Select):
                    _keep_output_names((node,))
        self.root = build_scope(query)

    def columns(self) -> Cols:
        return self._scope_columns(self.root) if self.root is not None else _UNKNOWN

    def named_sources(self) -> list[tuple[str, set[Src]]]:
        """(name, sources) of each output column; of the named ones when a star leaves the list open."""
        if self.root is None:
            return []
        names, complete, _ = self._scope_columns(self.root)
        if complete:
            return [(n, self._sources_at(self.root, i)) for i, n in enumerate(names)]
        return [(n, self._lookup(self.root, self.fold(n)) or set()) for n in names]

    def sources_at(self, index: int) -> set[Src]:
        return self._sources_at(self.root, index) if self.root else set()

    def sources_named(self, name: str) -> set[Src]:
        return (self._lookup(self.root, self.fold(name)) or set()) if self.root else set()

    def scans(self) -> set[Scan]:
        return self._scans(self.root) if self.root else set()

    # -- 1. output columns ---------------------------------------------------------

    def _items(self, scope: Scope) -> list[_Item]:
        return self._cached(("items", id(scope)), lambda: self._build_items(scope), [])  # type: ignore[return-value]

    def _build_items(self, scope: Scope) -> list[_Item]:
        out: list[_Item] = []
        node = scope.expression
        for i, proj in enumerate(node.expressions if isinstance(node, exp.Select) else []):
            inner = proj.unalias()
            if isinstance(proj, exp.Star) or isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star):
                star = proj if isinstance(proj, exp.Star) else proj.this
                out.extend(self._expand_star(scope, proj.table if isinstance(proj, exp.Column) else None, star))
            elif isinstance(inner, exp.Columns) or isinstance(proj, exp.Dot) and proj.is_star:
                self._problem(proj, "COLUMNS(...) and struct stars are not traced for column lineage")
                out.append(_Item(None, star=("", None)))
            else:
                name = proj.meta.get("lin_name") or proj.output_name or f"_col_{i}"
                out.append(_Item(name, inner, bare=isinstance(inner, exp.Column) and inner is proj))
        return out

    def _expand_star(self, scope: Scope, qualifier: str | None, star: exp.Star) -> list[_Item]:
        if qualifier and qualifier not in scope.sources:
            self._problem(star, f"'{qualifier}.*' names no table of this SELECT")
            return []
        fold = self.fold
        excluded = {fold(c.name) for c in star.args.get("except_") or []}
        replaced = {fold(a.alias): a.this for a in star.args.get("replace") or []}
        renamed = {fold(a.this.name): a.alias for a in star.args.get("rename") or []}
        dropped = set() if qualifier else {  # `SELECT *` shows a USING column once, merged
            (j.this.alias_or_name, fold(u.name)) for j in scope.expression.args.get("joins") or [] for u in j.args.get("using") or []
        }
        merged = {c for _, c in dropped}
        out: list[_Item] = []
        for alias in [qualifier] if qualifier else list(scope.selected_sources):
            names, complete, _ = self._source_cols(scope, alias)
            if not complete:
                out.append(_Item(None, star=(alias, None)))
                continue
            for col in names:
                f = fold(col)
                if f in excluded or (alias, f) in dropped:
                    continue
                if f in replaced:
                    out.append(_Item(col, replaced[f]))
                elif f in merged:
                    out.append(_Item(col, exp.column(col), bare=True))
                else:
                    out.append(_Item(renamed.get(f, col), star=(alias, col)))
        return out

    def _source(self, scope: Scope, alias: str) -> exp.Table | Scope | None:
        source = scope.sources.get(alias)
        while isinstance(source, Scope) and isinstance(source.expression, exp.Lateral) and source.subquery_scopes:
            source = source.subquery_scopes[0]  # LATERAL (SELECT …): its query
        return source

    def _source_cols(self, scope: Scope, alias: str) -> Cols:
        source = self._source(scope, alias)
        if isinstance(source, Scope):
            return self._scope_columns(source)
        key = source.meta.get("lin_key") if isinstance(source, exp.Table) else None
        return self.columns_of(key) if key is not None else _UNKNOWN

    def _scope_columns(self, scope: Scope) -> Cols:
        return self._cached(("cols", id(scope)), lambda: self._compute_columns(scope), ([], True, frozenset()))  # type: ignore[return-value]

    def _compute_columns(self, scope: Scope) -> Cols:
        node, outer = scope.expression, list(scope.outer_columns)
        if isinstance(node, exp.SetOperation) and scope.set_operation_scopes:
            names, complete, needs = self._scope_columns(scope.set_operation_scopes[0])
        elif isinstance(node, exp.Select):
            items = self._items(scope)
            names = [self._spelling(scope, it) for it in items if it.name is not None]
            open_stars = [it.star[0] for it in items if it.star and it.star[1] is None]
            complete, needs = not open_stars, frozenset()
            for alias in open_stars:  # an unaliased derived table is the source named "" (COLUMNS(...) names none)
                needs |= self._source_cols(scope, alias)[2] if alias in scope.sources else frozenset()
        else:  # VALUES or UNNEST: named by the alias' column list, if any
            return outer, bool(outer), frozenset()
        return outer + names[len(outer) :], complete, needs

    def _spelling(self, scope: Scope, item: _Item) -> str:
        """DuckDB names an unaliased column reference after the column it binds to."""
        name = item.name or ""
        if not item.bare or self.dialect != "duckdb" or not isinstance(item.expr, exp.Column):
            return name
        table, selected = item.expr.table, scope.selected_sources
        found = self._find_source(scope, table) if table else ((scope, next(iter(selected))) if len(selected) == 1 else None)
        if found is None:
            return name
        f = self.fold(item.expr.name)
        return next((c for c in self._source_cols(*found)[0] if self.fold(c) == f), name)

    # -- 2. sources of output columns ----------------------------------------------------

    def _sources_at(self, scope: Scope, index: int) -> set[Src]:
        node = scope.expression
        if isinstance(node, exp.SetOperation):
            return set().union(*(self._sources_at(b, index) for b in scope.set_operation_scopes))
        if isinstance(node, exp.Unnest):
            return self._udtf_sources(scope)
        for i, item in enumerate(self._items(scope)[: index + 1]):
            if item.star and item.star[1] is None:
                return set()  # the position is past a star of unknown width
            if i == index:
                return self._item_sources(scope, i)
        return set()

    def _item_sources(self, scope: Scope, index: int) -> set[Src]:
        def compute() -> set[Src]:
            item = self._items(scope)[index]
            if item.star is not None and item.star[1] is not None:
                return self._source_lookup(scope, item.star[0], self.fold(item.star[1]))
            return self._expr_sources(scope, item.expr) if item.expr is not None else set()

        return self._cached(("item", id(scope), index), compute, set())  # type: ignore[return-value]

    def _lookup(self, scope: Scope, name: str) -> set[Src] | None:
        """Sources of the column `name` (folded) of a child scope; None when it has no such column."""
        node = scope.expression
        outer = [self.fold(c) for c in scope.outer_columns]
        if name in outer:
            return self._sources_at(scope, outer.index(name))
        if isinstance(node, exp.SetOperation):
            names, complete, _ = self._scope_columns(scope)
            folded = [self.fold(c) for c in names]
            if complete:
                return self._sources_at(scope, folded.index(name)) if name in folded else None
            found = [f for f in (self._lookup(b, name) for b in scope.set_operation_scopes) if f is not None]
            return set().union(*found) if found else None
        if isinstance(node, exp.Unnest):
            return self._udtf_sources(scope)
        items = self._items(scope)
        for i, item in enumerate(items):
            if item.name is not None and self.fold(item.name) == name:
                return self._item_sources(scope, i)
        # Not named here: it may pass through a star whose columns are unknown.
        stars = [it.star[0] for it in items if it.star and it.star[1] is None and it.star[0] in scope.sources]
        return self._pick(scope, name, stars, None) if stars else None

    def _udtf_sources(self, scope: Scope) -> set[Src]:
        return _mod(set().union(*(self._expr_sources(scope, a) for a in scope.expression.expressions)))

    def _source_lookup(self, scope: Scope, alias: str, name: str) -> set[Src]:
        source = self._source(scope, alias)
        if isinstance(source, Scope):
            return self._lookup(source, name) or set()
        key = source.meta.get("lin_key") if isinstance(source, exp.Table) else None
        if key is None:
            return set()
        spelled = next((c for c in self.columns_of(key)[0] if self.fold(c) == name), name)
        return {(key, spelled, COPY)}

    def _source_has(self, scope: Scope, alias: str, name: str) -> bool | None:
        names, complete, _ = self._source_cols(scope, alias)
        if any(self.fold(c) == name for c in names):
            return True
        return False if complete else None

    def _expr_sources(self, scope: Scope, expr: exp.Expr, ctx: str = "select") -> set[Src]:
        bare = isinstance(expr, exp.Column)
        columns, subqueries = self._walk(scope, expr)
        out: set[Src] = set()
        for column in columns:
            srcs = self._resolve(scope, column, ctx)
            out |= srcs if bare else _mod(srcs)
        for sub in subqueries:
            out |= _mod(self._everything(sub))
        return out

    def _everything(self, scope: Scope) -> set[Src]:
        """All a nested query reads: it decides the value of the expression holding it."""
        out = {(k, c, MOD) for k, c, _ in self._scans(scope)}
        if isinstance(scope.expression, exp.SetOperation):
            return out.union(*(self._everything(b) for b in scope.set_operation_scopes))
        return out.union(*(_mod(self._item_sources(scope, i)) for i in range(len(self._items(scope)))))

    def _walk(self, scope: Scope, expr: exp.Expr) -> tuple[list[exp.Column], list[Scope]]:
        """Column references of `expr` in this scope, and the subquery scopes nested in it."""
        subs = self._cached(("subs", id(scope)), lambda: {id(s.expression): s for s in scope.subquery_scopes}, {})
        columns: list[exp.Column] = []
        nested: list[Scope] = []
        stack = [expr]
        while stack:
            node = stack.pop()
            if node is not expr and isinstance(node, (exp.Query, exp.Subquery)):
                sub = subs.get(id(node.unnest() if isinstance(node, exp.Subquery) else node))  # type: ignore[attr-defined]
                nested.extend([sub] if sub is not None else [])
            elif isinstance(node, exp.Column):
                columns.extend([node] if not isinstance(node.this, exp.Star) else [])
            else:
                if isinstance(node, exp.Window) and node.args.get("alias") is not None:  # OVER w: WINDOW w AS (…)
                    name = node.args["alias"].name
                    stack.extend(w for w in scope.expression.args.get("windows") or [] if w.this.name == name)
                stack.extend(node.iter_expressions())
        return columns, nested

    # -- 3. name resolution -----------------------------------------------------------

    def _find_source(self, scope: Scope, alias: str) -> tuple[Scope, str] | None:
        current: Scope | None = scope
        while current is not None:
            if alias in current.selected_sources or alias in current.lateral_sources:
                return current, alias
            current = current.parent if current.can_be_correlated else None
        return None

    def _resolve(self, scope: Scope, column: exp.Column, ctx: str) -> set[Src]:
        parts = [p.name for p in column.parts]
        for i, part in enumerate(parts[:-1]):  # `t.payload.kind`: the first part naming a table wins
            found = self._find_source(scope, part)
            if found is not None:
                srcs = self._source_lookup(*found, self.fold(parts[i + 1]))
                return srcs if i + 2 == len(parts) else _mod(srcs)  # a struct field is a modification
        srcs = self._resolve_name(scope, self.fold(parts[0]), ctx, column)
        return srcs if len(parts) == 1 else _mod(srcs)

    def _resolve_name(self, scope: Scope, name: str, ctx: str, node: exp.Expr) -> set[Src]:
        if ctx == "order":  # ORDER BY sees the SELECT's aliases first
            alias = self._alias_sources(scope, name)
            if alias is not None:
                return alias
        has = {a: self._source_has(scope, a, name) for a in scope.selected_sources}
        yes = [a for a, h in has.items() if h]
        if yes:  # valid SQL: when a known schema has it, no other source does
            return self._pick(scope, name, yes, node)
        alias = self._alias_sources(scope, name, ctx)
        if alias is not None:
            return alias
        maybe = [a for a, h in has.items() if h is None]
        if maybe:
            return self._pick(scope, name, maybe, node)
        if scope.can_be_correlated and scope.parent is not None:
            return self._resolve_name(scope.parent, name, "where", node)
        if has:
            self._problem(node, f"column '{name}' is in none of the known schemas of {', '.join(has)}", "check the column name against the upstream schema")
        return set()

    def _pick(self, scope: Scope, name: str, candidates: list[str], node: exp.Expr | None) -> set[Src]:
        """One candidate wins; a USING column reads every side; anything else is an ambiguity, reported."""
        using = {self.fold(u.name) for j in scope.expression.args.get("joins") or [] for u in j.args.get("using") or []}
        if len(candidates) == 1 or name in using:
            return set().union(*(self._source_lookup(scope, a, name) for a in candidates))
        sources = [scope.sources.get(a) for a in candidates]
        if all(isinstance(s, exp.Table) and s.meta.get("lin_key") is None for s in sources):
            return set()  # none of them is an asset: nothing to trace either way
        needs: set[str] = set()
        for alias, source in zip(candidates, sources):
            key = source.meta.get("lin_key") if isinstance(source, exp.Table) else None
            needs |= {key} if key and not key.startswith(VIRTUAL) else set(self._source_cols(scope, alias)[2])
        self.needs |= needs
        hint = f"; schemas of {', '.join(sorted(needs))} would resolve it" if needs else ""
        message = f"column '{name}' is ambiguous: it may come from {' or '.join(candidates)}{hint}"
        self._problem(node if node is not None else scope.expression, message, f"qualify it with its table, e.g. {candidates[0]}.{name}")
        return set()

    def _alias_sources(self, scope: Scope, name: str, ctx: str = "order") -> set[Src] | None:
        """DuckDB lets WHERE, GROUP BY, HAVING, ORDER BY and later projections use a SELECT alias.

        A projection sees only the aliases before it: in ``a AS a_cents, a / 100 AS a``
        the first ``a`` is the source column (DuckDB refuses a reference to a later alias).
        """
        items = self._items(scope)
        # the projection being resolved: chains of lateral aliases only go backwards, so the first one busy
        resolving = min((k[2] for k in self._busy if isinstance(k, tuple) and k[:2] == ("item", id(scope))), default=None) if ctx == "select" else None
        for proj in scope.expression.expressions if isinstance(scope.expression, exp.Select) else []:
            if isinstance(proj, exp.Alias) and self.fold(proj.alias) == name:
                index = next((i for i, it in enumerate(items) if it.expr is proj.this), -1)
                if index < 0 or ("item", id(scope), index) in self._busy or (resolving is not None and index > resolving):
                    return None  # `x AS x` names the source column, not itself; nor does a later alias
                return self._item_sources(scope, index)
        return None

    # -- 4. scans ---------------------------------------------------------------------

    def _scans(self, scope: Scope) -> set[Scan]:
        def compute() -> set[Scan]:
            node = scope.expression
            if isinstance(node, exp.SetOperation):
                return set().union(*(self._scans(b) for b in scope.set_operation_scopes))
            if isinstance(node, exp.Unnest):  # unnesting decides how many rows there are
                return {(k, c, "") for k, c, _ in self._udtf_sources(scope)}
            return self._select_scans(scope, node) if isinstance(node, exp.Select) else set()

        return self._cached(("scans", id(scope)), compute, set())  # type: ignore[return-value]

    def _select_scans(self, scope: Scope, node: exp.Select) -> set[Scan]:
        """WHERE, JOIN ON/USING, GROUP BY, HAVING, QUALIFY, DISTINCT ON, ORDER BY under a LIMIT; and row sources' own."""
        items, positions = self._items(scope), {}
        parts = [(node.args[a].this, a) for a in ("where", "having", "qualify") if node.args.get(a) is not None]
        parts += [(j.args["on"], "join") for j in node.args.get("joins") or [] if j.args.get("on") is not None]
        distinct = node.args.get("distinct")
        parts += [(distinct.args["on"], "order")] if distinct is not None and distinct.args.get("on") is not None else []
        group, order = node.args.get("group"), node.args.get("order")
        keys = [(g, "group") for g in group.expressions] if group is not None else []
        if group is not None and group.args.get("all"):
            positions.update({i: "group" for i, it in enumerate(items) if not (it.expr and it.expr.find(exp.AggFunc))})
        if order is not None and node.args.get("limit") is not None:
            for o in order.expressions:
                if isinstance(o.this, exp.Var) and o.this.name.upper() == "ALL":
                    positions.update(dict.fromkeys(range(len(items)), "order"))
                else:
                    keys.append((o.this, "order"))
        for expr, ctx in keys:
            if isinstance(expr, exp.Literal) and expr.is_int and 1 <= int(expr.name) <= len(items):
                positions[int(expr.name) - 1] = ctx  # GROUP BY 1
            else:
                parts.append((expr, ctx))
        out: set[Scan] = set()
        for expr, ctx in parts:
            out |= {(k, c, CLAUSES[ctx]) for k, c, _ in self._expr_sources(scope, expr, ctx)}
        for i, ctx in positions.items():
            out |= {(k, c, CLAUSES[ctx]) for k, c, _ in self._item_sources(scope, i)}
        for join in node.args.get("joins") or []:
            right = join.this.alias_or_name
            for u in join.args.get("using") or []:
                name = self.fold(u.name)
                left = [a for a in scope.selected_sources if a != right]
                known = [a for a in left if self._source_has(scope, a, name)]
                unknown = [a for a in left if self._source_has(scope, a, name) is None]
                sides = [right, *(known or unknown)[:1]] if known or len(unknown) <= 1 else [right]
                if not known and len(unknown) > 1:
                    self._pick(scope, name, unknown, u)
                out |= {(k, c, CLAUSES["join"]) for a in sides for k, c, _ in self._source_lookup(scope, a, name)}
        for alias in scope.selected_sources:
            source = self._source(scope, alias)
            out |= self._scans(source) if isinstance(source, Scope) else set()
        return out

    def _problem(self, node: exp.Expr, message: str, fix: str | None = None) -> None:
        ident = node if isinstance(node, exp.Identifier) else node.find(exp.Identifier)
        line, col = (ident.meta.get("line", 0), ident.meta.get("col", 0)) if ident is not None else (0, 0)
        if col and ident is not None:
            col = max(col - len(ident.name) + 1, 1)  # sqlglot records where the token ends
        self.problems.append((message, line, col, fix))


@dataclass
class Feed:
    """A query that fills a virtual relation: CREATE … AS, or an INSERT into it."""

    query: exp.Expr
    targets: list[str] | None = None  # the INSERT's column list
    by_name: bool = False
    lineage: QueryLineage | None = None


@dataclass
class Virtual:
    """A relation an earlier statement created (temp or not): traced through like a CTE."""

    key: str
    declared: list[str] | None = None  # CREATE TABLE x (a INT, …)
    feeds: list[Feed] = field(default_factory=list)
    union: list[str] | None = None  # read_parquet([a, b]): the same columns from each object


class Catalog(_Memo):
    """Upstream schemas plus the script's virtual relations; composes lineage through the latter."""

    def __init__(self, dialect: str, schemas: dict[str, list[str]], meta_comments: bool = True) -> None:
        super().__init__()
        self.dialect, self.schemas = dialect, schemas
        self.meta_comments = meta_comments  # False: the SQL holds no `sqlglot.meta` comment
        self.virtuals: dict[str, Virtual] = {}

    def lineage(self, query: exp.Expr) -> QueryLineage:
        return QueryLineage(query, self.dialect, self.columns_of, self.meta_comments)

    def feeds(self) -> list[QueryLineage]:
        """The lineages of virtual relations computed so far (their problems and needs count too)."""
        return [f.lineage for v in self.virtuals.values() for f in v.feeds if f.lineage is not None]

    def _feed(self, feed: Feed) -> QueryLineage:
        if feed.lineage is None:
            feed.lineage = self.lineage(feed.query)
        return feed.lineage

    def columns_of(self, key: str) -> Cols:
        if not key.startswith(VIRTUAL):
            cols = self.schemas.get(key)
            return (list(cols), True, frozenset()) if cols is not None else ([], False, frozenset({key}))
        v = self.virtuals.get(key)
        if v is None or v.declared is not None:
            return (v.declared, True, frozenset()) if v and v.declared is not None else _UNKNOWN
        if v.union:
            return self.columns_of(v.union[0])
        if not v.feeds:
            return _UNKNOWN
        return self._cached(("cols", key), lambda: self._feed(v.feeds[0]).columns(), _UNKNOWN)  # type: ignore[return-value]

    def expand(self, srcs: Iterable[Src]) -> set[Src]:
        """Replace virtual keys by the upstream sources they were filled from."""
        out: set[Src] = set()
        for key, col, kind in srcs:
            if key.startswith(VIRTUAL):
                out |= {(k, c, _kind(kind, k2)) for k, c, k2 in self._virtual_named(key, col)}
            else:
                out.add((key, col, kind))
        return out

    def query_scans(self, ql: QueryLineage) -> set[Scan]:
        """A query's scans, through virtual relations, plus the scans inside every virtual it reads."""
        out = {(k, c, clause) for k0, c0, clause in ql.scans() for k, c, _ in self.expand([(k0, c0, SCAN)])}
        for table in ql.query.find_all(exp.Table) if self.virtuals else ():  # no virtual relation: no virtual key
            key = table.meta.get("lin_key")
            if key is not None and key.startswith(VIRTUAL):
                out |= self._virtual_scans(key)
        return out

    def _virtual_scans(self, key: str) -> set[Scan]:
        feeds = self.virtuals[key].feeds if key in self.virtuals else []
        return self._cached(("scans", key), lambda: set().union(*(self.query_scans(self._feed(f)) for f in feeds)), set())  # type: ignore[return-value]

    def _virtual_named(self, key: str, col: str) -> set[Src]:
        def compute() -> set[Src]:
            v = self.virtuals.get(key)
            if v is None:
                return set()
            out: set[Src] = set()
            for uri in v.union or []:
                out.add((uri, next((c for c in self.schemas.get(uri) or [] if self.fold(c) == self.fold(col)), col), COPY))
            for feed in v.feeds:
                out |= self.expand(self._feed_sources(v, feed, self.fold(col)))
            return out

        return self._cached(("named", key, self.fold(col)), compute, set())  # type: ignore[return-value]

    def _feed_sources(self, v: Virtual, feed: Feed, col: str) -> set[Src]:
        ql, targets = self._feed(feed), feed.targets
        if targets is None and not feed.by_name and (v.declared is not None or feed is not v.feeds[0]):
            names, complete, _ = self.columns_of(v.key)  # INSERT without a column list: by position
            targets = names if complete else None
        if targets is not None:
            folded = [self.fold(t) for t in targets]
            return ql.sources_at(folded.index(col)) if col in folded else set()
        return ql.sources_named(col)
