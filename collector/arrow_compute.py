"""The Arrow compute functions that ingest and the collector call, run
through pyarrow's compiled function registry without importing
`pyarrow.compute`.

It and `collector.parquet_io` reach past pyarrow's public modules
(through `collector.pyarrow_internals`) because it pays: importing
`pyarrow.compute` builds a Python wrapper for each of its ~290 functions, with a docstring
parsed from the C++ documentation: 21 ms before the first file of every
`gpulens ingest` (a tenth of its fixed cost on a small trace, see
docs/performance.md) and 1.7 MB in each of its processes and in the
collector daemon. The kernels are the same either way: this module calls
them as `pyarrow.compute`'s wrappers do, by name and with the same default
options, so each function here takes the arguments and gives the result of
its namesake there (`tests/test_arrow_compute.py` compares them, and fails
when a pyarrow release moves the registry).

pyarrow's own methods that run a compute function (`take`, `cast`,
`fill_null`, `filter`, `is_null`, `is_valid`, `unique`, `drop_null`,
`dictionary_encode`, `value_counts`, `Table.sort_by`, and `Table.group_by`
through Acero) import `pyarrow.compute`, so code on these paths calls the
functions here instead; a test pins that `gpulens ingest` and `gpulens
collect` never load it. `call_function` and the option classes are
public in `pyarrow.compute` too: a pyarrow whose compiled module no
longer has them is served from there.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from gpulens.collector.pyarrow_internals import compute_registry as _arrow


def _call(name: str) -> Any:
    """The function `name` of Arrow's registry, called with its default options."""
    def call(*args: Any) -> Any:
        return _arrow.call_function(name, list(args))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"Arrow's `{name}` of the arguments (as pyarrow.compute.{name})."
    return call


# Element-wise functions that take no options.
add = _call("add")
add_checked = _call("add_checked")
subtract = _call("subtract")
divide = _call("divide")
equal = _call("equal")
less = _call("less")
greater = _call("greater")
greater_equal = _call("greater_equal")
and_ = _call("and")
or_ = _call("or")
invert = _call("invert")
if_else = _call("if_else")
coalesce = _call("coalesce")
is_valid = _call("is_valid")
utf8_upper = _call("utf8_upper")
binary_join_element_wise = _call("binary_join_element_wise")  # the last argument is the separator
# Aggregates and vector functions, with their default options (NULLs skipped).
min = _call("min")  # noqa: A001  # pyarrow.compute's names
max = _call("max")  # noqa: A001
sum = _call("sum")  # noqa: A001
unique = _call("unique")
drop_null = _call("drop_null")
value_counts = _call("value_counts")
indices_nonzero = _call("indices_nonzero")
dictionary_encode = _call("dictionary_encode")  # NULLs stay NULL in the indices ("mask")


def take(data: Any, indices: Any) -> Any:
    """The rows of `data` (an array, chunked array, record batch or table) at
    `indices`; a NULL index gives a NULL row, one out of bounds raises."""
    return _arrow.call_function("take", [data, indices], _arrow.TakeOptions(boundscheck=True))


def filter(data: Any, mask: Any) -> Any:  # noqa: A001  # pyarrow.compute's name
    """The rows of `data` where `mask` is true (NULL drops the row)."""
    return _arrow.call_function("filter", [data, mask], _arrow.FilterOptions("drop"))


def cast(values: Any, target_type: pa.DataType | str, safe: bool = True) -> Any:
    """`values` as `target_type`; a safe cast raises where a value does not fit."""
    target_type = pa.lib.ensure_type(target_type)
    options = _arrow.CastOptions.safe(target_type) if safe else _arrow.CastOptions.unsafe(target_type)
    return _arrow.call_function("cast", [values], options)


def fill_null(values: Any, fill_value: Any) -> Any:
    """`values` with each NULL replaced by `fill_value` (a value, scalar or
    array of the same length), converted to `values`' type."""
    if not isinstance(fill_value, (pa.Array, pa.ChunkedArray, pa.Scalar)):
        fill_value = pa.scalar(fill_value, type=values.type)
    elif values.type != fill_value.type:
        fill_value = pa.scalar(fill_value.as_py(), type=values.type)
    return _arrow.call_function("coalesce", [values, fill_value])


def is_null(values: Any) -> Any:
    """Whether each value is NULL (NaN is not)."""
    return _arrow.call_function("is_null", [values], _arrow.NullOptions(nan_is_null=False))


def is_in(values: Any, value_set: Any) -> Any:
    """Whether each value is in `value_set` (an array); NULL is in it where
    the set holds a NULL."""
    return _arrow.call_function("is_in", [values], _arrow.SetLookupOptions(value_set, skip_nulls=False))


def starts_with(strings: Any, pattern: str) -> Any:
    """Whether each string starts with `pattern` (NULL for NULL)."""
    return _arrow.call_function("starts_with", [strings], _arrow.MatchSubstringOptions(pattern, ignore_case=False))


def replace_substring_regex(strings: Any, pattern: str, replacement: str) -> Any:
    """Each string with every match of the regular expression `pattern` replaced."""
    return _arrow.call_function("replace_substring_regex", [strings],
                                _arrow.ReplaceSubstringOptions(pattern, replacement, max_replacements=None))


def count_distinct(values: Any) -> Any:
    """How many distinct non-NULL values (a scalar)."""
    return _arrow.call_function("count_distinct", [values], _arrow.CountOptions("only_valid"))


def sort_indices(values: Any) -> Any:
    """The indices that sort `values` ascending, NULLs last (stable)."""
    return _arrow.call_function("sort_indices", [values])


def sort_by(table: pa.Table, keys: list[tuple[str, str]]) -> pa.Table:
    """`table.sort_by(keys)`: its rows ordered by `keys`, (column, "ascending"
    or "descending") pairs, NULLs last (stable)."""
    return take(table, _arrow.call_function("sort_indices", [table], _arrow.SortOptions(keys)))
