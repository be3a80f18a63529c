"""Host syncs: calls that make the CPU wait for the GPU, and the idle GPU they leave behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.analysis import launch
from gpulens.analysis.dataset import open_dataset
from gpulens.collector.ingest import ingest_paths
from conftest import write_graph_replay_trace, write_sync_loop_trace


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory):
    """Run "loop": rank 0 drains the GPU with `.item()` every step; rank 1
    makes the same call with a second kernel still queued behind it."""
    folder = tmp_path_factory.mktemp("sync_traces")
    root = tmp_path_factory.mktemp("sync")
    files = [write_sync_loop_trace(folder / "rank0.json", 0), write_sync_loop_trace(folder / "rank1.json", 1, queued_behind=True)]
    assert not ingest_paths(files, out=root, run="loop").failures
    return open_dataset(root)


def _rows(con, rank: int) -> list[tuple]:
    frame = launch.host_syncs(con).filter(rank=rank).sort("step")
    return frame.select("step", "sync_count", "sync_ns", "sync_gpu_idle_ns", "is_last").rows()


def test_each_step_counts_its_sync_and_the_idle_gpu_it_leaves(loop) -> None:
    # The GPU runs dry at S+5070 under the wait and idles until the next
    # step's kernel at S+10070: 5 ms a step. Step 3's gap ends in the last
    # step (out of scope) and step 4 is the last: both unknown.
    assert _rows(loop, 0) == [
        (1, 1, 4_870_000, 5_000_000, False),
        (2, 1, 4_870_000, 5_000_000, False),
        (3, 1, 4_870_000, None, False),
        (4, 1, 4_870_000, None, True),
    ]


def test_a_sync_with_work_still_queued_leaves_no_idle_gpu(loop) -> None:
    assert [row[3] for row in _rows(loop, 1)] == [0, 0, None, None]


def test_each_step_names_the_call_and_the_operator_behind_it(loop) -> None:
    row = launch.host_syncs(loop).filter(rank=0, step=1).row(0, named=True)
    assert (row["sync_calls"], row["sync_ops"]) == (["cudaStreamSynchronize"], ["aten::_local_scalar_dense"])
    assert row["sync_gpu_idle_share"] == 0.5


def test_a_rank_drained_by_item_gets_a_host_sync_stall_finding(loop) -> None:
    [finding] = [f for f in launch.launch_findings(loop) if f.id == "host_sync_stall"]
    assert (finding.severity, finding.subject) == ("warning", {"run": "loop", "rank": 0})
    assert finding.title == ("Rank 0 of loop waits on the GPU 1 time a step, and the drained GPU then sat idle "
                             "50% of step time")
    assert finding.evidence == {
        "sync_gpu_idle_share": 0.5, "sync_gpu_idle_ns": 10_000_000, "sync_count": 2, "sync_ns": 9_740_000,
        "step_count": 2, "sync_calls": ["cudaStreamSynchronize"], "sync_ops": ["aten::_local_scalar_dense"]}
    assert "(cudaStreamSynchronize, from .item())" in finding.detail


def test_the_sync_stall_threshold_is_a_keyword(loop) -> None:
    assert [f for f in launch.launch_findings(loop, sync_min_idle_share=0.6) if f.id == "host_sync_stall"] == []


def test_nsys_call_names_with_a_version_suffix_count(tmp_path: Path) -> None:
    trace = write_sync_loop_trace(tmp_path / "rank0.json", 0)
    trace.write_text(trace.read_text().replace('"cudaStreamSynchronize"', '"cudaStreamSynchronize_v3020"'))
    assert not ingest_paths([trace], out=tmp_path / "ds", run="nsys_names").failures
    syncs = launch.host_syncs(open_dataset(tmp_path / "ds"))
    assert syncs["sync_count"].to_list() == [1, 1, 1, 1]
    # Named as the runtime names them, the suffix left out.
    assert syncs["sync_calls"].to_list() == [["cudaStreamSynchronize"]] * 4


def test_async_calls_are_not_syncs(tmp_path: Path) -> None:
    trace = write_sync_loop_trace(tmp_path / "rank0.json", 0)
    trace.write_text(trace.read_text().replace('"cudaStreamSynchronize"', '"cudaMemcpyAsync"'))
    assert not ingest_paths([trace], out=tmp_path / "ds", run="async").failures
    assert launch.host_syncs(open_dataset(tmp_path / "ds")).is_empty()


def test_a_sync_on_a_thread_that_launches_nothing_is_not_the_loops(tmp_path: Path) -> None:
    # A pin-memory or watchdog thread that waits on the GPU stalls no launch.
    import json

    trace = write_sync_loop_trace(tmp_path / "rank0.json", 0)
    data = json.loads(trace.read_text())
    for event in data["traceEvents"]:
        if event["name"] in ("cudaStreamSynchronize", "aten::_local_scalar_dense"):
            event["tid"] = 2
    trace.write_text(json.dumps(data))
    assert not ingest_paths([trace], out=tmp_path / "ds", run="other_thread").failures
    assert launch.host_syncs(open_dataset(tmp_path / "ds")).is_empty()


def test_report_metric_is_the_drained_gpu_idle_over_all_complete_steps(loop) -> None:
    from gpulens.analysis.metrics import compute_metrics

    metrics = compute_metrics(loop)
    # rank 0: 5 + 5 ms (step 3 unknown), rank 1: none, over 2 ranks x 3 complete steps of 10 ms
    assert metrics["sync_idle_share"] == pytest.approx(10 / 60)
    assert metrics["data_loader_idle_share"] == 0.0


def test_report_metrics_of_a_dataset_without_steps_are_not_known(tmp_path: Path) -> None:
    from gpulens.analysis.metrics import compute_metrics

    assert not ingest_paths([write_graph_replay_trace(tmp_path / "g.json")], out=tmp_path / "ds", run="g").failures
    metrics = compute_metrics(open_dataset(tmp_path / "ds"))
    assert (metrics["sync_idle_share"], metrics["data_loader_idle_share"]) == (None, None)


def test_the_gpu_idle_finding_says_how_much_of_the_idle_time_followed_syncs(loop) -> None:
    from gpulens.analysis.time_breakdown import gpu_idle_findings

    [idle] = [f for f in gpu_idle_findings(loop) if f.subject["rank"] == 0]
    assert (idle.evidence["data_loader_idle_ns"], idle.evidence["sync_idle_ns"]) == (0, 10_000_000)
    assert "Of that, 10.0 ms after synchronising calls drained the GPU. " in idle.detail


def test_a_drain_that_runs_into_the_next_fetch_is_split_between_the_two(tmp_path: Path) -> None:
    # The drain's 5 ms gap runs on through the next step's 40 µs fetch
    # (steps 2 and 3 known): the fetch is data loading's, the rest the sync's.
    import json

    from gpulens.analysis.time_breakdown import gpu_idle_findings
    from conftest import DATA_LOADER_SINGLE

    trace = write_sync_loop_trace(tmp_path / "rank0.json", 0)
    data = json.loads(trace.read_text())
    steps = [e for e in data["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    data["traceEvents"] += [{"ph": "X", "cat": "user_annotation", "name": DATA_LOADER_SINGLE, "pid": 1, "tid": 1,
                             "ts": step["ts"], "dur": 40.0} for step in steps]
    trace.write_text(json.dumps(data))
    assert not ingest_paths([trace], out=tmp_path / "ds", run="both").failures
    con = open_dataset(tmp_path / "ds")
    assert launch.host_syncs(con)["sync_gpu_idle_ns"].to_list()[:2] == [4_960_000, 4_960_000]
    [idle] = gpu_idle_findings(con)
    assert (idle.evidence["data_loader_idle_ns"], idle.evidence["sync_idle_ns"]) == (80_000, 9_920_000)
    assert ("no kernel ran for 10.0 ms. Of that, 80.0 µs while the loop waited on its DataLoader and 9.92 ms after "
            "synchronising calls drained the GPU. ") in idle.detail


DEMO = Path(__file__).resolve().parents[1] / "sample_traces" / "demo-training"


def test_the_demo_reads_its_loss_with_item_at_every_step_below_the_stall_threshold() -> None:
    con = open_dataset(DEMO)
    frame = launch.host_syncs(con)
    assert (frame.height, frame["sync_gpu_idle_ns"].count()) == (80, 64)  # the last two steps' gaps unknown
    assert frame["sync_ops"].explode().unique().to_list() == ["aten::_local_scalar_dense"]
    assert 0 < frame["sync_gpu_idle_share"].max() < 0.1
    assert not [f for f in launch.launch_findings(con) if f.id == "host_sync_stall"]


def test_a_cudafree_that_drains_the_gpu_is_a_sync_and_the_advice_names_the_allocator(tmp_path: Path) -> None:
    # The caching allocator handing memory back (empty_cache, an OOM retry) synchronises the device.
    trace = write_sync_loop_trace(tmp_path / "rank0.json", 0)
    trace.write_text(trace.read_text().replace('"cudaStreamSynchronize"', '"cudaFree"'))
    assert not ingest_paths([trace], out=tmp_path / "ds", run="free").failures
    con = open_dataset(tmp_path / "ds")
    assert launch.host_syncs(con)["sync_calls"].to_list()[0] == ["cudaFree"]
    [finding] = [f for f in launch.launch_findings(con) if f.id == "host_sync_stall"]
    assert "cudaFree or hipFree is the caching allocator handing memory back" in finding.detail


def test_where_the_steps_name_no_thread_every_threads_calls_count(tmp_path: Path) -> None:
    import json

    trace = write_sync_loop_trace(tmp_path / "rank0.json", 0)
    data = json.loads(trace.read_text())
    for event in data["traceEvents"]:
        if event["name"].startswith("ProfilerStep#"):
            del event["tid"]
        elif event["name"] in ("cudaStreamSynchronize", "aten::_local_scalar_dense"):
            event["tid"] = 2
    trace.write_text(json.dumps(data))
    assert not ingest_paths([trace], out=tmp_path / "ds", run="no_tids").failures
    assert launch.host_syncs(open_dataset(tmp_path / "ds"))["sync_count"].to_list() == [1, 1, 1, 1]
