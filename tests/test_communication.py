"""gpulens.analysis.communication: bandwidth, arrival skew, stragglers, slow calls.

Hand-made runs (one dataset, built once) pin exact numbers; simulated
8-rank traces with a planted straggler and the real A100 trace check the
whole path from ingest.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpulens.analysis import communication
from gpulens.analysis.dataset import open_dataset
from gpulens.collector.errors import UsageError
from gpulens.collector.hardware import network_peak_bytes_per_s
from gpulens.collector.writer import DatasetWriter
from conftest import write_trace_table

GIB = 1 << 30
MIB = 1 << 20
H100 = "NVIDIA H100 80GB HBM3"
A100_SXM = "NVIDIA A100-SXM4-80GB"
KERNEL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _write_run(root: Path, run: str, calls: list[dict], hosts: dict[int, str | None], device: str | None) -> None:
    """`calls`: one dict per rank's call (rank, op, bytes, start_ns, dur_ns, ...)."""
    ranks = sorted(hosts)
    write_trace_table(root, run, "runs", {
        "run": [run] * len(ranks), "rank": ranks, "world_size": [len(ranks)] * len(ranks),
        "host": [hosts[r] for r in ranks], "device_name": [device] * len(ranks),
        "time_base": ["epoch"] * len(ranks),
    })
    columns: dict[str, list] = {name: [] for name in (
        "run", "rank", "process_group", "seq", "op", "bytes", "group_size", "start_ns", "end_ns", "kernel_name",
        "in_nelems", "out_nelems", "out_split_sizes", "split_sizes_truncated")}
    for call in calls:
        for name in ("in_nelems", "out_nelems", "out_split_sizes", "split_sizes_truncated"):
            columns[name].append(call.get(name))
        columns["run"].append(run)
        columns["rank"].append(call["rank"])
        columns["process_group"].append(call.get("process_group", "0"))
        columns["seq"].append(call.get("seq"))
        columns["op"].append(call.get("op", "all_reduce"))
        columns["bytes"].append(call.get("bytes"))
        columns["group_size"].append(call.get("group_size", len(ranks)))
        columns["start_ns"].append(call["start_ns"])
        columns["end_ns"].append(call["start_ns"] + call["dur_ns"])
        columns["kernel_name"].append(call.get("kernel_name", KERNEL))
    write_trace_table(root, run, "collectives", columns)


def _lockstep(ranks: int, instances: list[tuple[str, int, int]], first_seq: int = 1) -> list[dict]:
    """Every rank starts and ends each (op, bytes, dur_ns) instance together."""
    calls = []
    for i, (op, size, dur) in enumerate(instances):
        for rank in range(ranks):
            calls.append({"rank": rank, "seq": first_seq + i, "op": op, "bytes": size,
                          "start_ns": 1_000_000_000 * (i + 1), "dur_ns": dur})
    return calls


# Arrival offsets (µs) of ranks 0-3 at six all_reduce instances; each ends
# 1 ms after its last arrival. Rank 2 is last at four of the five decisive
# instances, rank 0 at one; the sixth is within jitter (spread 1.5 µs).
SKEW_ARRIVALS_US = [
    (0, 10, 100, 20),
    (5, 0, 200, 10),
    (0, 0, 50, 0),
    (300, 0, 10, 20),
    (0, 5, 80, 5),
    (0, 1, 2, 3),
]


def _skewed(with_seq: bool) -> list[dict]:
    calls = []
    for i, offsets in enumerate(SKEW_ARRIVALS_US):
        base = 1_000_000_000 * (i + 1)
        end = base + max(offsets) * 1_000 + 1_000_000
        for rank, offset_us in enumerate(offsets):
            start = base + offset_us * 1_000
            calls.append({"rank": rank, "seq": 100 + i if with_seq else None, "bytes": 4 * MIB,
                          "start_ns": start, "dur_ns": end - start})
    return calls


# Transfer time of twelve 32 MiB all_reduces on two ranks: 1.00/1.01/1.02 ms,
# except seq 7 (5 ms on both ranks: the transfer was slow). At seq 4 rank 1
# arrives 3 ms late, so rank 0's kernel lasts 4.01 ms, but the transfer did not.
def _slow_transfer() -> list[dict]:
    calls = []
    for seq in range(1, 13):
        transfer = 5_000_000 if seq == 7 else 1_000_000 + 10_000 * (seq % 3)
        base = 1_000_000_000 * seq
        late = 3_000_000 if seq == 4 else 2_000
        calls.append({"rank": 0, "seq": seq, "bytes": 32 * MIB, "start_ns": base, "dur_ns": late + transfer})
        calls.append({"rank": 1, "seq": seq, "bytes": 32 * MIB, "start_ns": base + late, "dur_ns": transfer})
    return calls


SIZES = [0, 1, 1023, 1024, 1025, GIB - 1, GIB, 2 * GIB - 1, 3 * GIB, (1 << 53) - 1, None]


@pytest.fixture(scope="session")
def hand_made(tmp_path_factory):
    root = tmp_path_factory.mktemp("communication")
    one_node = {r: "node-a" for r in range(8)}
    # 1 GiB all_reduce over 8 ranks in 10 ms (the nccl-tests example), a
    # 256 MiB all_gather in 2 ms, a 1 MiB broadcast in 100 µs.
    _write_run(root, "bw8", _lockstep(8, [("all_reduce", GIB, 10_000_000)] * 3
                                      + [("all_gather", 256 * MIB, 2_000_000)] * 2
                                      + [("broadcast", MIB, 100_000)]), one_node, H100)
    # 64 MiB all_reduce over 8 ranks in 5 ms: 5 % of NVLink's peak.
    _write_run(root, "lowbw", _lockstep(8, [("all_reduce", 64 * MIB, 5_000_000)] * 4), one_node, H100)
    # Two ranks on two hosts: the network, although the group is small.
    _write_run(root, "xnode", _lockstep(2, [("all_reduce", GIB, 80_000_000)] * 3), {0: "node-a", 1: "node-b"}, H100)
    # A 16-rank group, hosts unknown, ranks 0 and 1 traced: the network by size.
    _write_run(root, "big_nohost", [dict(c, group_size=16) for c in _lockstep(2, [("all_reduce", GIB, 80_000_000)])],
               {0: None, 1: None}, H100)
    _write_run(root, "skew4", _skewed(with_seq=True), {r: None for r in range(4)}, A100_SXM)
    _write_run(root, "noseq4", _skewed(with_seq=False), {r: None for r in range(4)}, A100_SXM)
    # No device name: no peak, so no bandwidth verdict on it.
    _write_run(root, "slow", _slow_transfer(), {0: None, 1: None}, None)
    # Both ranks send and receive 1 MiB twice; rank 1's calls take longer.
    _write_run(root, "p2p", [{"rank": r, "op": op, "bytes": MIB, "start_ns": i * 1_000_000, "dur_ns": 100_000 + 200_000 * r}
                             for i in (1, 2) for r in (0, 1) for op in ("send", "recv")], {0: None, 1: None}, H100)
    _write_run(root, "sizes", [{"rank": 0, "seq": i, "op": "broadcast", "bytes": b, "start_ns": i * 1_000, "dur_ns": 100}
                               for i, b in enumerate(SIZES)], {0: None}, H100)
    return open_dataset(root)


def _row(frame: pl.DataFrame, **where) -> dict:
    rows = frame.filter(*(pl.col(k) == v for k, v in where.items())).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


# --- collective_stats ----------------------------------------------------------


def test_collective_stats_all_reduce_matches_nccl_tests_busbw(hand_made):
    # nccl-tests: algbw = S / t = 2^30 B / 10 ms = 107.37 GB/s;
    # busbw = algbw x 2(n-1)/n = 107.37 x 14/8 = 187.9 GB/s.
    row = _row(communication.collective_stats(hand_made), run="bw8", op="all_reduce")
    assert row["size_bucket_bytes"] == GIB
    assert (row["count"], row["instances"], row["ranks"], row["group_size"]) == (24, 3, 8, 8)
    assert row["bytes"] == 24 * GIB
    assert row["total_ns"] == 240_000_000
    assert row["mean_ns"] == 10_000_000
    assert row["algbw_bytes_per_s"] == pytest.approx(107_374_182_400)
    assert row["busbw_bytes_per_s"] == pytest.approx(187_904_819_200)
    assert (row["link_scope"], row["link_kind"], row["peak_bytes_per_s"]) == ("node", "nvlink", 450e9)
    assert row["busbw_share_of_peak"] == pytest.approx(187_904_819_200 / 450e9)
    assert row["transfer_busbw_bytes_per_s"] == pytest.approx(187_904_819_200)


def test_collective_stats_all_gather_and_broadcast_use_their_bus_factors(hand_made):
    stats = communication.collective_stats(hand_made)
    gather = _row(stats, run="bw8", op="all_gather")
    # 2^28 B / 2 ms = 134.22 GB/s algbw; x 7/8 = 117.44 GB/s busbw.
    assert gather["algbw_bytes_per_s"] == pytest.approx(134_217_728_000)
    assert gather["busbw_bytes_per_s"] == pytest.approx(117_440_512_000)
    broadcast = _row(stats, run="bw8", op="broadcast")
    # 2^20 B / 100 µs = 10.49 GB/s; broadcast's factor is 1.
    assert broadcast["busbw_bytes_per_s"] == pytest.approx(10_485_760_000)
    assert broadcast["bus_factor"] == 1.0


def test_collective_stats_group_across_hosts_is_measured_against_the_network(hand_made):
    row = _row(communication.collective_stats(hand_made), run="xnode")
    # 2^30 B / 80 ms = 13.42 GB/s; x 2(2-1)/2 = 1; NDR 400 Gb/s = 50 GB/s.
    assert (row["link_scope"], row["link_kind"], row["peak_bytes_per_s"]) == ("network", "ib_ndr", 50e9)
    assert row["busbw_share_of_peak"] == pytest.approx(13_421_772_800 / 50e9)


def test_collective_stats_large_group_without_hosts_is_assumed_to_cross_nodes(hand_made):
    row = _row(communication.collective_stats(hand_made, network_kind="roce_200g"), run="big_nohost")
    assert (row["link_scope"], row["link_kind"], row["peak_bytes_per_s"]) == ("network", "roce_200g", 25e9)
    # n = 16 from the trace, though only two ranks are traced: 2 x 15/16.
    assert row["bus_factor"] == 1.875


def test_collective_stats_small_group_without_hosts_uses_the_gpu_fabric(hand_made):
    row = _row(communication.collective_stats(hand_made), run="skew4")
    assert (row["link_scope"], row["link_kind"], row["peak_bytes_per_s"]) == ("node", "nvlink", 300e9)


def _two_h100_ranks_on(root: Path, link_count: int) -> duckdb.DuckDBPyConnection:
    """Two ranks on node-a whose collector inventory shows `link_count` active links a GPU."""
    _write_run(root, "vm", _lockstep(2, [("all_reduce", GIB, 80_000_000)]), {0: "node-a", 1: "node-a"}, H100)
    writer = DatasetWriter(root, "node-a")
    for gpu in (0, 1):
        writer.add("devices", {"ts": 1_700_000_000_000_000, "gpu_index": gpu, "gpu_uuid": f"GPU-{gpu}", "vendor": "nvidia",
                               "model": H100, "link_kind": "nvlink" if link_count else None, "link_count": link_count})
    writer.flush()
    return open_dataset(root)


def test_collective_stats_host_without_active_nvlink_is_measured_against_pcie(tmp_path):
    # An SXM H100 passed alone into a VM: the model has NVLink, the node does not.
    row = _row(communication.collective_stats(_two_h100_ranks_on(tmp_path, link_count=0)), run="vm")
    assert (row["link_scope"], row["link_kind"], row["peak_bytes_per_s"]) == ("node", "pcie", pytest.approx(63.0e9, rel=0.01))


def test_collective_stats_host_with_active_nvlink_keeps_the_fabric(tmp_path):
    row = _row(communication.collective_stats(_two_h100_ranks_on(tmp_path, link_count=18)), run="vm")
    assert (row["link_scope"], row["link_kind"], row["peak_bytes_per_s"]) == ("node", "nvlink", 450e9)


def test_collective_stats_group_of_one_rank_crosses_no_link(hand_made):
    row = _row(communication.collective_stats(hand_made), run="sizes", size_bucket_bytes=GIB)
    assert (row["link_scope"], row["link_kind"], row["peak_bytes_per_s"]) == (None, None, None)


def test_collective_stats_size_buckets_are_powers_of_two_at_or_below(hand_made):
    stats = communication.collective_stats(hand_made).filter(pl.col("run") == "sizes")
    counts = dict(zip(stats["size_bucket_bytes"].to_list(), stats["count"].to_list()))
    assert counts == {0: 1, 1: 1, 512: 1, 1024: 2, GIB // 2: 1, GIB: 2, 2 * GIB: 1, 1 << 52: 1, None: 1}


def test_collective_stats_point_to_point_calls_are_instances_of_their_own(hand_made):
    stats = communication.collective_stats(hand_made).filter(pl.col("run") == "p2p")
    for row in stats.to_dicts():
        # Rank 0's send and rank 1's send are not one operation: each call
        # counts with its own time, not the shorter of the two.
        assert (row["count"], row["instances"]) == (4, 4)
        assert row["transfer_ns"] == row["total_ns"] == 2 * (100_000 + 300_000)
        assert row["bus_factor"] == 1.0
    assert communication.collective_skew(hand_made).filter(pl.col("run") == "p2p").is_empty()


def test_collective_stats_default_network_peak_matches_the_hardware_table(hand_made):
    # The SQL default (used by the plain view) must agree with collector.hardware.
    view = hand_made.execute("select peak_bytes_per_s from collective_stats where run = 'xnode'").fetchone()[0]
    assert view == network_peak_bytes_per_s("ib_ndr")


def test_collective_stats_unknown_network_kind_is_a_usage_error(hand_made):
    with pytest.raises(UsageError, match="ib_qdr"):
        communication.collective_stats(hand_made, network_kind="ib_qdr")


# --- collective_skew and stragglers -----------------------------------------------


def test_collective_skew_marks_the_last_arrival_and_the_wait_of_others(hand_made):
    skew = communication.collective_skew(hand_made).filter((pl.col("run") == "skew4") & (pl.col("seq") == 100))
    by_rank = {r["rank"]: r for r in skew.to_dicts()}
    assert {r: by_rank[r]["arrival_skew_ns"] for r in range(4)} == {0: 100_000, 1: 90_000, 2: 0, 3: 80_000}
    # Median arrival is 15 µs: rank 2 is 85 µs later than it.
    assert by_rank[2]["lateness_ns"] == 85_000
    assert by_rank[2]["spread_ns"] == 85_000
    assert [by_rank[r]["is_last"] for r in range(4)] == [False, False, True, False]
    assert {r["last_rank"] for r in by_rank.values()} == {2}
    assert by_rank[0]["seq_source"] == "trace"


def test_collective_skew_tie_for_last_marks_no_one(hand_made):
    skew = communication.collective_skew(hand_made).filter(pl.col("run") == "bw8")
    assert skew["is_last"].sum() == 0
    assert skew["last_rank"].null_count() == len(skew)


def test_stragglers_rank_the_usual_last_arrival_first(hand_made):
    ranking = communication.stragglers(hand_made).filter(pl.col("run") == "skew4")
    top = ranking.row(0, named=True)
    assert top["rank"] == 2 and top["straggler_order"] == 1
    # Decisive: five instances (the sixth spread 1.5 µs); last at four.
    assert (top["instances"], top["decisive_instances"], top["last_count"]) == (6, 5, 4)
    assert top["share_last"] == 0.8
    assert top["expected_share_last"] == 0.25
    assert top["score"] == pytest.approx((0.8 - 0.25) / 0.75)
    # Lateness vs the median: 85, 192.5, 50, -5, 75, 0.5 µs.
    assert top["mean_lateness_ns"] == 66_333
    assert top["wait_caused_ns"] == 85_000 + 192_500 + 50_000 + 75_000
    assert '"last_count":4' in top["evidence"]
    rank0 = _row(ranking, rank=0)
    assert (rank0["last_count"], rank0["share_last"]) == (1, 0.2)


def test_stragglers_without_seq_numbers_match_calls_in_start_order(hand_made):
    skew = communication.collective_skew(hand_made).filter(pl.col("run") == "noseq4")
    assert set(skew["seq_source"]) == {"order"}
    assert sorted(skew["seq"].unique().to_list()) == [1, 2, 3, 4, 5, 6]
    ranking = communication.stragglers(hand_made)
    columns = ["rank", "score", "last_count", "mean_lateness_ns", "wait_caused_ns"]
    assert ranking.filter(pl.col("run") == "noseq4").select(columns).equals(
        ranking.filter(pl.col("run") == "skew4").select(columns))


def test_straggler_finding_fires_for_the_usual_last_arrival(hand_made):
    findings = [f for f in communication.straggler_findings(hand_made) if f.subject["run"] == "skew4"]
    assert len(findings) == 1
    finding = findings[0]
    assert (finding.id, finding.severity, finding.page) == ("straggler_rank", "warning", "communication")
    assert finding.subject == {"run": "skew4", "rank": 2}
    assert finding.evidence["share_last"] == 0.8
    assert finding.evidence["mean_lateness_ns"] == 66_333
    assert finding.evidence["collectives"] == 6


def test_straggler_finding_stays_quiet_without_a_consistent_last_rank(hand_made):
    # "slow": rank 1 is last once by 3 ms; lockstep runs have no last rank.
    runs = {f.subject["run"] for f in communication.straggler_findings(hand_made)}
    assert runs == {"skew4", "noseq4"}


# --- collective_outliers -------------------------------------------------------------


def test_collective_outliers_flag_the_slow_transfer_not_the_wait(hand_made):
    outliers = communication.collective_outliers(hand_made)
    assert outliers.select("run", "seq").rows() == [("slow", 7)]
    row = outliers.row(0, named=True)
    # Transfers: 1.00 ms x4, 1.01 ms x3 (seq 4: the shortest rank's time),
    # 1.02 ms x4, 5 ms: median 1.01 ms, MAD 10 µs.
    assert (row["transfer_ns"], row["median_ns"], row["mad_ns"], row["samples"]) == (5_000_000, 1_010_000, 10_000, 12)
    assert row["excess_ns"] == 3_990_000
    assert row["ratio_to_median"] == pytest.approx(5 / 1.01)


def test_collective_outliers_name_the_lowest_of_ranks_with_equal_transfers(tmp_path):
    # Both ranks start together and take as long; rank 1's rows come first.
    calls = [{"rank": rank, "seq": seq, "bytes": 32 * MIB, "start_ns": 1_000_000_000 * seq,
              "dur_ns": 5_000_000 if seq == 7 else 1_000_000 + 10_000 * (seq % 3)}
             for seq in range(1, 13) for rank in (1, 0)]
    _write_run(tmp_path, "tie", calls, {0: None, 1: None}, None)
    outliers = communication.collective_outliers(open_dataset(tmp_path))
    assert outliers.select("seq", "transfer_rank").rows() == [(7, 0)]


def test_collective_outliers_need_enough_samples(hand_made):
    assert communication.collective_outliers(hand_made, min_samples=13).is_empty()


def test_slow_collectives_finding_fires_for_the_slow_transfer(hand_made):
    findings = communication.outlier_findings(hand_made)
    assert [(f.id, f.severity, f.subject) for f in findings] == [
        ("slow_collectives", "warning", {"run": "slow", "process_group": "0", "op": "all_reduce"})]
    assert findings[0].evidence["seqs"] == [7]
    assert findings[0].evidence["excess_ns"] == 3_990_000


def test_slow_collectives_finding_stays_quiet_below_the_ratio(hand_made):
    assert communication.outlier_findings(hand_made, min_ratio=5.0) == []


# --- low bus bandwidth ------------------------------------------------------------------


def test_low_bus_bandwidth_fires_far_below_the_link_peak(hand_made):
    findings = communication.bandwidth_findings(hand_made)
    assert [(f.id, f.severity, f.subject["run"]) for f in findings] == [("low_bus_bandwidth", "critical", "lowbw")]
    # 2^26 B / 5 ms x 1.75 = 23.49 GB/s of 450 GB/s.
    assert findings[0].evidence["transfer_busbw_bytes_per_s"] == pytest.approx(23_488_102_400)
    assert findings[0].evidence["share_of_peak"] == pytest.approx(23_488_102_400 / 450e9)


def test_low_bus_bandwidth_stays_quiet_near_the_peak(hand_made):
    # bw8 reaches 42 % of NVLink, xnode 27 % of NDR: neither is below 25 %.
    runs = {f.subject["run"] for f in communication.bandwidth_findings(hand_made)}
    assert "bw8" not in runs and "xnode" not in runs
    assert communication.bandwidth_findings(hand_made, warning_share_of_peak=0.05) == []


# --- all_to_all_balance -----------------------------------------------------------------

# Elements (bf16) each of 4 ranks received at three all_to_all calls, each
# rank sending SENT_ELEMS[i]: rank 2 receives the most at the first two,
# the third is even.
RECEIVED_ELEMS = [(1000, 1000, 2000, 1000), (1000, 1000, 3000, 1000), (2000, 2000, 2000, 2000)]
SENT_ELEMS = [1250, 1500, 2000]


def _all_to_all(received=RECEIVED_ELEMS, sent=SENT_ELEMS, splits=True, truncated=False) -> list[dict]:
    calls = []
    for i, (elems, sent_elems) in enumerate(zip(received, sent)):
        for rank, out in enumerate(elems):
            # Rank 2's busiest peer sends it half of what it receives.
            peers = [out // 2, out // 6, out // 6, out - out // 2 - 2 * (out // 6)] if rank == 2 else [out // 4] * 4
            calls.append({
                "rank": rank, "seq": i + 1, "op": "all_to_all", "bytes": 2 * max(sent_elems, out),
                "in_nelems": sent_elems, "out_nelems": out, "out_split_sizes": peers if splits else None,
                "split_sizes_truncated": truncated, "start_ns": 1_000_000_000 * (i + 1),
                "dur_ns": 200_000 if rank == 2 else 100_000,
            })
    return calls


@pytest.fixture(scope="session")
def moe(tmp_path_factory):
    root = tmp_path_factory.mktemp("all_to_all")
    four = {r: "node-a" for r in range(4)}
    _write_run(root, "uneven", _all_to_all(), four, H100)
    _write_run(root, "twice", _all_to_all(received=[(1000, 1000, 4000, 1000)] * 3, sent=[1750] * 3), four, H100)
    _write_run(root, "even", _all_to_all(received=[(1500,) * 4] * 3, sent=[1500] * 3), four, H100)
    _write_run(root, "cut", _all_to_all(truncated=True), four, H100)
    _write_run(root, "nosplits", _all_to_all(splits=False), four, H100)
    # Rank 1 logged the second call alone: an instance of one rank.
    _write_run(root, "alone", [c for c in _all_to_all() if c["seq"] == 1] + [
        dict(c, rank=1) for c in _all_to_all() if c["seq"] == 2 and c["rank"] == 2], four, H100)
    # all_reduce carries element counts too, but is not an all_to_all.
    _write_run(root, "reduce", [dict(c, op="all_reduce") for c in _all_to_all()], four, H100)
    return open_dataset(root)


def test_all_to_all_balance_sums_what_each_rank_received_against_the_mean_rank(moe):
    hot = _row(communication.all_to_all_balance(moe), run="uneven", rank=2)
    # Received 2,000 + 3,000 + 2,000 elements of 2 bytes; the mean rank
    # 1,250 + 1,500 + 2,000.
    assert {k: hot[k] for k in ("instances", "ranks_seen", "group_size", "received_bytes", "sent_bytes")} == {
        "instances": 3, "ranks_seen": 4, "group_size": 4, "received_bytes": 14_000, "sent_bytes": 9_500}
    assert hot["received_vs_mean"] == pytest.approx(14_000 / 9_500)
    assert hot["max_received_vs_mean"] == pytest.approx(2.0)
    assert hot["mean_dur_ns"] == 200_000


def test_all_to_all_balance_counts_who_received_the_most_and_a_tie_marks_no_one(moe):
    shares = communication.all_to_all_balance(moe).filter(pl.col("run") == "uneven").sort("rank")
    # Rank 2 received the most at the first two calls; all four tied at the third.
    assert shares["most_received_share"].to_list() == pytest.approx([0.0, 0.0, 2 / 3, 0.0])


def test_all_to_all_balance_peer_imbalance_is_the_busiest_sender_over_the_mean_peer(moe):
    balance = communication.all_to_all_balance(moe).filter(pl.col("run") == "uneven").sort("rank")
    assert balance["peer_imbalance"].to_list() == pytest.approx([1.0, 1.0, 2.0, 1.0])
    assert balance["split_instances"].to_list() == [3, 3, 3, 3]


def test_all_to_all_balance_leaves_out_splits_pytorch_cut_short(moe):
    hot = _row(communication.all_to_all_balance(moe), run="cut", rank=2)
    assert (hot["peer_imbalance"], hot["split_instances"], hot["received_bytes"]) == (None, 0, 14_000)


def test_all_to_all_balance_without_splits_still_compares_ranks(moe):
    hot = _row(communication.all_to_all_balance(moe), run="nosplits", rank=2)
    assert hot["peer_imbalance"] is None
    assert hot["received_vs_mean"] == pytest.approx(14_000 / 9_500)


def test_all_to_all_balance_needs_two_ranks_at_an_instance(moe):
    alone = communication.all_to_all_balance(moe).filter(pl.col("run") == "alone").sort("rank")
    assert alone["instances"].to_list() == [1, 1, 1, 1]


def test_all_to_all_balance_reads_only_all_to_all(moe):
    assert communication.all_to_all_balance(moe).filter(pl.col("run") == "reduce").is_empty()


def test_all_to_all_imbalance_finding_names_the_rank_that_receives_the_most(moe):
    found = [f for f in communication.all_to_all_findings(moe) if f.subject["run"] == "uneven"]
    assert [(f.severity, f.subject) for f in found] == [("warning", {"run": "uneven", "process_group": "0", "rank": 2})]
    assert found[0].title == "Rank 2 received 1.47x the mean rank's all_to_all data (process group 0, 3 calls)"
    assert found[0].evidence["mean_rank_received_bytes"] == pytest.approx(9_500)
    assert found[0].evidence["others_mean_dur_ns"] == 100_000


def test_all_to_all_imbalance_is_critical_from_twice_the_mean(moe):
    # Rank 2 receives 4,000 of 7,000 elements at every call: 16/7 of the mean.
    found = [f for f in communication.all_to_all_findings(moe) if f.subject["run"] == "twice"]
    assert [(f.severity, f.subject["rank"], round(f.evidence["received_vs_mean"], 3)) for f in found] == [
        ("critical", 2, round(16 / 7, 3))]


def test_even_all_to_all_gives_no_finding(moe):
    assert not [f for f in communication.all_to_all_findings(moe) if f.subject["run"] == "even"]


def test_all_to_all_imbalance_needs_enough_calls(moe):
    assert not [f for f in communication.all_to_all_findings(moe, min_instances=4) if f.subject["run"] == "uneven"]


def test_all_to_all_imbalance_is_among_the_communication_findings(moe):
    assert "all_to_all_imbalance" in {f.id for f in communication.communication_findings(moe)}


# --- simulated traces: a planted straggler ------------------------------------------------


@pytest.fixture(scope="session")
def simulated(tmp_path_factory):
    from gpulens.collector.ingest import ingest_paths
    from gpulens.collector.sim_trace import write_training_traces

    root = tmp_path_factory.mktemp("sim_communication")
    for run, straggler in (("straggler", 5), ("even", None)):
        paths = write_training_traces(root / "raw" / run, ranks=8, steps=6, seed=0, straggler_rank=straggler,
                                      kernels_per_step=60)
        report = ingest_paths(paths, root / "data", run=run)
        assert not report.failures
    return open_dataset(root / "data")


def test_simulated_straggler_is_ranked_first_and_found(simulated):
    # HTA 0.5 cannot say: its straggler analysis keeps kernels whose names
    # start with "ncclKernel", NCCL >= 2.19 (as simulated, 2.21) names them
    # "ncclDevKernel_*", and get_potential_stragglers raises "attempt to get
    # argmax of an empty sequence". Keyed by c10d's Seq, rank 5 is last at
    # most decisive collectives; data-loader hiccups on other ranks make the rest.
    top = communication.stragglers(simulated).filter(pl.col("run") == "straggler").row(0, named=True)
    assert top["rank"] == 5
    assert top["share_last"] >= 0.5
    findings = [f for f in communication.straggler_findings(simulated)]
    assert [(f.subject["run"], f.subject["rank"]) for f in findings] == [("straggler", 5)]


def test_simulated_job_without_straggler_has_no_straggler_finding(simulated):
    ranking = communication.stragglers(simulated).filter(pl.col("run") == "even")
    assert ranking["score"].max() < 0.5
    assert all(f.subject["run"] != "even" for f in communication.communication_findings(simulated))


def test_simulated_transfer_busbw_sees_through_the_wait(simulated):
    stats = communication.collective_stats(simulated).filter(
        (pl.col("run") == "straggler") & (pl.col("op") == "all_reduce") & (pl.col("size_bucket_bytes") == 64 * MIB))
    row = stats.row(0, named=True)
    # The simulator moves data at 360 GB/s bus bandwidth (plus 12 µs latency);
    # early ranks' kernels also wait for rank 5, which halves the plain busbw.
    assert 330e9 < row["transfer_busbw_bytes_per_s"] < 360e9
    assert row["busbw_bytes_per_s"] < 0.6 * row["transfer_busbw_bytes_per_s"]
    assert row["link_kind"] == "nvlink"


# --- the real A100 trace --------------------------------------------------------------------


@pytest.fixture(scope="session")
def a100(shared_traces, tmp_path_factory):
    from gpulens.collector.ingest import ingest_paths

    root = tmp_path_factory.mktemp("a100_communication")
    report = ingest_paths([shared_traces / "kineto" / "a100_2rank_allreduce_nccl2.17.json.gz"], root, run="a100")
    assert not report.failures
    return open_dataset(root)


def test_a100_trace_collective_stats_count_every_collective(a100):
    stats = communication.collective_stats(a100)
    by_op = stats.group_by("op").agg(pl.col("count").sum()).sort("op").rows()
    assert by_op == [("all_reduce", 15), ("broadcast", 6)]
    buckets = stats.select("op", "size_bucket_bytes", "count").rows()
    assert buckets == [("all_reduce", 4 * MIB, 3), ("all_reduce", 8 * MIB, 3), ("all_reduce", 16 * MIB, 9),
                       ("broadcast", 256, 3), ("broadcast", 128 * 1024, 3)]
    all_reduce = stats.filter(pl.col("op") == "all_reduce")
    # One rank of two traced: n = 2, so busbw = algbw; NCCL 2.17 writes no Seq.
    assert set(all_reduce["bus_factor"]) == {1.0}
    assert all_reduce["timed_count"].sum() == 15
    # Between 1 and 20 GB/s: an A100 pair's NVLink, kernels that also wait.
    assert all(1e9 < bw < 20e9 for bw in all_reduce["busbw_bytes_per_s"])
    # "A100-PG509-200" is not in the hardware table: no peak rather than a guess.
    assert all_reduce["peak_bytes_per_s"].null_count() == len(all_reduce)


def test_a100_trace_numbers_calls_in_start_order_and_has_no_skew(a100):
    calls = a100.execute("select distinct seq_source from comm_calls").fetchall()
    assert calls == [("order",)]
    assert communication.collective_skew(a100).is_empty()
    assert communication.stragglers(a100).is_empty()


@pytest.fixture(scope="session")
def sampled_pair(shared_traces, tmp_path_factory):
    from gpulens.collector.ingest import ingest_paths

    root = tmp_path_factory.mktemp("sampled_communication")
    paths = [shared_traces / "kineto" / f"sampled_128rank_rank{r}.json.gz" for r in (0, 1)]
    report = ingest_paths(paths, root, run="s128")
    assert not report.failures
    return open_dataset(root)


def test_sampled_128_rank_pair_ranks_rank_1_later(sampled_pair):
    # Ranks 0 and 1 of a 128-rank job; the trace has no Seq, no group: the
    # ten collectives (4 all_reduce, 2 all_gather, 4 all_to_all) are matched
    # by order. Rank 1 arrives last at 8 of them, by 12.5 ms on average.
    skew = communication.collective_skew(sampled_pair)
    assert skew.group_by("op").len().sort("op").rows() == [("all_gather", 4), ("all_reduce", 8), ("all_to_all", 8)]
    top = communication.stragglers(sampled_pair).row(0, named=True)
    assert (top["rank"], top["last_count"], top["decisive_instances"], top["score"]) == (1, 8, 10, pytest.approx(0.6))
    assert top["mean_lateness_ns"] == 12_458_214
    assert top["group_size"] is None
