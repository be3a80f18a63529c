"""gpulens.analysis.power: headroom, node power, caps, interconnect, step and phase energy."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpulens.analysis import power, timeline
from gpulens.analysis.dataset import open_dataset
from gpulens.analysis.registry import SQL_DIR
from gpulens.collector import hardware
from gpulens.collector.sim import SimBackend
from gpulens.collector.throttle import POWER_REASONS, THERMAL_REASONS
from gpulens.collector.writer import DatasetWriter
from conftest import write_telemetry, write_trace_table

T0_S = 1_700_000_000  # a multiple of 50 s: timeline buckets start at T0
T0_US = T0_S * 1_000_000
T0_NS = T0_S * 1_000_000_000
S_NS = 1_000_000_000


def _by_gpu(frame, host: str = "node-a") -> dict[int, dict]:
    return {row["gpu_index"]: row for row in frame.iter_rows(named=True) if row["host"] == host}


def _write_devices(root: Path, host: str, rows: list[dict]) -> None:
    writer = DatasetWriter(root, host)
    for row in rows:
        writer.add("devices", {"ts": T0_US, **row})
    writer.flush()


# --- a node with a known answer ------------------------------------------------
#
# 101 samples, 1 s apart (100 intervals, 100 s).
# GPU 0: power 100 + i W (p50 150, p95 195, p99 199, max 200), limit 250 W;
#   an energy counter of 150 J a second that resets at sample 50; a power
#   violation counter that grows 0.5 s a second for the first 30 intervals
#   (15 s of 100 s); throttle reasons that disagree (the counters win).
# GPU 1: power 200 + 2i W (p99 398, max 400), limit 400 W; no counters:
#   power-cap reason at i >= 80 (21 samples), thermal reason at i < 10.


def _known_rows() -> list[dict]:
    rows = []
    for i in range(101):
        ts = T0_US + i * 1_000_000
        rows.append({
            "ts": ts, "gpu_index": 0, "power_w": 100.0 + i, "power_limit_w": 250.0,
            "energy_j": 5000.0 + 150 * i if i < 50 else 150.0 * (i - 49),
            "power_violation_ns": min(i, 30) * S_NS // 2, "thermal_violation_ns": 0,
            "throttle_reasons": ["sw_power_cap"] if i < 5 else [],
        })
        rows.append({
            "ts": ts, "gpu_index": 1, "power_w": 200.0 + 2 * i, "power_limit_w": 400.0,
            "throttle_reasons": (["sw_power_cap"] if i >= 80 else []) + (["hw_thermal_slowdown"] if i < 10 else []),
        })
    return rows


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    root = tmp_path_factory.mktemp("known")
    write_telemetry(root, "node-a", _known_rows())
    return open_dataset(root)


def test_power_headroom_percentiles_limit_and_headroom_on_known_rows(known):
    gpus = _by_gpu(power.power_headroom(known))
    g0, g1 = gpus[0], gpus[1]
    assert (g0["p50_w"], g0["p95_w"], g0["p99_w"], g0["max_w"]) == pytest.approx((150, 195, 199, 200))
    assert g0["limit_w"] == 250
    assert g0["headroom_w"] == pytest.approx(51)
    assert g0["headroom_pct"] == pytest.approx(20.4)
    assert (g1["p99_w"], g1["max_w"], g1["headroom_w"]) == pytest.approx((398, 400, 2))
    assert g0["samples"] == g0["power_samples"] == 101


def test_power_headroom_throttled_share_prefers_the_violation_counters(known):
    g0 = _by_gpu(power.power_headroom(known))[0]
    assert g0["power_throttled_share"] == pytest.approx(0.15)
    assert g0["thermal_throttled_share"] == 0
    assert g0["throttled_share"] == pytest.approx(0.15)
    assert (g0["power_throttle_source"], g0["thermal_throttle_source"]) == ("counters", "counters")


def test_power_headroom_throttled_share_from_reasons_without_counters(known):
    g1 = _by_gpu(power.power_headroom(known))[1]
    assert g1["power_throttled_share"] == pytest.approx(21 / 101)
    assert g1["thermal_throttled_share"] == pytest.approx(10 / 101)
    assert g1["throttled_share"] == pytest.approx(31 / 101)
    assert g1["power_throttle_source"] == "reasons"


def test_power_headroom_energy_from_counter_across_a_reset(known):
    g0 = _by_gpu(power.power_headroom(known))[0]
    assert g0["energy_source"] == "counter"
    assert g0["energy_j"] == pytest.approx(100 * 150)


def test_power_headroom_energy_integrates_power_without_counter(known):
    g1 = _by_gpu(power.power_headroom(known))[1]
    assert g1["energy_source"] == "power_integral"
    assert g1["energy_j"] == pytest.approx(sum(200 + 2 * i for i in range(1, 101)))


def test_power_headroom_energy_integral_skips_gaps(tmp_path):
    rows = [{"ts": T0_US + s * 1_000_000, "gpu_index": 0, "power_w": 100.0} for s in (0, 1, 2, 500, 501)]
    write_telemetry(tmp_path, "node-a", rows)
    con = open_dataset(tmp_path)
    assert power.power_headroom(con)["energy_j"].to_list() == [pytest.approx(300)]
    assert power.power_headroom(con, max_gap_s=1000)["energy_j"].to_list() == [pytest.approx(300 + 49_800)]


def test_node_power_coincident_peaks_and_extra_nodes_on_known_rows(known):
    node = power.node_power(known).row(0, named=True)
    # node power 300 + 3i: p50 450, p99 597, max 600; budget = 250 + 400
    assert (node["coincident_p50_w"], node["coincident_p99_w"], node["coincident_max_w"]) == pytest.approx((450, 597, 600))
    assert node["limit_sum_w"] == node["budget_w"] == 650
    assert node["extra_nodes_at_p99"] == pytest.approx(650 / 597 - 1)
    assert (node["gpus"], node["ticks"]) == (2, 101)


def test_node_power_budget_param_sets_the_budget(known):
    node = power.node_power(known, node_budget_w=1194).row(0, named=True)
    assert node["budget_w"] == 1194
    assert node["extra_nodes_at_p99"] == pytest.approx(1.0)
    assert power.node_power(known).row(0, named=True)["budget_w"] == 650  # default restored


def test_node_power_skips_ticks_with_a_gpu_missing_and_counts_the_fleet(tmp_path):
    # node-a: two GPUs at 100 + i W (node 200 + 2i: p99 398), limits 300 W;
    # one more tick where only GPU 0 reports a huge value (incomplete).
    rows = [{"ts": T0_US + i * 1_000_000, "gpu_index": g, "power_w": 100.0 + i, "power_limit_w": 300.0}
            for i in range(101) for g in (0, 1)]
    rows.append({"ts": T0_US + 101 * 1_000_000, "gpu_index": 0, "power_w": 10_000.0, "power_limit_w": 300.0})
    write_telemetry(tmp_path, "node-a", rows)
    # node-b: one GPU at 150 W, limit 300 W.
    write_telemetry(tmp_path, "node-b", [{"ts": T0_US + i * 1_000_000, "gpu_index": 0, "power_w": 150.0, "power_limit_w": 300.0} for i in range(50)])
    nodes = {row["host"]: row for row in power.node_power(open_dataset(tmp_path)).iter_rows(named=True)}
    a, b = nodes["node-a"], nodes["node-b"]
    assert (a["ticks"], a["coincident_p99_w"], a["coincident_max_w"]) == (101, pytest.approx(398), 400)
    assert a["extra_nodes_at_p99"] == pytest.approx(600 / 398 - 1)
    assert b["extra_nodes_at_p99"] == pytest.approx(1.0)
    # the fleet: 900 W of budget / mean p99 274 W = 3.28 nodes, 3 - 2 = 1 more
    assert a["fleet_budget_w"] == 900
    assert a["fleet_extra_nodes_at_p99"] == b["fleet_extra_nodes_at_p99"] == 1


def test_power_cap_whatif_counts_samples_and_energy_above_the_cap(known):
    gpus = _by_gpu(power.power_cap_whatif(known, power_cap_w=180))
    g0, g1 = gpus[0], gpus[1]
    assert (g0["cap_w"], g0["samples_above_cap"], g0["above_cap_s"]) == (180, 21, 21)
    assert g0["above_cap_share"] == pytest.approx(21 / 101)
    assert g0["energy_above_cap_j"] == pytest.approx(sum(range(1, 21)))
    assert g0["energy_j"] == pytest.approx(sum(100 + i for i in range(1, 101)))
    assert g1["samples_above_cap"] == 101
    assert g1["energy_above_cap_j"] == pytest.approx(sum(20 + 2 * i for i in range(1, 101)))
    assert g0["cap_above_limit"] is False


def test_power_cap_whatif_defaults_to_the_enforced_limit(known):
    gpus = _by_gpu(power.power_cap_whatif(known))
    assert (gpus[0]["cap_w"], gpus[0]["samples_above_cap"]) == (250, 0)
    assert (gpus[1]["cap_w"], gpus[1]["samples_above_cap"], gpus[1]["energy_above_cap_j"]) == (400, 1, 0)


def test_power_cap_whatif_node_lowers_the_coincident_peak(known):
    node = power.power_cap_whatif_node(known, power_cap_w=180).row(0, named=True)
    # capped node power: 280 + i up to i = 79, then 360
    assert node["any_above_cap_share"] == 1.0
    assert (node["capped_coincident_p99_w"], node["capped_coincident_max_w"]) == (pytest.approx(360), 360)
    assert node["capped_extra_nodes_at_p99"] == pytest.approx(650 / 360 - 1)
    assert node["extra_nodes_at_p99"] == pytest.approx(650 / 597 - 1)
    assert node["energy_above_cap_j"] == pytest.approx(sum(range(1, 21)) + sum(20 + 2 * i for i in range(1, 101)))


# --- some hosts of several -------------------------------------------------------
#
# node-a holds the known rows above; node-b two GPUs at 50 + i W, limits 300 W.


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("two_nodes")
    write_telemetry(root, "node-a", _known_rows())
    write_telemetry(root, "node-b", [
        {"ts": T0_US + i * 1_000_000, "gpu_index": g, "power_w": 50.0 + i, "power_limit_w": 300.0}
        for i in range(101) for g in (0, 1)
    ])
    return open_dataset(root)


# Each power analysis limited to node-a, and the columns that depend on which
# hosts are asked about (the fleet's, over every node asked for).
SCOPED_ANALYSES = {
    "power_headroom": (power.power_headroom, {}, ()),
    "power_cap_whatif": (power.power_cap_whatif, {"power_cap_w": 180.0}, ()),
    "node_power": (power.node_power, {}, ("fleet_budget_w", "fleet_extra_nodes_at_p99")),
    "power_cap_whatif_node": (power.power_cap_whatif_node, {"power_cap_w": 180.0},
                              ("fleet_budget_w", "fleet_extra_nodes_at_p99")),
    "power_histogram": (timeline.power_histogram, {}, ()),
    "power_cap_curve": (timeline.power_cap_curve, {"min_cap_w": 100.0, "max_cap_w": 400.0, "points": 4}, ()),
    "node_power_timeline": (timeline.node_power_timeline, {"bucket_s": 50, "power_cap_w": 180.0}, ()),
    "telemetry_timeline": (timeline.telemetry_timeline, {"bucket_s": 50}, ()),
}


@pytest.mark.parametrize("name", list(SCOPED_ANALYSES))
def test_power_analysis_of_one_host_equals_its_rows_over_every_host(two_nodes, name):
    function, kwargs, fleet_columns = SCOPED_ANALYSES[name]
    every = function(two_nodes, **kwargs)
    one = function(two_nodes, **kwargs, hosts=["node-a"])
    keep = [c for c in every.columns if c not in fleet_columns]
    expected = every.filter(pl.col("host") == "node-a").select(keep).sort(keep[:3])
    assert set(every["host"]) == {"node-a", "node-b"}
    assert one.height == expected.height > 0
    assert one.select(keep).sort(keep[:3]).equals(expected)


def test_node_power_fleet_counts_only_the_hosts_asked_for(two_nodes):
    # node-a alone: 650 W of budget / its p99 597 W = 1.09 nodes, 1 - 1 = 0 more.
    alone = power.node_power(two_nodes, hosts=["node-a"]).row(0, named=True)
    assert (alone["fleet_budget_w"], alone["fleet_extra_nodes_at_p99"]) == (650, 0)
    # both: 1,250 W / mean p99 (597 + 2 × 149) / 2 = 447.5 W: 2.79 nodes, 2 - 2 = 0 more;
    # node-b's coincident p99 is 2 × (50 + 99) W.
    both = power.node_power(two_nodes).row(0, named=True)
    assert both["fleet_budget_w"] == 1250
    assert both["fleet_extra_nodes_at_p99"] == 0
    assert power.node_power(two_nodes, hosts=["node-b"]).row(0, named=True)["coincident_p99_w"] == pytest.approx(298)


def test_power_analyses_of_a_host_not_in_the_dataset_are_empty(two_nodes):
    assert power.power_headroom(two_nodes, hosts=["node-z"]).height == 0
    assert power.node_power(two_nodes, hosts=[]).height == 0


def test_power_analyses_restore_every_host_after_a_scoped_call(two_nodes):
    power.power_headroom(two_nodes, hosts=["node-b"])
    assert set(power.power_headroom(two_nodes)["host"]) == {"node-a", "node-b"}
    assert set(two_nodes.sql("select distinct host from power_headroom").fetchall()) == {("node-a",), ("node-b",)}


def test_hosts_param_is_one_cache_key_whatever_the_order():
    assert power.hosts_param(["node-b", "node-a", "node-b"]) == ("node-a", "node-b")
    assert power.hosts_param(None) is None


def test_power_findings_on_known_rows_flag_caps_and_heat_per_gpu(known):
    found = {(f.id, f.subject.get("gpu_index")): f for f in power.power_findings(known)}
    capped = found[("power_capped_gpu", 0)]
    assert capped.severity == "warning" and capped.page == "power"
    assert capped.subject == {"host": "node-a", "gpu_index": 0}
    assert capped.evidence["power_throttled_share"] == pytest.approx(0.15)
    assert (capped.evidence["p99_w"], capped.evidence["limit_w"]) == (pytest.approx(199), 250)
    assert ("thermal_throttling", 1) in found
    assert ("thermal_throttling", 0) not in found  # its counter says never
    # 650 W budget / 597 W p99: 0.09 more nodes, below the 0.2 threshold
    assert not any(key[0] == "power_headroom" for key in found)


@pytest.mark.parametrize(("vendor", "command"), [("amd", "amd-smi static --limit"), ("nvidia", "nvidia-smi -q -d POWER")])
def test_power_capped_finding_names_the_vendors_tool_for_the_limit(tmp_path: Path, vendor: str, command: str) -> None:
    write_telemetry(tmp_path, "node-a", [{**row, "vendor": vendor} for row in _known_rows() if row["gpu_index"] == 0])
    headroom = power.power_headroom(open_dataset(tmp_path))
    [capped] = [f for f in power.power_findings(open_dataset(tmp_path)) if f.id == "power_capped_gpu"]
    assert headroom["vendor"].to_list() == [vendor]
    assert f"Check the enforced limit ({command};" in capped.detail


def test_power_findings_capped_gpu_threshold_is_a_keyword(known):
    found = power.power_findings(known, capped_min_share=0.2)
    assert [f.subject["gpu_index"] for f in found if f.id == "power_capped_gpu"] == [1]


# --- the simulated node ---------------------------------------------------------


def _sim_dataset(root: Path, profile: str, seconds: float = 20, interval_s: float = 0.1) -> None:
    backend = SimBackend(gpus=8, profile=profile, seed=1)
    rows = []
    for k in range(int(seconds / interval_s)):
        ts_ns = T0_NS + int(k * interval_s * 1e9)
        for gpu in range(8):
            rows.append({**backend.sample(gpu, ts_ns, slow=False).values, "ts": ts_ns // 1000, "gpu_index": gpu})
    write_telemetry(root, "sim-node", rows)
    pcie_peak = hardware.pcie_peak_bytes_per_s(5, 16)
    _write_devices(root, "sim-node", [
        {**asdict(device), "link_peak_bytes_per_s": backend.model.link_peak_bytes_per_s, "pcie_peak_bytes_per_s": pcie_peak}
        for device in backend.discover()
    ])


@pytest.fixture(scope="module")
def sim_training(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim_training")
    _sim_dataset(root, "training")
    return open_dataset(root)


def test_power_headroom_finds_the_sim_capped_gpu(sim_training):
    headroom = power.power_headroom(sim_training).sort("gpu_index")
    shares = headroom["power_throttled_share"].to_list()
    assert shares[7] > 0.5  # capped through the forward and backward phase
    assert shares[:7] == [0.0] * 7
    assert headroom["limit_w"].to_list() == [700.0] * 8
    assert headroom["power_throttle_source"].to_list() == ["counters"] * 8


def test_power_findings_flag_only_the_sim_capped_gpu(sim_training):
    found = power.power_findings(sim_training)
    capped = [f for f in found if f.id == "power_capped_gpu"]
    assert [f.subject for f in capped] == [{"host": "sim-node", "gpu_index": 7}]
    # training keeps the node near its limits and NVLink busy in the all-reduce
    assert not [f for f in found if f.id in ("power_headroom", "untapped_interconnect") and f.subject.get("link") != "pcie"]


def test_power_findings_see_headroom_on_a_sim_inference_node(tmp_path):
    _sim_dataset(tmp_path, "inference", seconds=60, interval_s=0.5)
    con = open_dataset(tmp_path)
    headroom = [f for f in power.power_findings(con) if f.id == "power_headroom"]
    assert [f.subject for f in headroom] == [{"host": "sim-node"}]
    node = power.node_power(con).row(0, named=True)
    assert headroom[0].evidence["extra_nodes_at_p99"] == pytest.approx(node["extra_nodes_at_p99"])
    assert node["budget_w"] == 8 * 700
    assert node["extra_nodes_at_p99"] > 0.2


def test_interconnect_usage_sim_nvlink_uses_its_peak_in_the_all_reduce(sim_training):
    usage = power.interconnect_usage(sim_training)
    nvlink = usage.filter((usage["link"] == "nvlink") & (usage["direction"] == "tx"))
    assert nvlink.height == 8
    assert nvlink["peak_bytes_per_s"].to_list() == [450e9] * 8
    assert min(nvlink["p95_utilisation"].to_list()) > 0.6


# --- interconnect with a known answer ---------------------------------------------


@pytest.fixture(scope="module")
def links(tmp_path_factory):
    root = tmp_path_factory.mktemp("links")
    # NVLink TX i GB/s (mean 50, p95 95, max 100 of 450), PCIe TX 60 of 63 GB/s
    write_telemetry(root, "node-a", [
        {"ts": T0_US + i * 1_000_000, "gpu_index": 0, "power_w": 300.0,
         "link_tx_bytes_per_s": i * 1e9, "pcie_tx_bytes_per_s": 60e9}
        for i in range(101)
    ])
    _write_devices(root, "node-a", [{
        "gpu_index": 0, "gpu_uuid": "GPU-0", "vendor": "nvidia", "model": "NVIDIA H100 80GB HBM3",
        "link_kind": "nvlink", "link_count": 18, "link_peak_bytes_per_s": 450e9, "pcie_peak_bytes_per_s": 63e9,
    }])
    # an AMD GPU whose PCIe figure covers both directions: peak 2 x 32 GB/s
    write_telemetry(root, "node-m", [
        {"ts": T0_US + i * 1_000_000, "gpu_index": 0, "vendor": "amd", "pcie_bytes_per_s": 16e9} for i in range(10)
    ])
    _write_devices(root, "node-m", [{
        "gpu_index": 0, "gpu_uuid": "GPU-0", "vendor": "amd", "model": "unknown part", "pcie_peak_bytes_per_s": 32e9,
    }])
    return open_dataset(root)


def test_interconnect_usage_against_the_nominal_peak(links):
    rows = {(r["host"], r["link"], r["direction"]): r for r in power.interconnect_usage(links).iter_rows(named=True)}
    assert set(rows) == {("node-a", "nvlink", "tx"), ("node-a", "pcie", "tx"), ("node-m", "pcie", "both")}
    nvlink = rows[("node-a", "nvlink", "tx")]
    assert (nvlink["achieved_bytes_per_s"], nvlink["p95_bytes_per_s"], nvlink["max_bytes_per_s"]) == pytest.approx((50e9, 95e9, 100e9))
    assert nvlink["utilisation"] == pytest.approx(50 / 450)
    assert nvlink["p95_utilisation"] == pytest.approx(95 / 450)
    assert nvlink["untapped_bytes_per_s"] == pytest.approx(400e9)
    both = rows[("node-m", "pcie", "both")]
    assert (both["peak_bytes_per_s"], both["utilisation"]) == (64e9, pytest.approx(0.25))


def test_interconnect_timeline_buckets_by_the_param(links):
    timeline = power.interconnect_timeline(links, bucket_s=50)
    nvlink = timeline.filter(timeline["link"] == "nvlink")
    assert nvlink["achieved_bytes_per_s"].to_list() == pytest.approx([24.5e9, 74.5e9, 100e9])
    assert [t.timestamp() for t in nvlink["bucket_start"].to_list()] == [T0_S, T0_S + 50, T0_S + 100]
    assert nvlink["samples"].to_list() == [50, 50, 1]


def test_untapped_interconnect_fires_for_an_idle_link_not_a_busy_one(links):
    untapped = [f for f in power.power_findings(links) if f.id == "untapped_interconnect"]
    # node-a PCIe at 95% and node-m PCIe at 25% (not below 25%) stay quiet
    assert [f.subject for f in untapped] == [{"host": "node-a", "link": "nvlink"}]
    assert untapped[0].page == "interconnect"
    assert untapped[0].evidence["max_p95_utilisation"] == pytest.approx(95 / 450)


# --- telemetry joined to a trace -----------------------------------------------------
#
# Telemetry: host node-a, GPU 0, a sample each second i = 0..10 at 100 + 10i W;
# sample i holds the power of (i - 1, i] s.
# Trace r1 rank 0 (epoch times, no host: the one telemetry host is used):
#   step 1: 1.5-3.0 s, compute kernel 1.5-2.5, communication 2.2-3.0 (compute wins the overlap)
#   step 2: 3.0-3.25 s, memory copy 3.0-3.1, then idle
#   step 3: 9.5-11.5 s, no kernels, telemetry ends at 10 s


def _ns(seconds: float) -> int:
    return T0_NS + int(seconds * S_NS)


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    root = tmp_path_factory.mktemp("joined")
    write_telemetry(root, "node-a", [
        {"ts": T0_US + i * 1_000_000, "gpu_index": 0, "power_w": 100.0 + 10 * i} for i in range(11)
    ])
    for run, time_base in (("r1", "epoch"), ("r2", "trace")):
        write_trace_table(root, run, "runs", {
            "run": [run], "rank": [0], "host": [None], "time_base": [time_base],
            "epoch_offset_ns": [0 if time_base == "epoch" else None],
        })
        steps = [(1, 1.5, 3.0), (2, 3.0, 3.25), (3, 9.5, 11.5)]
        write_trace_table(root, run, "annotations", {
            "run": [run] * 3, "rank": [0] * 3, "name": [f"ProfilerStep#{s}" for s, _, _ in steps],
            "kind": ["profiler_step"] * 3, "step": [s for s, _, _ in steps],
            "start_ns": [_ns(a) for _, a, _ in steps], "end_ns": [_ns(b) for _, _, b in steps],
            "dur_ns": [_ns(b) - _ns(a) for _, a, b in steps],
        })
        kernels = [("gemm", "compute", 1.5, 2.5), ("ncclDevKernel_AllReduce", "communication", 2.2, 3.0),
                   ("Memcpy HtoD", "memory", 3.0, 3.1)]
        write_trace_table(root, run, "kernels", {
            "run": [run] * 3, "rank": [0] * 3, "device": [0] * 3, "stream": [7] * 3,
            "name": [k[0] for k in kernels], "category": [k[1] for k in kernels],
            "start_ns": [_ns(k[2]) for k in kernels], "end_ns": [_ns(k[3]) for k in kernels],
            "dur_ns": [_ns(k[3]) - _ns(k[2]) for k in kernels],
        })
    return open_dataset(root)


def test_step_energy_takes_the_power_of_the_sample_covering_each_part(joined):
    steps = {row["step"]: row for row in power.step_energy(joined).iter_rows(named=True)}
    assert set(steps) == {1, 2, 3}
    one, two = steps[1], steps[2]
    # step 1: 0.5 s at 120 W + 1 s at 130 W
    assert one["energy_j"] == pytest.approx(60 + 130)
    assert one["mean_power_w"] == pytest.approx(190 / 1.5)
    assert (one["compute_energy_j"], one["communication_energy_j"], one["idle_energy_j"]) == pytest.approx((125, 65, 0))
    assert (one["host"], one["gpu_index"], one["coverage_share"], one["samples"]) == ("node-a", 0, 1.0, 2)
    # step 2: 0.25 s at 140 W: 0.1 s copying, 0.15 s idle
    assert two["energy_j"] == pytest.approx(35)
    assert (two["memory_energy_j"], two["idle_energy_j"]) == pytest.approx((14, 21))


def test_step_energy_is_null_where_telemetry_covers_part_of_a_step(joined):
    three = power.step_energy(joined).filter(power.step_energy(joined)["step"] == 3).row(0, named=True)
    assert three["energy_j"] is None
    assert three["coverage_share"] == pytest.approx(0.25)
    assert three["mean_power_w"] == pytest.approx(200)
    assert three["is_last"] is True


def test_phase_energy_splits_the_window_by_phase(joined):
    phases = {row["phase"]: row for row in power.phase_energy(joined).iter_rows(named=True)}
    assert set(phases) == {"compute", "communication", "memory", "idle"}
    assert phases["compute"]["energy_j"] == pytest.approx(125)
    assert phases["communication"]["energy_j"] == pytest.approx(65)
    assert phases["memory"]["energy_j"] == pytest.approx(14)
    # idle: 0.9 s at 140 W, then (4, 10] s at 150..200 W; 1.5 s uncovered
    assert phases["idle"]["energy_j"] == pytest.approx(126 + sum(100 + 10 * k for k in range(5, 11)))
    assert phases["idle"]["time_ns"] == int(8.4 * S_NS)
    assert phases["idle"]["coverage_share"] == pytest.approx(6.9 / 8.4)
    assert phases["compute"]["time_share"] == pytest.approx(1 / 10)
    assert sum(row["energy_share"] for row in phases.values()) == pytest.approx(1)


def _one_step_under(root: Path, interval_s: float, samples: int) -> duckdb.DuckDBPyConnection:
    """A step over (0, samples × interval_s] s of telemetry whose averaged power lags
    (200 W) while the instantaneous reading shows the load (600 W)."""
    write_telemetry(root, "node-a", [
        {"ts": T0_US + round(i * interval_s * 1e6), "gpu_index": 0, "power_w": 200.0, "power_instant_w": 600.0}
        for i in range(samples + 1)
    ])
    end_s = samples * interval_s
    write_trace_table(root, "r", "runs", {"run": ["r"], "rank": [0], "host": ["node-a"], "time_base": ["epoch"],
                                         "epoch_offset_ns": [0]})
    write_trace_table(root, "r", "annotations", {
        "run": ["r", "r"], "rank": [0, 0], "name": ["ProfilerStep#1", "ProfilerStep#2"], "kind": ["profiler_step"] * 2,
        "step": [1, 2], "start_ns": [_ns(0), _ns(end_s)], "end_ns": [_ns(end_s), _ns(end_s + interval_s)],
        "dur_ns": [_ns(end_s) - _ns(0), _ns(end_s + interval_s) - _ns(end_s)],
    })
    write_trace_table(root, "r", "kernels", {
        "run": ["r"], "rank": [0], "device": [0], "stream": [7], "name": ["gemm"], "category": ["compute"],
        "start_ns": [_ns(0)], "end_ns": [_ns(end_s)], "dur_ns": [_ns(end_s) - _ns(0)],
    })
    return open_dataset(root)


def test_step_energy_under_subsecond_telemetry_takes_the_instantaneous_power(tmp_path):
    # At 4 Hz the driver's 1 s average still holds the second before each sample.
    step = power.step_energy(_one_step_under(tmp_path, 0.25, 4)).filter(pl.col("step") == 1).row(0, named=True)
    assert (step["energy_j"], step["mean_power_w"]) == (pytest.approx(600.0), pytest.approx(600.0))


def test_step_energy_under_1hz_telemetry_takes_the_averaged_power(tmp_path):
    step = power.step_energy(_one_step_under(tmp_path, 1.0, 2)).filter(pl.col("step") == 1).row(0, named=True)
    assert (step["energy_j"], step["mean_power_w"]) == (pytest.approx(400.0), pytest.approx(200.0))


def test_power_trace_gpus_explains_a_trace_not_on_the_epoch(joined):
    ranks = {row["run"]: row for row in power.power_trace_gpus(joined).iter_rows(named=True)}
    assert ranks["r1"]["unmatched_reason"] is None
    assert ranks["r1"]["host_inferred"] is True
    assert "epoch" in ranks["r2"]["unmatched_reason"]
    assert set(power.step_energy(joined)["run"].to_list()) == {"r1"}


# --- bad and empty input ------------------------------------------------------------


def test_power_analyses_on_all_null_power_give_null_stats_and_one_finding(tmp_path):
    write_telemetry(tmp_path, "node-a", [
        {"ts": T0_US + i * 1_000_000, "gpu_index": g, "gpu_util_pct": 50.0} for i in range(10) for g in (0, 1)
    ])
    con = open_dataset(tmp_path)
    headroom = power.power_headroom(con)
    assert headroom.height == 2
    assert headroom["p99_w"].to_list() == [None, None]
    assert headroom["energy_j"].to_list() == [None, None]
    assert headroom["power_samples"].to_list() == [0, 0]
    node = power.node_power(con).row(0, named=True)
    assert (node["coincident_p99_w"], node["extra_nodes_at_p99"], node["gpus"]) == (None, None, 0)
    assert power.power_cap_whatif(con, power_cap_w=300).is_empty()
    found = power.power_findings(con)
    assert [(f.id, f.subject) for f in found] == [("no_power_data", {"host": "node-a"})]
    assert found[0].evidence["gpu_indexes"] == [0, 1]


POWER_VIEWS = (
    "power_samples", "power_headroom", "power_node_ticks", "node_power", "power_cap_whatif",
    "power_cap_whatif_node", "interconnect_links", "interconnect_usage", "interconnect_timeline",
    "power_trace_gpus", "power_trace_segments", "step_energy", "phase_energy",
)


def test_power_views_on_an_empty_dataset_are_empty(tmp_path):
    con = open_dataset(tmp_path)
    for view in POWER_VIEWS:
        assert con.execute(f"select count(*) from {view}").fetchone()[0] == 0, view
    assert power.power_findings(con) == []


def test_power_headroom_reason_names_match_collector_throttle():
    text = (SQL_DIR / "power_headroom.sql").read_text()
    lists = re.findall(r"list_has_any\(throttle_reasons, \[([^\]]*)\]\)::double\)\s+as (\w+)", text)
    names = {share: set(re.findall(r"'([^']+)'", items)) for items, share in lists}
    assert names == {"power_reason_share": set(POWER_REASONS), "thermal_reason_share": set(THERMAL_REASONS)}
