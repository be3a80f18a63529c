"""The Arrow compute functions that ingest and the collector call, from
`pyarrow.compute`, with the options they rely on fixed in one place.

Each name here is its namesake in `pyarrow.compute`, or that function with
the options ingest depends on stated (bounds-checked `take`, NULL-dropping
`filter`, NULLs counted as distinct nowhere). Call sites read the same
whichever pyarrow is installed.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# Element-wise functions, as pyarrow.compute gives them.
add = pc.add
add_checked = pc.add_checked
subtract = pc.subtract
divide = pc.divide
equal = pc.equal
less = pc.less
greater = pc.greater
greater_equal = pc.greater_equal
and_ = pc.and_
or_ = pc.or_
invert = pc.invert
if_else = pc.if_else
coalesce = pc.coalesce
is_valid = pc.is_valid
utf8_upper = pc.utf8_upper
binary_join_element_wise = pc.binary_join_element_wise  # the last argument is the separator
# Aggregates and vector functions, with their default options (NULLs skipped).
min = pc.min  # noqa: A001  # pyarrow.compute's names
max = pc.max  # noqa: A001
sum = pc.sum  # noqa: A001
unique = pc.unique
drop_null = pc.drop_null
value_counts = pc.value_counts
indices_nonzero = pc.indices_nonzero
dictionary_encode = pc.dictionary_encode  # NULLs stay NULL in the indices ("mask")
sort_indices = pc.sort_indices


def take(data: Any, indices: Any) -> Any:
    """The rows of `data` (an array, chunked array, record batch or table) at
    `indices`; a NULL index gives a NULL row, one out of bounds raises."""
    return pc.take(data, indices, boundscheck=True)


def filter(data: Any, mask: Any) -> Any:  # noqa: A001  # pyarrow.compute's name
    """The rows of `data` where `mask` is true (NULL drops the row)."""
    return pc.filter(data, mask, null_selection_behavior="drop")


def cast(values: Any, target_type: pa.DataType | str, safe: bool = True) -> Any:
    """`values` as `target_type`; a safe cast raises where a value does not fit."""
    return pc.cast(values, target_type, safe=safe)


def fill_null(values: Any, fill_value: Any) -> Any:
    """`values` with each NULL replaced by `fill_value` (a value, scalar or
    array of the same length), converted to `values`' type."""
    return pc.fill_null(values, fill_value)


def is_null(values: Any) -> Any:
    """Whether each value is NULL (NaN is not)."""
    return pc.is_null(values, nan_is_null=False)


def is_in(values: Any, value_set: Any) -> Any:
    """Whether each value is in `value_set` (an array); NULL is in it where
    the set holds a NULL."""
    return pc.is_in(values, value_set=value_set, skip_nulls=False)


def starts_with(strings: Any, pattern: str) -> Any:
    """Whether each string starts with `pattern` (NULL for NULL)."""
    return pc.starts_with(strings, pattern)


def replace_substring_regex(strings: Any, pattern: str, replacement: str) -> Any:
    """Each string with every match of the regular expression `pattern` replaced."""
    return pc.replace_substring_regex(strings, pattern, replacement)


def count_distinct(values: Any) -> Any:
    """How many distinct non-NULL values (a scalar)."""
    return pc.count_distinct(values, mode="only_valid")


def sort_by(table: pa.Table, keys: list[tuple[str, str]]) -> pa.Table:
    """`table.sort_by(keys)`: its rows ordered by `keys`, (column, "ascending"
    or "descending") pairs, NULLs last (stable)."""
    return table.sort_by(keys)
