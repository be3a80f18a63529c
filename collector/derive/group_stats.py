"""Per-group aggregates computed with numpy exactly as DuckDB computes them.

The kernel_names and step_launches tables collector.derive stores are what
DuckDB's group-by with filtered aggregates gives (NULL sums and extremes
over no rows, `min` of the category among the counted kernels else among
all), to the last bit: the quantiles are DuckDB's `quantile_cont`, its
interpolation rounded as DuckDB's build rounds it (a fused multiply-add),
so the stored values equal what the same SQL gives. Computed with numpy: a
DuckDB connection costs more than the work.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpulens.collector import arrow_compute as pc
from gpulens.collector.derive.inputs import _MAX, _MIN, _Columns, _sorted_codes
from gpulens.collector.schema import KERNEL_NAMES_SCHEMA


def _kernel_names(kernels: pa.Table) -> pa.Table:
    """Per (run, rank, name), in that order: kernel_stats over the scoped
    kernels, and the launched kernels' totals short_kernels and
    launch_outliers start from. What DuckDB's group-by with filtered
    aggregates gives (NULL sums and extremes over no rows, `min` of the
    category among the counted kernels else among all), computed with numpy:
    a DuckDB connection costs more than the work."""
    n = kernels.num_rows
    if n == 0:
        return KERNEL_NAMES_SCHEMA.empty_table()
    runs, run_values = _sorted_codes(kernels.column("run"))
    ranks, rank_values = _sorted_codes(kernels.column("rank"))
    names, name_values = _sorted_codes(kernels.column("name"))
    order = np.lexsort((names, ranks, runs))
    group_keys = np.column_stack((runs[order], ranks[order], names[order]))
    starts = np.flatnonzero(np.concatenate(([True], (group_keys[1:] != group_keys[:-1]).any(axis=1))))
    opens = np.zeros(n, dtype=bool)
    opens[starts] = True
    group = np.empty(n, dtype=np.int64)
    group[order] = np.cumsum(opens) - 1
    groups = len(starts)

    cols = _Columns(kernels, ("dur_ns", "launch_call_ns"))
    scoped = pc.fill_null(kernels.column("scoped"), False).to_numpy(zero_copy_only=False)
    counted = scoped & cols.valid["dur_ns"] & (cols["dur_ns"] >= 0)
    # Launched: with a launch call, in the complete profiler steps (as every per-rank aggregate).
    launched = scoped & pc.is_valid(kernels.column("launch_queue_ns")).to_numpy(zero_copy_only=False)
    dur_ns = cols["dur_ns"]

    kernel_count = np.bincount(group, weights=counted, minlength=groups).astype(np.int64)
    total_ns = _group_sum(group, dur_ns, counted, groups)
    min_ns = _group_extreme(group, dur_ns, counted, groups, np.minimum, _MAX)
    max_ns = _group_extreme(group, dur_ns, counted, groups, np.maximum, _MIN)
    quantiles = _group_quantiles(group, dur_ns, counted, groups, (0.5, 0.95))
    launched_count = np.bincount(group, weights=launched, minlength=groups).astype(np.int64)
    launched_gpu_ns = _group_sum(group, dur_ns, launched & cols.valid["dur_ns"], groups)
    launch_call_ns = _group_sum(group, cols["launch_call_ns"], launched & cols.valid["launch_call_ns"], groups)
    first = order[starts]
    return pa.table({
        "run": pc.take(pa.array(run_values, pa.string()), runs[first]),
        "rank": pc.take(pa.array(rank_values, pa.int32()), ranks[first]),
        "name": pc.take(pa.array(name_values, pa.string()), names[first]),
        "category": _group_min_text(kernels.column("category"), group, counted, groups),
        "kind": _group_min_text(kernels.column("kind"), group, counted, groups),
        "kernel_count": kernel_count,
        "total_ns": total_ns,
        "min_ns": min_ns,
        "max_ns": max_ns,
        "p50_ns": quantiles[0],
        "p95_ns": quantiles[1],
        "launched_count": launched_count,
        "launched_gpu_ns": launched_gpu_ns,
        "launch_call_total_ns": launch_call_ns,
    }, schema=KERNEL_NAMES_SCHEMA)


def _step_launches(step_key: np.ndarray, queue_ns: np.ndarray, launched: np.ndarray, call_ns: np.ndarray,
                   call_ns_valid: np.ndarray, delay_ns: np.ndarray, delay_counted: np.ndarray) -> dict[str, list]:
    """Per step in order (step_key _MIN: outside every step, last), over the
    launched kernels whose launch call it holds: what step_launch_summary
    reports that no threshold changes. The quantiles are exactly DuckDB's
    `quantile_cont` (see `_group_quantiles`). The delay statistics count the
    kernels of `delay_counted` (those whose call's duration is known, less
    a graph replay's kernels)."""
    if not launched.any():
        return {}
    steps = step_key[launched]
    # Outside every step sorts last, as NULLs do.
    step_values, group = np.unique(np.where(steps == _MIN, _MAX, steps), return_inverse=True)
    groups = len(step_values)
    known = call_ns_valid[launched]
    counted = delay_counted[launched]
    delay = delay_ns[launched]
    delay_sums = _group_sum(group, delay, counted, groups)
    call_sums = _group_sum(group, call_ns[launched], known, groups)
    quantiles = _group_quantiles(group, delay, counted, groups, (0.5, 0.95))
    return {
        "step": [None if value == _MAX else int(value) for value in step_values],
        "kernel_count": np.bincount(group, minlength=groups).tolist(),
        "tklqt_ns": _group_sum(group, queue_ns[launched], np.ones(len(group), dtype=bool), groups).to_pylist(),
        "launch_call_total_ns": pc.fill_null(call_sums, 0).to_pylist(),
        "launch_delay_total_ns": pc.fill_null(delay_sums, 0).to_pylist(),
        "launch_delay_p50_ns": quantiles[0].to_pylist(),
        "launch_delay_p95_ns": quantiles[1].to_pylist(),
    }


# --- per-group aggregates, as DuckDB computes them ------------------------------


def _group_sum(group: np.ndarray, values: np.ndarray, keep: np.ndarray, groups: int) -> pa.Array:
    """Exact int64 sums of the kept values per group; NULL where none is kept."""
    kept = np.flatnonzero(keep)
    sums = np.zeros(groups, dtype=np.int64)
    np.add.at(sums, group[kept], values[kept])
    any_kept = np.bincount(group[kept], minlength=groups) > 0
    return pa.array(sums, mask=~any_kept, type=pa.int64())


def _group_extreme(group: np.ndarray, values: np.ndarray, keep: np.ndarray, groups: int,
                   ufunc: np.ufunc, identity: int) -> pa.Array:
    kept = np.flatnonzero(keep)
    out = np.full(groups, identity, dtype=np.int64)
    ufunc.at(out, group[kept], values[kept])
    any_kept = np.bincount(group[kept], minlength=groups) > 0
    return pa.array(out, mask=~any_kept, type=pa.int64())


def _group_quantiles(group: np.ndarray, values: np.ndarray, keep: np.ndarray, groups: int,
                     quantiles: tuple[float, ...]) -> list[pa.Array]:
    """Per group, DuckDB's `quantile_cont` of the kept values: position
    RN = (n - 1) q in the sorted values, between its neighbours lo and hi
    (d = RN - floor(RN)) at lo (1 - d) + hi d; NULL where none is kept."""
    kept = np.flatnonzero(keep)
    kept_group, kept_values = group[kept], values[kept]
    order = np.lexsort((kept_values, kept_group))
    ordered = kept_values[order].astype(np.float64)
    counts = np.bincount(kept_group, minlength=groups)
    offsets = np.cumsum(counts) - counts
    some = counts > 0
    results = []
    for q in quantiles:
        position = (counts[some] - 1) * q
        low = np.floor(position)
        lo, hi = ordered[offsets[some] + low.astype(np.int64)], ordered[offsets[some] + np.ceil(position).astype(np.int64)]
        value = np.zeros(groups, dtype=np.float64)
        value[some] = [_interpolate(a, b, d) for a, b, d in zip(lo.tolist(), hi.tolist(), (position - low).tolist())]
        results.append(pa.array(value, mask=~some, type=pa.float64()))
    return results


def _interpolate(lo: float, hi: float, d: float) -> float:
    """lo (1 - d) + hi d as DuckDB's build computes it: hi d rounded, then
    lo (1 - d) added with one rounding (a fused multiply-add). So the
    stored quantiles equal what the same SQL gives, to the last bit, and a
    quantile that lies on a whole number is that number. One call per
    group and quantile: a few hundred a file.

    Exact: the three doubles' ratios have power-of-two denominators, so
    the sum is taken over the larger one in integers, and int / int rounds
    once, as float(Fraction) does (7x faster than Fractions, which cost a
    small file 4 ms: a twentieth of its ingest)."""
    if d == 0.0:
        return lo
    lo_num, lo_den = lo.as_integer_ratio()
    weight_num, weight_den = (1.0 - d).as_integer_ratio()
    high_num, high_den = (hi * d).as_integer_ratio()
    num, den = lo_num * weight_num, lo_den * weight_den
    if high_den > den:
        num, den = num * (high_den // den), high_den
    return (num + high_num * (den // high_den)) / den


def _group_min_text(column: pa.ChunkedArray, group: np.ndarray, preferred: np.ndarray, groups: int) -> pa.Array:
    """coalesce(min(column) filter (where preferred), min(column)) per group."""
    codes, values = _sorted_codes(column)
    null_code = len(values) - 1
    present = codes != null_code
    best = _group_extreme(group, codes, present & preferred, groups, np.minimum, _MAX)
    fallback = _group_extreme(group, codes, present, groups, np.minimum, _MAX)
    chosen = pc.fill_null(pc.coalesce(best, fallback), null_code).to_numpy(zero_copy_only=False)
    return pc.take(pa.array(values, pa.string()), pa.array(chosen))
