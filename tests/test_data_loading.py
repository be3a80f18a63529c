"""Data loading: how long each step waits on its DataLoader, and whether the GPU idles meanwhile."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.analysis import launch
from gpulens.analysis.dataset import open_dataset
from gpulens.collector.ingest import ingest_paths
from conftest import DATA_LOADER_WORKERS, write_data_loader_trace


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory):
    """Run "loop": rank 0 fetches for 4 ms a step in the loop's own process,
    rank 1 for 0.1 ms from worker processes."""
    folder = tmp_path_factory.mktemp("loop_traces")
    root = tmp_path_factory.mktemp("loop")
    files = [write_data_loader_trace(folder / "rank0.json", 0, 4_000.0),
             write_data_loader_trace(folder / "rank1.json", 1, 100.0, DATA_LOADER_WORKERS)]
    assert not ingest_paths(files, out=root, run="loop").failures
    return open_dataset(root)


def _rows(con, rank: int) -> list[tuple]:
    frame = launch.data_loading(con).filter(rank=rank).sort("step")
    return frame.select("step", "load_count", "load_ns", "load_gpu_idle_ns", "is_last").rows()


def test_each_step_counts_its_fetch_and_the_gpu_idle_time_within_it(loop) -> None:
    # Steps 2 and 3 idle through the whole 4 ms fetch. Step 1's fetch comes
    # before the rank's first kernel and the last step is cut short: what
    # the GPU did then is not known (NULL, not 0).
    assert _rows(loop, 0) == [
        (1, 1, 4_000_000, None, False),
        (2, 1, 4_000_000, 4_000_000, False),
        (3, 1, 4_000_000, 4_000_000, False),
        (4, 1, 4_000_000, None, True),
    ]


def test_shares_are_of_the_step(loop) -> None:
    step2 = launch.data_loading(loop).filter(rank=0, step=2).row(0, named=True)
    assert (step2["step_ns"], step2["load_share"], step2["load_gpu_idle_share"]) == (10_000_000, 0.4, 0.4)


def test_a_fetch_from_worker_processes_counts_the_same_way(loop) -> None:
    assert _rows(loop, 1)[1] == (2, 1, 100_000, 100_000, False)


def test_a_starved_rank_gets_a_data_loader_stall_finding(loop) -> None:
    [finding] = [f for f in launch.launch_findings(loop) if f.id == "data_loader_stall"]
    assert (finding.severity, finding.subject) == ("warning", {"run": "loop", "rank": 0})
    # steps 2 and 3: 8 ms idle of 20 ms
    assert finding.evidence == {"load_gpu_idle_share": 0.4, "load_share": 0.4,
                                "load_gpu_idle_ns": 8_000_000, "load_ns": 8_000_000, "step_count": 2}
    assert finding.title == ("Rank 0 of loop waits on its DataLoader: the GPU sat idle 40% of step time while "
                             "the next batch loaded")
    assert "num_workers" in finding.detail


def test_the_stall_threshold_is_a_keyword(loop) -> None:
    found = launch.launch_findings(loop, data_loader_min_idle_share=0.5)
    assert [f for f in found if f.id == "data_loader_stall"] == []


def test_a_trace_without_dataloader_ranges_has_no_rows(tmp_path: Path) -> None:
    trace = write_data_loader_trace(tmp_path / "rank0.json", 0, 4_000.0, loader="forward")
    assert not ingest_paths([trace], out=tmp_path / "ds", run="plain").failures
    assert launch.data_loading(open_dataset(tmp_path / "ds")).is_empty()


def test_report_metric_is_the_gpu_idle_on_data_over_all_complete_steps(loop) -> None:
    from gpulens.analysis.metrics import compute_metrics

    metrics = compute_metrics(loop)
    # rank 0: 4 + 4 ms, rank 1: 0.1 + 0.1 ms, over 2 ranks x 3 complete steps of 10 ms
    assert metrics["data_loader_idle_share"] == pytest.approx(8.2 / 60)
    assert metrics["sync_idle_share"] == 0.0  # steps, but no synchronising call in them


def test_the_gpu_idle_finding_says_how_much_of_the_idle_time_was_data_loading(loop) -> None:
    from gpulens.analysis.time_breakdown import gpu_idle_findings

    idle = {f.subject["rank"]: f for f in gpu_idle_findings(loop)}
    assert (idle[0].evidence["data_loader_idle_ns"], idle[0].evidence["sync_idle_ns"]) == (8_000_000, 0)
    assert "no kernel ran for 10.0 ms. Of that, 8.00 ms while the loop waited on its DataLoader. " in idle[0].detail


DEMO = Path(__file__).resolve().parents[1] / "sample_traces" / "demo-training"


def test_the_demo_fetches_a_batch_at_every_step_of_every_rank() -> None:
    # 8 ranks x 10 steps; the first step's fetch precedes the rank's first
    # kernel and the last step is cut short: 8 x 8 known.
    frame = launch.data_loading(open_dataset(DEMO))
    assert (frame.height, frame["load_gpu_idle_ns"].count(), frame["load_count"].unique().to_list()) == (80, 64, [1])
