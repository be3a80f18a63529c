"""Jobs and physical GPUs in the analyses: ranks placed by process evidence
(power_trace_gpus, step_energy), and the per-job views (job_holds, job_gpus,
job_energy) with their findings."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpulens.analysis.dataset import open_dataset
from gpulens.analysis.jobs import job_findings
from gpulens.analysis.registry import run_analysis
from gpulens.collector.demo import DEMO_SLURM_JOB, DEMO_START_NS, make_demo, rank_gpu
from gpulens.collector.sim_trace import MIN_KERNELS_PER_STEP, rank_pid
from gpulens.collector.writer import DatasetWriter

SMALL = {"minutes": 1, "steps": 4, "kernels_per_step": MIN_KERNELS_PER_STEP}


@pytest.fixture(scope="module")
def shuffled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("shuffled") / "demo", seed=0, capped_gpu=3, gpu_binding="shuffled", **SMALL)


def _frame(con, sql: str) -> pl.DataFrame:
    return pl.from_arrow(con.sql(sql).to_arrow_table())


def test_power_trace_gpus_places_each_rank_on_the_gpu_its_pid_ran_on(shuffled: Path) -> None:
    matched = run_analysis(open_dataset(shuffled), "power_trace_gpus").sort("rank")
    assert matched.select("rank", "device", "gpu_index", "matched_by").rows() == [
        (rank, rank, (rank * 3) % 8, "pid") for rank in range(8)]
    assert matched["unmatched_reason"].null_count() == 8


def test_step_energy_takes_the_true_gpus_power_where_the_index_join_takes_another(shuffled: Path) -> None:
    con = open_dataset(shuffled)
    steps = run_analysis(con, "step_energy").filter(~pl.col("is_last"))
    # the power of the sample closing each step, on the rank's true GPU and on the GPU its index names
    powers = _frame(con, """
        select s.rank, s.step, s.mean_power_w,
            (select power_w from telemetry t where t.gpu_index = s.gpu_index and epoch_ns(t.ts) >= s.end_ns
             order by t.ts limit 1) as true_gpu_w,
            (select power_w from telemetry t where t.gpu_index = s.rank and epoch_ns(t.ts) >= s.end_ns
             order by t.ts limit 1) as index_gpu_w
        from step_energy s where not s.is_last order by s.rank, s.step""")
    assert steps["gpu_index"].to_list() == [rank_gpu(rank, "shuffled") for rank in steps["rank"]]
    assert (powers["mean_power_w"] - powers["true_gpu_w"]).abs().max() < 1e-6
    wrong = powers.filter((pl.col("mean_power_w") - pl.col("index_gpu_w")).abs() > 1e-6)["rank"].unique().sort().to_list()
    assert wrong == [1, 2, 3, 5, 6, 7]  # 0 and 4 are bound to GPUs of their own index


def _copy(dataset: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(dataset, tmp_path / "demo"))


def test_power_trace_gpus_reports_a_pid_two_gpus_show_and_guesses_no_gpu(tmp_path: Path, shuffled: Path) -> None:
    root = _copy(shuffled, tmp_path)
    writer = DatasetWriter(root, "sim-node-00")
    for tick in range(0, 60, 10):  # rank 2's process also holds a context on GPU 0
        writer.add("processes", {"ts": (DEMO_START_NS + tick * 10**9) // 1000, "gpu_index": 0, "gpu_uuid": "GPU-x",
                                 "pid": rank_pid(0, 2), "process_name": "python", "used_mem_bytes": 500 << 20})
    writer.flush()
    con = open_dataset(root)
    rank2 = run_analysis(con, "power_trace_gpus").filter(pl.col("rank") == 2).row(0, named=True)
    assert (rank2["gpu_index"], rank2["matched_by"], rank2["pid_gpus"]) == (None, None, 2)
    assert rank2["unmatched_reason"] == (f"pid {rank_pid(0, 2)} ran on GPUs 0, 6 during the trace: "
                                         "which one was the rank's is not known")
    assert run_analysis(con, "step_energy").filter(pl.col("rank") == 2).height == 0
    findings = [f for f in job_findings(con) if f.id == "rank_gpu_unresolved"]
    assert [(f.subject, f.evidence["ranks"]) for f in findings] == [({"run": "demo-training"}, [2])]


def test_power_trace_gpus_reports_a_pid_no_gpu_shows(tmp_path: Path, shuffled: Path) -> None:
    root = _copy(shuffled, tmp_path)
    for path in (root / "processes").rglob("*.parquet"):
        path.unlink()
    writer = DatasetWriter(root, "sim-node-00")
    for tick in range(0, 60, 10):  # other processes: the ranks' pids are those of another PID namespace
        for gpu in range(8):
            writer.add("processes", {"ts": (DEMO_START_NS + tick * 10**9) // 1000, "gpu_index": gpu,
                                     "gpu_uuid": f"GPU-{gpu}", "pid": 4000 + gpu, "process_name": "python",
                                     "used_mem_bytes": 1 << 30})
    writer.flush()
    con = open_dataset(root)
    matched = run_analysis(con, "power_trace_gpus").sort("rank")
    assert matched.select("gpu_index", "matched_by", "pid_gpus").rows() == [(None, None, 0)] * 8
    assert matched["unmatched_reason"][0] == (f"the processes on sim-node-00's GPUs during the trace do not include "
                                             f"pid {rank_pid(0, 0)}")
    findings = [f for f in job_findings(con) if f.id == "rank_gpu_unresolved"]
    assert [f.evidence["ranks"] for f in findings] == [list(range(8))]


def test_power_trace_gpus_assumes_the_index_without_process_rows(tmp_path: Path, shuffled: Path) -> None:
    root = _copy(shuffled, tmp_path)
    for path in (root / "processes").rglob("*.parquet"):
        path.unlink()
    matched = run_analysis(open_dataset(root), "power_trace_gpus").sort("rank")
    assert matched.select("gpu_index", "matched_by").rows() == [(rank, "index_assumed") for rank in range(8)]


def test_job_energy_sums_equal_the_energy_counters_over_the_jobs_interval(shuffled: Path) -> None:
    con = open_dataset(shuffled)
    energy = run_analysis(con, "job_energy")
    assert energy.select("job", "step", "gpus", "hosts").rows() == [
        (f"slurm-{DEMO_SLURM_JOB}", None, 8, 1), (f"slurm-{DEMO_SLURM_JOB}", "0", 8, 1)]
    counters = _frame(con, """
        select sum(last.energy_j - first.energy_j) as counter_j, max(first.power_w) as one_sample_j
        from job_gpus g
        join telemetry first on first.gpu_index = g.gpu_index and epoch_ns(first.ts) = g.start_ns
        join telemetry last on last.gpu_index = g.gpu_index and epoch_ns(last.ts) = g.end_ns""").row(0, named=True)
    job = energy.row(0, named=True)
    # 1 Hz samples: one sample's energy is at most its power for 1 s
    assert abs(job["energy_j"] - counters["counter_j"]) <= counters["one_sample_j"]
    assert job["gpu_hours"] == pytest.approx(8 * 50 / 3600)  # sightings at 0 s and 50 s of a 1-minute demo
    assert job["throttled_s"] > 0  # the capped GPU 3


def _idle_node(root: Path, idle_from_s: int, idle_to_s: int, minutes: int = 20) -> None:
    writer = DatasetWriter(root, "node-a")
    for second in range(0, minutes * 60 + 1, 10):
        ts = (DEMO_START_NS + second * 10**9) // 1000
        util = 0.0 if idle_from_s < second <= idle_to_s else 90.0
        writer.add("telemetry", {"ts": ts, "gpu_index": 0, "gpu_uuid": "GPU-a", "vendor": "nvidia",
                                 "power_w": 80.0 if util == 0 else 600.0, "gpu_util_pct": util})
        writer.add("processes", {"ts": ts, "gpu_index": 0, "gpu_uuid": "GPU-a", "pid": 77, "process_name": "python",
                                 "used_mem_bytes": 1 << 30, "k8s_pod_uid": "5e1f0c2a-7b3d-4c9e-8a6f-2d4b1e9c7a05",
                                 "k8s_namespace": "lab", "k8s_pod_name": "notebook-0"})
    writer.flush()


def test_job_gpus_idle_finding_fires_after_ten_idle_minutes(tmp_path: Path) -> None:
    _idle_node(tmp_path, idle_from_s=120, idle_to_s=120 + 11 * 60)
    con = open_dataset(tmp_path)
    gpus = run_analysis(con, "job_gpus").row(0, named=True)
    assert (gpus["job"], gpus["held_s"], gpus["idle_s"], gpus["longest_idle_s"]) == ("pod-lab/notebook-0", 1200.0, 660.0, 660.0)
    findings = [f for f in job_findings(con) if f.id == "job_gpus_idle"]
    assert [(f.subject, f.evidence["gpus"], f.evidence["longest_idle_s"]) for f in findings] == [
        ({"job": "pod-lab/notebook-0"}, ["node-a:0"], 660.0)]


def test_job_gpus_idle_finding_is_silent_for_nine_idle_minutes(tmp_path: Path) -> None:
    _idle_node(tmp_path, idle_from_s=120, idle_to_s=120 + 9 * 60)
    assert [f for f in job_findings(open_dataset(tmp_path)) if f.id == "job_gpus_idle"] == []


def test_processes_of_schema_version_2_read_with_null_job_columns(tmp_path: Path) -> None:
    folder = tmp_path / "processes" / "host=a"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"ts": pa.array([0], pa.timestamp("us", tz="UTC")), "host": ["a"],
                             "gpu_index": pa.array([0], pa.int32()), "pid": [5]}), folder / "part-0.parquet")
    con = open_dataset(tmp_path)
    assert con.sql("select pid, slurm_job_id, k8s_pod_uid, nspid from processes").fetchall() == [(5, None, None, None)]
    assert run_analysis(con, "job_energy").height == 0


@pytest.mark.parametrize(("gpu_uuid", "pci_bus_id"), [
    ("GPU-5e8f2c31-8d0b-4c59-9b8e-1f0b7a3c2d11", None),  # the export's TARGET_INFO_GPU.uuid
    ("GPU-00000000-0000-0000-0000-000000000005", "00000000:18:00.0"),  # its busLocation 0000:18:00.0
], ids=["uuid", "pci_bus_id"])
def test_power_trace_gpus_matches_the_device_an_nsys_export_names(tmp_path: Path, gpu_uuid: str,
                                                                 pci_bus_id: str | None) -> None:
    from gpulens.collector.ingest import ingest_paths
    from test_ingest_nsys import EPOCH_NS, build_export

    report = ingest_paths([build_export(tmp_path / "report.sqlite")], tmp_path / "data", run="r1")
    assert not report.failures
    writer = DatasetWriter(tmp_path / "data", "node-a")
    for gpu in range(8):
        writer.add("devices", {"ts": EPOCH_NS // 1000, "gpu_index": gpu, "vendor": "nvidia", "model": "H100",
                               "gpu_uuid": gpu_uuid if gpu == 5 else f"GPU-{gpu}",
                               "pci_bus_id": pci_bus_id if gpu == 5 else f"00000000:{0x20 + gpu:02X}:00.0"})
        for second in range(-5, 6):
            writer.add("telemetry", {"ts": EPOCH_NS // 1000 + second * 1_000_000, "gpu_index": gpu,
                                     "gpu_uuid": f"GPU-{gpu}", "vendor": "nvidia", "power_w": 300.0})
    writer.flush()
    matched = run_analysis(open_dataset(tmp_path / "data"), "power_trace_gpus")
    assert matched.select("device", "gpu_index", "gpu_uuid", "matched_by", "unmatched_reason").rows() == [
        (0, 5, gpu_uuid, "uuid", None)]


def test_report_of_one_job_keeps_the_telemetry_it_held_and_its_runs(shuffled: Path, tmp_path: Path) -> None:
    from gpulens.dashboard.report.build import build_report

    report = build_report(shuffled, job=f"slurm-{DEMO_SLURM_JOB}")
    assert report.title == f"gpulens report: job slurm-{DEMO_SLURM_JOB}"
    # the job is seen from 0 s to 50 s of the minute: 51 samples of each of the 8 GPUs
    assert report.source.rows["telemetry"] == 8 * 51
    assert [run["run"] for run in report.source.runs] == ["demo-training"]


def test_report_of_a_job_the_dataset_lacks_names_the_jobs_it_has(shuffled: Path) -> None:
    from gpulens.collector.errors import UsageError
    from gpulens.dashboard.report.build import build_report

    with pytest.raises(UsageError, match=r"no job 'slurm-1' in the dataset's processes \(jobs: slurm-4242\)"):
        build_report(shuffled, job="slurm-1")


@pytest.mark.slow
def test_power_page_picks_a_job_and_shows_its_energy(shuffled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1 import AppTest

    from gpulens.dashboard import data

    monkeypatch.setenv(data.DATASET_ENV, str(shuffled))
    monkeypatch.setenv("GPULENS_WARM_UP", "0")
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "dashboard" / "app.py"), default_timeout=120)
    at.switch_page("app_pages/power.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    picker = next(box for box in at.selectbox if box.label == "Job")
    assert picker.options == [f"slurm-{DEMO_SLURM_JOB}"]
    shown = [table.value for table in at.dataframe if "gpu_hours" in table.value.columns]
    assert [(list(frame["gpus"]), frame["step"].iloc[1]) for frame in shown] == [([8, 8], "0")]
