"""Communication: collective bandwidth, arrival skew, stragglers, slow calls.

Each question is one SQL file in `analysis/sql/` (also a view of the same
name on a connection from `open_dataset`); the functions here run it with
other thresholds and return a Polars frame:

- `collective_stats`: per run, process group, op and power-of-two message
  size: count, bytes, time, algbw and busbw (nccl-tests factors), against
  the nominal peak of the link in between (NVLink, XGMI, PCIe, network).
- `collective_skew`: per collective instance and rank, how long before the
  last rank it arrived, and who was last.
- `stragglers`: per run, ranks ranked by how often they arrive last (chance
  corrected), with their lateness.
- `collective_outliers`: instances much slower than the same collective of
  the same size usually is.
- `all_to_all_balance`: per rank, the all_to_all data it received against
  its group's mean rank (uneven mixture-of-experts routing).

`communication_findings` turns them into verdicts: `straggler_rank`,
`low_bus_bandwidth`, `slow_collectives`, `all_to_all_imbalance`.

Unlike Holistic Trace Analysis's straggler analysis, which looks for kernels
named `ncclKernel*` (NCCL >= 2.19 names them `ncclDevKernel*`, and HTA then
finds none) and flags the top k late starters of every iteration whether or
not anyone is late, the ranking here keys collectives by c10d's sequence
number and counts only instances whose spread is more than jitter.
"""

from __future__ import annotations

from typing import Any

import duckdb
import polars as pl

from gpulens.analysis.findings import Finding, format_duration_ns
from gpulens.analysis.registry import run_analysis
from gpulens.collector.errors import UsageError
from gpulens.collector.hardware import NETWORK_KINDS, network_peak_bytes_per_s
from gpulens.collector.wording import counted

PAGE = "communication"
MIB = 1 << 20


def network_params(network_kind: str) -> dict[str, Any]:
    """The SQL params for a network kind (`ib_ndr`, `roce_400g`, `NDR`, ...)."""
    peak = network_peak_bytes_per_s(network_kind)
    if peak is None:
        raise UsageError(f"unknown network kind {network_kind!r}; known: {', '.join(NETWORK_KINDS)}")
    return {"comm_network_kind": network_kind, "comm_network_peak_bytes_per_s": peak}


def collective_stats(
    con: duckdb.DuckDBPyConnection,
    network_kind: str = "ib_ndr",
    max_ranks_per_node: int = 8,
) -> pl.DataFrame:
    """Bandwidth per run, process group, op and message-size bucket.

    `network_kind` is the fabric between nodes (one port per GPU) that
    groups spanning nodes are measured against; `max_ranks_per_node` is how
    many ranks a node holds where the trace names no host.
    """
    return run_analysis(
        con, "collective_stats", comm_max_ranks_per_node=max_ranks_per_node, **network_params(network_kind)
    )


def collective_skew(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per collective instance and rank: arrival skew, lateness, the last rank."""
    return run_analysis(con, "collective_skew")


def stragglers(con: duckdb.DuckDBPyConnection, min_spread_ns: int = 10_000) -> pl.DataFrame:
    """Ranks of each run, most likely straggler first.

    Only instances whose last rank came at least `min_spread_ns` after the
    median rank count towards the share of last arrivals.
    """
    return run_analysis(con, "stragglers", straggler_min_spread_ns=min_spread_ns)


def collective_outliers(
    con: duckdb.DuckDBPyConnection,
    mad_k: float = 5,
    min_ratio: float = 2.0,
    min_samples: int = 8,
) -> pl.DataFrame:
    """Instances slower than median + mad_k x MAD and min_ratio x median."""
    return run_analysis(
        con,
        "collective_outliers",
        collective_outlier_mad_k=mad_k,
        collective_outlier_min_ratio=min_ratio,
        collective_outlier_min_samples=min_samples,
    )


# --- findings ----------------------------------------------------------------


def straggler_findings(
    con: duckdb.DuckDBPyConnection,
    min_score: float = 0.5,
    critical_score: float = 0.8,
    min_instances: int = 5,
    min_spread_ns: int = 10_000,
) -> list[Finding]:
    """`straggler_rank`: a rank that arrives last far more often than chance.

    Fires where the rank's chance-corrected score is at least `min_score`
    over at least `min_instances` decisive collectives; critical from
    `critical_score`.
    """
    ranking = stragglers(con, min_spread_ns=min_spread_ns).filter(
        (pl.col("decisive_instances") >= min_instances) & (pl.col("score") >= min_score)
    )
    findings = []
    for row in ranking.iter_rows(named=True):
        severity = "critical" if row["score"] >= critical_score else "warning"
        share, expected = row["share_last"], row["expected_share_last"]
        findings.append(
            Finding(
                id="straggler_rank",
                severity=severity,
                title=(
                    f"Rank {row['rank']} arrived last at {share:.0%} of {row['decisive_instances']} collectives "
                    f"(chance: {expected:.0%})"
                ),
                detail=(
                    "Every collective waits for its last rank, so the other ranks idle in NCCL while this one "
                    f"catches up: {format_duration_ns(row['wait_caused_ns'])} in all for the typical rank, "
                    f"{format_duration_ns(row['mean_lateness_ns'])} late on average. Look at what this rank does "
                    "before its collectives: more data or compute than its peers, a slow data loader, host "
                    "contention, or a GPU held back by power or thermal limits."
                    + _partial_group_note(row["ranks_seen"], row["group_size"])
                ),
                subject={"run": row["run"], "rank": row["rank"]},
                evidence={
                    "share_last": share,
                    "expected_share_last": expected,
                    "score": row["score"],
                    "mean_lateness_ns": row["mean_lateness_ns"],
                    "median_lateness_ns": row["median_lateness_ns"],
                    "wait_caused_ns": row["wait_caused_ns"],
                    "collectives": row["instances"],
                    "decisive_collectives": row["decisive_instances"],
                    "last_count": row["last_count"],
                    "ranks_seen": row["ranks_seen"],
                    "group_size": row["group_size"],
                },
                page=PAGE,
            )
        )
    return findings


def _partial_group_note(ranks_seen: int, group_size: int | None) -> str:
    if group_size is None or ranks_seen >= group_size:
        return ""
    return f" Only {ranks_seen} of the group's {group_size} ranks were traced: it is last among those."


def bandwidth_findings(
    con: duckdb.DuckDBPyConnection,
    min_message_bytes: int = 16 * MIB,
    warning_share_of_peak: float = 0.25,
    critical_share_of_peak: float = 0.1,
    min_instances: int = 3,
    network_kind: str = "ib_ndr",
) -> list[Finding]:
    """`low_bus_bandwidth`: large collectives far below the link's peak.

    Per run, process group and op, over the size buckets of at least
    `min_message_bytes`: the transfer bus bandwidth (the last rank's kernel
    time, so waiting for stragglers does not count; that is
    `straggler_rank`'s business) against the nominal peak. Fires below
    `warning_share_of_peak`; critical below `critical_share_of_peak`.
    """
    large = collective_stats(con, network_kind=network_kind).filter(
        (pl.col("size_bucket_bytes") >= min_message_bytes)
        & pl.col("peak_bytes_per_s").is_not_null()
        & pl.col("transfer_busbw_bytes_per_s").is_not_null()
    )
    if large.is_empty():
        return []
    groups = (
        large.group_by("run", "process_group", "op")
        .agg(
            pl.col("instances").sum(),
            pl.col("bytes").sum(),
            pl.col("size_bucket_bytes").min().alias("min_bucket_bytes"),
            (pl.col("transfer_busbw_bytes_per_s") * pl.col("transfer_ns")).sum().alias("_weighted"),
            pl.col("transfer_ns").sum(),
            (pl.col("busbw_bytes_per_s") * pl.col("total_ns")).sum().alias("_weighted_all"),
            pl.col("total_ns").sum(),
            pl.col("peak_bytes_per_s").first(),
            pl.col("link_kind").first(),
            pl.col("group_size").max(),
        )
        .with_columns(
            (pl.col("_weighted") / pl.col("transfer_ns")).alias("transfer_busbw_bytes_per_s"),
            (pl.col("_weighted_all") / pl.col("total_ns")).alias("busbw_bytes_per_s"),
        )
        .with_columns((pl.col("transfer_busbw_bytes_per_s") / pl.col("peak_bytes_per_s")).alias("share_of_peak"))
        .filter((pl.col("instances") >= min_instances) & (pl.col("share_of_peak") < warning_share_of_peak))
        .sort("run", "process_group", "op", nulls_last=True)
    )
    findings = []
    for row in groups.iter_rows(named=True):
        severity = "critical" if row["share_of_peak"] < critical_share_of_peak else "warning"
        busbw_gb = row["transfer_busbw_bytes_per_s"] / 1e9
        peak_gb = row["peak_bytes_per_s"] / 1e9
        findings.append(
            Finding(
                id="low_bus_bandwidth",
                severity=severity,
                title=(
                    f"{row['op']} of ≥ {row['min_bucket_bytes'] / MIB:.0f} MiB reaches {busbw_gb:.1f} GB/s bus "
                    f"bandwidth, {row['share_of_peak']:.0%} of the {row['link_kind']} peak ({peak_gb:.0f} GB/s)"
                ),
                detail=(
                    "Large messages should run near the link's bandwidth (nccl-tests reach 60-90 % of the "
                    "nominal peak). Check that NCCL uses the expected transport (NCCL_DEBUG=INFO: P2P/NVLink "
                    "or NET/IB with GPUDirect RDMA, not SHM or sockets), the topology and NIC affinity, and "
                    "whether other traffic shares the link."
                ),
                subject={"run": row["run"], "process_group": row["process_group"], "op": row["op"]},
                evidence={
                    "transfer_busbw_bytes_per_s": row["transfer_busbw_bytes_per_s"],
                    "busbw_bytes_per_s": row["busbw_bytes_per_s"],
                    "peak_bytes_per_s": row["peak_bytes_per_s"],
                    "share_of_peak": row["share_of_peak"],
                    "link_kind": row["link_kind"],
                    "group_size": row["group_size"],
                    "instances": row["instances"],
                    "bytes": row["bytes"],
                    "min_message_bytes": min_message_bytes,
                },
                page=PAGE,
            )
        )
    return findings


def outlier_findings(
    con: duckdb.DuckDBPyConnection,
    critical_ratio: float = 10.0,
    mad_k: float = 5,
    min_ratio: float = 2.0,
    min_samples: int = 8,
) -> list[Finding]:
    """`slow_collectives`: per run, process group and op with outliers.

    Critical where the worst is at least `critical_ratio` x its usual time.
    """
    outliers = collective_outliers(con, mad_k=mad_k, min_ratio=min_ratio, min_samples=min_samples)
    if outliers.is_empty():
        return []
    groups = (
        outliers.sort("ratio_to_median", descending=True)
        .group_by("run", "process_group", "op", maintain_order=True)
        .agg(
            pl.len().alias("outliers"),
            pl.col("excess_ns").sum(),
            pl.col("ratio_to_median").first().alias("worst_ratio_to_median"),
            pl.col("transfer_ns").first().alias("worst_transfer_ns"),
            pl.col("median_ns").first().alias("worst_median_ns"),
            pl.col("size_bucket_bytes").first().alias("worst_size_bucket_bytes"),
            pl.col("seq").sort().head(10).alias("seqs"),
            pl.col("ranks_seen").min().alias("min_ranks_seen"),
        )
        .sort("run", "process_group", "op", nulls_last=True)
    )
    findings = []
    for row in groups.iter_rows(named=True):
        severity = "critical" if row["worst_ratio_to_median"] >= critical_ratio else "warning"
        findings.append(
            Finding(
                id="slow_collectives",
                severity=severity,
                title=(
                    f"{counted(row['outliers'], row['op'] + ' call')} took up to {row['worst_ratio_to_median']:.1f}x their "
                    f"usual time ({format_duration_ns(row['excess_ns'])} lost)"
                ),
                detail=(
                    (
                        "Each was timed by its fastest rank, so waiting for a late rank is not the cause: the "
                        "transfer itself was slow. "
                        if row["min_ranks_seen"] > 1
                        else "Only one rank's trace has them, so waiting for a late peer may be part of it; "
                        "ingest the other ranks' traces to tell. "
                    )
                    + "Look for link or network congestion (other jobs, checkpoint traffic), NCCL retries or "
                    "error counters (PCIe replays, IB link errors), or clock and power throttling at those times."
                ),
                subject={"run": row["run"], "process_group": row["process_group"], "op": row["op"]},
                evidence={
                    "outliers": row["outliers"],
                    "excess_ns": row["excess_ns"],
                    "worst_ratio_to_median": row["worst_ratio_to_median"],
                    "worst_transfer_ns": row["worst_transfer_ns"],
                    "worst_median_ns": row["worst_median_ns"],
                    "worst_size_bucket_bytes": row["worst_size_bucket_bytes"],
                    "seqs": row["seqs"],
                    "min_ranks_seen": row["min_ranks_seen"],
                },
                page=PAGE,
            )
        )
    return findings


def all_to_all_balance(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per run, process group and rank: all_to_all bytes received and sent,
    against the mean rank of the same instances."""
    return run_analysis(con, "all_to_all_balance")


def all_to_all_findings(
    con: duckdb.DuckDBPyConnection,
    min_ratio: float = 1.25,
    critical_ratio: float = 2.0,
    min_instances: int = 3,
) -> list[Finding]:
    """`all_to_all_imbalance`: a rank that receives far more than its
    group's mean rank in all_to_all.

    One finding per run and process group, about the rank that received the
    most relative to the mean (summed over at least `min_instances`
    instances), where that is at least `min_ratio` times the mean; critical
    from `critical_ratio`.
    """
    balance = all_to_all_balance(con)
    if balance.is_empty():
        return []
    others_dur = (
        balance.join(balance.select("run", "process_group", "rank", "mean_dur_ns"), on=["run", "process_group"],
                     how="inner", suffix="_other", nulls_equal=True)
        .filter(pl.col("rank") != pl.col("rank_other"))
        .group_by("run", "process_group", "rank")
        .agg(pl.col("mean_dur_ns_other").mean().alias("others_mean_dur_ns"))
    )
    heaviest = (
        balance.filter(pl.col("instances") >= min_instances)
        .sort("received_vs_mean", "rank", descending=[True, False], nulls_last=True)
        .group_by("run", "process_group", maintain_order=True)
        .first()
        .filter(pl.col("received_vs_mean") >= min_ratio)
        .join(others_dur, on=["run", "process_group", "rank"], how="left", nulls_equal=True)
        .sort("run", "process_group", nulls_last=True)
    )
    findings = []
    for row in heaviest.iter_rows(named=True):
        ratio = row["received_vs_mean"]
        times = ""
        if row["mean_dur_ns"] is not None and row["others_mean_dur_ns"] is not None:
            times = (f" Its all_to_all kernels took {format_duration_ns(row['mean_dur_ns'])} on average, "
                     f"the other ranks' {format_duration_ns(row['others_mean_dur_ns'])}.")
        peers = ""
        if row["peer_imbalance"] is not None:
            peers = (f" Its busiest sender sent it {row['peer_imbalance']:.1f}x the mean peer's rows "
                     f"({row['split_instances']} calls with per-peer splits).")
        findings.append(
            Finding(
                id="all_to_all_imbalance",
                severity="critical" if ratio >= critical_ratio else "warning",
                title=(
                    f"Rank {row['rank']} received {ratio:.2f}x the mean rank's all_to_all data "
                    f"(process group {row['process_group']}, {row['instances']} calls)"
                ),
                detail=(
                    "An all_to_all ends when its last transfer does, so every rank of the group waits for the "
                    f"one that receives the most; this rank received the most at {row['most_received_share']:.0%} "
                    f"of the calls, up to {row['max_received_vs_mean']:.2f}x the mean at one."
                    + times + peers
                    + " In a mixture-of-experts model this is uneven routing: the experts on this rank take more "
                    "tokens than the others. An auxiliary load-balancing loss, a token capacity per expert, or "
                    "placing often-chosen experts on different ranks evens it."
                    + _partial_group_note(row["ranks_seen"], row["group_size"])
                ),
                subject={"run": row["run"], "process_group": row["process_group"], "rank": row["rank"]},
                evidence={
                    "received_vs_mean": ratio,
                    "max_received_vs_mean": row["max_received_vs_mean"],
                    "most_received_share": row["most_received_share"],
                    "received_bytes": row["received_bytes"],
                    "mean_rank_received_bytes": row["received_bytes"] / ratio,
                    "sent_bytes": row["sent_bytes"],
                    "peer_imbalance": row["peer_imbalance"],
                    "mean_dur_ns": row["mean_dur_ns"],
                    "others_mean_dur_ns": row["others_mean_dur_ns"],
                    "instances": row["instances"],
                    "ranks_seen": row["ranks_seen"],
                    "group_size": row["group_size"],
                },
                page=PAGE,
            )
        )
    return findings


def communication_findings(con: duckdb.DuckDBPyConnection) -> list[Finding]:
    """Stragglers, low bus bandwidth, slow collectives and all_to_all
    imbalance, with default thresholds."""
    return straggler_findings(con) + bandwidth_findings(con) + outlier_findings(con) + all_to_all_findings(con)
