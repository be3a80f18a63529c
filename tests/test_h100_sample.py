"""The real-H100 sample (sample_traces/h100-training): what the recording holds.

Recorded by our collector and a profiled PyTorch job on one H100; these pin
what the analyses find in real hardware's data, so a change that reads it
differently shows up here (see sample_traces/README.md for the phases).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from gpulens.analysis.dataset import open_dataset
from gpulens.analysis.launch import launch_rank_summary
from gpulens.analysis.timeline import step_queue_length

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "h100-training"


@pytest.fixture(scope="module")
def con():
    return open_dataset(SAMPLE)


@pytest.fixture(scope="module")
def phases() -> dict[str, dict]:
    return {phase["name"]: phase for phase in json.loads((SAMPLE / "raw" / "phases.json").read_text())}


def one(con, sql: str, *params):
    return con.execute(sql, list(params)).fetchone()


def test_every_trace_ingested_with_its_raw_event_counts(con):
    kernels = dict(con.execute("select run, count(*) from kernels group by run").fetchall())
    collectives = dict(con.execute("select run, count(*) from collectives group by run").fetchall())
    assert kernels == {"h100-train": 4209, "h100-small-batch": 3092}
    assert collectives == {"h100-train": 55, "h100-small-batch": 55, "h100-nccl": 7415}


@pytest.mark.parametrize("run, folder", [("h100-train", "train"), ("h100-small-batch", "small-batch")])
def test_each_category_of_the_real_pytorch_trace_lands_row_for_row(con, run, folder):
    (path,) = (SAMPLE / "raw" / "kineto" / folder).glob("*.pt.trace.json.gz")
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    raw = Counter(event.get("cat") for event in events if event.get("ph") == "X")
    # The profiler's window marks (`Iteration Start`, `Record Window End`): instant annotations.
    instants = sum(1 for event in events if event.get("ph") == "i")
    rows = {table: one(con, f"select count(*) from {table} where run = ?", run)[0]
            for table in ("kernels", "api_calls", "cpu_ops", "annotations")}
    assert rows == {
        "kernels": raw["kernel"] + raw["gpu_memcpy"] + raw["gpu_memset"],
        "api_calls": raw["cuda_runtime"] + raw["cuda_driver"],
        "cpu_ops": raw["cpu_op"],
        "annotations": raw["user_annotation"] + raw["gpu_user_annotation"] + instants,
    }
    assert instants == 2


def test_large_batch_training_is_gpu_bound_and_small_batch_cpu_bound(con):
    verdicts = dict(launch_rank_summary(con).select("run", "verdict").iter_rows())
    assert verdicts == {"h100-train": "gpu_bound", "h100-small-batch": "cpu_bound"}


def test_gpu_bound_steps_fill_cudas_launch_queue_and_launch_bound_steps_leave_it_mostly_empty(con):
    def queues(run: str) -> list[tuple[int, float]]:
        steps = con.execute("select step from step_windows where run = ? and rank = 0 order by step", [run]).fetchall()
        return [step_queue_length(con, run, 0, step).select("max_queue_length", "empty_share").row(0) for (step,) in steps]

    # In the GPU-bound run the CPU runs up to CUDA's 1,024 pending launches and waits there (1,022 not
    # yet started, beside the one running); the first step starts from an empty queue and fills it.
    # Its 495 cuLaunchKernelEx launches count: HTA's list of launch calls misses them (max 894).
    train = queues("h100-train")
    assert len(train) == 5 and max(deepest for deepest, _ in train) == 1022
    assert [empty for _, empty in train[1:]] == [0.0] * 4
    # In the launch-bound run the GPU waits for each launch: the queue is empty for most of every step.
    small = queues("h100-small-batch")
    assert len(small) == 5 and all(deepest < 64 and empty > 0.5 for deepest, empty in small)


def test_pcie_copies_read_at_their_real_rate_not_aliased_by_the_32bit_counters(con, phases):
    # The copies moved 53.9 GB/s of payload; nvidia-smi dmon read 59-60 GB/s on the wire.
    # The 32-bit byte counters, read every 0.25 s, had reported 1-16 GB/s.
    peak_rx, peak_tx = one(
        con,
        "select max(pcie_rx_bytes_per_s), max(pcie_tx_bytes_per_s) from telemetry "
        "where epoch_ns(ts) between ? and ?",
        phases["pcie-h2d"]["start_ns"], phases["pcie-d2h"]["end_ns"] + 2 * 10**9,
    )
    assert 55e9 < peak_rx < 63e9 and 55e9 < peak_tx < 63e9


def test_sm_activity_is_read_through_gpm_and_below_utilisation_when_training(con, phases):
    sm_active, util = one(
        con,
        "select avg(sm_active_pct), avg(gpu_util_pct) from telemetry where epoch_ns(ts) between ? and ?",
        phases["train"]["start_ns"] + 5 * 10**9, phases["train"]["end_ns"],
    )
    assert 60 < sm_active < util


def test_power_is_held_at_the_700_w_limit_while_training(con, phases):
    mean_power_w, capped_share = one(
        con,
        "select avg(power_w), avg(list_contains(throttle_reasons, 'sw_power_cap')::int) from telemetry "
        "where epoch_ns(ts) between ? and ?",
        phases["train"]["start_ns"] + 5 * 10**9, phases["train"]["end_ns"],
    )
    assert 650 < mean_power_w <= 700 and capped_share > 0.9


def test_power_violation_counter_counts_nanoseconds(con, phases):
    # Capped throughout the gemm phase: the counter runs at wall-clock speed.
    start_ns, end_ns = phases["gemm"]["start_ns"] + 2 * 10**9, phases["gemm"]["end_ns"] - 10**9
    grew_ns, span_ns = one(
        con,
        "select max(power_violation_ns) - min(power_violation_ns), max(epoch_ns(ts)) - min(epoch_ns(ts)) "
        "from telemetry where epoch_ns(ts) between ? and ?",
        start_ns, end_ns,
    )
    assert grew_ns / span_ns == pytest.approx(1.0, abs=0.05)


def test_profiled_training_steps_draw_what_the_gpu_drew_not_the_lagging_average(con):
    # The 1 s average still held the ramp from idle (405-573 W); the GPU was at its cap.
    powers = [row[0] for row in con.execute(
        "select mean_power_w from step_energy where run = 'h100-train' order by step").fetchall()]
    assert len(powers) == 5 and all(690 < w < 740 for w in powers)
