"""Column helpers shared by the parsers: exact time conversion, lenient ids.

Microseconds to nanoseconds, exactly
------------------------------------
Chrome-trace writers give `ts`/`dur` in microseconds as decimals with up to
three fractional digits (Kineto: `"ts": 4458676388068.751`). A JSON decoder
turns that into the nearest double, and `round(ts * 1000)` is then off by
one nanosecond for about 0.3 % of such values: the product is rounded to a
double before `round` sees it. `us_to_ns` instead splits the double into its
integer part (exact) and its fraction (exact: Sterbenz), and scales only the
fraction, so the result is the decimal the writer wrote, exactly, whenever
the double can still tell nanoseconds apart: |ts| < 2**43 µs (about 101.8
days). Kineto's `ts` relative to `baseTimeNanoseconds` stays far below that;
integer microseconds (older Kineto writes epoch µs as integers) are exact up
to 2**53 µs. Beyond 2**43 µs a fractional value is within 1 ns.

A time no int64 of nanoseconds holds (NaN or an infinity, which a time
written as text can spell, or beyond ±2**63 ns, about 292 years) is NULL,
not an error that costs the file.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from gpulens.collector import arrow_compute as pc


# Microseconds below this in magnitude are within int64 nanoseconds.
_MAX_US = 2.0**63 / 1000


def add_or_null(left: pa.Array, right: pa.Array | int) -> pa.Array:
    """`left + right` in int64, NULL where the sum overflows (a start plus
    an absurd duration) rather than a wrapped, negative time."""
    try:
        return pc.add_checked(left, right)
    except pa.ArrowInvalid:  # rare: find the rows that overflow
        pass
    total = pc.add(left, right)  # wraps around
    both_positive = pc.and_(pc.greater(left, 0), pc.greater(right, 0))
    both_negative = pc.and_(pc.less(left, 0), pc.less(right, 0))
    wrapped = pc.or_(pc.and_(both_positive, pc.less(total, 0)), pc.and_(both_negative, pc.greater_equal(total, 0)))
    return pc.if_else(wrapped, None, total)


def us_to_ns(values: Sequence[float | int | None] | pa.Array) -> pa.Array:
    """int64 nanoseconds from microsecond numbers (None, NaN, ±inf and
    values beyond int64 nanoseconds are NULL)."""
    micros = pc.cast(values, pa.float64()) if isinstance(values, pa.Array) else pa.array(values, type=pa.float64())
    # In numpy: a handful of operations on a few thousand values each, where
    # each Arrow call costs about 10 µs whatever its size (a small rank
    # made 90 of them here, half of all its Arrow calls).
    floats = micros.to_numpy(zero_copy_only=False)  # NULL as NaN
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, dropped below
        in_range = np.abs(floats) < _MAX_US  # false for NaN
        whole = np.trunc(floats)
        fraction_ns = np.round((floats - whole) * 1000.0)
    out_of_range = None if in_range.all() else ~in_range
    if out_of_range is not None:
        whole[out_of_range] = 0  # NULL below: zero, so that the casts stay defined
        fraction_ns[out_of_range] = 0
    return pa.array(whole.astype(np.int64) * 1000 + fraction_ns.astype(np.int64), mask=out_of_range, type=pa.int64())


def to_int(value: Any) -> int | None:
    """An int from an id written as a number or a numeric string, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def int_array(values: list[Any], type: pa.DataType = pa.int64()) -> pa.Array:
    """An integer array; values that are not integers become NULL.

    Tries the fast path first (every value already an int or None) and only
    normalises value by value when that fails. The values' own type is
    inferred first: asked for integers, pyarrow would truncate 1.5 to 1.
    """
    try:
        array = pa.array(values)
        if pa.types.is_integer(array.type) or pa.types.is_null(array.type):
            return pc.cast(array, type)  # a safe cast: raises where a value does not fit
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    # An id beyond the column's range (a uint64 written by a profiler bug or
    # a hash) is NULL too: one bad id must not cost the file.
    bits = type.bit_width
    low, high = (0, 1 << bits) if pa.types.is_unsigned_integer(type) else (-(1 << (bits - 1)), 1 << (bits - 1))
    ints = (to_int(v) for v in values)
    return pa.array([i if i is not None and low <= i < high else None for i in ints], type=type)


def str_array(values: list[Any]) -> pa.Array:
    """A string array; non-string values are written with str()."""
    try:
        return pa.array(values, type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([v if v is None or isinstance(v, str) else str(v) for v in values], type=pa.string())


def constant(value: Any, length: int, type: pa.DataType) -> pa.Array:
    """`length` copies of one value."""
    if value is None:
        return pa.nulls(length, type=type)
    return pa.repeat(pa.scalar(value, type=type), length)


def replace_column(table: pa.Table, name: str, values: pa.Array | pa.ChunkedArray) -> pa.Table:
    """`table` with column `name` holding `values`, its field (type,
    nullability, metadata) kept."""
    index = table.schema.get_field_index(name)
    return table.set_column(index, table.schema.field(index), values)
