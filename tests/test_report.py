"""`gpulens report`: findings first, every analysis, html / md / json, compare and fail-on."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import jsonschema
import polars as pl
import pytest


REPO_ROOT = Path(__file__).resolve().parents[1]
TRAINING = REPO_ROOT / "sample_traces" / "demo-training"
INFERENCE = REPO_ROOT / "sample_traces" / "demo-inference"
SCHEMA = REPO_ROOT / "dashboard" / "report" / "schema" / "report.schema.json"


def gpulens(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run `gpulens ARGS` in this process: (exit code, stdout, stderr)."""
    from gpulens.dashboard import cli

    capsys.readouterr()
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def training_report():
    """The report of the training sample, built once."""
    if not TRAINING.is_dir():
        pytest.skip("sample_traces/demo-training is not present")
    from gpulens.dashboard.report.build import build_report

    return build_report(TRAINING)


@pytest.fixture(scope="module")
def training_json(training_report) -> dict:
    from gpulens.dashboard.report.jsonout import render_json

    return json.loads(render_json(training_report))


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small training demo (1 minute, 4 steps) with rank 4 straggling, for the command-line tests."""
    from gpulens.collector.demo import make_demo
    from gpulens.collector.sim_trace import MIN_KERNELS_PER_STEP

    return make_demo(tmp_path_factory.mktemp("small") / "demo", straggler_rank=4, capped_gpu=1, minutes=1, steps=4,
                     kernels_per_step=MIN_KERNELS_PER_STEP)


def _findings(report: dict, finding_id: str) -> list[dict]:
    return [f for f in report["findings"] if f["id"] == finding_id]


def test_report_finds_the_planted_straggler_rank(training_json: dict) -> None:
    stragglers = _findings(training_json, "straggler_rank")
    assert [f["subject"] for f in stragglers] == [{"run": "demo-training", "rank": 5}]
    assert stragglers[0]["severity"] == "critical"
    assert stragglers[0]["evidence"]["share_last"] > 0.5


def test_report_finds_the_power_capped_gpu(training_json: dict) -> None:
    capped = _findings(training_json, "power_capped_gpu")
    assert [f["subject"] for f in capped] == [{"host": "sim-node-00", "gpu_index": 3}]
    assert capped[0]["evidence"]["power_throttled_share"] > 0.3


def test_report_findings_are_most_severe_first(training_json: dict) -> None:
    order = {"critical": 0, "warning": 1, "info": 2}
    severities = [order[f["severity"]] for f in training_json["findings"]]
    assert severities == sorted(severities)
    assert training_json["findings"][0]["id"] == "straggler_rank"


def test_report_json_validates_against_the_schema(training_json: dict) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(training_json)


def test_report_json_has_every_analysis_table_and_no_problems(training_json: dict) -> None:
    assert training_json["problems"] == []
    for name in ("step_launch_summary", "time_breakdown", "stragglers", "collective_stats", "power_headroom",
                 "node_power", "interconnect_usage", "step_energy"):
        assert training_json["tables"][name], name
    assert training_json["source"]["rows"]["telemetry"] == 8 * 180
    assert training_json["source"]["runs"][0]["ranks"] == 8
    assert training_json["metrics"]["step_time_ns"] > 0
    assert training_json["metrics"]["energy_per_step_j"] > 0


def _same(a: object, b: object) -> bool:
    """Equal, floats to 1e-9 relative (DuckDB sums floats in parallel, in no fixed order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9)
    return a == b


def test_report_json_is_the_same_for_the_same_data(small: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for _ in range(2):
        code, out, err = gpulens("report", str(small), "--format", "json", capsys=capsys)
        assert code == 0, err
        runs.append(json.loads(out))
    assert list(runs[0]) == list(runs[1])
    assert _same(runs[0], runs[1])


def test_report_markdown_lists_the_findings_and_key_tables(training_report) -> None:
    from gpulens.dashboard.report.markdown import render_markdown

    text = render_markdown(training_report)
    assert text.startswith("# gpulens report")
    assert "`straggler_rank`: Rank 5 arrived last" in text
    assert "`power_capped_gpu`: GPU 3 on sim-node-00" in text
    assert "### Straggler ranking" in text and "### Power per GPU" in text
    assert "## Metrics" in text


def test_report_markdown_shows_two_findings_of_a_kind_and_names_the_rest(training_report) -> None:
    from gpulens.dashboard.report.markdown import render_markdown

    text = render_markdown(training_report)
    exposed = [line for line in text.splitlines() if "`exposed_communication`" in line]
    assert len(exposed) == 3  # ranks 0 and 1 in full, then one line for the six others
    assert exposed[-1] == "- 🟠 6 more `exposed_communication` (warning): _run demo-training, ranks 2-7_"


def test_report_markdown_leaves_out_an_empty_table_marked_omit_if_empty(training_report) -> None:
    import dataclasses

    from gpulens.dashboard.report.build import TableResult
    from gpulens.dashboard.report.markdown import render_markdown

    def emptied(table: TableResult) -> TableResult:
        if table.name != "stragglers":
            return table
        return TableResult(dataclasses.replace(table.spec, omit_if_empty=True), table.frame.clear())

    sections = [dataclasses.replace(section, tables=[emptied(t) for t in section.tables])
                for section in training_report.sections]
    assert "### Straggler ranking" in render_markdown(training_report)
    assert "### Straggler ranking" not in render_markdown(dataclasses.replace(training_report, sections=sections))


def test_report_html_is_self_contained_with_plotly_inlined_once(training_report) -> None:
    from gpulens.dashboard.report.html import render_html

    page = render_html(training_report)
    assert page.count("* plotly.js v") == 1
    assert page.count("Plotly.newPlot(") >= 8
    assert "<script src" not in page and "<link" not in page and "@import" not in page
    assert page.index('id="findings"') < page.index('id="launch"') < page.index('id="data"')
    assert "Rank 5 arrived last" in page and "GPU 3 on sim-node-00" in page
    assert 'class="problem"' not in page


def test_report_html_shows_long_kernel_names_short_opening_to_the_full_name(training_report) -> None:
    import html
    import re

    from gpulens.dashboard.report.html import NAME_CHARS, render_html

    page = render_html(training_report)
    cells = re.findall(r'<details class="name"><summary>(.*?)</summary><span class="full">(.*?)</span>', page)
    names = {html.unescape(short): html.unescape(full) for short, full in cells}
    gemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
    assert names[gemm[: NAME_CHARS - 1] + "…"] == gemm
    assert all(len(short) <= NAME_CHARS < len(full) for short, full in names.items())
    # a name that fits is a plain cell
    assert ">ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage&lt;4096ul&gt;)</td>" in page


def test_report_command_writes_html_by_default(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = gpulens("report", str(small), capsys=capsys)
    assert code == 0, err
    assert out == ""
    assert err.startswith("report.html: html report written; findings: ")
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_report_format_follows_the_output_suffix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    code, _, err = gpulens("report", str(INFERENCE), "-o", str(out), capsys=capsys)
    assert code == 0, err
    data = json.loads(out.read_text())
    assert _findings(data, "power_headroom")[0]["subject"] == {"host": "sim-infer-00"}
    assert data["tables"]["time_breakdown"] == []


def test_report_ingests_raw_traces_into_a_temporary_dataset(small: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = gpulens("report", str(small / "raw" / "kineto"), "--format", "md", capsys=capsys)
    assert code == 0, err
    assert "`straggler_rank`: Rank 4 arrived last" in out
    assert "a temporary dataset" not in out  # md names the inputs
    assert f"Made from `{small / 'raw' / 'kineto'}`" in out


def test_report_prints_a_files_warnings_as_ingest_does(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_ingest_nccl_log import TWO_NODES_LOG

    log = tmp_path / "nccl.log"
    log.write_text(TWO_NODES_LOG)
    code, _, err = gpulens("report", str(small / "raw" / "kineto"), str(log), "-o", str(tmp_path / "r.md"), capsys=capsys)
    warnings = [line for line in err.splitlines() if line.startswith("gpulens: warning:")]
    assert (code, warnings) == (0, [f"gpulens: warning: {log}: 2 COLL lines could not be read (the first at line 32); "
                                    "their collectives are missing"])


def test_report_warns_when_two_traces_claim_one_rank(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rank0 = sorted((small / "raw" / "kineto").glob("rank-0.*"))[0]
    again = tmp_path / "rerun" / rank0.name
    again.parent.mkdir()
    shutil.copy(rank0, again)
    code, _, err = gpulens("report", str(rank0), str(again), "--run", "two", "-o", str(tmp_path / "r.md"), capsys=capsys)
    warnings = [line for line in err.splitlines() if line.startswith("gpulens: warning:")]
    paths = ", ".join(sorted([str(rank0), str(again)]))
    assert (code, warnings) == (0, [f"gpulens: warning: run two: rank 0 comes from 2 kineto files ({paths}); "
                                    "analyses merge them as one rank (ingest separate jobs with their own --run; "
                                    "where the traces do not say their rank, put it in each file's or folder's name: "
                                    "rank3/...)"])


def test_report_keeps_the_ingested_dataset_where_asked(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traces = sorted((small / "raw" / "kineto").glob("rank-[01].*"))
    keep = tmp_path / "kept"
    code, _, err = gpulens("report", *map(str, traces), "--dataset", str(keep), "--run", "two", "-o",
                           str(tmp_path / "r.md"), capsys=capsys)
    assert code == 0, err
    assert sorted(p.name for p in (keep / "traces").iterdir()) == ["run=two"]


# --- compare -----------------------------------------------------------------------------


@pytest.fixture()
def baseline_json(tmp_path: Path):
    """A JSON baseline: a report with some metrics changed."""

    def make(report: dict, **metrics: float) -> Path:
        data = json.loads(json.dumps(report))
        data["metrics"].update(metrics)
        path = tmp_path / "baseline.json"
        path.write_text(json.dumps(data, indent=2))
        return path

    return make


def test_report_compare_with_itself_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    code, _, err = gpulens("report", str(INFERENCE), "--compare", str(INFERENCE), "--fail-on", "power_throttled_share:1",
                           "-o", str(out), capsys=capsys)
    assert code == 0, err
    comparison = json.loads(out.read_text())["comparison"]
    assert comparison["regressions"] == []
    assert comparison["new_findings"] == [] and comparison["resolved_findings"] == []
    deltas = {m["metric"]: m for m in comparison["metrics"]}
    assert deltas["power_throttled_share"]["delta"] == 0


@pytest.fixture(scope="module")
def small_json(small: Path) -> dict:
    from gpulens.dashboard.report.build import build_report
    from gpulens.dashboard.report.jsonout import render_json

    return json.loads(render_json(build_report(small)))


def test_report_compare_exits_3_when_a_metric_regressed(small: Path, small_json: dict, baseline_json, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    current = small_json["metrics"]
    baseline = baseline_json(small_json, step_time_ns=current["step_time_ns"] / 1.25,
                             busbw_bytes_per_s=current["busbw_bytes_per_s"] * 0.99)
    out = tmp_path / "r.md"
    code, _, err = gpulens("report", str(small), "--compare", str(baseline), "--fail-on", "step_time:5",
                           "--fail-on", "busbw:5%", "-o", str(out), capsys=capsys)
    assert code == 3
    lines = [line for line in err.splitlines() if line.startswith("gpulens: error:")]
    assert len(lines) == 1
    assert "step_time rose 25.0 % (limit 5 %)" in lines[0] and "busbw" not in lines[0]
    assert "**regressed**" in out.read_text()  # the report is written all the same


def test_report_compare_passes_within_the_threshold(small: Path, small_json: dict, baseline_json,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    baseline = baseline_json(small_json, step_time_ns=small_json["metrics"]["step_time_ns"] / 1.02)
    code, out, err = gpulens("report", str(small), "--compare", str(baseline), "--fail-on", "step_time:5",
                             "--format", "json", capsys=capsys)
    assert code == 0, err
    delta = next(m for m in json.loads(out)["comparison"]["metrics"] if m["metric"] == "step_time")
    assert delta["delta_pct"] == pytest.approx(2.0)
    assert delta["regressed"] is False


def test_report_compare_against_a_run_without_straggler(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpulens.collector.demo import make_demo
    from gpulens.collector.sim_trace import MIN_KERNELS_PER_STEP

    good = make_demo(tmp_path / "good", straggler_rank=None, capped_gpu=1, minutes=1, steps=4,
                     kernels_per_step=MIN_KERNELS_PER_STEP)
    out = tmp_path / "r.json"
    code, _, err = gpulens("report", str(small), "--compare", str(good), "--fail-on", "step_time:3", "-o", str(out),
                           capsys=capsys)
    assert code == 3, err
    comparison = json.loads(out.read_text())["comparison"]
    assert comparison["regressions"] == ["step_time"]
    assert [f["subject"]["rank"] for f in comparison["new_findings"] if f["id"] == "straggler_rank"] == [4]


def test_report_fail_on_a_metric_the_baseline_lacks_is_an_error(small: Path, small_json: dict, baseline_json, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    baseline = baseline_json(small_json, step_time_ns=None)
    code, _, err = gpulens("report", str(small), "--compare", str(baseline), "--fail-on", "step_time:5",
                           "-o", str(tmp_path / "r.json"), capsys=capsys)
    assert code == 1
    assert err.strip().splitlines() == [err.strip()]
    assert "step_time" in err and "baseline has no data" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fail-on", "step_time:5"], "--fail-on needs --compare"),
        (["--compare", str(INFERENCE), "--fail-on", "latency:5"], "unknown metric 'latency'"),
        (["--compare", str(INFERENCE), "--fail-on", "step_time"], "expected METRIC:PCT"),
    ],
)
def test_report_bad_fail_on_exits_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = gpulens("report", str(INFERENCE), *args, capsys=capsys)
    assert code == 2
    assert message in err


# --- bad input ---------------------------------------------------------------------------


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gpulens: error: ")
    return lines[0]


def test_report_on_a_corrupt_trace_fails_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "rank0.pt.trace.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "name"')[:-6])
    code, _, err = gpulens("report", str(bad), "-o", str(tmp_path / "r.html"), capsys=capsys)
    assert code == 1
    assert str(bad) in _one_line_error(err)
    assert not (tmp_path / "r.html").exists()


def test_report_on_a_trace_without_profiler_steps_is_written_without_step_charts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # No ProfilerStep ranges: its one window per rank has no step to draw.
    from conftest import write_graph_replay_trace

    trace = write_graph_replay_trace(tmp_path / "graph.json")
    code, _, err = gpulens("report", str(trace), "-o", str(tmp_path / "r.html"), capsys=capsys)
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "CUDA and HIP graph replays per rank" in page and "Kernels per stream" not in page


def test_report_of_a_job_without_graphs_leaves_the_graph_table_out(training_report) -> None:
    from gpulens.dashboard.report.html import render_html

    assert "graph replays per rank" not in render_html(training_report)


def test_report_on_an_empty_file_fails_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "trace.json"
    empty.write_bytes(b"")
    code, _, err = gpulens("report", str(empty), capsys=capsys)
    assert code == 1
    assert _one_line_error(err) == f"gpulens: error: {empty}: empty file"


def test_report_on_an_empty_folder_fails_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = gpulens("report", str(tmp_path), capsys=capsys)
    assert code == 1
    assert "no trace files found" in _one_line_error(err)


def test_report_on_a_missing_path_fails_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = gpulens("report", str(tmp_path / "nope"), capsys=capsys)
    assert code == 1
    assert _one_line_error(err) == f"gpulens: error: {tmp_path / 'nope'}: no such file or directory"


def test_report_on_an_empty_dataset_fails_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "telemetry").mkdir()
    code, _, err = gpulens("report", str(tmp_path), capsys=capsys)
    assert code == 1
    assert "nothing to report" in _one_line_error(err)


def test_report_on_a_dataset_with_a_corrupt_file_fails_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = tmp_path / "data"
    shutil.copytree(INFERENCE, dataset)
    victim = next((dataset / "telemetry").rglob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[:200])
    code, _, err = gpulens("report", str(dataset), "-o", str(tmp_path / "r.html"), capsys=capsys)
    assert code == 1
    assert str(dataset) in _one_line_error(err)


@pytest.fixture()
def analysis_runs(monkeypatch):
    """How often each analysis ran, by (name, parameters), from now on."""
    from collections import Counter

    from gpulens.analysis import registry

    runs: Counter[tuple] = Counter()
    real = registry._run_analysis

    def counted(con, name, **params):
        runs[(name, tuple(sorted(params.items())))] += 1
        return real(con, name, **params)

    monkeypatch.setattr(registry, "_run_analysis", counted)
    return runs


def test_report_runs_each_analysis_once_though_findings_and_sections_share_them(small: Path, analysis_runs) -> None:
    from gpulens.analysis import registry
    from gpulens.dashboard.report.build import build_report

    kept_before = set(registry._REMEMBERED)  # other tests' dashboard connections
    build_report(small)
    assert analysis_runs[("power_headroom", ())] == 1
    assert [key for key, count in analysis_runs.items() if count > 1] == []
    assert set(registry._REMEMBERED) <= kept_before  # nothing of the report's kept once it is built


def test_report_baseline_dataset_runs_each_analysis_once(small: Path, analysis_runs) -> None:
    from gpulens.dashboard.report.compare import load_baseline

    baseline = load_baseline(small)
    assert baseline.metrics and analysis_runs
    assert [key for key, count in analysis_runs.items() if count > 1] == []


def test_report_step_charts_of_two_runs_on_one_gpu_give_each_run_its_colour():
    from gpulens.dashboard import charts
    from gpulens.dashboard.report import figures

    steps = pl.DataFrame({"run": ["train", "train", "small", "small"], "rank": [0] * 4, "step": [10, 11, 100, 101],
                          "gpu_idle_share": [0.02, 0.03, 0.8, 0.7], "energy_j": [39.0, 40.0, 9.0, 8.0],
                          "gpu_index": [0] * 4})
    for fig in (figures.launch_figure(steps), charts.step_energy_figure(steps)):
        assert len({trace.line.color for trace in fig.data}) == 2


def test_report_draws_each_runs_median_step_with_its_launch_queue() -> None:
    from gpulens.dashboard.report import figures
    from gpulens.dashboard.report.build import build_report

    report = build_report(Path(__file__).resolve().parents[1] / "sample_traces" / "h100-training")
    # Of the complete steps of rank 0 (the last may be cut short): 34.3, 34.9, 54.1, 60.7 ms -> step 12;
    # 38.2, 40.6, 53.6, 79.3 ms -> step 102. The NCCL log's run has no steps.
    chosen = {key: (frame["rank"][0], frame["step"][0]) for key, frame in report.series.items() if key.startswith("step_")}
    assert chosen == {"step_kernels/h100-train": (0, 12), "step_queue/h100-train": (0, 12),
                      "step_kernels/h100-small-batch": (0, 102), "step_queue/h100-small-batch": (0, 102)}
    titles = [build().layout.title.text for _, build in figures.section_figures(report, report.section("launch"))]
    assert titles[2:] == ["Kernels per stream: h100-small-batch, rank 0, step 102 (its median step)",
                          "Kernels per stream: h100-train, rank 0, step 12 (its median step)"]


def test_report_draws_energy_per_step_and_per_phase_as_the_dashboard_does() -> None:
    from gpulens.dashboard.report import figures
    from gpulens.dashboard.report.build import build_report

    report = build_report(Path(__file__).resolve().parents[1] / "sample_traces" / "h100-training")
    titles = [build().layout.title.text for _, build in figures.section_figures(report, report.section("energy"))]
    assert titles == ["Energy per step", "Energy by phase per rank"]


H100 = REPO_ROOT / "sample_traces" / "h100-training"


def _runs_alone(tmp_path: Path, runs: list[str]) -> Path:
    """A dataset holding only these trace runs of the real H100 sample."""
    root = tmp_path / "+".join(runs)
    for run in runs:
        shutil.copytree(H100 / "traces" / f"run={run}", root / "traces" / f"run={run}")
    return root


def test_report_metrics_per_run_are_each_runs_own_metrics(tmp_path: Path) -> None:
    from gpulens.analysis.dataset import open_dataset
    from gpulens.analysis.metrics import compute_metrics, compute_run_metrics

    runs = ["h100-small-batch", "h100-train"]
    both = compute_run_metrics(open_dataset(_runs_alone(tmp_path, runs)), runs)
    assert list(both) == runs
    for run in runs:
        assert both[run] == compute_metrics(open_dataset(_runs_alone(tmp_path, [run])))
    # the launch-bound run idles, the GPU-bound one does not
    assert both["h100-small-batch"]["idle_share"] > 0.7 > 0.1 > both["h100-train"]["idle_share"]


def test_report_metrics_per_run_leave_telemetry_metrics_to_the_dataset() -> None:
    from gpulens.analysis.dataset import open_dataset
    from gpulens.analysis.metrics import compute_metrics, compute_run_metrics

    con = open_dataset(H100)
    per_run = compute_run_metrics(con, ["h100-small-batch", "h100-train"])
    assert [values["power_throttled_share"] for values in per_run.values()] == [None, None]
    assert compute_metrics(con)["power_throttled_share"] is not None


def test_report_of_one_run_has_no_metrics_per_run(training_json: dict) -> None:
    assert training_json["metrics_by_run"] == {}


@pytest.fixture(scope="module")
def two_run_report(tmp_path_factory: pytest.TempPathFactory):
    from gpulens.dashboard.report.build import build_report

    return build_report(_runs_alone(tmp_path_factory.mktemp("two_runs"), ["h100-small-batch", "h100-train"]))


def test_report_markdown_gives_each_run_a_metrics_column(two_run_report) -> None:
    from gpulens.dashboard.report.markdown import render_markdown

    assert "| metric | h100-small-batch | h100-train | all runs | better |" in render_markdown(two_run_report)


def test_report_html_gives_each_run_a_metrics_column(two_run_report) -> None:
    from gpulens.dashboard.report.html import render_html

    assert "<th>metric</th><th>h100-small-batch</th><th>h100-train</th><th>all runs</th><th>what</th>" in render_html(two_run_report)


def test_report_json_of_two_runs_matches_the_schema(two_run_report) -> None:
    from gpulens.dashboard.report.jsonout import render_json

    report = json.loads(render_json(two_run_report))
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    assert list(report["metrics_by_run"]) == ["h100-small-batch", "h100-train"]


def test_the_report_command_ends_at_once_with_its_report_whole(small: Path, tmp_path: Path) -> None:
    # As the process's entry point: the report on stdout, its last line on
    # stderr and its status must all be there, and no scratch folder left behind.
    import subprocess
    import sys
    import tempfile

    scratch_before = set(Path(tempfile.gettempdir()).glob("gpulens-report-*"))
    result = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "report", str(small), "--format", "json"],
                            capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert _findings(json.loads(result.stdout), "straggler_rank")[0]["subject"]["rank"] == 4
    assert set(Path(tempfile.gettempdir()).glob("gpulens-report-*")) == scratch_before
