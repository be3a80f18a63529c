"""The Kineto trace synthesiser: deterministic, well-formed, with a straggler."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import orjson
import pytest

from gpulens.collector.errors import UsageError
from gpulens.collector.sim_trace import MIN_KERNELS_PER_STEP, write_training_traces

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _load(path: Path) -> dict:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    return orjson.loads(data)


def _events(path: Path) -> list[dict]:
    return _load(path)["traceEvents"]


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("straggler")
    return write_training_traces(out, ranks=4, steps=4, seed=7, straggler_rank=2, kernels_per_step=120)


def test_same_seed_gives_identical_bytes(tmp_path: Path) -> None:
    first = write_training_traces(tmp_path / "a", ranks=2, steps=2, seed=3, kernels_per_step=60)
    second = write_training_traces(tmp_path / "b", ranks=2, steps=2, seed=3, kernels_per_step=60)
    assert [p.name for p in first] == [p.name for p in second]
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_different_seed_gives_different_times(tmp_path: Path) -> None:
    first = write_training_traces(tmp_path / "a", ranks=1, steps=1, seed=1, kernels_per_step=60)
    second = write_training_traces(tmp_path / "b", ranks=1, steps=1, seed=2, kernels_per_step=60)
    assert first[0].read_bytes() != second[0].read_bytes()


def test_file_names_follow_the_trace_handler_with_the_rank_in_front(tmp_path: Path) -> None:
    paths = write_training_traces(tmp_path, ranks=2, steps=1, kernels_per_step=60)
    assert [p.name.split(".")[0] for p in paths] == ["rank-0", "rank-1"]
    assert all(p.name.endswith(".pt.trace.json") for p in paths)
    assert sorted(tmp_path.iterdir()) == sorted(paths)  # no temporary files left


def test_traces_carry_kineto_top_level_keys(tmp_path: Path) -> None:
    path = write_training_traces(tmp_path, ranks=2, steps=1, kernels_per_step=60, base_time_ns=1_700_000_000_000_000_000)[1]
    trace = _load(path)
    assert trace["schemaVersion"] == 1
    assert trace["baseTimeNanoseconds"] == 1_700_000_000_000_000_000
    assert trace["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert trace["deviceProperties"][0]["numSms"] == 132
    info = trace["distributedInfo"]
    assert (info["backend"], info["rank"], info["world_size"], info["nccl_version"]) == ("nccl", 1, 2, "2.21.5")
    assert info["pg_config"] == [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}]


def test_gpu_activities_per_rank_equal_kernels_per_step_times_steps(tmp_path: Path) -> None:
    for kernels_per_step, steps in ((60, 2), (150, 3)):
        paths = write_training_traces(tmp_path / f"{kernels_per_step}", ranks=2, steps=steps, kernels_per_step=kernels_per_step)
        for path in paths:
            gpu = [e for e in _events(path) if e.get("cat") in GPU_CATS]
            assert len(gpu) == kernels_per_step * steps


def test_every_launch_has_a_flow_pair_and_a_kernel(tmp_path: Path) -> None:
    events = _events(write_training_traces(tmp_path, ranks=2, steps=2, kernels_per_step=80)[0])
    starts = {e["id"] for e in events if e["ph"] == "s"}
    ends = {e["id"] for e in events if e["ph"] == "f"}
    gpu_correlations = {e["args"]["correlation"] for e in events if e.get("cat") in GPU_CATS}
    launches = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    assert starts == ends == gpu_correlations
    assert gpu_correlations <= launches


def test_profiler_steps_are_numbered_from_two(tmp_path: Path) -> None:
    events = _events(write_training_traces(tmp_path, ranks=1, steps=3, kernels_per_step=60)[0])
    steps = [e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")]
    assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]


def test_collectives_carry_full_args_and_consecutive_seq(straggler_run: list[Path]) -> None:
    events = _events(straggler_run[0])
    comms = [e for e in events if e.get("name") == "record_param_comms"]
    seqs = [e["args"]["Seq"] for e in comms]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    ops = Counter(e["args"]["Collective name"] for e in comms)
    # 120 kernels per step: 3 layers → 1 + 3 bucket all_reduces + the loss.
    assert ops == {"allreduce": 5 * 4, "_reduce_scatter_base": 4, "_allgather_base": 4}
    bucket = next(e["args"] for e in comms if e["args"]["dtype"] == "BFloat16" and e["args"]["Collective name"] == "allreduce")
    assert bucket["Group size"] == 4
    assert bucket["Process Group Name"] == "0"
    assert bucket["Process Group Description"] == "default_pg"
    assert bucket["Process Group Ranks"] == "[0, 1, 2, 3]"
    nccl = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_")]
    assert len(nccl) == len(comms)
    assert {e["args"]["stream"] for e in nccl} == {24}
    assert "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)" in {e["name"] for e in nccl}


def _nccl_kernels(path: Path) -> list[dict]:
    return [e for e in _events(path) if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_")]


def test_straggler_starts_its_collectives_last_in_most_instances(straggler_run: list[Path]) -> None:
    per_rank = [_nccl_kernels(p) for p in straggler_run]
    instances = list(zip(*per_rank))
    latest = Counter(max(range(4), key=lambda r: kernels[r]["ts"]) for kernels in instances)
    assert latest.most_common(1)[0][0] == 2
    assert latest[2] > 0.6 * len(instances)


def test_waiting_ranks_hold_their_collective_kernels_longer(straggler_run: list[Path]) -> None:
    per_rank = [_nccl_kernels(p) for p in straggler_run]
    total_us = [sum(e["dur"] for e in kernels) for kernels in per_rank]
    assert min(range(4), key=lambda r: total_us[r]) == 2
    # Every rank's copy of one collective ends within a few µs.
    for kernels in zip(*per_rank):
        ends = [e["ts"] + e["dur"] for e in kernels]
        assert max(ends) - min(ends) < 6.0


def test_gzip_output_holds_the_same_json(tmp_path: Path) -> None:
    plain = write_training_traces(tmp_path / "plain", ranks=1, steps=1, kernels_per_step=60)[0]
    packed = write_training_traces(tmp_path / "gz", ranks=1, steps=1, kernels_per_step=60, gzip=True)[0]
    assert packed.name == plain.name + ".gz"
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()


def test_ranks_spread_over_hosts_by_eight(tmp_path: Path) -> None:
    paths = write_training_traces(tmp_path, ranks=16, steps=1, kernels_per_step=60)
    assert [p.name.split(".")[1].split("_")[0] for p in (paths[7], paths[8])] == ["sim-node-00", "sim-node-01"]
    assert _load(paths[9])["hostname"] == "sim-node-01"
    devices = {e["args"]["device"] for e in _events(paths[9]) if e.get("cat") == "kernel"}
    assert devices == {1}


@pytest.mark.parametrize(
    "kwargs",
    [{"ranks": 0}, {"steps": 0}, {"straggler_rank": 4}, {"kernels_per_step": MIN_KERNELS_PER_STEP - 1}, {"world_hosts": 3}, {"world_hosts": 0}],
)
def test_bad_arguments_raise_usage_error(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(UsageError):
        write_training_traces(tmp_path, **{"ranks": 4, **kwargs})


def test_ingester_accepts_synthesised_traces(tmp_path: Path) -> None:
    ingest = pytest.importorskip("gpulens.collector.ingest")
    import pyarrow.parquet as pq

    traces = tmp_path / "job"
    write_training_traces(traces, ranks=2, steps=2, straggler_rank=1, kernels_per_step=80)
    out = tmp_path / "data"
    report = ingest.ingest_paths([traces], out, run="demo", jobs=1)
    assert report.failures == []
    assert sorted(r.rank for r in report.results) == [0, 1]
    kernels = pq.read_table(out / "traces" / "run=demo" / "kernels")
    assert kernels.num_rows == 2 * 2 * 80
    collectives = pq.read_table(out / "traces" / "run=demo" / "collectives")
    # 80 kernels per step: 1 layer → 5 collectives per step.
    assert collectives.num_rows == 2 * 2 * 5
    assert set(collectives.column("op").to_pylist()) == {"all_reduce", "all_gather", "reduce_scatter"}


def test_ranks_beyond_eight_fill_a_second_node(tmp_path: Path) -> None:
    paths = write_training_traces(tmp_path, ranks=12, steps=1, kernels_per_step=60)
    assert _load(paths[11])["hostname"] == "sim-node-01"
    assert {e["args"]["device"] for e in _events(paths[11]) if e.get("cat") == "kernel"} == {3}


def test_collectives_across_nodes_take_longer_than_within_one(tmp_path: Path) -> None:
    one = write_training_traces(tmp_path / "one", ranks=4, steps=1, kernels_per_step=60)
    two = write_training_traces(tmp_path / "two", ranks=4, steps=1, kernels_per_step=60, world_hosts=2)
    within = sum(e["dur"] for e in _nccl_kernels(one[0]))
    across = sum(e["dur"] for e in _nccl_kernels(two[0]))
    assert across > 5 * within
