"""Column helpers shared by the parsers: exact time conversion, lenient ids.

Microseconds to nanoseconds, exactly
------------------------------------
Chrome-trace writers give `ts`/`dur` in microseconds as decimals with up to
three fractional digits (Kineto: `"ts": 4458676388068.751`, or on the Unix
epoch `"ts": 1712195495502094.565`). The nanoseconds gpulens stores are
that decimal's, exactly, however large it is:

- the compiled scanner (`_kineto_scan.c`, `exact_ns`) reads the digits
  into an integer and never forms a double;
- msgspec's path decodes doubles, which are exact where `us_to_ns` can
  make them so (below), and re-reads the times of a batch whose text
  holds a fractional time beyond that as `decimal.Decimal`, from the
  text itself (`kineto_stream.decode_events`); `times_to_ns` converts
  those exactly.

`us_to_ns` on a double: a JSON decoder gives the nearest double, and
`round(ts * 1000)` is then off by one nanosecond for about 0.3 % of such
values (the product is rounded to a double before `round` sees it).
`us_to_ns` splits the double into its integer part (exact) and its
fraction (exact: Sterbenz) and scales only the fraction, so the result is
the decimal the writer wrote whenever the double can still tell
nanoseconds apart: |ts| < 2**43 µs (about 101.8 days), and integers up to
2**53 µs. Beyond 2**43 µs a double's step is coarser than a nanosecond
(0.25 µs at 1.7e15 µs, today's epoch), so it cannot be exact there: the
readers above never hand it such a value with a fraction.

Digits past the nanosecond (four or more decimals) are rounded half to
even: on the decimal in the scanner and in `times_to_ns`, on the double in
`us_to_ns` (the two can differ there by one nanosecond on an exact tie).

A time no int64 of nanoseconds holds (NaN or an infinity, which a time
written as text can spell, or beyond ±2**63 ns, about 292 years) is NULL,
not an error that costs the file.
"""

from __future__ import annotations

import decimal
import math
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from gpulens.collector import arrow_compute as pc


# Microseconds below this in magnitude are within int64 nanoseconds.
_MAX_US = 2.0**63 / 1000
_INT64 = (-(1 << 63), (1 << 63) - 1)
_MAX_INT_US = (1 << 63) // 1000
# Room for any decimal a trace writes: scaling by 1000 never rounds.
_EXACT = decimal.Context(prec=80, Emax=10**6, Emin=-(10**6))


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


def times_to_ns(values: list[Any]) -> pa.Array:
    """int64 nanoseconds from microsecond times as msgspec decoded them:
    floats and ints (`us_to_ns`; integers exactly, whatever their size) or,
    in a batch read exactly, `decimal.Decimal` (exactly, digits past the
    nanosecond rounded half to even). NULL as `us_to_ns`."""
    try:  # the usual column: msgspec's floats (a Decimal, or an int beyond a double, refuses it)
        return us_to_ns(pa.array(values, pa.float64()))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    try:
        array = pa.array(values)  # inferred: an int, decimal or mixed column
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        array = None
    if array is not None and pa.types.is_signed_integer(array.type):
        micros = pc.fill_null(array, 0).to_numpy()
        if ((micros > -_MAX_INT_US) & (micros < _MAX_INT_US)).all():  # else NULL, value by value below
            nulls = pc.is_null(array).to_numpy(zero_copy_only=False) if array.null_count else None
            return pa.array(micros.astype(np.int64) * 1000, mask=nulls, type=pa.int64())
    return pa.array([_exact_ns(value) for value in values], pa.int64())


def _exact_ns(value: Any) -> int | None:
    """One time's nanoseconds (see `times_to_ns`)."""
    if value is None:
        return None
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return None
        ns = round(value.scaleb(3, _EXACT))  # half to even
    elif isinstance(value, int):
        ns = value * 1000
    else:
        micros = float(value)
        if not abs(micros) < _MAX_US:
            return None
        whole = math.trunc(micros)
        ns = whole * 1000 + round((micros - whole) * 1000.0)  # as us_to_ns
    return ns if _INT64[0] <= ns <= _INT64[1] else None


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
