"""Collectives of one Kineto trace: one row per collective, linked to its kernel.

Where a row's facts come from, best first:

1. A `record_param_comms` CPU op with collective args (newer PyTorch):
   op, sizes (and all_to_all's per-peer split sizes), dtype, process group
   and its ranks, `Seq` where the version writes it. Its kernel is the
   communication kernel with the op's `External id` or, failing that, the
   one whose launch call ran inside the op on the same thread. `wait` ops
   (Work.wait) are not collectives.
2. A communication kernel with collective args of its own (newer Kineto
   copies them onto the kernel) that no op of (1) claimed.
3. Any other communication kernel (older PyTorch records the op without
   args): the op from the `nccl:<op>` range its launch ran inside, else from
   the kernel name; the size from that range's input shapes where the trace
   recorded shapes. Group, ranks and seq stay NULL: the trace does not say.

`start_ns`/`end_ns` are the kernel's interval (first start to last end when
one op launched several kernels), or the CPU op's where no kernel was
found (then `kernel_name` is NULL). Bytes are max(in, out elements) × the
element size, so all-gather counts its output and reduce-scatter its input.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import msgspec
import pyarrow as pa

from gpulens.collector import arrow_compute as pc
from gpulens.collector.ingest.arrays import to_int
from gpulens.collector.ingest.base import dtype_bytes, normalise_op, op_from_kernel_name
from gpulens.collector.ingest.kernel_collectives import Enclosing
from gpulens.collector.ingest.kineto_schema import (
    COLLECTIVE_ANNOTATION_PREFIX,
    NO_ARGS,
    KinetoArgs,
    KinetoEvent,
)

NOT_COLLECTIVES = frozenset({"wait"})
# Op, dtype and rank-list texts repeat over every collective of a process
# group: each distinct one is parsed once.
_op_name = lru_cache(maxsize=1024)(normalise_op)


@dataclass
class EventRows:
    """One table's contract columns, and the few raw events kept by row."""

    columns: dict[str, Any]
    kept: dict[int, KinetoEvent]

    def take_columns(self, columns: tuple[str, ...], indices: list[int]) -> list[list[Any]]:
        """Each column's values at `indices`, as lists."""
        if not indices:  # also where the table has no rows, hence no columns
            return [[] for _ in columns]
        at = pa.array(indices, type=pa.int64())
        return [pc.take(self.columns[column], at).to_pylist() for column in columns]


# --- value normalisation -------------------------------------------------------

# PyTorch ScalarType names (record_param_comms `dtype`) and C++ type names
# (`Input type`) to the names NCCL logs and nsys use (base.NCCL_DTYPES).
_DTYPE_NAMES: dict[str, str] = {
    "float": "float32", "float32": "float32", "half": "float16", "float16": "float16",
    "bfloat16": "bfloat16", "double": "float64", "float64": "float64",
    "long": "int64", "long int": "int64", "int64": "int64", "int": "int32", "int32": "int32",
    "short": "int16", "int16": "int16", "char": "int8", "signed char": "int8", "int8": "int8",
    "byte": "uint8", "unsigned char": "uint8", "uint8": "uint8", "bool": "bool",
    "complexfloat": "complex64", "complexdouble": "complex128",
}


@lru_cache(maxsize=1024)
def normalise_dtype(dtype: str | None) -> str | None:
    """`Float` → `float32`, `c10::BFloat16` → `bfloat16`; unknown names kept."""
    if not dtype:
        return None
    key = dtype.strip().lower().removeprefix("c10::").removeprefix("torch.")
    return _DTYPE_NAMES.get(key, key)


def clean_str(value: Any) -> str | None:
    """A metadata string; the legacy path wrote some values with their quotes."""
    if value is None:
        return None
    text = str(value).strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = text[1:-1]
    return text or None


def parse_group_ranks(value: Any, group_size: int | None, start: int | None = None, stride: int | None = None) -> list[int] | None:
    """The ranks of a process group, rebuilding a list Kineto truncated.

    PyTorch writes at most 30 ranks and then `...` (`"[0, 1, ..., 29, ...]"`);
    some writers keep the last one (`"[0, 1, 2, ..., 127]"`). A truncated
    list is rebuilt from `Global rank start`/`Global rank stride` where
    given (a stride below 1 means "not strided"), else, where the last rank
    is shown too, from the stride of its first ranks; and kept only if it
    agrees with every rank shown and the group size. None when it cannot be
    rebuilt: a guess would put traffic on ranks that never sent it.
    """
    if isinstance(value, list):
        ranks = [to_int(v) for v in value]
        return None if any(r is None for r in ranks) else ranks  # type: ignore[return-value]
    ranks = _ranks_from_text(clean_str(value), group_size, start, stride)
    return None if ranks is None else list(ranks)


@lru_cache(maxsize=1024)
def _ranks_from_text(text: str | None, group_size: int | None, start: int | None, stride: int | None) -> tuple[int, ...] | None:
    """`parse_group_ranks` of a text (or missing) value; a tuple, as it is shared."""
    head: list[int] = []
    tail: list[int] = []
    truncated = False
    if text is not None and text.startswith("[") and text.endswith("]"):
        for part in text[1:-1].split(","):
            part = part.strip()
            if not part:
                continue
            if part.endswith("..."):
                truncated = True
                part = part.removesuffix("...").strip()
                if not part:
                    continue
            number = to_int(part)
            if number is None:
                return None
            (tail if truncated else head).append(number)
        if not truncated:
            return tuple(head) if head else None  # `[]`: the ranks are not stated
    elif text is not None:
        return None
    if group_size is None or group_size < 1:
        return None
    if start is None or stride is None or stride < 1:
        # No stride stated (or -1: "not strided"). The ranks shown fit many
        # groups ({0..29} begins both 0..63 and 0..31 + 64..95), so infer a
        # stride only where the last rank is shown too and checks it.
        if len(head) >= 2 and tail:
            start, stride = head[0], head[1] - head[0]
        elif len(head) == 1 and group_size == 1:
            return tuple(head)
        else:
            return None
    if stride < 1:
        return None
    ranks = [start + i * stride for i in range(group_size)]
    if ranks[: len(head)] != head or (tail and ranks[-len(tail):] != tail):
        return None
    return tuple(ranks)


def parse_split_sizes(value: Any) -> tuple[list[int] | None, bool]:
    """`In split size` / `Out split size` → (the sizes, whether cut short).

    PyTorch writes the list as text, `"[4, 2, 2]"`, and only its first 30
    values then `...` (`"[4, 2, 2, ...]"`): those values come back
    with True. `"[]"` (an even split), a missing value and text that is not
    such a list give (None, False).
    """
    if isinstance(value, list):
        sizes = [to_int(v) for v in value]
        return (None, False) if not sizes or any(s is None for s in sizes) else (sizes, False)  # type: ignore[return-value]
    sizes, truncated = _split_sizes_from_text(clean_str(value))
    return (None if sizes is None else list(sizes)), truncated


@lru_cache(maxsize=1024)
def _split_sizes_from_text(text: str | None) -> tuple[tuple[int, ...] | None, bool]:
    if text is None or not (text.startswith("[") and text.endswith("]")):
        return None, False
    sizes: list[int] = []
    truncated = False
    for part in text[1:-1].split(","):
        part = part.strip()
        if part == "...":
            truncated = True
            continue
        number = to_int(part) if part and not truncated else None
        if number is None:
            return None, False  # a value after `...`, or not a number
        sizes.append(number)
    return (tuple(sizes), truncated) if sizes else (None, False)


# --- rows ----------------------------------------------------------------------

COLUMNS = (
    "process_group", "process_group_desc", "seq", "op", "bytes", "group_size", "dtype",
    "in_nelems", "out_nelems", "in_split_sizes", "out_split_sizes", "split_sizes_truncated",
    "group_ranks", "start_ns", "end_ns", "cpu_start_ns", "cpu_end_ns", "kernel_name",
    "correlation_id", "external_id",
)


def _bytes(in_nelems: int | None, out_nelems: int | None, dtype: str | None) -> int | None:
    size = dtype_bytes(dtype)
    counts = [n for n in (in_nelems, out_nelems) if n is not None]
    if size is None or not counts:
        return None
    return max(counts) * size


def fields_from_args(args: KinetoArgs) -> dict[str, Any]:
    """The collective columns a record_param_comms op (or kernel) states."""
    stated = (args.collective_name, args.dtype, args.in_msg_nelems, args.out_msg_nelems, args.in_split_size,
              args.out_split_size, args.group_size, args.process_group_ranks, args.global_rank_start,
              args.global_rank_stride, args.process_group_name, args.process_group_desc)
    try:
        # A training loop repeats each collective's args every step, its
        # sequence number aside: each distinct set is normalised once.
        fields = _fields(*stated)
    except TypeError:  # a list among them (unhashable): normalised each time
        fields = _fields.__wrapped__(*stated)
    return {**fields, "seq": to_int(args.seq)}


# typed: 1, 1.0 and True are not the same key (to_int reads True as no number).
@lru_cache(maxsize=4096, typed=True)
def _fields(collective_name: Any, dtype: Any, in_msg_nelems: Any, out_msg_nelems: Any, in_split_size: Any,
            out_split_size: Any, group_size: Any, process_group_ranks: Any, global_rank_start: Any,
            global_rank_stride: Any, process_group_name: Any, process_group_desc: Any) -> dict[str, Any]:
    """`fields_from_args` but for `seq`; callers copy the dict, not its lists."""
    size = to_int(group_size)
    ranks = parse_group_ranks(process_group_ranks, size, to_int(global_rank_start), to_int(global_rank_stride))
    if size is None and ranks is not None:
        size = len(ranks)
    normalised_dtype = normalise_dtype(clean_str(dtype))
    in_nelems, out_nelems = to_int(in_msg_nelems), to_int(out_msg_nelems)
    in_splits, in_truncated = parse_split_sizes(in_split_size)
    out_splits, out_truncated = parse_split_sizes(out_split_size)
    return {
        "process_group": clean_str(process_group_name),
        "process_group_desc": clean_str(process_group_desc),
        "op": _op_name(clean_str(collective_name)),
        "bytes": _bytes(in_nelems, out_nelems, normalised_dtype),
        "group_size": size,
        "dtype": normalised_dtype,
        "in_nelems": in_nelems,
        "out_nelems": out_nelems,
        "in_split_sizes": in_splits,
        "out_split_sizes": out_splits,
        "split_sizes_truncated": (in_truncated or out_truncated) if (in_splits or out_splits) else None,
        "group_ranks": ranks,
    }


def _decode_raw(raw: msgspec.Raw) -> Any:
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None


@lru_cache(maxsize=1024)
def _op_of_range(name: str) -> str | None:
    return _op_name(name.removeprefix(COLLECTIVE_ANNOTATION_PREFIX))


def fields_from_annotation(annotation: KinetoEvent | None, kernel_name: str) -> dict[str, Any]:
    """What an older trace says about a collective: its `nccl:<op>` range.

    The range's first input is the tensor sent; its shape gives the element
    count. Sizes of gather-type ops grow by the (unknown) group size, so
    their bytes stay NULL.
    """
    op = None
    in_nelems = dtype = None
    if annotation is not None:
        op = _op_of_range(str(annotation.name))
        args = annotation.args or NO_ARGS
        dims, types = _decode_raw(args.input_dims), _decode_raw(args.input_type)
        if isinstance(dims, list) and dims and isinstance(dims[0], list) and isinstance(types, list) and types:
            shape = [to_int(d) for d in dims[0]]
            if shape and all(d is not None for d in shape):
                in_nelems = 1
                for d in shape:
                    in_nelems *= d  # type: ignore[operator]
                dtype = normalise_dtype(clean_str(types[0]))
    if op is None:
        op = op_from_kernel_name(kernel_name)
    grows = op in ("all_gather", "gather")
    return {
        "op": op,
        "dtype": dtype,
        "in_nelems": in_nelems,
        "bytes": None if grows else _bytes(in_nelems, None, dtype),
    }


def build_collectives(kernels: EventRows, cpu_ops: EventRows, api_calls: EventRows, annotations: EventRows) -> dict[str, list] | None:
    """Column lists for the `collectives` table, or None when there are none.

    Uses the kept events: communication kernels, `record_param_comms` ops
    and `nccl:` ranges, by row index in their tables.
    """
    comm = sorted(kernels.kept)
    param_ops = []
    for j in sorted(cpu_ops.kept):
        name = clean_str((cpu_ops.kept[j].args or NO_ARGS).collective_name)
        if name is None or name.lower() not in NOT_COLLECTIVES:
            param_ops.append(j)
    if not comm and not param_ops:
        return None

    op_start, op_end, op_external, op_tid = cpu_ops.take_columns(("start_ns", "end_ns", "external_id", "tid"), param_ops)
    op_interval = dict(zip(param_ops, zip(op_start, op_end)))
    external_of_op = dict(zip(param_ops, op_external))
    param_by_external: dict[int, int] = {}
    for j, external in zip(param_ops, op_external):
        if external is not None:
            param_by_external.setdefault(external, j)
    param_ranges = Enclosing(op_tid, op_start, op_end, param_ops)

    ranges = sorted(annotations.kept)
    a_start, a_end, a_tid = annotations.take_columns(("start_ns", "end_ns", "tid"), ranges)
    annotation_interval = dict(zip(ranges, zip(a_start, a_end)))
    annotation_ranges = Enclosing(a_tid, a_start, a_end, ranges)

    k_correlation, k_external, k_start, k_end = kernels.take_columns(("correlation_id", "external_id", "start_ns", "end_ns"), comm)
    launches = _launches(api_calls, {c for c in k_correlation if c is not None})

    kernels_of_op: dict[int, list[int]] = {}
    unclaimed: list[tuple[int, int | None, int | None]] = []  # kernel's place in comm, param op, annotation
    for place, (correlation, external) in enumerate(zip(k_correlation, k_external)):
        launch = launches.get(correlation) if correlation is not None else None
        j = param_by_external.get(external) if external is not None else None
        annotation = None
        if launch is not None:
            if j is None:
                j = param_ranges.find(*launch)
            annotation = annotation_ranges.find(*launch)
        if j is not None and (cpu_ops.kept[j].args or NO_ARGS).collective_name is not None:
            kernels_of_op.setdefault(j, []).append(place)
        else:
            unclaimed.append((place, j, annotation))

    def attach(row: dict[str, Any], places: list[int]) -> dict[str, Any]:
        """The kernels' interval (first start to last end), first kernel's name and correlation."""
        if not places:
            row["start_ns"], row["end_ns"] = row.get("cpu_start_ns"), row.get("cpu_end_ns")
            return row
        first = min(places, key=lambda place: k_start[place] or 0)
        row["start_ns"] = k_start[first]
        ends = [end for end in (k_end[place] for place in places) if end is not None]
        row["end_ns"] = max(ends) if ends else None
        row["kernel_name"] = kernels.kept[comm[first]].name
        row["correlation_id"] = k_correlation[first]
        return row

    rows: list[dict[str, Any]] = []
    for j in param_ops:
        args = cpu_ops.kept[j].args or NO_ARGS
        if args.collective_name is None:
            continue
        row = fields_from_args(args)
        row["cpu_start_ns"], row["cpu_end_ns"] = op_interval[j]
        row["external_id"] = external_of_op[j]
        rows.append(attach(row, kernels_of_op.get(j, [])))
    for place, j, annotation in unclaimed:
        kernel = kernels.kept[comm[place]]
        args = kernel.args or NO_ARGS
        if args.collective_name is not None:
            row = fields_from_args(args)
        else:
            row = fields_from_annotation(annotations.kept[annotation] if annotation is not None else None, str(kernel.name))
        if j is not None:
            row["cpu_start_ns"], row["cpu_end_ns"] = op_interval[j]
        elif annotation is not None:
            row["cpu_start_ns"], row["cpu_end_ns"] = annotation_interval[annotation]
        row["external_id"] = external_of_op[j] if j is not None else k_external[place]
        rows.append(attach(row, [place]))
    if not rows:
        return None
    rows.sort(key=lambda r: (r["start_ns"] is None, r["start_ns"] or 0))
    return {column: [row.get(column) for row in rows] for column in COLUMNS}


def _launches(api_calls: EventRows, correlations: set[int]) -> dict[int, tuple[int, int]]:
    """correlation id → (thread, start) of the runtime call with that id."""
    if not correlations or "correlation_id" not in api_calls.columns:
        return {}
    wanted = pa.array(sorted(correlations), type=pa.int64())
    mask = pc.fill_null(pc.is_in(api_calls.columns["correlation_id"], value_set=wanted), False)
    calls = pc.indices_nonzero(mask).to_pylist()
    launches: dict[int, tuple[int, int]] = {}
    for correlation, tid, start in zip(*api_calls.take_columns(("correlation_id", "tid", "start_ns"), calls)):
        if start is not None:
            launches.setdefault(correlation, (tid, start))
    return launches
