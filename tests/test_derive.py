"""gpulens.collector.derive: the per-kernel facts ingest stores beside each trace file.

Small hand-made ranks (times in µs from T0) with every derived value
worked out by hand; the analyses built on them are pinned in
test_time_breakdown, test_launch and test_power.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from gpulens.analysis.dataset import open_dataset
from gpulens.collector.derive import derive_trace_tables
from gpulens.collector.errors import DatasetError
from gpulens.collector.ingest.base import build_table

US = 1_000
T0 = 1_700_000_000_000_000_000


def _tables(kernels: list[tuple], calls: list[tuple] = (), steps: list[tuple] = (), rank: int = 0) -> dict:
    """kernels: (correlation_id, category, stream, start_us, end_us[, device]);
    calls: (correlation_id, name, start_us, dur_us); steps: (step, start_us, end_us)."""
    n = len(kernels)
    return {
        "kernels": build_table("kernels", {
            "run": ["r"] * n, "rank": [rank] * n, "device": [k[5] if len(k) > 5 else 0 for k in kernels],
            "stream": [k[2] for k in kernels], "name": [f"k{k[0]}" for k in kernels],
            "category": [k[1] for k in kernels], "kind": ["kernel"] * n,
            "start_ns": [T0 + k[3] * US for k in kernels], "end_ns": [T0 + k[4] * US for k in kernels],
            "dur_ns": [(k[4] - k[3]) * US for k in kernels], "correlation_id": [k[0] for k in kernels],
        }),
        "api_calls": build_table("api_calls", {
            "run": ["r"] * len(calls), "rank": [rank] * len(calls), "name": [c[1] for c in calls],
            "start_ns": [T0 + c[2] * US for c in calls], "end_ns": [T0 + (c[2] + c[3]) * US for c in calls],
            "dur_ns": [c[3] * US for c in calls], "correlation_id": [c[0] for c in calls],
        }),
        "annotations": build_table("annotations", {
            "run": ["r"] * len(steps), "rank": [rank] * len(steps), "name": [f"ProfilerStep#{s[0]}" for s in steps],
            "kind": ["profiler_step"] * len(steps), "step": [s[0] for s in steps],
            "start_ns": [T0 + s[1] * US for s in steps], "end_ns": [T0 + s[2] * US for s in steps],
        }),
    }


def _column(table, name: str) -> list:
    return table.column(name).to_pylist()


def _us(values: list) -> list:
    return [None if v is None else v / US for v in values]


def test_each_kernel_gets_the_earliest_runtime_call_with_its_correlation_id():
    derived = derive_trace_tables(_tables(
        kernels=[(1, "compute", 7, 100, 110), (2, "compute", 7, 120, 130), (3, "compute", 7, 140, 150)],
        calls=[(1, "cudaLaunchKernel", 10, 4), (2, "cudaGraphLaunch", 30, 5), (2, "cudaLaunchKernel", 20, 6)],
    ))["kernels"]
    assert _column(derived, "launch_call_name") == ["cudaLaunchKernel", "cudaLaunchKernel", None]
    assert _us(_column(derived, "launch_call_start_ns")) == [T0 / US + 10, T0 / US + 20, None]
    assert _us(_column(derived, "launch_call_ns")) == [4, 6, None]
    # delay: start - call end; queue: start - call start
    assert _us(_column(derived, "launch_delay_ns")) == [86, 94, None]
    assert _us(_column(derived, "launch_queue_ns")) == [90, 100, None]


def test_the_step_is_the_disjoint_step_window_holding_the_launch_call():
    # Step 1 [0, 100) overlaps step 2 [80, 200): step 1 is cut at 80.
    derived = derive_trace_tables(_tables(
        kernels=[(1, "compute", 7, 300, 310), (2, "compute", 7, 300, 310), (3, "compute", 7, 300, 310)],
        calls=[(1, "cudaLaunchKernel", 50, 1), (2, "cudaLaunchKernel", 90, 1), (3, "cudaLaunchKernel", 250, 1)],
        steps=[(1, 0, 100), (2, 80, 200)],
    ))["kernels"]
    assert _column(derived, "step") == [1, 2, None]


def test_kernels_launched_in_the_last_step_are_out_of_scope():
    # The last step starts at 100. Kernel 2 starts after it but was launched
    # before; kernel 3 was launched after; kernel 4 has no call.
    derived = derive_trace_tables(_tables(
        kernels=[(1, "compute", 7, 10, 20), (2, "compute", 7, 120, 130), (3, "compute", 7, 140, 150),
                 (4, "compute", 7, 160, 170)],
        calls=[(1, "cudaLaunchKernel", 5, 1), (2, "cudaLaunchKernel", 90, 1), (3, "cudaLaunchKernel", 110, 1)],
        steps=[(1, 0, 100), (2, 100, 200)],
    ))["kernels"]
    assert _column(derived, "scoped") == [True, True, False, False]


def test_a_rank_with_one_step_counts_whole():
    derived = derive_trace_tables(_tables(
        kernels=[(1, "compute", 7, 120, 130)], calls=[(1, "cudaLaunchKernel", 110, 1)], steps=[(1, 100, 200)],
    ))["kernels"]
    assert _column(derived, "scoped") == [True]


# compute A [0,100] on stream 7, communication C [50,200] on 24, compute
# B [150,250] on 7, memcpy M [300,340] on 9 (launched at 280, inside the gap
# [250,300]: host wait), compute D [400,500] launched at 0.
SWEEP = dict(
    kernels=[(1, "compute", 7, 0, 100), (2, "communication", 24, 50, 200), (3, "compute", 7, 150, 250),
             (4, "memory", 9, 300, 340), (5, "compute", 7, 400, 500)],
    calls=[(1, "cudaLaunchKernel", -5, 1), (2, "ncclLaunch", 40, 1), (3, "cudaLaunchKernel", 20, 1),
           (4, "cudaMemcpyAsync", 280, 1), (5, "cudaLaunchKernel", 0, 1)],
)


def test_the_rank_summary_holds_each_union_and_the_idle_gaps():
    summary = derive_trace_tables(_tables(**SWEEP))["rank_summary"].to_pylist()
    assert len(summary) == 1
    in_us = {k: v / US for k, v in summary[0].items() if k.endswith("_ns") and not k.startswith(("span", "first", "last", "main"))}
    # busy [0,250] [300,340] [400,500]; compute [0,100] [150,250] [400,500];
    # communication [50,200]; compute or communication [0,250] [400,500]
    assert in_us == {"busy_ns": 390, "compute_union_ns": 300, "comm_union_ns": 150, "memory_union_ns": 40,
                     "compute_comm_union_ns": 350, "idle_ns": 110, "idle_host_wait_ns": 50, "unlaunched_busy_ns": 0}
    assert (summary[0]["scoped_kernel_count"], summary[0]["idle_gap_count"], summary[0]["main_device"]) == (5, 2, 0)
    assert ((summary[0]["span_start_ns"] - T0) / US, (summary[0]["span_end_ns"] - T0) / US) == (0, 500)


def test_each_kernel_carries_the_idle_gap_it_ends_and_its_cause():
    derived = derive_trace_tables(_tables(**SWEEP))["kernels"]
    assert _us(_column(derived, "rank_gap_ns")) == [None, None, None, 50, 60]
    assert _column(derived, "rank_gap_host_wait") == [None, None, None, True, False]
    # per stream: B waits on stream 7 for [100,150] (launched at 20: not host
    # wait), D for [250,400]
    assert _us(_column(derived, "stream_gap_ns")) == [None, None, 50, None, 150]
    assert _column(derived, "stream_gap_host_wait") == [None, None, False, None, False]


def test_profiler_steps_carry_the_gpu_busy_time_inside_them():
    # Kernels [0,100] and [50,200] (union [0,200]) and [300,340]; step 1
    # [0,150), step 2 [150,400): 150 and 50 + 40.
    derived = derive_trace_tables(_tables(
        kernels=[(1, "compute", 7, 0, 100), (2, "communication", 24, 50, 200), (3, "compute", 7, 300, 340)],
        steps=[(1, 0, 150), (2, 150, 400)],
    ))["annotations"]
    assert _us(_column(derived, "gpu_busy_ns")) == [150, 90]


def test_gpu_phases_give_compute_precedence_and_merge_touching_segments():
    # compute [0,100] and [100,150], communication [50,200], memory [180,300]
    # on device 0; compute [0,10] on device 1.
    phases = derive_trace_tables(_tables(
        kernels=[(1, "compute", 7, 0, 100), (2, "compute", 7, 100, 150), (3, "communication", 24, 50, 200),
                 (4, "memory", 9, 180, 300), (5, "compute", 7, 0, 10, 1)],
    ))["gpu_phases"]
    rows = [(r["device"], r["phase"], (r["start_ns"] - T0) // US, (r["end_ns"] - T0) // US) for r in phases.to_pylist()]
    assert sorted(rows) == [(0, "communication", 150, 200), (0, "compute", 0, 150), (0, "memory", 200, 300),
                            (1, "compute", 0, 10)]


def test_ranks_of_one_file_are_derived_apart():
    # An nsys export can hold several ranks: their kernels never share a sweep.
    rank0 = _tables(kernels=[(1, "compute", 7, 0, 100)], calls=[(1, "cudaLaunchKernel", -10, 1)])
    rank1 = _tables(kernels=[(1, "compute", 7, 50, 60)], calls=[(1, "cudaLaunchKernel", 40, 1)], rank=1)
    import pyarrow as pa
    both = {name: pa.concat_tables([rank0[name], rank1[name]]) for name in rank0}
    derived = derive_trace_tables(both)
    assert [r["busy_ns"] / US for r in derived["rank_summary"].to_pylist()] == [100, 10]
    assert _us(_column(derived["kernels"], "launch_call_start_ns")) == [T0 / US - 10, T0 / US + 40]


def test_a_kernels_file_without_the_derived_columns_is_named_on_open(tmp_path):
    old = _tables(kernels=[(1, "compute", 7, 0, 100)])["kernels"].drop_columns(["scoped", "rank_gap_ns"])
    path = tmp_path / "traces" / "run=r" / "kernels" / "old.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(old, path)
    with pytest.raises(DatasetError, match=r"old\.parquet: kernels written by an older gpulens"):
        open_dataset(tmp_path)


def test_step_launches_sum_each_steps_launches_and_take_its_delay_quantiles():
    # Step 1 [0,100) launches kernels 1-3 (delays 10, 20, 40 µs: calls of
    # 1 µs); kernel 4 is launched outside every step.
    derived = derive_trace_tables(_tables(
        kernels=[(1, "compute", 7, 11, 12), (2, "compute", 7, 41, 42), (3, "compute", 7, 81, 82),
                 (4, "compute", 7, 300, 310)],
        calls=[(1, "cudaLaunchKernel", 0, 1), (2, "cudaLaunchKernel", 20, 1), (3, "cudaLaunchKernel", 40, 1),
               (4, "cudaLaunchKernel", 250, 1)],
        steps=[(1, 0, 100)],
    ))["step_launches"]
    rows = {r["step"]: r for r in derived.to_pylist()}
    assert sorted(rows, key=lambda s: (s is None, s)) == [1, None]
    one = rows[1]
    assert (one["kernel_count"], one["tklqt_ns"] / US, one["launch_call_total_ns"] / US,
            one["launch_delay_total_ns"] / US) == (3, 11 + 21 + 41, 3, 70)
    # quantile_cont over (10, 20, 40) µs: the median 20, p95 at 1.9 → 38
    assert (one["launch_delay_p50_ns"] / US, round(one["launch_delay_p95_ns"] / US, 6)) == (20, 38)
    assert (rows[None]["kernel_count"], rows[None]["launch_delay_total_ns"] / US) == (1, 49)


def test_kernel_names_count_scoped_kernels_and_launched_ones_apart():
    # Two steps, the last starting at 100: g at 10 and 30 (launched), g at
    # 150 launched in the last step (out of scope); m at 50 without a call.
    derived = derive_trace_tables(_tables(
        kernels=[(1, "compute", 7, 10, 20), (2, "compute", 7, 30, 60), (3, "compute", 7, 150, 160),
                 (4, "memory", 9, 50, 54)],
        calls=[(1, "cudaLaunchKernel", 5, 2), (2, "cudaLaunchKernel", 25, 2), (3, "cudaLaunchKernel", 120, 2)],
        steps=[(1, 0, 100), (2, 100, 200)],
    ))["kernel_names"]
    rows = {r["name"]: r for r in derived.to_pylist()}
    one = rows["k1"]  # names are k<correlation id>: one kernel each
    assert (one["kernel_count"], one["total_ns"] / US, one["launched_count"], one["launch_call_total_ns"] / US) == (1, 10, 1, 2)
    # Launched in the last step: neither counted nor among the launched ones (launch analyses' scope too).
    assert (rows["k3"]["kernel_count"], rows["k3"]["launched_count"]) == (0, 0)
    assert (rows["k4"]["kernel_count"], rows["k4"]["launched_count"], rows["k4"]["p50_ns"] / US) == (1, 0, 4)


def test_a_derived_table_missing_columns_is_named_on_open(tmp_path):
    tables = derive_trace_tables(_tables(kernels=[(1, "compute", 7, 0, 100)]))
    for name in ("kernels", "rank_summary"):
        table = tables[name] if name == "kernels" else tables[name].drop_columns(["kernel_count"])
        path = tmp_path / "traces" / "run=r" / name / "a.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(table, path)
    with pytest.raises(DatasetError, match=r"rank_summary/a\.parquet: rank_summary written by an older gpulens \(no kernel_count\)"):
        open_dataset(tmp_path)


def test_gpu_phases_tile_the_main_devices_window_with_running_totals():
    # compute [0,100], a gap, communication [300,350]; steps span [-50,500].
    phases = derive_trace_tables(_tables(
        kernels=[(1, "compute", 7, 0, 100), (2, "communication", 24, 300, 350)],
        steps=[(1, -50, 200), (2, 200, 500)],
    ))["gpu_phases"].to_pylist()
    rows = [(r["phase"], (r["start_ns"] - T0) // US, (r["end_ns"] - T0) // US,
             r["compute_before_ns"] // US, r["communication_before_ns"] // US) for r in phases]
    assert rows == [("idle", -50, 0, 0, 0), ("compute", 0, 100, 0, 0), ("idle", 100, 300, 100, 0),
                    ("communication", 300, 350, 100, 0), ("idle", 350, 500, 100, 50)]


def test_gpu_phases_are_cut_at_bucket_bounds():
    from gpulens.collector.derive import PHASE_BUCKET_NS

    # one 40 ms kernel spans three 16.8 ms buckets
    phases = derive_trace_tables(_tables(kernels=[(1, "compute", 7, 0, 40_000)]))["gpu_phases"].to_pylist()
    assert [r["bucket"] for r in phases] == [r["start_ns"] // PHASE_BUCKET_NS for r in phases]
    assert len(phases) == 3 and sum(r["dur_ns"] for r in phases) == 40_000 * US
    assert [r["compute_before_ns"] for r in phases] == [0, phases[0]["dur_ns"], phases[0]["dur_ns"] + phases[1]["dur_ns"]]


def test_gpu_phases_of_a_kernel_days_away_take_wider_buckets_not_millions_of_rows():
    from gpulens.collector.derive import PHASE_MAX_BUCKETS

    # A bogus time 51 days after the other kernel: 2^24 ns buckets would be 266 million tiles.
    days_51_us = 51 * 86_400 * 10**6
    phases = derive_trace_tables(_tables(
        kernels=[(1, "compute", 7, 0, 100), (2, "compute", 7, days_51_us, days_51_us + 100)],
    ))["gpu_phases"].to_pylist()
    bits = {r["bucket_bits"] for r in phases}
    assert (bits, len(phases) <= PHASE_MAX_BUCKETS + 3, sum(r["dur_ns"] for r in phases),
            [r["bucket"] for r in phases] == [r["start_ns"] >> 33 for r in phases]) == (
        {33}, True, (days_51_us + 100) * US, True)


def _assert_rows_match(got: list[tuple], expected: list[tuple]) -> None:
    """Equal rows. Quantiles are compared to the last bit where this
    DuckDB build fuses its interpolation's multiply-add (as the one
    installed here does), else to within that bit's rounding."""
    import duckdb

    # 0.95 of the way from 1000 to 2000: 1599.9999999999995 unfused.
    probe = "select quantile_cont(x, 0.95) from unnest([1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 2000]) t(x)"
    fused = duckdb.sql(probe).fetchall()[0][0] == 1599.9999999999998
    assert len(got) == len(expected)
    for got_row, expected_row in zip(got, expected):
        assert [type(v) for v in got_row] == [type(v) for v in expected_row]
        for value, want in zip(got_row, expected_row):
            assert value == (pytest.approx(want, rel=1e-15) if isinstance(want, float) and not fused else want)


def _random_kernels(seed: int, n: int = 5000):
    """Kernels of 2 runs x 3 ranks with the awkward cases mixed in: NULL
    names and durations, negative durations, kernels out of scope, kernels
    without a launch call or without its duration."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)

    def sometimes_null(values, share):
        return [None if drop else v for v, drop in zip(values.tolist(), rng.random(n) < share)]

    names = [f"kernel_{i:02d}" for i in rng.integers(0, 40, n)]
    return pa.table({
        "run": pa.array(rng.choice(["train", "eval"], n).tolist()),
        "rank": pa.array(rng.integers(0, 3, n), pa.int32()),
        "name": pa.array([None if i % 97 == 0 else name for i, name in enumerate(names)], pa.string()),
        "category": pa.array(rng.choice(["compute", "communication", "memory"], n).tolist()),
        "kind": pa.array(rng.choice(["kernel", "memcpy"], n).tolist()),
        "dur_ns": pa.array(sometimes_null(rng.integers(-5, 2_000_000, n), 0.02), pa.int64()),
        "scoped": pa.array(rng.random(n) < 0.9),
        "launch_call_ns": pa.array(sometimes_null(rng.integers(1_000, 9_000, n), 0.35), pa.int64()),
        "launch_queue_ns": pa.array(sometimes_null(rng.integers(0, 90_000, n), 0.3), pa.int64()),
    })


def test_kernel_names_are_what_duckdbs_group_by_gives():
    import duckdb

    from gpulens.collector.derive.group_stats import _kernel_names

    kernels = _random_kernels(seed=7)
    con = duckdb.connect()
    con.register("kernels", kernels)
    expected = con.sql("""
        select run, rank, name,
            coalesce(min(category) filter (where counted), min(category)) as category,
            coalesce(min(kind) filter (where counted), min(kind)) as kind,
            count(*) filter (where counted) as kernel_count,
            sum(dur_ns) filter (where counted)::bigint as total_ns,
            min(dur_ns) filter (where counted) as min_ns,
            max(dur_ns) filter (where counted) as max_ns,
            quantile_cont(dur_ns, 0.5) filter (where counted) as p50_ns,
            quantile_cont(dur_ns, 0.95) filter (where counted) as p95_ns,
            count(*) filter (where launched) as launched_count,
            sum(dur_ns) filter (where launched)::bigint as launched_gpu_ns,
            sum(launch_call_ns) filter (where launched)::bigint as launch_call_total_ns
        from (select *, scoped and dur_ns >= 0 as counted, coalesce(scoped, false) and launch_queue_ns is not null as launched from kernels)
        group by run, rank, name
        order by run, rank, name
    """).fetchall()
    _assert_rows_match([tuple(row.values()) for row in _kernel_names(kernels).to_pylist()], expected)


def test_step_launches_are_what_duckdbs_group_by_gives():
    import duckdb
    import numpy as np
    import pyarrow as pa

    from gpulens.collector.derive.inputs import _MIN
    from gpulens.collector.derive.group_stats import _step_launches

    rng = np.random.default_rng(11)
    n = 4000
    step = np.where(rng.random(n) < 0.1, _MIN, rng.integers(3, 40, n))
    queue_ns, call_ns = rng.integers(0, 90_000, n), rng.integers(1_000, 9_000, n)
    launched, call_known = rng.random(n) < 0.8, rng.random(n) < 0.7
    delay_counted = call_known & (rng.random(n) < 0.9)  # less a graph replay's kernels
    delay_ns = np.maximum(queue_ns - call_ns, 0)
    got = _step_launches(step, queue_ns, launched, call_ns, call_known, delay_ns, delay_counted)

    con = duckdb.connect()
    con.register("launched", pa.table({
        "step": pa.array(step[launched], mask=step[launched] == _MIN),
        "queue_ns": queue_ns[launched],
        "call_ns": pa.array(call_ns[launched], mask=~call_known[launched]),
        "delay_ns": pa.array(delay_ns[launched], mask=~delay_counted[launched]),
    }))
    expected = con.sql("""
        select step, count(*), sum(queue_ns)::bigint, coalesce(sum(call_ns), 0)::bigint,
               coalesce(sum(delay_ns), 0)::bigint, quantile_cont(delay_ns, 0.5), quantile_cont(delay_ns, 0.95)
        from launched group by step order by step nulls last
    """).fetchall()
    _assert_rows_match(list(zip(*got.values())), expected)


def test_quantile_interpolation_rounds_the_exact_value_once():
    """lo (1 - d) + hi d with hi d rounded first, then one rounding of the
    exact sum: what a fused multiply-add gives, checked against Fractions."""
    from fractions import Fraction

    from gpulens.collector.derive.group_stats import _interpolate

    cases = [
        (1000.0, 2000.0, 0.95 * 8 - 7),  # 0.95 of 9 values: 1599.9999999999998
        (1_722_100_000_123.0, 1_722_100_000_977.0, 0.3),
        (0.1, 0.7, 1e-17),  # lo (1 - d) rounds to lo; the sum does not
        (3.0, 3.0, 0.999999999),
        (-250.5, 4.0e15, 0.5),
        (5e-324, 1e-323, 0.3),
    ]
    for lo, hi, d in cases:
        exact = Fraction(lo) * Fraction(1.0 - d) + Fraction(hi * d)
        assert _interpolate(lo, hi, d) == float(exact)
    assert _interpolate(1000.0, 2000.0, 0.95 * 8 - 7) == 1599.9999999999998
    assert _interpolate(7.0, 9.0, 0.0) == 7.0


def test_derive_gives_back_every_table_but_kernels_and_annotations_as_it_was(tmp_path):
    # The writer writes those while derive runs (store._StagedWriter).
    from gpulens.collector.derive import CHANGED_TABLES, DERIVED_TABLES
    from gpulens.collector.ingest import kineto
    from gpulens.collector.sim_trace import write_training_traces

    (path,) = write_training_traces(tmp_path, ranks=1, steps=3, kernels_per_step=60)
    tables = kineto.parse(path, "r").tables
    derived = derive_trace_tables(tables)
    assert CHANGED_TABLES == ("kernels", "annotations")
    assert {"api_calls", "cpu_ops", "collectives", "runs"} <= set(tables)
    assert all(derived[name] is tables[name] for name in tables if name not in CHANGED_TABLES)
    assert set(derived) == set(tables) | set(DERIVED_TABLES)
