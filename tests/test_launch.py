"""gpulens.analysis.launch: launch delay, queuing time (TKLQT), short kernels, verdicts.

Small hand-made runs pin exact values; the real V100 and A100 traces,
ingested once, are compared kernel by kernel with Holistic Trace Analysis
(HTA) 0.5's `get_cuda_kernel_launch_stats`, each trace loaded once.
"""

from __future__ import annotations

import inspect
import logging
import shutil
import warnings
from pathlib import Path

import polars as pl
import pytest

from gpulens.analysis import launch
from gpulens.analysis.dataset import open_dataset
from gpulens.analysis.registry import all_params
from conftest import write_graph_replay_trace, write_trace_table

T0 = 1_700_000_000_000_000_123  # epoch ns with odd last digits: any rounding to µs would show
US = 1_000


def _write_rank(root: Path, run: str, rank: int, launches: list[tuple], steps: list[tuple] = (),
                unlaunched: list[tuple] = ()) -> None:
    """Write one rank's tables; times in ns after T0.

    launches: (call_start, call_ns, kernel_start, kernel_ns[, name[, stream]]);
    steps: (step, start, end); unlaunched: (kernel_start, kernel_ns, stream),
    kernels whose launch call the trace lacks. Correlation ids follow list order.
    """
    source = f"rank{rank}"
    full = [(*item[:4], item[4] if len(item) > 4 else "k", item[5] if len(item) > 5 else 7) for item in launches]
    kernels = [(c, k_start, k_ns, name, stream) for c, (_, _, k_start, k_ns, name, stream) in enumerate(full, start=1)]
    kernels += [(10_000 + i, k_start, k_ns, "unlaunched", stream) for i, (k_start, k_ns, stream) in enumerate(unlaunched)]
    n = len(kernels)
    write_trace_table(root, run, "kernels", {
        "run": [run] * n, "rank": [rank] * n, "device": [rank] * n, "stream": [k[4] for k in kernels],
        "name": [k[3] for k in kernels], "category": ["compute"] * n, "kind": ["kernel"] * n,
        "start_ns": [T0 + k[1] for k in kernels], "end_ns": [T0 + k[1] + k[2] for k in kernels],
        "dur_ns": [k[2] for k in kernels], "correlation_id": [k[0] for k in kernels],
    }, source=source)
    m = len(full)
    write_trace_table(root, run, "api_calls", {
        "run": [run] * m, "rank": [rank] * m, "pid": [1] * m, "tid": [1] * m, "name": ["cudaLaunchKernel"] * m,
        "start_ns": [T0 + f[0] for f in full], "end_ns": [T0 + f[0] + f[1] for f in full], "dur_ns": [f[1] for f in full],
        "correlation_id": list(range(1, m + 1)),
    }, source=source)
    if steps:
        write_trace_table(root, run, "annotations", {
            "run": [run] * len(steps), "rank": [rank] * len(steps), "name": [f"ProfilerStep#{s[0]}" for s in steps],
            "kind": ["profiler_step"] * len(steps), "step": [s[0] for s in steps],
            "start_ns": [T0 + s[1] for s in steps], "end_ns": [T0 + s[2] for s in steps], "dur_ns": [s[2] - s[1] for s in steps],
        }, source=source)


def _write_graph_rank(root: Path, run: str, graph_api: str = "cudaGraphLaunch") -> None:
    """One CUDA-graph replay beside ordinary launches, as CUPTI records it:
    a 20 µs `graph_api` call (correlation 1) whose 50 "node" kernels of 2 µs
    run back to back from 25 µs, all with its correlation id (delays 5, 7,
    ... 103 µs; each shorter than the call), then three "eager" kernels of
    1 µs, each launched by its own 5 µs cudaLaunchKernel, the last starting
    150 µs after its call returned."""
    nodes = [(1, 25 * US + i * 2 * US, 2 * US, "node") for i in range(50)]
    eager = [(2, 200 * US, US, "eager"), (3, 210 * US, US, "eager"), (4, 375 * US, US, "eager")]
    kernels = nodes + eager
    n = len(kernels)
    write_trace_table(root, run, "kernels", {
        "run": [run] * n, "rank": [0] * n, "device": [0] * n, "stream": [7] * n,
        "name": [k[3] for k in kernels], "category": ["compute"] * n, "kind": ["kernel"] * n,
        "start_ns": [T0 + k[1] for k in kernels], "end_ns": [T0 + k[1] + k[2] for k in kernels],
        "dur_ns": [k[2] for k in kernels], "correlation_id": [k[0] for k in kernels],
    }, source="rank0")
    calls = [(1, graph_api, 0, 20 * US), (2, "cudaLaunchKernel", 190 * US, 5 * US),
             (3, "cudaLaunchKernel", 200 * US, 5 * US), (4, "cudaLaunchKernel", 220 * US, 5 * US)]
    m = len(calls)
    write_trace_table(root, run, "api_calls", {
        "run": [run] * m, "rank": [0] * m, "pid": [1] * m, "tid": [1] * m, "name": [c[1] for c in calls],
        "start_ns": [T0 + c[2] for c in calls], "end_ns": [T0 + c[2] + c[3] for c in calls],
        "dur_ns": [c[3] for c in calls], "correlation_id": [c[0] for c in calls],
    }, source="rank0")


# Step patterns, each at an offset `t` (ns after T0):
def _cpu_bound_step(t: int) -> list[tuple]:
    """A 100 µs step: ten 2 µs launches every 10 µs, each 2 µs kernel starting
    3 µs after its call returns. Busy 20 µs (idle 0.8), every delay 3 µs,
    every queue time 5 µs (TKLQT 50 µs)."""
    return [(t + i * 10 * US, 2 * US, t + i * 10 * US + 5 * US, 2 * US) for i in range(10)]


def _queued_step(t: int, kernel_ns: int) -> list[tuple]:
    """Four 0.5 µs launches 1 µs apart; their kernels run back to back from
    t + 1 µs. Delays: 0.5 µs, then kernel_ns - 1 µs + 0.5 µs more each."""
    return [(t + i * US, US // 2, t + US + i * kernel_ns, kernel_ns) for i in range(4)]


def _rows(frame: pl.DataFrame, *columns: str) -> list[tuple]:
    return frame.select(columns).rows()


def _short_kernel_launches() -> list[tuple]:
    """7 kernels: 3 "tiny" and 2 "small" are short (shorter than their call);
    one "tiny" outlasts its call; "slow_call"'s 60 µs call is over the limit."""
    return ([(i * 100 * US, 5 * US, i * 100 * US + 6 * US, US, "tiny") for i in range(3)]
            + [(300 * US, 5 * US, 306 * US, 6 * US, "tiny")]
            + [(400 * US + i * 100 * US, 4 * US, 405 * US + i * 100 * US, 2 * US, "small") for i in range(2)]
            + [(700 * US, 60 * US, 800 * US, 10 * US, "slow_call")])


CPU_BOUND_STEP = [(1, 0, 100 * US)]
GPU_BOUND_STEP = [(1, 0, 1_000 * US)]
FLIP_RUNS = {"m_bs8": "cpu", "m_bs16": "cpu", "m_bs32": "gpu", "m_bs64": "gpu", "g_bs8": "gpu", "g_bs16": "gpu",
             "BS4": "cpu", "gpt-batch16": "cpu", "llama_batch_size=32": "cpu", "vit-batchsize-2": "cpu",
             "jobs8": "cpu", "nobatch": "cpu"}


@pytest.fixture(scope="module")
def hand(tmp_path_factory: pytest.TempPathFactory):
    """One dataset of small hand-made runs, opened once; each test reads its own run."""
    root = tmp_path_factory.mktemp("launch_hand")
    _write_rank(root, "delay", 0, [(1_000, 500, 4_321, 700), (10_000, 2_000, 11_000, 100)])
    _write_rank(root, "steps", 0, [(9_000, 100, 12_000, 100),   # called in step 1, runs in step 2
                                   (10_000, 100, 10_500, 100),  # called exactly at step 2's start
                                   (25_000, 100, 26_000, 100),  # after the last step
                                   (-5_000, 100, 1_000, 100)],  # before the first
                [(1, 0, 10_000), (2, 10_000, 20_000)])
    _write_rank(root, "unlaunched", 0, [(0, 100, 200, 100)], unlaunched=[(500, 100, 7)])
    _write_rank(root, "same_ids_a", 0, [(0, 100, 1_000, 100)])
    _write_rank(root, "same_ids_b", 0, [(0, 100, 5_000, 100)])
    _write_rank(root, "tklqt", 0, _cpu_bound_step(0) + _cpu_bound_step(200 * US)[:4], [(1, 0, 100 * US), (2, 200 * US, 300 * US)])
    _write_rank(root, "busy", 0, [(0, US, 10 * US, 20 * US, "a", 7),       # [10, 30)
                                  (US, US, 20 * US, 20 * US, "b", 8),      # [20, 40): overlaps a on another stream
                                  (2 * US, US, 90 * US, 30 * US, "c", 7)],  # [90, 120): crosses into step 2
                [(1, 0, 100 * US), (2, 100 * US, 200 * US)],
                unlaunched=[(-5 * US, 10 * US, 9),    # [-5, 5): starts before step 1
                            (150 * US, 10 * US, 9)])  # [150, 160): no launch call, still busy time
    _write_rank(root, "cpu", 0, _cpu_bound_step(0), CPU_BOUND_STEP)
    # 250 µs kernels in a 1 ms step: busy [1 µs, 1 ms), delays 0.5, 249.5, 498.5, 747.5 µs
    _write_rank(root, "gpu", 0, _queued_step(0, 250 * US), GPU_BOUND_STEP)
    # 25 µs kernels in a 100 µs step: idle 1 %, median delay 36.5 µs (< 100 µs)
    _write_rank(root, "balanced", 0, _queued_step(0, 25 * US), [(1, 0, 100 * US)])
    _write_rank(root, "unknown", 0, [(0, US // 2, 200 * US, 10 * US)],
                [(1, 0, 1_000 * US), (2, 2_000 * US, 3_000 * US), (3, 4_000 * US, 5_000 * US)])
    _write_rank(root, "totals", 0, _cpu_bound_step(0), [(1, 0, 100 * US), (2, 100 * US, 200 * US), (3, 200 * US, 300 * US)])
    _write_rank(root, "totals", 1, _cpu_bound_step(0), [(1, 0, 100 * US)])
    _write_rank(root, "nosteps", 0, [(0, US, 2 * US, 3 * US), (10 * US, US, 12 * US, 8 * US)])
    # two 100 µs cpu-bound steps, one 1 ms gpu-bound step, then a last (cut-short) step
    _write_rank(root, "dominant", 0, _cpu_bound_step(0) + _cpu_bound_step(200 * US) + _queued_step(400 * US, 250 * US),
                [(1, 0, 100 * US), (2, 200 * US, 300 * US), (3, 400 * US, 1_400 * US), (4, 1_500 * US, 1_600 * US)])
    _write_rank(root, "short", 0, _short_kernel_launches())
    _write_rank(root, "outliers", 0, [(0, US, 151 * US, US, "a"),            # delay 150 µs
                                      (1_000 * US, US, 1_201 * US, US, "a"),  # 200 µs
                                      (2_000 * US, US, 2_101 * US, US, "b"),  # 100 µs: at the cutoff, not over
                                      (3_000 * US, US, 3_121 * US, US, "b"),  # 120 µs
                                      (4_000 * US, 60 * US, 4_060 * US, US, "c")])  # a 60 µs call
    # Two steps; the last (cut-short) one holds a short kernel and a delay outlier, both left out.
    _write_rank(root, "last_step", 0, [(10 * US, 5 * US, 16 * US, US, "tiny"), (20 * US, US, 30 * US, 2 * US, "late"),
                                       (150 * US, 5 * US, 156 * US, US, "tiny"), (160 * US, US, 400 * US, US, "late")],
                [(1, 0, 100 * US), (2, 100 * US, 200 * US)])
    _write_graph_rank(root, "graph")
    _write_graph_rank(root, "hip_graph", graph_api="hipGraphLaunch")
    _write_rank(root, "findings_cpu", 3, _cpu_bound_step(0) + _cpu_bound_step(200 * US),
                [(1, 0, 100 * US), (2, 200 * US, 300 * US), (3, 400 * US, 500 * US)])
    for run, kind in FLIP_RUNS.items():
        if kind == "cpu":
            _write_rank(root, run, 0, _cpu_bound_step(0), CPU_BOUND_STEP)
        else:
            _write_rank(root, run, 0, _queued_step(0, 250 * US), GPU_BOUND_STEP)
    return open_dataset(root)


def _of(frame: pl.DataFrame, run: str) -> pl.DataFrame:
    return frame.filter(pl.col("run") == run)


# --- kernel_launches ------------------------------------------------------------------------


def test_kernel_launches_delay_and_queue_time_exact_ns(hand) -> None:
    frame = _of(launch.kernel_launches(hand), "delay").sort("correlation_id")
    assert _rows(frame, "start_ns", "dur_ns", "launch_call_ns", "launch_delay_ns", "launch_queue_ns")[0] == (
        T0 + 4_321, 700, 500, 2_821, 3_321)


def test_kernel_launches_delay_clips_at_zero_when_kernel_starts_before_call_returns(hand) -> None:
    frame = _of(launch.kernel_launches(hand), "delay").sort("correlation_id")
    assert _rows(frame, "launch_delay_ns", "launch_queue_ns")[1] == (0, 1_000)


def test_kernel_launches_step_is_the_step_window_holding_the_call(hand) -> None:
    frame = _of(launch.kernel_launches(hand), "steps").sort("correlation_id")
    assert frame["step"].to_list() == [1, 2, None, None]


def test_kernel_launches_leaves_out_kernels_without_a_launch_call(hand) -> None:
    assert _of(launch.kernel_launches(hand), "unlaunched")["correlation_id"].to_list() == [1]


def test_kernel_launches_keeps_runs_with_the_same_correlation_ids_apart(hand) -> None:
    frame = launch.kernel_launches(hand).filter(pl.col("run").str.starts_with("same_ids")).sort("run")
    assert _rows(frame, "run", "launch_delay_ns") == [("same_ids_a", 900), ("same_ids_b", 4_900)]


# --- step_launch_summary --------------------------------------------------------------------


def test_step_launch_summary_tklqt_sums_queue_time_of_the_calls_in_the_step(hand) -> None:
    frame = _of(launch.step_launch_summary(hand), "tklqt").sort("step")
    assert _rows(frame, "step", "kernel_count", "tklqt_ns", "tklqt_share") == [(1, 10, 50 * US, 0.5), (2, 4, 20 * US, 0.2)]


def test_step_launch_summary_busy_is_the_union_of_all_streams_within_the_window(hand) -> None:
    frame = _of(launch.step_launch_summary(hand), "busy").sort("step")
    assert _rows(frame, "step", "step_ns", "gpu_busy_ns", "gpu_idle_ns", "gpu_idle_share") == [
        (1, 100 * US, 45 * US, 55 * US, 0.55), (2, 100 * US, 30 * US, 70 * US, 0.7)]


def test_step_launch_summary_verdict_cpu_bound_when_gpu_idles_and_delays_are_short(hand) -> None:
    row = _of(launch.step_launch_summary(hand), "cpu").row(0, named=True)
    assert (row["verdict"], row["gpu_idle_share"], row["launch_delay_p50_ns"], row["launch_delay_mean_ns"]) == (
        "cpu_bound", 0.8, 3_000, 3_000)


def test_step_launch_summary_verdict_gpu_bound_when_kernels_queue(hand) -> None:
    row = _of(launch.step_launch_summary(hand), "gpu").row(0, named=True)
    assert (row["verdict"], row["gpu_busy_ns"], row["launch_delay_p50_ns"], row["launch_delay_p95_ns"]) == (
        "gpu_bound", 999 * US, 374_000, 710_150)


def test_step_launch_summary_verdict_balanced_between_thresholds(hand) -> None:
    row = _of(launch.step_launch_summary(hand), "balanced").row(0, named=True)
    assert (row["verdict"], row["gpu_idle_share"], row["launch_delay_p50_ns"]) == ("balanced", 0.01, 36_500)


def test_step_launch_summary_verdict_follows_the_thresholds_given(hand) -> None:
    frame = _of(launch.step_launch_summary(hand, launch_gpu_bound_min_delay_ns=30_000), "balanced")
    assert frame["verdict"].to_list() == ["gpu_bound"]


def test_step_launch_summary_verdict_unknown_for_idle_with_long_delays_or_no_kernels(hand) -> None:
    frame = _of(launch.step_launch_summary(hand), "unknown").sort("step")
    assert _rows(frame, "step", "kernel_count", "verdict") == [(1, 1, "unknown"), (2, 0, "unknown"), (3, 0, "unknown")]
    assert frame["launch_delay_p50_ns"].to_list() == [199_500, None, None]


def test_step_launch_summary_counts_all_steps_but_the_last_in_rank_totals(hand) -> None:
    frame = _of(launch.step_launch_summary(hand), "totals").sort("rank", "step")
    assert _rows(frame, "rank", "step", "is_last", "in_rank_totals") == [
        (0, 1, False, True), (0, 2, False, True), (0, 3, True, False), (1, 1, True, True)]


def test_step_launch_summary_without_profiler_steps_uses_the_whole_trace(hand) -> None:
    frame = _of(launch.step_launch_summary(hand), "nosteps")
    assert _rows(frame, "step", "start_ns", "step_ns", "gpu_busy_ns", "tklqt_ns", "in_rank_totals") == [
        (None, T0, 20 * US, 11 * US, 4 * US, True)]


# --- launch_rank_summary --------------------------------------------------------------------


def test_launch_rank_summary_verdict_holds_for_the_most_step_time(hand) -> None:
    row = _of(launch.launch_rank_summary(hand), "dominant").row(0, named=True)
    assert (row["verdict"], row["step_count"], row["cpu_bound_steps"], row["gpu_bound_steps"]) == ("gpu_bound", 3, 2, 1)
    assert row["verdict_share"] == pytest.approx(1_000 / 1_200)
    assert (row["step_ns"], row["kernel_count"], row["gpu_busy_ns"]) == (1_200 * US, 24, 40 * US + 999 * US)


# --- short kernels and outliers -------------------------------------------------------------


def test_short_kernels_counts_per_name_with_shares(hand) -> None:
    frame = _of(launch.short_kernels(hand), "short").sort("name_rank")
    assert _rows(frame, "name", "name_rank", "kernel_count", "gpu_ns", "launch_call_total_ns") == [
        ("tiny", 1, 3, 3 * US, 15 * US), ("small", 2, 2, 4 * US, 8 * US)]
    first = frame.row(0, named=True)
    assert first["kernel_share"] == pytest.approx(3 / 7)
    assert first["gpu_time_share"] == pytest.approx(3 / 23)
    assert (first["rank_short_kernel_count"], first["rank_short_kernel_share"]) == (5, pytest.approx(5 / 7))


def test_short_kernels_call_limit_is_a_parameter(hand) -> None:
    frame = _of(launch.short_kernels(hand, short_kernel_max_call_ns=100 * US), "short")
    assert frame.sort("name_rank")["name"].to_list() == ["tiny", "small", "slow_call"]


def test_launch_outliers_delay_over_cutoff_and_slow_calls(hand) -> None:
    frame = _of(launch.launch_outliers(hand), "outliers").sort("outlier_kind", "name_rank")
    assert _rows(frame, "outlier_kind", "name", "name_rank", "kernel_count", "total_ns", "max_ns", "rank_outlier_count") == [
        ("launch_call", "c", 1, 1, 60 * US, 60 * US, 1),
        ("launch_delay", "a", 1, 2, 350 * US, 200 * US, 3),
        ("launch_delay", "b", 2, 1, 120 * US, 120 * US, 3)]


def test_kernel_launches_mark_the_kernels_a_graph_replay_launched(hand) -> None:
    frame = _of(launch.kernel_launches(hand), "graph")
    assert frame.group_by("name", "graph_launch").len().sort("name").rows() == [("eager", False, 3), ("node", True, 50)]
    assert _of(launch.kernel_launches(hand), "hip_graph").filter(pl.col("name") == "node")["graph_launch"].all()


def test_kernel_launches_keep_a_graph_kernels_queue_time_from_the_replay_call(hand) -> None:
    nodes = _of(launch.kernel_launches(hand), "graph").filter(pl.col("name") == "node").sort("start_ns")
    assert nodes["launch_queue_ns"].to_list()[:3] == [25 * US, 27 * US, 29 * US]


def test_short_kernels_count_only_the_complete_profiler_steps(hand) -> None:
    frame = _of(launch.short_kernels(hand), "last_step")
    assert _rows(frame, "name", "kernel_count", "rank_short_kernel_count") == [("tiny", 1, 1)]
    assert frame["kernel_share"].to_list() == [pytest.approx(1 / 2)]  # of the two launched in step 1


def test_launch_outliers_count_only_the_complete_profiler_steps(hand) -> None:
    frame = _of(launch.launch_outliers(hand), "last_step")
    assert frame.is_empty()  # late's 239 µs delay was in the last step; its 9 µs in step 1 is no outlier


@pytest.mark.parametrize("run", ["graph", "hip_graph"])
def test_short_kernels_leave_out_kernels_replayed_from_a_graph(hand, run: str) -> None:
    frame = _of(launch.short_kernels(hand), run)
    assert _rows(frame, "name", "kernel_count", "rank_short_kernel_count") == [("eager", 3, 3)]
    assert frame["kernel_share"].to_list() == [pytest.approx(3 / 53)]  # of every launched kernel, nodes included


def test_launch_outliers_leave_out_kernels_replayed_from_a_graph(hand) -> None:
    frame = _of(launch.launch_outliers(hand), "graph")
    assert _rows(frame, "outlier_kind", "name", "kernel_count", "total_ns") == [("launch_delay", "eager", 1, 150 * US)]


def test_a_graph_replays_call_time_counts_once_with_its_first_kernel(hand) -> None:
    nodes = _of(launch.kernel_launches(hand), "graph").filter(pl.col("name") == "node").sort("start_ns")
    assert nodes["launch_call_ns"].to_list() == [20 * US] + [None] * 49
    assert _of(launch.step_launch_summary(hand), "graph")["launch_call_total_ns"].to_list() == [20 * US + 3 * 5 * US]


def test_step_launch_summary_median_delay_leaves_out_a_graph_replays_kernels(hand) -> None:
    row = _of(launch.step_launch_summary(hand), "graph").row(0, named=True)
    assert (row["kernel_count"], row["launch_delay_p50_ns"]) == (53, 5 * US)  # the eager kernels' 5, 5 and 150 µs


def test_kernel_launches_and_ingest_know_graph_launches_by_the_same_names() -> None:
    import re

    from gpulens.collector.derive import GRAPH_LAUNCH_PREFIXES

    sql = (Path(launch.__file__).parent / "sql" / "kernel_launches.sql").read_text()
    assert tuple(re.findall(r"launch_call_name like '(\w+)%'", sql)) == GRAPH_LAUNCH_PREFIXES


def test_a_kineto_graph_replay_is_ingested_as_one_launch_of_many_kernels(tmp_path: Path) -> None:
    from gpulens.collector.ingest import ingest_paths

    ingest_paths([write_graph_replay_trace(tmp_path / "graph.json", kernels=40)], tmp_path / "data", run="graph")
    con = open_dataset(tmp_path / "data")
    launches = launch.kernel_launches(con)
    assert (launches.height, launches["graph_launch"].all()) == (40, True)
    assert launch.short_kernels(con).is_empty() and launch.launch_outliers(con).is_empty()


def test_graph_launches_give_the_share_of_a_ranks_work_that_graphs_replayed(hand) -> None:
    row = _of(launch.graph_launches(hand), "graph").row(0, named=True)
    assert {key: row[key] for key in ("replays", "graph_kernels", "graph_gpu_ns", "replay_call_ns",
                                      "launched_kernels", "launched_gpu_ns")} == {
        "replays": 1, "graph_kernels": 50, "graph_gpu_ns": 100 * US, "replay_call_ns": 20 * US,
        "launched_kernels": 53, "launched_gpu_ns": 103 * US}
    assert (row["kernel_share"], row["gpu_time_share"]) == (pytest.approx(50 / 53), pytest.approx(100 / 103))


def test_graph_launches_of_a_rank_without_graphs_count_no_replays(hand) -> None:
    row = _of(launch.graph_launches(hand), "delay").row(0, named=True)
    assert (row["replays"], row["graph_kernels"], row["graph_gpu_ns"], row["kernel_share"]) == (0, 0, None, 0.0)


def test_gpu_idle_of_a_rank_that_replays_graphs_does_not_advise_capturing_one(hand) -> None:
    from gpulens.analysis.time_breakdown import gpu_idle_findings

    finding = next(f for f in gpu_idle_findings(hand) if f.subject["run"] == "graph")
    assert finding.evidence["main_cause"] == "host_wait"
    assert finding.evidence["graph_kernel_share"] == pytest.approx(50 / 53)
    assert "gaps lie between graph replays" in finding.detail and "CUDA graphs, a faster" not in finding.detail


def test_cpu_bound_rank_that_replays_graphs_is_told_to_capture_more_not_to_capture_one(hand) -> None:
    finding = next(f for f in launch.launch_findings(hand) if f.id == "cpu_bound_launches" and f.subject["run"] == "graph")
    assert finding.evidence["graph_kernel_share"] == pytest.approx(50 / 53)
    assert "already run from CUDA graphs" in finding.detail and "mode='reduce-overhead'" not in finding.detail


def test_a_launch_call_without_a_name_is_not_taken_for_a_graph_replay(tmp_path: Path) -> None:
    write_trace_table(tmp_path, "r", "kernels", {
        "run": ["r"], "rank": [0], "device": [0], "stream": [7], "name": ["k"], "category": ["compute"],
        "kind": ["kernel"], "start_ns": [T0 + 10 * US], "end_ns": [T0 + 11 * US], "dur_ns": [US], "correlation_id": [1]})
    write_trace_table(tmp_path, "r", "api_calls", {
        "run": ["r"], "rank": [0], "pid": [1], "tid": [1], "name": [None], "start_ns": [T0], "end_ns": [T0 + 5 * US],
        "dur_ns": [5 * US], "correlation_id": [1]})
    con = open_dataset(tmp_path)
    assert launch.kernel_launches(con)["graph_launch"].to_list() == [False]
    assert _rows(launch.short_kernels(con), "name", "kernel_count") == [("k", 1)]


def test_launch_histogram_counts_only_the_kernels_launched_one_by_one(hand) -> None:
    from gpulens.analysis.timeline import launch_histogram

    frame = _of(launch_histogram(hand), "graph")
    assert frame.group_by("metric").agg(pl.col("kernels").sum()).sort("metric").rows() == [
        ("launch_call_ns", 3), ("launch_delay_ns", 3)]


# --- launch_flip ----------------------------------------------------------------------------


def test_launch_flip_batch_size_and_series_from_the_run_name(hand) -> None:
    frame = launch.launch_flip(hand).filter(~pl.col("series").is_in(["m_bs*", "g_bs*"])).sort("run")
    assert _rows(frame, "run", "batch_size", "series") == [
        ("BS4", 4, "BS*"), ("gpt-batch16", 16, "gpt-batch*"), ("llama_batch_size=32", 32, "llama_batch_size=*"),
        ("vit-batchsize-2", 2, "vit-batchsize-*")]


def test_launch_flip_finds_the_batch_size_where_cpu_bound_turns_gpu_bound(hand) -> None:
    frame = launch.launch_flip(hand).filter(pl.col("series") == "m_bs*")
    assert _rows(frame, "batch_size", "verdict", "prev_verdict", "is_flip") == [
        (8, "cpu_bound", None, False), (16, "cpu_bound", "cpu_bound", False),
        (32, "gpu_bound", "cpu_bound", True), (64, "gpu_bound", "gpu_bound", False)]
    assert set(_rows(frame, "flip_batch_size", "flip_after_batch_size")) == {(32, 16)}


def test_launch_flip_without_a_change_has_no_flip(hand) -> None:
    frame = launch.launch_flip(hand).filter(pl.col("series") == "g_bs*")
    assert _rows(frame, "batch_size", "is_flip", "flip_batch_size") == [(8, False, None), (16, False, None)]


# --- findings -------------------------------------------------------------------------------


def _findings(con, finding_id: str, run: str, **thresholds) -> list:
    return [f for f in launch.launch_findings(con, **thresholds) if f.id == finding_id and f.subject["run"] == run]


def test_launch_findings_cpu_bound_fires_with_evidence(hand) -> None:
    [finding] = _findings(hand, "cpu_bound_launches", "findings_cpu")
    assert (finding.severity, finding.subject, finding.page) == ("warning", {"run": "findings_cpu", "rank": 3}, "kernels")
    assert {k: finding.evidence[k] for k in ("gpu_idle_share", "launch_delay_mean_ns", "launch_delay_p50_ns", "tklqt_share",
                                             "short_kernel_count", "cpu_bound_steps", "step_count")} == {
        "gpu_idle_share": 0.8, "launch_delay_mean_ns": 3_000, "launch_delay_p50_ns": 3_000, "tklqt_share": 0.5,
        "short_kernel_count": 0, "cpu_bound_steps": 2, "step_count": 2}
    assert finding.title.startswith("Rank 3 of findings_cpu is CPU-bound: the GPU idles 80% of step time")


def test_launch_findings_cpu_bound_quiet_for_a_gpu_bound_rank(hand) -> None:
    assert _findings(hand, "cpu_bound_launches", "gpu") == []


def test_launch_findings_short_kernels_fire_with_top_names(hand) -> None:
    [finding] = _findings(hand, "short_kernels", "short", short_kernel_min_count=5)
    assert (finding.severity, finding.evidence["short_kernel_count"]) == ("warning", 5)
    assert finding.evidence["top_names"] == [{"name": "tiny", "kernel_count": 3}, {"name": "small", "kernel_count": 2}]


def test_launch_findings_name_a_templated_kernel_by_its_short_name(tmp_path: Path) -> None:
    adam = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
            "FusedOptimizerTensorListMetadata<4>, float const*>(at::native::(anonymous namespace)::"
            "FusedOptimizerTensorListMetadata<4>, float const*, double, double, bool)")
    _write_rank(tmp_path, "adam", 0, [(i * 100 * US, 5 * US, i * 100 * US + 6 * US, US, adam) for i in range(5)])
    [finding] = [f for f in launch.launch_findings(open_dataset(tmp_path), short_kernel_min_count=5) if f.id == "short_kernels"]
    assert finding.title.endswith("most often at::native::multi_tensor_apply_kernel")
    assert finding.evidence["top_names"] == [{"name": adam, "kernel_count": 5}]


def test_launch_findings_short_kernels_info_below_the_warning_share(hand) -> None:
    [finding] = _findings(hand, "short_kernels", "short", short_kernel_min_count=5, short_kernel_warning_share=0.9)
    assert finding.severity == "info"


def test_launch_findings_short_kernels_quiet_below_the_minimum_count(hand) -> None:
    assert _findings(hand, "short_kernels", "short") == []  # 5 short kernels, default minimum 100


def test_launch_findings_delay_outliers_fire_and_say_the_verdict(hand) -> None:
    # delays 0.5, 249.5, 498.5, 747.5 µs: three outliers
    [finding] = _findings(hand, "launch_delay_outliers", "gpu", outlier_min_count=3)
    assert (finding.severity, finding.evidence["outlier_count"], finding.evidence["max_launch_delay_ns"]) == (
        "info", 3, 747_500)
    assert finding.evidence["verdict"] == "gpu_bound"


def test_launch_findings_delay_outliers_quiet_below_the_minimum_count(hand) -> None:
    assert _findings(hand, "launch_delay_outliers", "gpu") == []  # 3 outliers, default minimum 10


def test_launch_findings_empty_dataset_has_none(tmp_path: Path) -> None:
    assert launch.launch_findings(open_dataset(tmp_path)) == []


def test_launch_functions_default_to_the_sql_parameters() -> None:
    sql_defaults = all_params()
    for function in (launch.step_launch_summary, launch.launch_rank_summary, launch.short_kernels,
                     launch.launch_outliers, launch.launch_flip):
        for name, parameter in inspect.signature(function).parameters.items():
            if name != "con":
                assert parameter.default == sql_defaults[name], (function.__name__, name)


# --- real traces, against HTA ---------------------------------------------------------------

HTA_TRACES = {"v100": "v100_2rank_allreduce.json.gz", "a100": "a100_2rank_allreduce_nccl2.17.json.gz"}
# HTA counts these runtime calls as launches (cuda_kernel_analysis.py).
HTA_LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")


@pytest.fixture(scope="module")
def real(shared_traces: Path, tmp_path_factory: pytest.TempPathFactory):
    """The V100 and A100 traces, ingested once as runs "v100" and "a100", opened."""
    from gpulens.collector.ingest import ingest_paths

    root = tmp_path_factory.mktemp("launch_real")
    for run, name in HTA_TRACES.items():
        report = ingest_paths([shared_traces / "kineto" / name], out=root, run=run)
        assert not report.failures
    return open_dataset(root)


@pytest.fixture(scope="session")
def hta_launch_stats(shared_traces: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, pl.DataFrame]:
    """HTA's per-kernel launch stats of each trace (µs), loaded once."""
    pytest.importorskip("hta")
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    stats = {}
    for run, name in HTA_TRACES.items():
        folder = tmp_path_factory.mktemp(f"hta_{run}")
        shutil.copy(shared_traces / "kineto" / name, folder / name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # HTA's own pandas deprecations
            analysis = TraceAnalysis(trace_dir=str(folder))
            [(_, frame)] = analysis.get_cuda_kernel_launch_stats(ranks=analysis.t.get_ranks(), visualize=False).items()
        stats[run] = pl.from_pandas(frame).with_columns(pl.col("correlation").cast(pl.Int64))
    return stats


def _hta_comparable(con, run: str) -> pl.DataFrame:
    """Our launches as HTA selects them: its four launch calls, and only calls
    before the last profiler step starts (HTA drops the last step's kernels)."""
    names = ", ".join(f"'{name}'" for name in HTA_LAUNCH_CALLS)
    return pl.from_arrow(con.sql(f"""
        select k.correlation_id, k.start_ns, k.dur_ns, k.launch_call_start_ns, k.launch_call_ns, k.launch_delay_ns
        from kernel_launches as k
        join (select distinct run, rank, last_step_start_ns from step_windows) as w using (run, rank)
        where k.run = '{run}' and k.launch_call_name in ({names}) and k.launch_call_start_ns < w.last_step_start_ns
    """).to_arrow_table())


def _hta_rounded(ours: pl.DataFrame) -> pl.DataFrame:
    """Our ns values rounded as HTA rounds ns traces (trace_parser.round_down_time_stamps):
    start up to the next µs, end down to the previous µs."""
    def ceil_us(col: pl.Expr) -> pl.Expr:
        return -((-col) // US)

    call_end = (pl.col("launch_call_start_ns") + pl.col("launch_call_ns")) // US
    kernel_start = ceil_us(pl.col("start_ns"))
    return ours.select(
        pl.col("correlation_id"),
        (call_end - ceil_us(pl.col("launch_call_start_ns"))).alias("cpu_duration"),
        ((pl.col("start_ns") + pl.col("dur_ns")) // US - kernel_start).alias("gpu_duration"),
        (kernel_start - call_end).clip(lower_bound=0).alias("launch_delay"),
    )


def test_kernel_launches_match_hta_exactly_on_v100_microsecond_trace(real, hta_launch_stats) -> None:
    # The V100 trace has whole-µs times, so HTA rounds nothing: every kernel agrees to the ns.
    ours = _hta_comparable(real, "v100")
    hta = hta_launch_stats["v100"]
    joined = ours.join(hta, left_on="correlation_id", right_on="correlation", how="full", coalesce=True)
    assert joined.height == ours.height == hta.height == 17_832
    assert (joined["launch_delay_ns"] == joined["launch_delay"] * US).all()
    assert (joined["launch_call_ns"] == joined["cpu_duration"] * US).all()
    assert (joined["dur_ns"] == joined["gpu_duration"] * US).all()
    assert (ours["launch_call_ns"].sum(), ours["dur_ns"].sum()) == (156_892_000, 753_057_000)
    assert (hta["cpu_duration"].sum() * US, hta["gpu_duration"].sum() * US) == (156_892_000, 753_057_000)


def test_kernel_launches_match_hta_after_its_rounding_on_a100_ns_trace(real, hta_launch_stats) -> None:
    # The A100 trace has ns times; HTA rounds each event inward to whole µs
    # (start up, end down), so its durations lose up to 2 µs each and its
    # delays gain up to 1 µs. Rounded the same way, our values equal HTA's
    # for every kernel; our own sums keep the ns.
    ours = _hta_comparable(real, "a100")
    hta = hta_launch_stats["a100"]
    joined = _hta_rounded(ours).join(hta, left_on="correlation_id", right_on="correlation", how="full", coalesce=True)
    assert joined.height == ours.height == hta.height == 2_516
    for column in ("cpu_duration", "gpu_duration", "launch_delay"):
        assert (joined[column] == joined[f"{column}_right"]).all(), column
    # HTA's sums, µs: CPU 21,289, GPU 100,462, delay 70,623. Ours, exact:
    # launch calls 23.79 ms (HTA 10.5 % short: calls of ~8 µs each lose ~1 µs),
    # kernels 102.98 ms (HTA 2.4 % short), delay 68.12 ms (HTA 3.7 % long).
    assert (hta["cpu_duration"].sum(), hta["gpu_duration"].sum(), hta["launch_delay"].sum()) == (21_289, 100_462, 70_623)
    assert (ours["launch_call_ns"].sum(), ours["dur_ns"].sum(), ours["launch_delay_ns"].sum()) == (
        23_787_895, 102_977_881, 68_120_684)


def test_step_launch_summary_real_traces_are_cpu_bound(real) -> None:
    frame = launch.step_launch_summary(real).filter(pl.col("in_rank_totals")).sort("run", "step")
    assert _rows(frame, "run", "step", "verdict") == [
        ("a100", 4, "cpu_bound"), ("a100", 5, "cpu_bound"),
        ("v100", 2, "cpu_bound"), ("v100", 3, "cpu_bound"), ("v100", 4, "cpu_bound"), ("v100", 5, "cpu_bound")]
    a100_step4 = frame.row(0, named=True)
    assert (a100_step4["kernel_count"], a100_step4["tklqt_ns"], a100_step4["gpu_busy_ns"]) == (1_258, 46_990_970, 49_438_921)


def test_findings_on_the_mi250_trace_advise_hip_graphs(shared_traces: Path, tmp_path: Path) -> None:
    # ROCm's kernels are launched by hipLaunchKernel: the advice names HIP graphs, not CUDA's.
    from gpulens.collector.ingest import ingest_paths
    from gpulens.analysis.time_breakdown import gpu_idle_findings

    assert not ingest_paths([shared_traces / "kineto" / "mi250_rocm6.2_minitoy.json.gz"], out=tmp_path, run="mi250").failures
    con = open_dataset(tmp_path)
    [cpu_bound] = [f for f in launch.launch_findings(con) if f.id == "cpu_bound_launches"]
    [idle] = gpu_idle_findings(con)
    assert launch.hip_ranks(con) == {("mi250", 0)}
    assert "capture the step in a HIP graph" in cpu_bound.detail and "CUDA" not in cpu_bound.detail
    assert "HIP graphs" in idle.detail and "CUDA" not in idle.detail


def test_findings_on_a_cuda_trace_keep_cuda_graphs(real) -> None:
    assert launch.hip_ranks(real) == set()
    assert all("HIP" not in f.detail for f in launch.launch_findings(real))
