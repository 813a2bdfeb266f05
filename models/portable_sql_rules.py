"""The hand fixes of the portable view export (models/portable_sql.py): what sqlglot does not
translate, or translates into SQL that runs but answers differently. Each rule says why.

Rules run on the DuckDB syntax tree before sqlglot writes the dialect. Checked by
tests/test_export_sql.py: the PostgreSQL and ClickHouse output against real engines (a
PostgreSQL server, the chdb engine) on the same data as DuckDB; the other dialects parse back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from models.portable_sql_columns import Lookup, spell_out


@dataclass(frozen=True)
class Column:
    """A base table's column as the migrations leave it."""

    name: str
    type: exp.DataType
    not_null: bool


#: Views a dialect cannot run correctly yet, and why: emitted commented out, listed in
#: docs/portable-views.md. The tests assert that every other view matches DuckDB's answer.
NOT_PORTED: dict[str, dict[str, str]] = {}

#: Lines the script of a dialect starts with (as comments).
SCRIPT_NOTES: dict[str, tuple[str, ...]] = {
    "clickhouse": (
        "Tables are MergeTree ORDER BY tuple(): pick a sort key that fits your queries.",
        "Every view ends in SETTINGS join_use_nulls = 1 (without it ClickHouse fills a LEFT",
        "JOIN's unmatched rows with defaults (0, '') instead of NULL) and",
        "prefer_column_name_to_alias = 1 (sum(x) AS x beside sum(y * x)). Columns that DuckDB",
        "allows to be NULL are Nullable(...), and lag()/lead() read toNullable(...), else",
        "lag() returns '' or 0 instead of NULL on a partition's first row.",
        "Timestamps are DateTime64(6, 'UTC'); run with session_timezone = 'UTC'.",
    ),
    "postgres": (
        "Maps (metric_samples.labels) are JSONB; lists are arrays. Run with TimeZone = 'UTC'.",
    ),
}


# ----- CREATE TABLE -----


def _ch_type(t: exp.DataType, nullable: bool) -> str:
    """A ClickHouse column type: Nullable unless NOT NULL (ClickHouse columns are not NULL by
    default, and a NULL loaded into one becomes 0 or ''); arrays and maps cannot be Nullable,
    their elements need not be."""
    k = t.this
    if k == exp.DataType.Type.ARRAY:
        return f"Array({_ch_type(t.expressions[0], False)})"
    if k == exp.DataType.Type.MAP:
        key, value = t.expressions
        return f"Map({_ch_type(key, False)}, {_ch_type(value, False)})"
    if k == exp.DataType.Type.TIMESTAMPTZ:
        base = "DateTime64(6, 'UTC')"  # DuckDB's TIMESTAMPTZ: microseconds, an instant
    elif k == exp.DataType.Type.TIMESTAMP:
        base = "DateTime64(6, 'UTC')"
    elif k == exp.DataType.Type.DATE:
        base = "Date32"  # Date stops at 2149; Date32 covers DuckDB's range we use
    else:
        base = exp.DataType.build(k).sql("clickhouse")
        base = base.removeprefix("Nullable(").removesuffix(")")
    return f"Nullable({base})" if nullable else base


def _plain_type(t: exp.DataType, dialect: str) -> str:
    k = t.this
    if k == exp.DataType.Type.MAP:
        # no MAP type in PostgreSQL or BigQuery: JSON objects hold the same pairs
        return {"postgres": "JSONB", "bigquery": "JSON", "snowflake": "OBJECT"}.get(
            dialect, t.sql(dialect)
        )
    if k == exp.DataType.Type.ARRAY and dialect == "snowflake":
        return "ARRAY"  # a semi-structured ARRAY: typed arrays need Iceberg tables
    return t.sql(dialect)


def create_table(name: str, columns: Sequence[Column], dialect: str) -> str:
    """CREATE TABLE for the final schema of one table: columns, types and NOT NULL only
    (keys, defaults and CHECKs belong to the ledger that writes it, not to a copy)."""
    if dialect == "clickhouse":
        cols = ",\n".join(f"    {c.name} {_ch_type(c.type, not c.not_null)}" for c in columns)
        return f"CREATE TABLE {name} (\n{cols}\n) ENGINE = MergeTree ORDER BY tuple()"
    quote = exp.to_identifier
    cols = ",\n".join(
        f"    {quote(c.name).sql(dialect)} {_plain_type(c.type, dialect)}"
        + (" NOT NULL" if c.not_null else "")
        for c in columns
    )
    return f"CREATE TABLE {name} (\n{cols}\n)"


# ----- views: rules for every dialect -----


def _has_aggregate(node: exp.Expression) -> bool:
    return any(not agg.find_ancestor(exp.Window) for agg in node.find_all(exp.AggFunc))


def expand_group_by_all(tree: exp.Expression) -> exp.Expression:
    """GROUP BY ALL is DuckDB's (and Snowflake's, ClickHouse's): PostgreSQL and Trino lack
    it, so every dialect gets the explicit list, the projections without an aggregate."""
    for select in tree.find_all(exp.Select):
        group = select.args.get("group")
        if isinstance(group, exp.Group) and group.args.get("all"):
            keys = [
                p.unalias().copy()
                for p in select.expressions
                if not _has_aggregate(p) and not isinstance(p.unalias(), exp.Literal)
            ]
            select.set("group", exp.Group(expressions=keys))
    return tree


def expand_unpivot(tree: exp.Expression) -> exp.Expression:
    """UNPIVOT exists in DuckDB, Snowflake, BigQuery, Spark only; PostgreSQL, ClickHouse and
    Trino have no such clause and sqlglot refuses it. The same rows as a UNION ALL, one
    branch per unpivoted column; DuckDB's UNPIVOT drops NULL values, so each branch does
    too. The branches carry the columns the enclosing SELECT reads."""
    for table in list(tree.find_all(exp.Table)):
        pivots = table.args.get("pivots") or []
        if len(pivots) != 1 or not pivots[0].args.get("unpivot"):
            continue
        pivot = pivots[0]
        value = pivot.expressions[0].name
        field_in = pivot.args["fields"][0]
        name_col = field_in.this.name
        select = table.find_ancestor(exp.Select)
        assert select is not None
        kept = []
        for p in select.expressions:
            col = p.unalias()
            if isinstance(col, exp.Column) and col.name not in (value, name_col):
                kept.append(col.name)
        branches = []
        source = exp.Table(this=table.this.copy())
        for alias in field_in.expressions:
            column = alias.this.name
            branches.append(
                exp.select(*kept)
                .select(exp.Literal.string(alias.args["alias"].this).as_(name_col))
                .select(exp.column(column).as_(value))
                .from_(source.copy())
                .where(exp.column(column).is_(exp.null()).not_())
            )
        union: exp.Expression = branches[0]
        for b in branches[1:]:
            union = exp.union(union, b, distinct=False)
        table.replace(
            exp.Subquery(
                this=union, alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))
            )
        )
    return tree


def alias_subqueries(tree: exp.Expression) -> exp.Expression:
    """DuckDB (and PostgreSQL 16) accept a subquery in FROM without an alias; PostgreSQL 15,
    ClickHouse's older parsers and BigQuery's style want one: each gets `_subquery_N`."""
    n = 0
    for sub in list(tree.find_all(exp.Subquery)):
        if not sub.alias and isinstance(sub.parent, exp.From | exp.Join):
            n += 1
            sub.set("alias", exp.TableAlias(this=exp.to_identifier(f"_subquery_{n}")))
    return tree


# ----- views: per dialect -----


def _template(sql: str, **args: exp.Expression) -> exp.Expression:
    """A DuckDB expression with placeholders (uppercase names) replaced by arguments."""
    node = sqlglot.parse_one(sql, read="duckdb")

    def repl(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not n.table and n.name in args:
            return exp.paren(args[n.name].copy())
        return n

    return node.transform(repl)


def _anon(node: exp.Expression, name: str) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.this).lower() == name


_PRINTF_SPEC = re.compile(r"%%|%\.(\d+)f")


def _printf_pieces(fmt: str, args: Sequence[exp.Expression]) -> list[exp.Expression] | None:
    """printf's format as literal text and rounded numbers; None for other specifiers."""
    out: list[exp.Expression] = []
    pos, used = 0, 0
    for m in _PRINTF_SPEC.finditer(fmt):
        out.append(exp.Literal.string(fmt[pos : m.start()]))
        if m.group(0) == "%%":
            out.append(exp.Literal.string("%"))
        else:
            if used >= len(args):
                return None
            out.append(
                _template(
                    f"cast(round(cast(X as decimal(38, 10)), {m.group(1)}) as varchar)",
                    X=args[used],
                )
            )
            used += 1
        pos = m.end()
    rest = fmt[pos:]
    if "%" in _PRINTF_SPEC.sub("", fmt) or used != len(args):
        return None  # another specifier (%s, %d, ...): left to sqlglot
    out.append(exp.Literal.string(rest))
    return [p for p in out if not (isinstance(p, exp.Literal) and p.this == "")]


def postgres_rules(node: exp.Expression) -> exp.Expression:
    # unnest(range(n)): sqlglot writes UNNEST(GENERATE_SERIES(0, n - 1)), but PostgreSQL's
    # generate_series already returns rows (unnest wants an array)
    if isinstance(node, exp.Explode) and isinstance(node.this, exp.GenerateSeries):
        series = node.this
        end = series.args["end"]
        if series.args.get("is_end_exclusive"):
            end = exp.Sub(this=end.copy(), expression=exp.Literal.number(1))
        return exp.Anonymous(this="generate_series", expressions=[series.args["start"].copy(), end])
    # ANY_VALUE arrived in PostgreSQL 16 (Debian 12 ships 15); DuckDB's ignores NULLs
    if isinstance(node, exp.IgnoreNulls) and isinstance(node.this, exp.AnyValue):
        node = node.this
    if isinstance(node, exp.IgnoreNulls) and getattr(node.this, "meta", {}).get("any_value"):
        return node.this  # already rewritten below (children first): it skips NULLs
    if isinstance(node, exp.AnyValue):
        picked = exp.Bracket(
            this=exp.paren(_template("array_agg(X) filter (where X is not null)", X=node.this)),
            expressions=[exp.Literal.number(1)],
            offset=1,  # PostgreSQL arrays count from 1, as DuckDB lists do
        )
        picked.meta["any_value"] = True
        return picked
    # no arg_max in PostgreSQL: the value of the row with the largest key (NULL keys last)
    if isinstance(node, exp.ArgMax):
        agg = exp.ArrayAgg(
            this=exp.Order(
                this=node.this.copy(),
                expressions=[
                    exp.Ordered(this=node.expression.copy(), desc=True, nulls_first=False)
                ],
            )
        )
        return exp.Bracket(this=exp.paren(agg), expressions=[exp.Literal.number(1)], offset=1)
    # make_timestamp(µs): sqlglot writes TO_TIMESTAMP(µs / 1e6), a double that loses the
    # last microsecond of today's dates; epoch + interval is exact and stays a TIMESTAMP
    # printf('... %.1f%% ...', x): PostgreSQL's format() has no %.Nf; the pieces are
    # concatenated, each number rounded to N places as text (ties may round otherwise)
    if _anon(node, "printf") and isinstance(node.expressions[0], exp.Literal):
        pieces = _printf_pieces(node.expressions[0].this, node.expressions[1:])
        if pieces is not None:
            return exp.Concat(expressions=pieces)
    scale = node.args.get("scale") if isinstance(node, exp.UnixToTime) else None
    if scale is not None and str(scale.this) == "6":
        return _template("(TIMESTAMP '1970-01-01' + X * INTERVAL '1 microsecond')", X=node.this)
    if _anon(node, "make_timestamptz") and len(node.expressions) == 1:
        return _template(
            "(TIMESTAMPTZ '1970-01-01 00:00:00+00' + X * INTERVAL '1 microsecond')",
            X=node.expressions[0],
        )
    return node


def _labels_without(node: exp.Expression) -> tuple[exp.Expression, exp.Expression] | None:
    """(map, key) when node is map_from_entries(list_filter(map_entries(map), lambda e:
    e.key <> key)): a map without one key, which sqlglot cannot write for either engine."""
    if not isinstance(node, exp.MapFromEntries) or not isinstance(node.this, exp.ArrayFilter):
        return None
    entries, fn = node.this.this, node.this.expression
    if not (_anon(entries, "map_entries") and isinstance(fn, exp.Lambda)):
        return None
    body = fn.this
    if not (isinstance(body, exp.NEQ) and isinstance(body.this, exp.Dot)):
        return None
    if body.this.expression.name != "key" or not isinstance(body.expression, exp.Literal):
        return None
    return entries.expressions[0], body.expression


def postgres_map_rules(node: exp.Expression) -> exp.Expression:
    # maps are JSONB in PostgreSQL: a map without a key is `jsonb - key`
    found = _labels_without(node)
    if found is not None:
        return exp.paren(exp.Sub(this=exp.paren(found[0].copy()), expression=found[1].copy()))
    return node


def _cte_columns(select: exp.Select, alias: str) -> list[str] | None:
    """The output columns of the CTE that `alias` names in select's FROM/JOINs, when that CTE
    lists them all by name (no star); else None."""
    joins = list(select.args.get("joins") or [])
    sources = [select.args.get("from_") or select.args.get("from"), *joins]
    table = next(
        (
            s.this
            for s in sources
            if s is not None and isinstance(s.this, exp.Table) and s.this.alias_or_name == alias
        ),
        None,
    )
    if table is None:
        return None
    node: exp.Expression | None = select
    while node is not None:
        with_ = node.args.get("with_") or node.args.get("with")
        if isinstance(with_, exp.With):
            for cte in with_.expressions:
                if cte.alias_or_name == table.name and isinstance(cte.this, exp.Select):
                    if any(isinstance(p, exp.Star) or p.is_star for p in cte.this.expressions):
                        return None
                    return list(cte.this.named_selects)
        node = node.parent
    return None


def clickhouse_selects(tree: exp.Expression) -> exp.Expression:
    """Rules on whole SELECTs for ClickHouse."""
    for select in list(tree.find_all(exp.Select)):
        if select.args.get("joins"):
            # `b.*` over a join names the columns that another joined table also has
            # "b.day", not "day", in ClickHouse: list them when b is a CTE that names them
            for p in list(select.expressions):
                if isinstance(p, exp.Column) and isinstance(p.this, exp.Star) and p.table:
                    names = _cte_columns(select, p.table)
                    if names:
                        cols = [exp.alias_(exp.column(n, table=p.table), n) for n in names]
                        index = select.expressions.index(p)
                        select.set(
                            "expressions",
                            select.expressions[:index] + cols + select.expressions[index + 1 :],
                        )
        for p in select.expressions:
            # ClickHouse names an unaliased `t.col` column "t.col", not "col" as others do
            if isinstance(p, exp.Column) and p.table and not isinstance(p.this, exp.Star):
                p.replace(exp.alias_(p.copy(), p.name))
        # two unnest() in one SELECT run in step in DuckDB (and PostgreSQL); ClickHouse's
        # arrayJoin() twice is a cross product: join one zipped array, then take its parts
        explodes = [
            p for p in select.expressions if isinstance(p.unalias(), exp.Explode) and p.alias
        ]
        if len(explodes) > 1:
            zipped = exp.Anonymous(
                this="arrayZip", expressions=[p.unalias().this.copy() for p in explodes]
            )
            joined = exp.alias_(exp.Explode(this=zipped), "_zipped")
            for i, p in enumerate(explodes, start=1):
                p.replace(
                    exp.alias_(
                        exp.Dot(this=exp.column("_zipped"), expression=exp.Literal.number(i)),
                        p.alias,
                    )
                )
            select.set("expressions", [joined, *select.expressions])
    return tree


def spark_selects(tree: exp.Expression) -> exp.Expression:
    """Spark allows one generator per SELECT and none inside an expression: two unnest() in
    step become one INLINE(ARRAYS_ZIP(...)) AS (a, b); CAST(unnest(list) AS t) becomes
    unnest(CAST(list AS ARRAY<t>)). Not executed here (no Spark): sqlglot parses it back."""
    for select in list(tree.find_all(exp.Select)):
        explodes = [
            p for p in select.expressions if isinstance(p.unalias(), exp.Explode) and p.alias
        ]
        if len(explodes) > 1:
            zipped = exp.Anonymous(
                this="ARRAYS_ZIP", expressions=[p.unalias().this.copy() for p in explodes]
            )
            inline = exp.Aliases(
                this=exp.Anonymous(this="INLINE", expressions=[zipped]),
                expressions=[exp.to_identifier(p.alias) for p in explodes],
            )
            first = select.expressions.index(explodes[0])
            rest = [p for p in select.expressions if p not in explodes]
            select.set("expressions", [*rest[:first], inline, *rest[first:]])
    for cast in list(tree.find_all(exp.Cast)):
        if isinstance(cast.this, exp.Explode):
            inner = cast.this.this.copy()
            to = exp.DataType(
                this=exp.DataType.Type.ARRAY, expressions=[cast.to.copy()], nested=True
            )
            cast.replace(exp.Explode(this=exp.Cast(this=inner, to=to)))
    return tree


def bigquery_window_order(tree: exp.Expression) -> exp.Expression:
    """A window's (or ARRAY_AGG's) ascending ORDER BY puts NULLs last in DuckDB and first in
    BigQuery, which has no NULLS LAST there: sqlglot gives up on those views. Every such
    ascending key of the analyst views is never NULL (NOT NULL columns, or filtered),
    so BigQuery's own order is the same order: say NULLS FIRST, which it writes as nothing.
    Not executed here (no BigQuery)."""
    for ordered in tree.find_all(exp.Ordered):
        in_window = ordered.find_ancestor(exp.Window, exp.ArrayAgg) is not None
        if in_window and not ordered.args.get("desc"):
            ordered.set("nulls_first", True)
    return tree


def _floaty(node: exp.Expression) -> bool:
    return any(
        isinstance(n, exp.Div | exp.Pow)
        or (isinstance(n, exp.Literal) and not n.is_string and "." in str(n.this))
        for n in node.walk()
    )


def _textual(node: exp.Expression) -> bool:
    return (
        (isinstance(node, exp.Literal) and node.is_string)
        or isinstance(node, exp.Concat | exp.DPipe)
        or _anon(node, "printf")
    )


def clickhouse_rules(node: exp.Expression) -> exp.Expression:
    # a CASE whose branches mix integers and doubles has no common type in ClickHouse 26 (it
    # becomes a Variant that sum() refuses); DuckDB's answer is a DOUBLE: say so
    if isinstance(node, exp.Case):
        branches = [i.args["true"] for i in node.args.get("ifs") or []]
        if node.args.get("default") is not None:
            branches.append(node.args["default"])
        if any(_floaty(b) for b in branches) and not any(_textual(b) for b in branches):
            for b in branches:
                if not isinstance(b, exp.Null):
                    b.replace(exp.Anonymous(this="toFloat64", expressions=[b.copy()]))
        return node
    # range(n) (0 .. n-1): sqlglot writes GENERATE_SERIES, which ClickHouse lacks
    if (
        isinstance(node, exp.GenerateSeries)
        and node.args.get("is_end_exclusive")
        and str(node.args["start"].this) == "0"
    ):
        return exp.Anonymous(this="range", expressions=[node.args["end"].copy()])
    # list(x ORDER BY k): ClickHouse's groupArray has no ORDER BY; sort (k, x) pairs
    if isinstance(node, exp.ArrayAgg) and isinstance(node.this, exp.Order):
        order = node.this
        if len(order.expressions) == 1 and not order.expressions[0].args.get("desc"):
            pairs = exp.Tuple(expressions=[order.expressions[0].this.copy(), order.this.copy()])
            sorted_ = exp.Anonymous(
                this="arraySort",
                expressions=[exp.Anonymous(this="groupArray", expressions=[pairs])],
            )
            return _template("arrayMap(p -> p.2, S)", S=sorted_)
    # strftime: ClickHouse's formatDateTime reads %M as the month's name and %i as the
    # minute (https://clickhouse.com/docs/sql-reference/functions/date-time-functions);
    # sqlglot passes %M through
    if isinstance(node, exp.TimeToStr) and isinstance(node.args.get("format"), exp.Literal):
        fmt = node.args["format"].this.replace("%M", "%i")
        return exp.Anonymous(
            this="formatDateTime", expressions=[node.this.copy(), exp.Literal.string(fmt)]
        )
    # make_timestamptz(µs): an instant from microseconds since the epoch
    if _anon(node, "make_timestamptz") and len(node.expressions) == 1:
        return _template("fromUnixTimestamp64Micro(X, 'UTC')", X=node.expressions[0])
    # a map without one key: mapFilter
    found = _labels_without(node)
    if found is not None:
        return _template("mapFilter((k, v) -> k <> K, M)", K=found[1], M=found[0])
    # lag()/lead() on a column that is not Nullable return its default (0, '', 1970-01-01)
    # past the partition's edge, not NULL: read a Nullable copy (issue #15)
    if isinstance(node, exp.Lag | exp.Lead) and not _anon(node.this, "tonullable"):
        node.set("this", exp.Anonymous(this="toNullable", expressions=[node.this.copy()]))
        return node
    # epoch(ts): sqlglot writes TIME_TO_UNIX, which ClickHouse does not have; microseconds
    # as a double keep the fraction DuckDB's epoch() keeps
    if isinstance(node, exp.TimeToUnix):
        return _template("toUnixTimestamp64Micro(X) / 1e6", X=node.this)
    # a // b: sqlglot writes CAST(a / b AS Int64), a double division that rounds big
    # integers (nanosecond times) before truncating; intDiv is exact
    if isinstance(node, exp.IntDiv):
        return exp.Anonymous(this="intDiv", expressions=[node.this.copy(), node.expression.copy()])
    # timezone('UTC', ts) and ts AT TIME ZONE 'UTC': the DateTime64 columns are UTC already
    if _anon(node, "timezone") and len(node.expressions) == 2:
        return exp.Anonymous(
            this="toTimeZone", expressions=[node.expressions[1].copy(), node.expressions[0].copy()]
        )
    if isinstance(node, exp.AtTimeZone):
        return exp.Anonymous(
            this="toTimeZone", expressions=[node.this.copy(), node.args["zone"].copy()]
        )
    return node


def _bottom_up(
    node: exp.Expression, fn: Callable[[exp.Expression], exp.Expression]
) -> exp.Expression:
    """fn applied to every node, children first, so a rule sees its arguments already
    rewritten (sqlglot's transform goes top down and skips what a rule builds)."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            node.set(key, _bottom_up(value, fn))
        elif isinstance(value, list):
            node.set(
                key, [_bottom_up(v, fn) if isinstance(v, exp.Expression) else v for v in value]
            )
    return fn(node)


def _warehouse_rules(dialect: str) -> Callable[[exp.Expression], exp.Expression]:
    """Rules for the dialects with no engine here (not executed; docs/portable-views.md)."""

    def rules(node: exp.Expression) -> exp.Expression:
        # any_value(labels) IGNORE NULLS: Trino's arbitrary and BigQuery's ANY_VALUE skip NULLs
        # already and do not take the clause; labels, the one column it reads, is NOT NULL
        if isinstance(node, exp.IgnoreNulls) and isinstance(node.this, exp.AnyValue):
            return node.this
        found = _labels_without(node)
        if found is None:
            return node
        labels, key = found
        if isinstance(labels, exp.IgnoreNulls):
            labels = labels.this
        # the labels map without one key, in each warehouse's own terms: Snowflake OBJECT,
        # BigQuery JSON, Spark and Trino MAP (map_filter)
        if dialect == "snowflake":
            return exp.Anonymous(this="OBJECT_DELETE", expressions=[labels.copy(), key.copy()])
        if dialect == "bigquery":
            path = exp.Literal.string(f"$.{key.this}")
            return exp.Anonymous(this="JSON_REMOVE", expressions=[labels.copy(), path])
        keep = exp.Lambda(
            this=exp.NEQ(this=exp.column("k"), expression=key.copy()),
            expressions=[exp.to_identifier("k"), exp.to_identifier("v")],
        )
        return exp.Anonymous(this="MAP_FILTER", expressions=[labels.copy(), keep])

    return rules


_RULES: Mapping[str, Callable[[exp.Expression], exp.Expression]] = {
    "postgres": postgres_rules,
    "clickhouse": clickhouse_rules,
    **{d: _warehouse_rules(d) for d in ("snowflake", "bigquery", "spark", "trino")},
}


#: DuckDB's `* EXCLUDE` and `UNION BY NAME` are spelled out for every dialect: PostgreSQL,
#: ClickHouse and Trino have neither, Spark SQL has no `* EXCEPT`, and the warehouses that
#: have some form of them spell and scope them differently; an explicit list means the same
#: everywhere.
SPELL_OUT_COLUMNS = frozenset({"postgres", "clickhouse", "snowflake", "bigquery", "spark", "trino"})


def create_view(name: str, tree: exp.Expression, dialect: str, lookup: Lookup) -> str:
    """CREATE VIEW name AS the query, in the dialect, with the rules applied. `lookup` gives
    the output columns of another view or a base table (for `* EXCLUDE`, `UNION BY NAME`)."""
    tree = alias_subqueries(expand_unpivot(expand_group_by_all(tree.copy())))
    if dialect in SPELL_OUT_COLUMNS:
        tree = spell_out(tree, lookup)
    rule = _RULES.get(dialect)
    if dialect == "clickhouse":
        tree = clickhouse_selects(tree)
    if dialect == "postgres":
        tree = tree.transform(postgres_map_rules)
    if dialect == "spark":
        tree = spark_selects(tree)
    if dialect == "bigquery":
        tree = bigquery_window_order(tree)
    if rule is not None:
        tree = _bottom_up(tree, rule)
    if dialect == "clickhouse" and isinstance(tree, exp.Query):
        # unmatched LEFT JOIN rows are NULL only with join_use_nulls = 1 (issue #15); a
        # view's SETTINGS apply whenever it is read, whatever the session's settings
        # and `sum(x) AS x` next to `sum(y * x)` reads the column x in SQL, but ClickHouse
        # substitutes the alias (an aggregate inside an aggregate) unless columns win over
        # aliases: prefer_column_name_to_alias = 1
        tree.set(
            "settings",
            [
                exp.EQ(this=exp.column(name), expression=exp.Literal.number(1))
                for name in ("join_use_nulls", "prefer_column_name_to_alias")
            ],
        )
    body = tree.sql(dialect, pretty=True, unsupported_level=sqlglot.ErrorLevel.RAISE)
    return f"CREATE VIEW {exp.to_identifier(name).sql(dialect)} AS\n{body}"
