"""The compiled fast path for nvidia-smi logs (`_nvsmi_scan.c`), if built.

A block of a log's lines is tokenised and converted by C in one pass:
each wanted field straight into the buffer of its Arrow column (numbers
with their units trimmed and NULL markers as a validity bitmap, times as
naive microseconds, text and hex masks as dictionary codes over the raw
bytes), which `nvidia_smi` wraps without copying. It reads what pyarrow's
CSV reader and Arrow's casts read, in the forms nvidia-smi writes, and
refuses the rest (`scan` returns None): a quote, a line of another length,
a number or time in another form, a header repeated in the log. That
block then takes the pure path, which decides and names the bad line, so
both give the same tables (the tests compare them on every log at hand).

The extension is optional: `pip install` builds it where a C compiler and
Python's headers are at hand, and goes on without it elsewhere.
`GPULENS_PURE_PYTHON=1` turns it off (to compare, or to rule it out).
"""

from __future__ import annotations

import pyarrow as pa

from gpulens.collector.compiled import load_compiled

# The scanner's output this module reads (`SCAN_VERSION` in the C file).
VERSION = 2

# Kinds of a plan entry (the `K_*` of the C file).
TIMESTAMP, FLOAT64, FLOAT32, INT32, INT64, RAW = range(6)
_NUMBER_KINDS = {pa.float64(): FLOAT64, pa.float32(): FLOAT32, pa.int32(): INT32, pa.int64(): INT64}
_TYPES = {kind: dtype for dtype, kind in _NUMBER_KINDS.items()}


_SCANNER, _ = load_compiled(f"{__package__}._nvsmi_scan", VERSION, "nvidia-smi scanner")


def available() -> bool:
    return _SCANNER is not None


def number_kind(dtype: pa.DataType) -> int:
    """The plan kind that reads a number into a column of `dtype`."""
    return _NUMBER_KINDS[dtype]


def scan(block: bytes | memoryview, fields: int, plan: list[tuple[int, int, float]]) -> tuple[int, list] | None:
    """The rows of `block` (whole lines of `fields` fields) as `plan`
    ((field, kind, scale), ...) reads them: the rows, and per plan entry
    (data, validity or None, nulls) or, for RAW, (codes, offsets, values).
    None where the fast path is off or does not read this block."""
    if _SCANNER is None:
        return None
    return _SCANNER.scan(block, fields, plan)


def arrays(n: int, plan: list[tuple[int, int, float]], outputs: list[tuple]) -> list[pa.Array]:
    """`scan`'s outputs as Arrow arrays over its buffers (no copy): naive
    `timestamp('us')`, the numbers' types, and RAW fields as dictionaries
    of their text (not checked as UTF-8, as the CSV reader leaves it)."""
    result = []
    for (_, kind, _), output in zip(plan, outputs):
        if kind == RAW:
            codes, offsets, values = output
            dictionary = pa.Array.from_buffers(pa.string(), len(offsets) // 4 - 1,
                                               [None, pa.py_buffer(offsets), pa.py_buffer(values)])
            indices = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(codes)])
            result.append(pa.DictionaryArray.from_arrays(indices, dictionary))
            continue
        data, valid, nulls = output
        dtype = pa.timestamp("us") if kind == TIMESTAMP else _TYPES[kind]
        result.append(pa.Array.from_buffers(dtype, n, [None if valid is None else pa.py_buffer(valid),
                                                       pa.py_buffer(data)], null_count=nulls))
    return result
