"""Column lists for the portable view export (models/portable_sql.py): DuckDB's
`* EXCLUDE (...)` and `UNION [ALL] BY NAME` spelled out, for engines that have neither
(PostgreSQL, ClickHouse, Trino).

A query's output columns are derived from its projections: a name or alias as written, a star
from the columns of what it selects from (a CTE in scope, another view, or a base table of the
migrations' schema). Pure: syntax trees in, syntax trees out.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

#: the output columns of a view or base table by name; None when unknown
Lookup = Callable[[str], "list[str] | None"]


def _ancestors(node: exp.Expression) -> list[exp.Expression]:
    out = []
    parent = node.parent
    while parent is not None:
        out.append(parent)
        parent = parent.parent
    return out


def _cte(node: exp.Expression, name: str) -> exp.Expression | None:
    scope: exp.Expression | None = node
    while scope is not None:
        with_ = scope.args.get("with_") or scope.args.get("with")
        if isinstance(with_, exp.With):
            for cte in with_.expressions:
                inside = any(a is cte for a in _ancestors(node))
                if cte.alias_or_name.lower() == name.lower() and not inside:
                    return cte.this
        scope = scope.parent
    return None


def _sources(select: exp.Select) -> list[exp.Expression]:
    from_ = select.args.get("from_") or select.args.get("from")
    joins = list(select.args.get("joins") or [])
    return [s.this for s in ([from_] if from_ is not None else []) + joins]


def _source_columns(source: exp.Expression, lookup: Lookup) -> list[str] | None:
    if isinstance(source, exp.Subquery):
        return output_columns(source.this, lookup)
    if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
        cte = _cte(source, source.name)
        if cte is not None:
            return output_columns(cte, lookup)
        return lookup(source.name.lower())
    return None


def _star_columns(
    select: exp.Select, table: str | None, lookup: Lookup
) -> list[tuple[str | None, str]] | None:
    """(qualifier, column) for the columns a star stands for; None when unknown."""
    out: list[tuple[str | None, str]] = []
    sources = _sources(select)
    for source in sources:
        alias = source.alias_or_name
        if table is not None and alias != table:
            continue
        cols = _source_columns(source, lookup)
        if cols is None:
            return None
        qualifier = alias if (table is not None or len(sources) > 1) else None
        out += [(qualifier, c) for c in cols]
    return out


def _star_parts(p: exp.Expression) -> tuple[exp.Star, str | None] | None:
    if isinstance(p, exp.Star):
        return p, None
    if isinstance(p, exp.Column) and isinstance(p.this, exp.Star):
        return p.this, p.table
    return None


def _except(star: exp.Star) -> set[str]:
    return {c.name.lower() for c in star.args.get("except_") or star.args.get("except") or []}


def output_columns(query: exp.Expression, lookup: Lookup) -> list[str] | None:
    """The names of the columns a query returns, in order; None when unknown."""
    if isinstance(query, exp.Subquery):
        return output_columns(query.this, lookup)
    if isinstance(query, exp.SetOperation):
        left = output_columns(query.this, lookup)
        if not query.args.get("by_name"):
            return left
        right = output_columns(query.expression, lookup)
        if left is None or right is None:
            return None
        return left + [c for c in right if c not in left]
    if not isinstance(query, exp.Select):
        return None
    names: list[str] = []
    for p in query.expressions:
        star = _star_parts(p)
        if star is None:
            names.append(p.alias_or_name)
            continue
        cols = _star_columns(query, star[1], lookup)
        if cols is None:
            return None
        dropped = _except(star[0])
        names += [c for _, c in cols if c.lower() not in dropped]
    return names


def _expand_stars(select: exp.Select, lookup: Lookup, all_stars: bool) -> bool:
    """Replace `* EXCLUDE` (every star when all_stars) by its columns; False if unknown."""
    new: list[exp.Expression] = []
    for p in select.expressions:
        star = _star_parts(p)
        if star is None or not (all_stars or _except(star[0])) or star[0].args.get("replace"):
            new.append(p)
            continue
        cols = _star_columns(select, star[1], lookup)
        if cols is None:
            return False
        dropped = _except(star[0])
        new += [exp.column(c, table=q) for q, c in cols if c.lower() not in dropped]
    select.set("expressions", new)
    return True


def _branches(union: exp.Expression) -> list[exp.Expression]:
    if isinstance(union, exp.Union) and union.args.get("by_name"):
        return _branches(union.this) + _branches(union.expression)
    return [union]


def spell_out(tree: exp.Expression, lookup: Lookup) -> exp.Expression:
    """`* EXCLUDE` and `UNION [ALL] BY NAME` rewritten with explicit column lists (each
    branch selects every column of the union, in the first branch's order then new ones,
    NULL where it has none). Raises ValueError when a column list cannot be derived."""
    for select in list(tree.find_all(exp.Select)):
        if not _expand_stars(select, lookup, all_stars=False):
            raise ValueError("cannot list the columns of a `* EXCLUDE`")
    unions = [u for u in tree.find_all(exp.Union) if u.args.get("by_name")]
    # the outermost by-name unions (a chain parses as nested unions)
    tops = [
        u for u in unions if not (isinstance(u.parent, exp.Union) and u.parent.args.get("by_name"))
    ]
    for top in tops:
        branches = _branches(top)
        for b in branches:
            if not isinstance(b, exp.Select) or not _expand_stars(b, lookup, all_stars=True):
                raise ValueError("cannot list the columns of a UNION BY NAME branch")
        names: list[str] = []
        for b in branches:
            names += [p.alias_or_name for p in b.expressions if p.alias_or_name not in names]
        for b in branches:
            have = {p.alias_or_name: p for p in b.expressions}
            b.set(
                "expressions",
                [have[n] if n in have else exp.alias_(exp.null(), n) for n in names],
            )
        chain = [top, *[x for x in top.find_all(exp.Union) if x.args.get("by_name")]]
        for u in chain:
            u.set("by_name", None)
        if all(u.args.get("distinct") is False for u in chain):
            # PostgreSQL types a union column pairwise from the left: NULL and NULL become
            # text, which then clashes with a later branch's number. The order of UNION ALL
            # rows means nothing, so the branch that fills the most columns goes first
            # (the column order stays the first branch's, as DuckDB's BY NAME has it).
            filled = {id(b): sum(1 for n in names if not _is_filler(b, n)) for b in branches}
            ordered = sorted(branches, key=lambda b: -filled[id(b)])
            if ordered != branches:
                rebuilt: exp.Expression = ordered[0].copy()
                for b in ordered[1:]:
                    rebuilt = exp.union(rebuilt, b.copy(), distinct=False)
                top.replace(rebuilt)
    return tree


def _is_filler(branch: exp.Expression, name: str) -> bool:
    for p in branch.expressions:
        if p.alias_or_name == name:
            return isinstance(p.unalias(), exp.Null)
    return True
