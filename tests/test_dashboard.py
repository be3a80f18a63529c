"""The dashboard: every page run by Streamlit's AppTest on a sample dataset and
on empty or missing ones; the chart views of `analysis.timeline`; the data
layer's cache keys; the `gpulens dashboard` command line.

The sample is built once: a simulated 8-GPU node (GPU 7 held at its power
limit) sampled around the traces of two simulated 8-rank runs, `training`
(rank 5 a straggler) and `balanced` (none).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from gpulens.analysis import communication, power, timeline
from gpulens.analysis.dataset import open_dataset
from conftest import write_data_loader_trace, write_graph_replay_trace, write_sync_loop_trace, write_telemetry, write_trace_table
from gpulens.dashboard import charts, data
from gpulens.dashboard.app_pages.common import default_hosts

APP = str(Path(__file__).resolve().parents[1] / "dashboard" / "app.py")
T0_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z

# Page script -> the chart titles (prefixes) it draws on the sample.
PAGE_CHARTS: dict[str, list[str]] = {
    "app_pages/overview.py": ["What the dataset covers, in time"],
    "app_pages/telemetry.py": ["Board power per GPU", "GPU utilisation per GPU", "SM clock per GPU", "GPU temperature per GPU",
                           "Memory used per GPU", "Throttling: share of samples"],
    "app_pages/power.py": ["Power percentiles per GPU", "Power distribution per GPU", "Node coincident power",
                       "Power-cap what-if", "Energy per step", "Energy by phase per rank"],
    "app_pages/interconnect.py": ["NVLink throughput per GPU", "NVLink throughput over time", "PCIe throughput per GPU",
                              "PCIe throughput over time"],
    "app_pages/kernels.py": ["GPU time breakdown per rank", "Kernel launch and queuing time (TKLQT) per step",
                         "Launch delay (call return to kernel start)", "Launch call CPU time", "Short kernels: top 15",
                         "Top 15 kernels by GPU time",
                         "Kernels per stream: balanced, rank 0, step 3"],
    "app_pages/communication.py": ["Collective time by op and message size", "Bus bandwidth by message size",
                               "Communication overlapped with compute", "Arrival skew", "Straggler ranking"],
    "app_pages/compare.py": ["Kernel time per rank-step: training minus balanced", "Bus bandwidth: balanced vs training"],
    "app_pages/live.py": ["Board power, last 5 min", "GPU utilisation, last 5 min", "SM clock, last 5 min",
                      "GPU temperature, last 5 min"],
}
ALL_PAGES = list(PAGE_CHARTS)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    return data.build_sample_dataset(
        tmp_path_factory.mktemp("dashboard") / "data", steps=5, kernels_per_step=60, telemetry_s=300,
        dense_s=1.0, dense_interval_s=0.02, balanced_run="balanced",
    )


def _run(monkeypatch, dataset: Path | str, page: str = "app_pages/overview.py") -> AppTest:
    monkeypatch.setenv(data.DATASET_ENV, str(dataset))
    monkeypatch.setenv("GPULENS_WARM_UP", "0")  # no background queries competing with the page's
    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _charts(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def _titles(at: AppTest) -> list[str]:
    return [spec["layout"]["title"]["text"] for spec in _charts(at)]


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _text(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


# --- every page on the sample ------------------------------------------------------------


def test_overview_counts_what_the_dataset_covers(monkeypatch, sample):
    at = _run(monkeypatch, sample)
    metrics = _metrics(at)
    assert metrics["Hosts"] == "1"
    assert metrics["GPUs"] == "8"
    assert metrics["Trace runs"] == "2"
    assert metrics["Kernels"] == f"{2 * 8 * 5 * 60:,}"
    samples = open_dataset(sample).execute("select count(*) from telemetry").fetchone()[0]
    assert metrics["Telemetry samples"] == f"{samples:,}"
    assert "**Telemetry** covers 2026-01-01 00:57:30 to 2026-01-01 01:02:29 UTC" in _text(at)


def test_overview_shows_the_findings_with_their_numbers_and_evidence_pages(monkeypatch, sample):
    at = _run(monkeypatch, sample)
    text = _text(at)
    con = open_dataset(sample)
    capped = power.power_headroom(con).filter(pl.col("gpu_index") == 7).row(0, named=True)
    assert f"GPU 7 on sim-node-00 was held back by its power limit {capped['power_throttled_share']:.0%} of the time" in text
    straggler = communication.stragglers(con).filter((pl.col("run") == "training") & (pl.col("rank") == 5)).row(0, named=True)
    assert f"Rank 5 arrived last at {straggler['share_last']:.0%} of {straggler['decisive_instances']} collectives" in text
    links = {link.proto.label for link in at.get("page_link")}
    assert {"Evidence: Power headroom", "Evidence: Communication"} <= links


def test_overview_gives_each_findings_numbers_as_a_table_not_a_code_block(monkeypatch, sample):
    # A code block loads Streamlit's syntax highlighter: 0.6 s of a fresh tab.
    at = _run(monkeypatch, sample)
    assert not at.get("code")
    straggler = communication.stragglers(open_dataset(sample)).filter(
        (pl.col("run") == "training") & (pl.col("rank") == 5)).row(0, named=True)
    assert f"| decisive\\_collectives | {straggler['decisive_instances']:,} |" in _text(at)  # markdown_text


def test_evidence_markdown_writes_numbers_short_and_escapes_table_bars():
    from gpulens.dashboard.app_pages.common import evidence_markdown

    assert evidence_markdown({"wait_caused_ns": 38208256, "score": 0.8857142857142858, "ranks": [0, 5],
                              "note": "a|b", "capped": True}) == (
        "| evidence | value |\n|---|---|\n| wait\\_caused\\_ns | 38,208,256 |\n| score | 0.885714 |\n"
        "| ranks | \\[0, 5\\] |\n| note | a\\|b |\n| capped | true |\n")
    assert evidence_markdown({}) == "_No numbers recorded._"


def test_evidence_markdown_shows_a_link_or_image_in_a_name_as_text():
    from gpulens.dashboard.app_pages.common import evidence_markdown

    assert evidence_markdown({"kernel": "![t](http://x/t.png)<b>k</b>"}).splitlines()[-1] == (
        "| kernel | \\!\\[t\\]\\(http://x/t.png\\)&lt;b&gt;k&lt;/b&gt; |")


def test_overview_lists_the_most_severe_findings_first(monkeypatch, sample):
    at = _run(monkeypatch, sample)
    badges = [m.value for m in at.markdown if m.value.startswith(":") and "-badge[:material/" in m.value]
    order = {"critical": 0, "warning": 1, "info": 2}
    severities = [next(s for s in order if f"] {s}]" in b or f" {s}]" in b) for b in badges]
    assert severities and severities == sorted(severities, key=order.get)


@pytest.mark.parametrize("page", list(PAGE_CHARTS))
def test_page_draws_its_charts_on_the_sample(monkeypatch, sample, page):
    at = _run(monkeypatch, sample, page)
    titles = _titles(at)
    for expected in PAGE_CHARTS[page]:
        assert any(title.startswith(expected) for title in titles), f"{expected!r} not in {titles}"
    assert not at.error
    for spec in _charts(at):
        # the template (plotly_white, trimmed) has the defaults of every trace type drawn
        assert {trace.get("type", "scatter") for trace in spec["data"]} <= set(charts.TEMPLATE_TRACE_TYPES)
        # every chart says what its axes measure (panels that share their x axis name it once, under the last)
        layout = spec["layout"]
        if spec["data"] and spec["data"][0].get("type") != "heatmap" and layout.get("xaxis", {}).get("visible", True):
            assert any(layout[key].get("title", {}).get("text") for key in layout if key.startswith("xaxis"))
            assert layout["yaxis"]["title"]["text"]


def test_telemetry_charts_ship_at_most_5000_points_per_series(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/telemetry.py")
    lengths = [len(trace.get("x") or []) for spec in _charts(at) for trace in spec["data"]]
    assert max(lengths) <= 5000
    power_chart = _charts(at)[0]
    names = [trace.get("name") for trace in power_chart["data"]]
    assert {"GPU 0", "GPU 7", "power limit"} <= set(names)
    assert [name for name in names if "throttled" in name] == ["GPU 7 throttled (power/heat)"]


def test_telemetry_for_one_gpu_draws_its_min_max_band(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/telemetry.py")
    at.multiselect(key="telemetry_gpus").set_value(["GPU 7"]).run()
    power_chart = _charts(at)[0]
    assert [t.get("name") for t in power_chart["data"]][:3] == ["GPU 7 max", "GPU 7 min", "GPU 7"]
    assert power_chart["data"][1]["fill"] == "tonexty"


@pytest.fixture
def three_nodes(tmp_path):
    """Three hosts of 8 GPUs, 30 s of telemetry each: 24 GPUs, more than a page draws at first."""
    for host in ("node-a", "node-b", "node-c"):
        write_telemetry(tmp_path, host, [
            {"ts": T0_US + i * 1_000_000, "gpu_index": g, "power_w": 300.0 + g, "gpu_util_pct": 90.0}
            for i in range(30) for g in range(8)
        ])
    return tmp_path


def test_pages_with_a_line_per_gpu_start_with_the_first_hosts_of_16_gpus_or_fewer():
    def coverage(gpus_by_host: dict[str, int]) -> pl.DataFrame:
        return pl.DataFrame([(host, g) for host, gpus in gpus_by_host.items() for g in range(gpus)],
                            schema=["host", "gpu_index"], orient="row")

    assert default_hosts(coverage({"node-c": 8, "node-a": 8, "node-b": 8})) == ["node-a", "node-b"]
    assert default_hosts(coverage({"node-a": 4, "node-b": 4})) == ["node-a", "node-b"]
    assert default_hosts(coverage({"big-node": 24, "node-z": 1})) == ["big-node"]  # at least one host
    assert default_hosts(pl.DataFrame(schema={"host": pl.String, "gpu_index": pl.Int32})) == []


def test_telemetry_of_24_gpus_draws_the_first_two_hosts_and_says_so(monkeypatch, three_nodes):
    at = _run(monkeypatch, three_nodes, "app_pages/telemetry.py")
    assert at.multiselect(key="telemetry_hosts").value == ["node-a", "node-b"]
    power_chart = _charts(at)[0]
    assert len([t for t in power_chart["data"] if str(t.get("name", "")).startswith(("node-a", "node-b"))]) == 16
    assert not any(str(t.get("name", "")).startswith("node-c") for t in power_chart["data"])
    assert any(c.value == "Showing 2 of 3 hosts: pick more under Hosts." for c in at.caption)


def test_telemetry_of_24_gpus_asks_for_the_series_of_the_two_hosts_shown_alone(monkeypatch, three_nodes):
    from gpulens.dashboard.app_pages import common

    data.RESULTS.clear()
    _run(monkeypatch, three_nodes, "app_pages/telemetry.py")
    ds = data.current(three_nodes)
    window = common.default_telemetry_window(ds)
    assert data.cache_key(ds, timeline.telemetry_timeline, window, {"hosts": ("node-a", "node-b")}) in data.RESULTS
    assert data.cache_key(ds, timeline.telemetry_timeline, window, {"hosts": None}) not in data.RESULTS


def test_live_view_of_24_gpus_shows_the_first_two_hosts_until_more_are_picked(monkeypatch, three_nodes):
    at = _run(monkeypatch, three_nodes, "app_pages/live.py")
    assert len(_metrics(at)) == 16
    at.multiselect(key="live_hosts").set_value(["node-a", "node-b", "node-c"]).run()
    assert len(_metrics(at)) == 24 and _metrics(at)["node-c GPU 7"] == "307 W"


def test_power_of_24_gpus_opens_on_the_first_two_hosts_and_counts_the_fleet_of_three(monkeypatch, three_nodes):
    at = _run(monkeypatch, three_nodes, "app_pages/power.py")
    assert at.multiselect(key="power_hosts").value == ["node-a", "node-b"]
    per_gpu = at.dataframe[0].value
    assert len(per_gpu) == 16 and set(per_gpu["host"]) == {"node-a", "node-b"}
    assert any(c.value == "Showing 2 of 3 hosts: pick more under Hosts." for c in at.caption)
    assert any(c.value.startswith("Over all 3 nodes:") for c in at.caption)


def test_power_shows_every_host_once_picked(monkeypatch, three_nodes):
    at = _run(monkeypatch, three_nodes, "app_pages/power.py")
    at.multiselect(key="power_hosts").set_value(["node-a", "node-b", "node-c"]).run()
    assert not at.exception
    assert len(at.dataframe[0].value) == 24
    assert not any(c.value.startswith("Showing") for c in at.caption)


def test_power_of_hosts_without_power_readings_asks_for_others(monkeypatch, tmp_path):
    # node-a and node-b (the first 16 GPUs) report no power; node-c does.
    for host in ("node-a", "node-b", "node-c"):
        write_telemetry(tmp_path, host, [
            {"ts": T0_US + i * 1_000_000, "gpu_index": g, "gpu_util_pct": 90.0,
             **({"power_w": 300.0} if host == "node-c" else {})}
            for i in range(10) for g in range(8)
        ])
    at = _run(monkeypatch, tmp_path, "app_pages/power.py")
    assert [i.value for i in at.info] == ["The hosts picked have no power readings: pick others under Hosts."]
    at.multiselect(key="power_hosts").set_value(["node-c"]).run()
    assert not at.info and len(at.dataframe[0].value) == 8


def test_power_of_one_host_offers_no_host_picker(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/power.py")
    assert not [m for m in at.multiselect if m.key == "power_hosts"]


def test_power_whatif_slider_recomputes_the_capped_figures(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/power.py")
    before = _metrics(at)
    assert before["Extra nodes at p99, uncapped"] == before["Extra nodes at p99, capped at 700 W"]
    at.slider(key="power_cap_w").set_value(400).run()
    after = _metrics(at)
    node = power.power_cap_whatif_node(open_dataset(sample), power_cap_w=400.0, node_budget_w=5600.0).row(0, named=True)
    assert after["Extra nodes at p99, capped at 400 W"] == f"{node['capped_extra_nodes_at_p99']:+.2f}"
    assert float(after["Extra nodes at p99, capped at 400 W"]) > float(after["Extra nodes at p99, uncapped"])


def test_communication_names_the_planted_straggler(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/communication.py")
    at.selectbox(key="communication_run").set_value("training").run()
    assert _metrics(at)["Most likely straggler"] == "rank 5"


def test_kernels_page_gives_a_verdict_and_draws_a_chosen_step(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/kernels.py")
    assert _metrics(at)["Verdict"] in {"CPU-bound", "GPU-bound", "balanced", "undecided"}
    at.selectbox(key="kernels_rank").set_value(5).run()
    at.selectbox(key="kernels_step").set_value(4).run()
    assert "Kernels per stream: balanced, rank 5, step 4" in _titles(at)


def test_kernels_page_shows_each_streams_launch_queue_over_the_whole_trace(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/kernels.py")
    labels = [expander.label for expander in at.expander]
    assert any(label.startswith("Launch queue per stream, whole trace (") for label in labels), labels
    tables = [table.value for table in at.dataframe if "max_queue_length" in table.value.columns]
    assert tables and (tables[0]["max_queue_length"] <= 1024).all()


def test_kernels_page_says_how_many_kernels_graph_replays_ran(monkeypatch, tmp_path):
    from gpulens.collector.ingest import ingest_paths

    ingest_paths([write_graph_replay_trace(tmp_path / "graph.json", kernels=40)], tmp_path / "data", run="graph")
    at = _run(monkeypatch, tmp_path / "data", "app_pages/kernels.py")
    assert "40 GPU activities (100% of those launched) ran from 1 CUDA or HIP graph replays" in _captions(at)


def test_kernels_page_shows_a_data_starved_runs_loading_per_step(monkeypatch, tmp_path):
    from gpulens.collector.ingest import ingest_paths

    ingest_paths([write_data_loader_trace(tmp_path / "rank0.json", 0, 4_000.0)], tmp_path / "data", run="loop")
    at = _run(monkeypatch, tmp_path / "data", "app_pages/kernels.py")
    [expander] = [e for e in at.expander if e.label.startswith("Data loading")]
    assert expander.label == "Data loading: the GPU idle 40% of step time while batches loaded"


def test_kernels_page_shows_the_idle_gpu_that_item_calls_leave(monkeypatch, tmp_path):
    from gpulens.collector.ingest import ingest_paths

    ingest_paths([write_sync_loop_trace(tmp_path / "rank0.json", 0)], tmp_path / "data", run="loop")
    at = _run(monkeypatch, tmp_path / "data", "app_pages/kernels.py")
    [expander] = [e for e in at.expander if e.label.startswith("Synchronising calls")]
    assert expander.label == "Synchronising calls: the GPU idle 50% of step time after they drained it"


def test_kernels_page_of_a_job_without_graphs_says_nothing_of_them(monkeypatch, sample):
    assert "graph replays" not in _captions(_run(monkeypatch, sample, "app_pages/kernels.py"))


def test_kernels_page_draws_the_steps_launch_queue_under_its_kernels(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/kernels.py")
    at.selectbox(key="kernels_rank").set_value(5).run()
    at.selectbox(key="kernels_step").set_value(4).run()
    queue = timeline.step_queue_length(open_dataset(sample), "balanced", 5, 4)
    spec = next(spec for spec in _charts(at) if spec["layout"]["title"]["text"] == "Kernels per stream: balanced, rank 5, step 4")
    lines = [trace["name"] for trace in spec["data"] if trace.get("yaxis") == "y2"]
    assert queue.height and lines == [
        f"stream {stream}: mean {mean:,.1f}, max {deepest:,}, empty {empty:.0%}"
        for stream, mean, deepest, empty in queue.select("stream", "mean_queue_length", "max_queue_length", "empty_share")
        .unique().sort("stream").rows()]
    assert any(c.value.startswith("Below the kernels, each stream's launch queue") for c in at.caption)


def test_kernels_timeline_draws_every_kernel_and_a_narrow_window_separates_merged_ones(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/kernels.py")
    at.selectbox(key="kernels_rank").set_value(5).run()
    at.selectbox(key="kernels_step").set_value(4).run()
    whole = timeline.step_kernel_runs(open_dataset(sample), "balanced", 5, 4)
    kernels = whole["kernels_in_window"][0]
    assert whole["kernel_count"].sum() == kernels and whole.height < kernels  # some are merged at full view
    assert any(c.value.startswith(f"{kernels:,} kernels in {whole.height:,} shapes") for c in at.caption)
    busiest = whole.sort("kernel_count", descending=True).row(0, named=True)  # the run with most kernels at full view
    window_ms = (round(busiest["offset_ns"] / 1e6, 3), round(busiest["end_offset_ns"] / 1e6, 3))
    at.slider(key="kernels_window_5_4").set_value(window_ms).run()
    narrow = timeline.step_kernel_runs(open_dataset(sample), "balanced", 5, 4, *(int(ms * 1e6) for ms in window_ms))
    assert narrow.height > 1 and narrow["kernel_count"].max() < busiest["kernel_count"]
    timeline_chart = next(spec for spec in _charts(at) if spec["layout"]["title"]["text"].startswith("Kernels per stream"))
    hover = next(trace for trace in timeline_chart["data"] if trace.get("name") == "kernels")
    assert len(hover["text"]) == narrow.height
    # The launch queue below follows the same window.
    assert timeline_chart["layout"]["xaxis2"]["range"] == list(window_ms)


def test_compare_puts_two_runs_side_by_side(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/compare.py")
    metrics = _metrics(at)
    compared = timeline.compare_kernels(open_dataset(sample), "balanced", "training")
    assert metrics["Kernel time per rank-step, B"] == f"{compared['per_step_ns_b'].sum() / 1e6:.3f} ms"
    at.selectbox(key="compare_b").set_value("balanced").run()
    assert any("Pick two different runs" in i.value for i in at.info)


def test_compare_with_one_run_says_it_needs_two(monkeypatch, tmp_path, sample):
    one = tmp_path / "one"
    (one / "traces").mkdir(parents=True)
    import shutil

    shutil.copytree(sample / "traces" / "run=training", one / "traces" / "run=training")
    at = _run(monkeypatch, one, "app_pages/compare.py")
    assert any("comparing needs two" in i.value for i in at.info)


# --- empty, missing, partial datasets ------------------------------------------------------


@pytest.mark.parametrize("page", ALL_PAGES)
def test_page_on_an_empty_dataset_says_so_without_a_stack_trace(monkeypatch, tmp_path, page):
    at = _run(monkeypatch, tmp_path, page)
    messages = [e.value for e in at.error] + [i.value for i in at.info]
    assert any("holds no Parquet files yet" in m for m in messages), messages
    assert not _charts(at)


@pytest.mark.parametrize("page", ["app_pages/overview.py", "app_pages/telemetry.py", "app_pages/kernels.py"])
def test_page_on_a_missing_path_names_it(monkeypatch, tmp_path, page):
    missing = tmp_path / "nowhere"
    at = _run(monkeypatch, missing, page)
    assert [e.value for e in at.error] == [f"`{missing}`: no such dataset directory."]


def test_trace_pages_on_a_telemetry_only_dataset_ask_for_traces(monkeypatch, tmp_path):
    write_telemetry(tmp_path, "node-a", [{"ts": T0_US + i * 1_000_000, "gpu_index": 0, "power_w": 300.0} for i in range(5)])
    for page in ("app_pages/kernels.py", "app_pages/communication.py", "app_pages/compare.py"):
        at = _run(monkeypatch, tmp_path, page)
        assert any("has no kernel traces" in i.value for i in at.info), page
    at = _run(monkeypatch, tmp_path, "app_pages/interconnect.py")
    assert any("no NVLink, XGMI or PCIe throughput" in i.value for i in at.info)


def test_live_view_waits_for_a_collector_and_then_shows_its_data(monkeypatch, tmp_path):
    at = _run(monkeypatch, tmp_path, "app_pages/live.py")
    assert any("Waiting for data" in i.value for i in at.info)
    write_telemetry(tmp_path, "node-a", [
        {"ts": T0_US + i * 1_000_000, "gpu_index": g, "power_w": 100.0 + g, "gpu_util_pct": 50.0}
        for i in range(30) for g in range(2)
    ])
    at.run()
    assert not at.exception
    assert _metrics(at) == {"GPU 0": "100 W", "GPU 1": "101 W"}
    assert "Board power, last 5 min" in _titles(at)


def _live_with_last_sample_ago(monkeypatch, root: Path, seconds: float) -> AppTest:
    now_us = int(time.time() * 1e6)
    write_telemetry(root, "node-a", [
        {"ts": now_us - int(seconds * 1e6) - i * 1_000_000, "gpu_index": 0, "power_w": 300.0} for i in range(10)
    ])
    return _run(monkeypatch, root, "app_pages/live.py")


def _captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.caption)


def test_live_view_of_a_collector_that_flushes_seldom_says_how_to_see_fresher_data(monkeypatch, tmp_path):
    at = _live_with_last_sample_ago(monkeypatch, tmp_path, 45)
    assert "run it with `--flush-every 5`" in _captions(at)


def test_live_view_of_fresh_data_gives_no_flush_hint(monkeypatch, tmp_path):
    assert "--flush-every" not in _captions(_live_with_last_sample_ago(monkeypatch, tmp_path, 2))


def test_live_view_of_a_stopped_collector_gives_no_flush_hint(monkeypatch, tmp_path):
    assert "--flush-every" not in _captions(_live_with_last_sample_ago(monkeypatch, tmp_path, 3600))


# --- the chart views (analysis.timeline) -------------------------------------------------------


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    root = tmp_path_factory.mktemp("timeline")
    # GPU 0: power 100 + i W at 1 s, throttled by power at i = 5..9; GPU 1: 200 W.
    write_telemetry(root, "node-a", [
        {"ts": T0_US + i * 1_000_000, "gpu_index": 0, "power_w": 100.0 + i, "power_limit_w": 300.0,
         "throttle_reasons": ["sw_power_cap"] if 5 <= i < 10 else []}
        for i in range(20)
    ] + [{"ts": T0_US + i * 1_000_000, "gpu_index": 1, "power_w": 200.0} for i in range(20)])
    return open_dataset(root)


def test_telemetry_timeline_gives_min_mean_max_per_bucket(known):
    frame = timeline.telemetry_timeline(known, bucket_s=10).filter(pl.col("gpu_index") == 0).sort("bucket_start")
    assert frame["samples"].to_list() == [10, 10]
    assert frame["power_w_min"].to_list() == [100.0, 110.0]
    assert frame["power_w_mean"].to_list() == [104.5, 114.5]
    assert frame["power_w_max"].to_list() == [109.0, 119.0]
    assert frame["power_throttled_share"].to_list() == [0.5, 0.0]
    assert frame["bucket_start"][1] == datetime(2026, 1, 1, 0, 0, 10, tzinfo=timezone.utc)


def test_telemetry_timeline_gives_sm_activity_per_bucket(tmp_path):
    write_telemetry(tmp_path, "node-a", [
        {"ts": T0_US + i * 1_000_000, "gpu_index": 0, "power_w": 500.0, "sm_active_pct": 70.0 + i}
        for i in range(4)
    ])
    frame = timeline.telemetry_timeline(open_dataset(tmp_path), bucket_s=2).sort("bucket_start")
    assert frame.select("sm_active_pct_min", "sm_active_pct_mean", "sm_active_pct_max").rows() == [
        (70.0, 70.5, 71.0), (72.0, 72.5, 73.0)]


def test_telemetry_timeline_keeps_the_asked_range(known):
    frame = timeline.telemetry_timeline(known, bucket_s=1, start=datetime(2026, 1, 1, 0, 0, 5),
                                        end=datetime(2026, 1, 1, 0, 0, 8))
    assert frame.filter(pl.col("gpu_index") == 0)["power_w_mean"].to_list() == [105.0, 106.0, 107.0]


def test_skew_by_step_is_planned_as_an_asof_join_never_a_loop_over_every_pair(sample):
    # A loop join over 400,000 collectives and 8,000 steps took 11-13 s, the ASOF join 0.4 s.
    plan = open_dataset(sample).execute("explain select * from dash_skew_steps").fetchall()[0][1]
    operators = plan.upper().replace(" ", "_")
    assert "ASOF_JOIN" in operators
    assert "NESTED_LOOP_JOIN" not in operators


def test_bucket_seconds_keeps_a_day_of_samples_under_the_point_budget():
    assert timeline.bucket_seconds(86_400, 1.0) == 60
    assert timeline.bucket_seconds(300, 1.0) == 1
    assert timeline.bucket_seconds(10, 0.01) == 0.01
    assert 86_400 * 7 / timeline.bucket_seconds(86_400 * 7, 1.0) <= timeline.MAX_POINTS


def test_node_power_timeline_caps_each_gpu(known):
    frame = timeline.node_power_timeline(known, bucket_s=20, power_cap_w=150).row(0, named=True)
    assert frame["node_w_max"] == 119.0 + 200.0
    assert frame["capped_node_w_max"] == 119.0 + 150.0


def test_compare_kernels_of_a_run_with_itself_changes_nothing(sample):
    compared = timeline.compare_kernels(open_dataset(sample), "training", "training")
    assert compared.height > 10
    assert compared["delta_per_step_ns"].abs().max() == 0


# --- the data layer, the charts module and the command -----------------------------------------


def test_fingerprint_changes_when_a_file_is_added(tmp_path):
    empty = data.fingerprint(tmp_path)
    assert empty == data.EMPTY_FINGERPRINT
    write_telemetry(tmp_path, "node-a", [{"ts": T0_US, "gpu_index": 0, "power_w": 1.0}])
    first = data.fingerprint(tmp_path)
    assert first != empty
    write_telemetry(tmp_path, "node-a", [{"ts": T0_US + 1_000_000, "gpu_index": 0, "power_w": 2.0}])
    assert data.fingerprint(tmp_path) not in (empty, first)


def test_cached_calls_see_the_files_a_collector_adds(tmp_path):
    write_telemetry(tmp_path, "node-a", [{"ts": T0_US, "gpu_index": 0, "power_w": 1.0}])
    before = data.cached(data.current(tmp_path), timeline.telemetry_coverage)
    write_telemetry(tmp_path, "node-a", [{"ts": T0_US + 1_000_000, "gpu_index": 0, "power_w": 2.0}])
    after = data.cached(data.current(tmp_path), timeline.telemetry_coverage)
    assert (before["samples"][0], after["samples"][0]) == (1, 2)


def test_result_cache_computes_each_key_once_for_concurrent_askers():
    import threading
    import time

    cache, calls = data.ResultCache(max_entries=2), []

    def slow() -> int:
        calls.append(1)
        time.sleep(0.2)
        return 42

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("k", slow))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [42] * 4 and len(calls) == 1
    cache.get("a", lambda: 1)
    cache.get("b", lambda: 2)
    assert "k" not in cache and "a" in cache and "b" in cache  # least recently used out


def test_warm_up_fills_the_cache_in_the_background_once(sample):
    ds = data.current(sample)
    calls = [(power.power_headroom, (), {}), (timeline.trace_runs, (), {})]
    thread = data.warm_up(ds, calls, idle_s=0)
    assert thread is not None
    thread.join(timeout=60)
    for func, args, kwargs in calls:
        assert data.cache_key(ds, func, args, kwargs) in data.RESULTS
    assert data.warm_up(ds, calls) is None


def test_warm_up_waits_while_a_page_runs(sample, tmp_path):
    # A copy of the sample: its own dataset key, so no other test has warmed it.
    copy = tmp_path / "sample"
    shutil.copytree(sample, copy)
    ds = data.current(copy)
    calls = [(timeline.trace_runs, (), {})]
    key = data.cache_key(ds, timeline.trace_runs, (), {})
    with data.busy():
        thread = data.warm_up(ds, calls, idle_s=0)
        time.sleep(0.5)
        assert key not in data.RESULTS
    thread.join(timeout=60)
    assert key in data.RESULTS


def test_warm_up_queries_do_not_count_as_page_activity(sample, tmp_path):
    # Were they counted, each would make the next wait idle_s after it: one result per idle_s.
    copy = tmp_path / "sample"
    shutil.copytree(sample, copy)
    ds = data.current(copy)
    last_page_activity = data._activity["last"]
    thread = data.warm_up(ds, [(timeline.trace_runs, (), {}), (power.power_headroom, (), {})], idle_s=0)
    thread.join(timeout=60)
    assert data.cache_key(ds, power.power_headroom, (), {}) in data.RESULTS
    assert data._activity["last"] == last_page_activity


def test_reload_drops_the_results_and_warms_the_dataset_again(sample, tmp_path):
    copy = tmp_path / "sample"
    shutil.copytree(sample, copy)
    ds = data.current(copy)
    calls = [(timeline.trace_runs, (), {})]
    data.warm_up(ds, calls, idle_s=0).join(timeout=60)
    data.reload(ds)
    assert data.cache_key(ds, timeline.trace_runs, (), {}) not in data.RESULTS
    thread = data.warm_up(ds, calls, idle_s=0)
    assert thread is not None
    thread.join(timeout=60)
    assert data.cache_key(ds, timeline.trace_runs, (), {}) in data.RESULTS


def test_page_warm_up_draws_the_kernels_timeline_the_page_shows_first(sample, tmp_path):
    from gpulens.dashboard.app_pages import common

    copy = tmp_path / "sample"
    shutil.copytree(sample, copy)
    ds = data.current(copy)
    common.warm_up(ds)
    data._warm_up_threads[-1].join(timeout=120)
    # The first run of the menu, its first rank, its second profiler step (the sample's steps start at 2).
    assert common.default_timeline_step(ds) == ("balanced", 0, 3)
    assert data.cache_key(ds, timeline.step_kernel_runs, ("balanced", 0, 3), {}) in data.RESULTS


def test_cached_refuses_functions_outside_analysis(tmp_path):
    with pytest.raises(ValueError, match="analysis functions only"):
        data.cached(data.current(tmp_path), len)


def test_charts_build_without_streamlit():
    code = "import sys, dashboard.charts; assert 'streamlit' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(APP).parents[1])


def test_default_dataset_prefers_the_demo_folder_then_builds_one_into_the_cache(monkeypatch, tmp_path):
    demo = tmp_path / "sample_traces" / "demo-training"
    monkeypatch.setattr(data, "DEMO_DATASET", demo)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    built = []

    def fake_build(out: Path) -> None:
        built.append(out)
        write_telemetry(out, "node-a", [{"ts": T0_US, "gpu_index": 0, "power_w": 1.0}])

    monkeypatch.setattr(data, "_build_demo", fake_build)
    cached = data.default_dataset()
    assert cached == tmp_path / "cache" / "gpulens" / "demo-training"
    assert data.default_dataset() == cached and len(built) == 1  # built once
    write_telemetry(demo, "node-a", [{"ts": T0_US, "gpu_index": 0, "power_w": 1.0}])
    assert data.default_dataset() == demo


def _serve(monkeypatch, args: list[str]) -> tuple[list[str], dict[str, str]]:
    from gpulens.dashboard import serve

    calls = []
    monkeypatch.setattr(serve.os, "execve", lambda path, argv, env: calls.append((argv, env)))
    result = CliRunner().invoke(serve.dashboard, args)
    assert result.exit_code == 0, result.output
    return calls[0]


def test_dashboard_command_binds_localhost_and_names_the_dataset(monkeypatch, sample):
    argv, env = _serve(monkeypatch, [str(sample), "--port", "8600"])
    assert argv[1:4] == ["-m", "gpulens.dashboard.launch", "run"] and argv[4].endswith("dashboard/app.py")
    options = dict(zip(argv[5::2], argv[6::2]))
    assert options == {
        "--server.address": "127.0.0.1", "--server.port": "8600", "--server.headless": "true",
        "--server.fileWatcherType": "none", "--browser.gatherUsageStats": "false", "--client.toolbarMode": "viewer",
    }
    assert env[data.DATASET_ENV] == str(sample.resolve())


def test_dashboard_command_binds_elsewhere_only_when_told(monkeypatch, sample):
    argv, _ = _serve(monkeypatch, [str(sample), "--address", "0.0.0.0"])
    assert argv[argv.index("--server.address") + 1] == "0.0.0.0"
    assert argv[argv.index("--server.port") + 1] == "8501"


def _serve_refused(monkeypatch, capsys, args: list[str]) -> tuple[int, str, list]:
    from gpulens.dashboard import cli, serve

    calls = []
    monkeypatch.setattr(serve.os, "execve", lambda path, argv, env: calls.append(argv))
    code = cli.main(["dashboard", *args])
    return code, capsys.readouterr().err, calls


def test_dashboard_on_an_address_of_no_interface_here_is_one_error_line_and_starts_nothing(monkeypatch, capsys, sample):
    # 192.0.2.1 is kept for documentation (RFC 5737): no machine has it.
    assert _serve_refused(monkeypatch, capsys, [str(sample), "--address", "192.0.2.1"]) == (
        2, "gpulens: error: --address 192.0.2.1: cannot serve there (Cannot assign requested address)\n", [])


def test_dashboard_on_an_address_that_is_no_address_is_one_error_line_and_starts_nothing(monkeypatch, capsys, sample):
    code, err, calls = _serve_refused(monkeypatch, capsys, [str(sample), "--address", "999.1.1.1"])
    # The reason is the resolver's: "Name or service not known" without a DNS server, another with one.
    assert (code, err.startswith("gpulens: error: --address 999.1.1.1: cannot serve there ("), err.count("\n"), calls) == (
        2, True, 1, [])


def test_dashboard_on_a_port_another_server_holds_is_one_error_line_and_starts_nothing(monkeypatch, capsys, sample):
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert _serve_refused(monkeypatch, capsys, [str(sample), "--port", str(port)]) == (
            2, f"gpulens: error: --port {port}: in use on 127.0.0.1 (another server listens there; choose another "
               "--port)\n", [])


def test_the_launcher_warms_every_pages_first_view_into_the_pages_cache(monkeypatch, sample, tmp_path):
    from gpulens.analysis.all_findings import all_findings
    from gpulens.dashboard import launch
    from gpulens.dashboard.app_pages import common

    copy = tmp_path / "sample"  # its own dataset key, warmed by no other test
    shutil.copytree(sample, copy)
    monkeypatch.setenv(data.DATASET_ENV, str(copy))
    monkeypatch.delenv("GPULENS_WARM_UP", raising=False)
    thread = launch.prepare()
    thread.join(timeout=120)
    ds = data.current(copy)
    # The overview's findings, and the last page of the menu with a warmed view: the kernels timeline.
    assert data.cache_key(ds, all_findings, (), {}) in data.RESULTS
    assert data.cache_key(ds, timeline.step_kernel_runs, common.default_timeline_step(ds), {}) in data.RESULTS
    # The first visit finds it warmed already: no second warm-up.
    assert common.warm_up(ds) is None


def test_the_launcher_warms_nothing_with_warm_up_off(monkeypatch, sample):
    from gpulens.dashboard import launch

    monkeypatch.setenv(data.DATASET_ENV, str(sample))
    monkeypatch.setenv("GPULENS_WARM_UP", "0")
    assert launch.prepare() is None


def test_warm_up_computes_the_power_views_of_the_first_hosts_the_page_opens_on(monkeypatch, three_nodes):
    from gpulens.dashboard.app_pages import common

    monkeypatch.delenv("GPULENS_WARM_UP", raising=False)
    ds = data.current(three_nodes)
    thread = common.warm_up(ds)
    assert thread is not None
    thread.join(timeout=120)
    first_two = {"hosts": ("node-a", "node-b")}
    assert common.default_host_scope(ds) == first_two["hosts"]
    for function in (power.power_headroom, timeline.power_histogram, power.node_power):
        assert data.cache_key(ds, function, (), first_two) in data.RESULTS


def test_page_warm_up_computes_the_telemetry_view_the_page_shows_first(monkeypatch, sample):
    from gpulens.dashboard.app_pages import common

    data.RESULTS.clear()
    _run(monkeypatch, sample, "app_pages/telemetry.py")
    window = common.default_telemetry_window(data.current(sample))
    assert window is not None and window[0] == 1.0  # 5 min sampled at 1 s: 1 s buckets
    assert data.cache_key(data.current(sample), timeline.telemetry_timeline, window, {"hosts": None}) in data.RESULTS


# --- runs without kernels (an NCCL log) ---------------------------------------------------------

H100_SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "h100-training"


def test_kernels_page_offers_only_runs_with_kernels(monkeypatch):
    # The real-H100 sample's first run by name, h100-nccl, is an NCCL log: no kernels.
    at = _run(monkeypatch, H100_SAMPLE, "app_pages/kernels.py")
    picker = at.selectbox(key="kernels_run")
    assert (picker.value, picker.options) == ("h100-small-batch", ["h100-small-batch", "h100-train"])


def test_compare_page_opens_on_the_first_two_runs_with_kernels(monkeypatch):
    at = _run(monkeypatch, H100_SAMPLE, "app_pages/compare.py")
    assert (at.selectbox(key="compare_a").value, at.selectbox(key="compare_b").value) == ("h100-small-batch", "h100-train")


def test_compare_page_sets_the_two_runs_headline_metrics_side_by_side(monkeypatch):
    from gpulens.analysis.metrics import compute_run_metrics

    at = _run(monkeypatch, H100_SAMPLE, "app_pages/compare.py")
    [table] = [df.value for df in at.dataframe if "verdict" in df.value.columns]
    idle = table[table["metric"] == "idle_share"].iloc[0]
    expected = compute_run_metrics(open_dataset(H100_SAMPLE), ["h100-small-batch", "h100-train"])
    a, b = expected["h100-small-batch"]["idle_share"], expected["h100-train"]["idle_share"]
    assert (idle["A"], idle["B"], idle["change"], idle["verdict"]) == (f"{a:.1%}", f"{b:.1%}", f"{(b - a) / a:+.1%}", "better")


def test_power_page_says_why_a_run_cannot_be_joined_to_the_telemetry(monkeypatch, three_nodes):
    from gpulens.dashboard.escape import markdown_text

    # A rocprofv3 run kept on the boot clock beside node-a's telemetry.
    note = "ts on the boot clock (CLOCK_BOOTTIME): the trace names no host"
    write_trace_table(three_nodes, "amd", "runs", {"run": ["amd"], "rank": [0], "host": ["node-a"], "time_base": ["trace"],
                                                  "metadata_json": [json.dumps({"time_note": note})]})
    write_trace_table(three_nodes, "amd", "kernels", {
        "run": ["amd"], "rank": [0], "device": [0], "stream": [1], "name": ["gemm"], "category": ["compute"],
        "start_ns": [5_000], "end_ns": [9_000], "dur_ns": [4_000]})
    at = _run(monkeypatch, three_nodes, "app_pages/power.py")
    assert at.info[-1].value == (f"`amd` cannot be joined to the telemetry: "
                                 + markdown_text(f"trace times are not on the epoch (runs.time_base): {note}") + ".")
    assert "Energy per step" not in _titles(at)


def test_power_page_prices_each_step_and_phase_of_a_run_under_the_telemetry(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/power.py")
    steps = next(spec for spec in _charts(at) if spec["layout"]["title"]["text"] == "Energy per step")
    phases = next(spec for spec in _charts(at) if spec["layout"]["title"]["text"] == "Energy by phase per rank")
    assert steps["data"] and all(trace["mode"] == "lines+markers" for trace in steps["data"])
    assert [trace["name"] for trace in phases["data"]] == ["compute", "communication", "memory", "idle"]


def test_dashboard_on_a_missing_dataset_is_one_error_line_and_starts_nothing(monkeypatch, capsys, tmp_path):
    missing = tmp_path / "no" / "such" / "path"
    assert _serve_refused(monkeypatch, capsys, [str(missing)]) == (
        1, f"gpulens: error: {missing}: no such dataset directory\n", [])


def test_dashboard_on_a_file_is_one_error_line_and_starts_nothing(monkeypatch, capsys, tmp_path):
    file = tmp_path / "trace.json"
    file.write_text("{}")
    assert _serve_refused(monkeypatch, capsys, [str(file)]) == (
        1, f"gpulens: error: {file}: not a directory (a dataset is a folder of Parquet tables)\n", [])



def test_communication_opens_on_a_run_with_collectives_on_the_gpu_not_an_nccl_log(monkeypatch, sample, tmp_path):
    import shutil

    from conftest import write_trace_table

    dataset = tmp_path / "data"
    shutil.copytree(sample, dataset)
    # An NCCL log's run, first alphabetically: collectives with sizes, no kernels.
    write_trace_table(dataset, "aaa-nccl-log", "runs", {"run": ["aaa-nccl-log"], "rank": [0], "source_format": ["nccl_log"]})
    write_trace_table(dataset, "aaa-nccl-log", "collectives", {
        "run": ["aaa-nccl-log"], "rank": [0], "op": ["all_reduce"], "bytes": [1 << 20], "seq": [0]})
    at = _run(monkeypatch, dataset, "app_pages/communication.py")
    assert at.selectbox(key="communication_run").options[0] == "aaa-nccl-log"
    assert at.selectbox(key="communication_run").value == "balanced"


def test_dashboard_tables_show_a_missing_value_as_the_report_does(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/kernels.py")
    assert at.dataframe and {frame.proto.placeholder for frame in at.dataframe} == {"–"}


def test_kernels_page_offers_the_chosen_step_as_a_perfetto_trace(monkeypatch, sample):
    at = _run(monkeypatch, sample, "app_pages/kernels.py")
    at.selectbox(key="kernels_step").set_value(3).run()
    [button] = [b for b in at.get("download_button") if b.proto.label.startswith("Download step")]
    assert button.proto.label == "Download step 3 as a Perfetto trace"


def test_perfetto_trace_of_the_dashboard_holds_the_steps_of_every_rank(sample):
    import gzip

    trace = json.loads(gzip.decompress(data.perfetto_trace(data.current(sample), "training", (3, 3))))
    steps = [(e["pid"], e["name"]) for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]
    assert sorted(steps) == [(rank + 1, "ProfilerStep#3") for rank in range(8)]
