"""The rules that mend sqlglot's DuckDB→Spark translation (analysis.spark_sql).

sqlglot parses the DuckDB SQL into a tree and writes it in Spark's
dialect. Where what it writes asks a different question, or one Spark
refuses, a rule below rewrites that node first. Each rule says what goes
wrong without it; tests/test_engine_parity.py covers every one (a view
that needs it fails there when it is removed). A construct that needs more
than a local rewrite gets a Spark twin instead (analysis/sql/spark/).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from gpulens.collector.errors import QueryError

Rule = Callable[[exp.Expression], exp.Expression]


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


def _unix_micros(node: exp.Expression) -> exp.Expression:
    return _call("unix_micros", node)


def epoch_functions(node: exp.Expression) -> exp.Expression:
    """epoch_us/epoch_ns/epoch_ms pass through under DuckDB's names, which
    Spark lacks; `epoch(ts)` (seconds as a DOUBLE, with the fraction)
    becomes UNIX_TIMESTAMP, whole seconds."""
    if isinstance(node, exp.Anonymous):
        name = node.name.lower()
        if name == "epoch_us":
            return _unix_micros(node.expressions[0])
        if name == "epoch_ns":
            return exp.Mul(this=_unix_micros(node.expressions[0]), expression=exp.Literal.number(1000))
        if name == "epoch_ms":
            return _call("unix_millis", node.expressions[0])
    if isinstance(node, exp.TimeToUnix):
        return exp.Div(this=_unix_micros(node.this), expression=exp.Literal.number("1e6"))
    return node


def fractional_seconds_to_timestamp(node: exp.Expression) -> exp.Expression:
    """`to_timestamp(seconds)` becomes CAST(FROM_UNIXTIME(..)), which drops
    the fraction of a second: TIMESTAMP_SECONDS keeps it."""
    if isinstance(node, exp.UnixToTime) and node.args.get("scale") is None and node.args.get("format") is None:
        return _call("timestamp_seconds", node.this)
    return node


def percentiles(node: exp.Expression) -> exp.Expression:
    """quantile_cont(x, q) becomes PERCENTILE_CONT(x, q), which Spark
    refuses (it wants WITHIN GROUP); Spark's PERCENTILE interpolates as
    quantile_cont does, and takes a list of fractions too."""
    if isinstance(node, exp.PercentileCont) and node.args.get("expression") is not None:
        return _call("percentile", node.this, node.expression)
    return node


def top_n(node: exp.Expression) -> exp.Expression:
    """DuckDB's max(x, n) (the n largest, largest first) and min(x, n):
    sqlglot drops n and warns. Spark: the sorted collected values, sliced."""
    if isinstance(node, (exp.Max, exp.Min)) and node.args.get("count") is not None:
        ascending = exp.false() if isinstance(node, exp.Max) else exp.true()
        ordered = _call("sort_array", _call("collect_list", node.this), ascending)
        return _call("slice", ordered, exp.Literal.number(1), node.args["count"])
    return node


def list_overlap(node: exp.Expression) -> exp.Expression:
    """list_has_any becomes the `&&` operator, which Spark SQL lacks."""
    if isinstance(node, exp.ArrayOverlaps):
        return _call("arrays_overlap", node.this, node.expression)
    return node


def list_element(node: exp.Expression) -> exp.Expression:
    """DuckDB's list_extract(list, i) (1-based; a negative i counts from
    the end; NULL past either end) is Spark's element_at, which sqlglot
    passes through unchanged as an unknown function."""
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in ("list_extract", "list_element"):
        return _call("element_at", *node.expressions)
    return node


def json_array_elements(node: exp.Expression) -> exp.Expression:
    """DuckDB's json_extract(x, '$.a[*]') is a list of the array's elements
    as JSON; Spark's get_json_object gives one JSON text. Spark: that text
    read back as an array of JSON texts (from_json into array<string>)."""
    if isinstance(node, exp.JSONExtract) and isinstance(node.expression, exp.JSONPath):
        parts = node.expression.expressions
        if parts and isinstance(parts[-1], exp.JSONPathSubscript) and isinstance(parts[-1].this, exp.JSONPathWildcard):
            whole = exp.JSONExtract(this=node.this, expression=exp.JSONPath(expressions=parts[:-1]))
            return _call("from_json", whole, exp.Literal.string("array<string>"))
    return node


def sorted_distinct_string_agg(node: exp.Expression) -> exp.Expression:
    """string_agg(distinct x, sep order by x) becomes LISTAGG ... WITHIN
    GROUP, which Spark refuses with DISTINCT; the sorted set, joined, is
    the same string (NULL where no value, as string_agg's)."""
    if not isinstance(node, exp.GroupConcat):
        return node
    inner = node.this
    order = None
    if isinstance(inner, exp.Order):
        order, inner = inner, inner.this
    if not isinstance(inner, exp.Distinct) or len(inner.expressions) != 1:
        return node
    value = inner.expressions[0]
    if order is not None:
        keys = order.expressions
        if len(keys) != 1 or keys[0].this != value or keys[0].args.get("desc"):
            raise QueryError(f"{node.sql('duckdb')}: string_agg(distinct) ordered by another key has no Spark rule")
    values = _call("array_sort", _call("collect_set", value))
    separator = node.args.get("separator") or exp.Literal.string(",")
    return exp.Case(ifs=[exp.If(this=exp.EQ(this=_call("size", values.copy()), expression=exp.Literal.number(0)),
                                true=exp.null())],
                    default=_call("array_join", values, separator))


def regexp_flags(node: exp.Expression) -> exp.Expression:
    """regexp_extract/regexp_replace with DuckDB's options ('i'): sqlglot
    drops them. Java's regex takes them inline, `(?i)`. And DuckDB's
    regexp_replace replaces the first match (without 'g'), Spark's every
    match; its `\\1` in the replacement is Java's `$1`."""
    if isinstance(node, exp.RegexpExtract):
        flags = node.args.get("parameters")
        if flags is not None:
            node = node.copy()
            node.set("expression", _with_flags(node.expression, flags))
            node.set("parameters", None)
        return node
    if isinstance(node, exp.RegexpReplace):
        flags = node.args.get("modifiers")
        flag_text = flags.name if isinstance(flags, exp.Literal) else ""
        pattern, replacement = node.expression, node.args["replacement"]
        if not (isinstance(pattern, exp.Literal) and isinstance(replacement, exp.Literal)):
            raise QueryError(f"{node.sql('duckdb')}: regexp_replace needs literal pattern and replacement on Spark")
        inline = "".join(sorted(set(flag_text) & {"i", "s", "m"}))
        text = pattern.name
        groups = _capturing_groups(text)
        if "g" in flag_text:
            new_pattern = (f"(?{inline})" if inline else "") + text
            new_replacement = re.sub(r"\\(\d)", r"$\1", replacement.name)
        else:
            # The first match only: what precedes it, it, and the rest.
            new_pattern = (f"(?{inline})" if inline else "") + f"^((?s:.*?))(?:{text})((?s:.*))$"
            shifted = re.sub(r"\\(\d)", lambda m: f"${int(m[1]) + 1}", replacement.name)
            new_replacement = f"$1{shifted}${groups + 2}"
        return exp.RegexpReplace(this=node.this, expression=exp.Literal.string(new_pattern),
                                 replacement=exp.Literal.string(new_replacement))
    return node


def _with_flags(pattern: exp.Expression, flags: exp.Expression) -> exp.Expression:
    inline = "".join(sorted(set(flags.name) & {"i", "s", "m"})) if isinstance(flags, exp.Literal) else ""
    if not inline:
        return pattern
    if not isinstance(pattern, exp.Literal):
        return exp.DPipe(this=exp.Literal.string(f"(?{inline})"), expression=pattern)
    return exp.Literal.string(f"(?{inline})" + pattern.name)


def _capturing_groups(pattern: str) -> int:
    """The capturing groups of a regular expression: `(` not escaped, not `(?`."""
    return len(re.findall(r"(?<!\\)\((?!\?)", pattern))


def materialized_ctes(node: exp.Expression) -> exp.Expression:
    """`with x as materialized (...)`: a DuckDB hint Spark cannot parse."""
    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node = node.copy()
        node.set("materialized", None)
    return node


def union_by_name(node: exp.Expression) -> exp.Expression:
    """UNION [ALL] BY NAME, which Spark SQL lacks, where both sides name the
    same columns in the same order (`select *, a as x` of one source on
    both sides): a positional UNION gives the same rows."""
    if not isinstance(node, exp.Union) or not node.args.get("by_name"):
        return node
    left, right = node.this, node.expression
    if isinstance(left, exp.Select) and isinstance(right, exp.Select) and _shape(left) == _shape(right):
        node = node.copy()
        node.set("by_name", None)
        return node
    raise QueryError("UNION BY NAME of sides with different columns has no Spark rule: list the columns")


def _shape(select: exp.Select) -> list[str]:
    source = select.args.get("from_") or select.args.get("from")
    names = []
    for projection in select.expressions:
        if isinstance(projection, exp.Star):
            names.append("*" + (source.sql() if source is not None else ""))
        else:
            names.append(projection.alias_or_name)
    return names


def list_aggregates(node: exp.Expression) -> exp.Expression:
    """list_sum and list_avg pass through under DuckDB's names. Spark:
    the list's non-NULL values folded (NULL where there is none, as
    DuckDB's)."""
    if not isinstance(node, exp.Anonymous) or node.name.lower() not in ("list_sum", "list_avg"):
        return node
    values = f"filter({node.expressions[0].sql('spark')}, v -> v is not null)"
    total = f"aggregate({values}, cast(0 as double), (acc, v) -> acc + v)"
    if node.name.lower() == "list_avg":
        total = f"{total} / size({values})"
    return exp.maybe_parse(f"(case when size({values}) = 0 then null else {total} end)", dialect="spark")


ASOF_NEXT = "__asof_next"


def asof_join(node: exp.Expression) -> exp.Expression:
    """DuckDB's ASOF JOIN, which sqlglot passes through and Spark cannot
    parse. `a asof [left] join b on <b.k = a.k ...> and a.x >= b.y` matches
    each row of a with the row of b (of the same keys) of the greatest
    y <= x. The same as an ordinary join with the interval each b row
    holds: from its y to the next row's y (of the same keys), its row
    joined by LEAD. Rows of b with equal y: all but the last hold an empty
    interval, so each row of a still matches one. Spark runs it as a join
    on the keys with a range condition, not as a sort-merge as-of join.
    Only that shape of ON (equalities and one `>=`) is carried."""
    if not isinstance(node, exp.Join) or "ASOF" not in (node.args.get("method") or "").upper():
        return node
    right = node.this
    alias = right.alias_or_name
    if not isinstance(right, exp.Table) or not alias:
        raise QueryError("ASOF JOIN of a subquery has no Spark rule: join a named view or CTE")
    conditions = list(node.args["on"].flatten()) if isinstance(node.args.get("on"), exp.And) else [node.args.get("on")]
    keys: list[str] = []
    bound: str | None = None
    kept: list[exp.Expression] = []
    for condition in conditions:
        mine = [column for column in condition.find_all(exp.Column) if column.table == alias]
        if isinstance(condition, exp.EQ) and len(mine) == 1:
            keys.append(mine[0].name)
        elif isinstance(condition, (exp.GTE, exp.LTE)) and len(mine) == 1 and bound is None:
            theirs = condition.expression if isinstance(condition, exp.GTE) else condition.this
            if not (isinstance(theirs, exp.Column) and theirs.table == alias):
                raise QueryError(f"ASOF JOIN: {condition.sql('duckdb')}: write it as `left >= right.column`")
            bound = theirs.name
            upper = (condition.this if isinstance(condition, exp.GTE) else condition.expression).copy()
            kept.append(exp.paren(exp.or_(
                exp.column(ASOF_NEXT, table=alias).is_(exp.null()),
                exp.LT(this=upper, expression=exp.column(ASOF_NEXT, table=alias)))))
        else:
            raise QueryError(f"ASOF JOIN: {condition.sql('duckdb')}: only equalities and one >= have a Spark rule")
        kept.append(condition.copy())
    if bound is None:
        raise QueryError("ASOF JOIN without an inequality has no Spark rule")
    partition = ", ".join(keys)
    source = right.copy()
    source.set("alias", None)
    intervals = exp.maybe_parse(
        f"(select *, lead({bound}) over ({'partition by ' + partition + ' ' if keys else ''}order by {bound}) "
        f"as {ASOF_NEXT} from {source.sql('spark')} where {bound} is not null)", dialect="spark")
    joined = exp.Join(this=exp.alias_(exp.Subquery(this=intervals.unnest()), alias, table=True),
                      side=node.args.get("side"), on=exp.and_(*kept))
    return joined


def json_objects(node: exp.Expression) -> exp.Expression:
    """json_object('k', v, ...) comes out in a syntax Spark cannot parse.
    Spark: to_json of a struct with those fields (NULL fields kept,
    as DuckDB's; numbers as Java writes them)."""
    if isinstance(node, exp.JSONObject):
        pairs: list[exp.Expression] = []
        for pair in node.expressions:
            pairs.extend([pair.this, pair.expression])
        keep_nulls = _call("map", exp.Literal.string("ignoreNullFields"), exp.Literal.string("false"))
        return _call("to_json", _call("named_struct", *pairs), keep_nulls)
    return node


def logarithms(node: exp.Expression) -> exp.Expression:
    """log10(x) becomes LOG(10, x), ln(x) / ln(10), which misses exact
    powers of ten (LOG(10, 1000) = 2.9999999999999996, so a floor lands a
    bin low); Spark's LOG10 is exact there, as DuckDB's. DuckDB's log(x)
    is log10 too, where Spark's one-argument LOG is ln."""
    if not isinstance(node, exp.Log):
        return node
    base, value = (node.this, node.expression) if node.expression is not None else (exp.Literal.number(10), node.this)
    if isinstance(base, exp.Literal) and base.name == "10":
        return _call("log10", value)
    return node


def double_division(node: exp.Expression) -> exp.Expression:
    """DuckDB's `/` gives a DOUBLE whatever its operands (`//` divides
    whole numbers); Spark's keeps DECIMAL operands DECIMAL (1.0 / 8 is
    0.1250... and round() keeps its scale: '0.1250' in a JSON string)."""
    if isinstance(node, exp.Div) and not (isinstance(node.this, exp.Cast) and node.this.to.is_type("double")):
        node = node.copy()
        node.set("this", exp.cast(node.this, "double"))
    return node


RULES: tuple[Rule, ...] = (
    double_division,
    logarithms,
    json_objects,
    asof_join,
    list_aggregates,
    epoch_functions,
    fractional_seconds_to_timestamp,
    percentiles,
    top_n,
    list_overlap,
    list_element,
    json_array_elements,
    sorted_distinct_string_agg,
    regexp_flags,
    materialized_ctes,
    union_by_name,
)


def apply_rules(tree: exp.Expression) -> exp.Expression:
    for rule in RULES:
        tree = tree.transform(rule)
    return tree
