"""Where GPU time goes: compute, communication, memory and idle, per rank.

Each question is one SQL file in `analysis/sql/` (also a view of the same
name on a connection from `open_dataset`); the functions here run it with
other thresholds and return a Polars frame:

- `scoped_kernels`: the kernels of the complete profiler steps, the GPU work
  the per-rank aggregates count (the last step, cut short when the profiler
  stops, is left out, as HTA does).
- `time_breakdown`: per rank, the span from first kernel start to last
  kernel end split into compute, communication, memory and idle time (the
  union of kernel intervals over all streams, each instant counted once),
  and the idle time split into waiting on the host, waiting on the previous
  kernel, and other (HTA's temporal and idle-time breakdowns).
- `idle_breakdown`: the same idle split per stream, as HTA reports it.
- `idle_intervals`: per stream and cause, the gaps' count, total, p50, p95
  and max: many tiny gaps or a few long ones.
- `annotation_gpu_time`: per user annotation (`record_function` range),
  the GPU activities launched inside it and their GPU time.
- `operator_kernels`: per CPU operator (`aten::mm`) and kernel name, the
  activities it launched, their GPU time and launch delay.
- `comm_overlap`: per rank, how much communication runs under compute
  (|C ∩ K| / |C|) and how much is exposed (|C \\ K|).
- `kernel_stats`: per kernel name: count, total, mean, p50 and p95 duration.
- `memcpy_stats`: memory copies and sets per direction and the memory at
  each end (pageable, pinned, device): count, bytes, time, bandwidth.

`breakdown_findings` turns them into verdicts: `gpu_idle`,
`exposed_communication` and `pageable_memcpy`.

Unlike Holistic Trace Analysis, which rounds nanosecond traces to whole
microseconds (start up, end down: about a percentage point of idle share on
a busy trace), every time here keeps its nanoseconds.
"""

from __future__ import annotations


import duckdb
import polars as pl

from gpulens.analysis.findings import Finding, format_duration_ns
from gpulens.analysis.registry import run_analysis

KERNEL_WAIT_MAX_GAP_NS = 30_000


def scoped_kernels(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The kernels of the complete profiler steps of each rank."""
    return run_analysis(con, "scoped_kernels")


def time_breakdown(
    con: duckdb.DuckDBPyConnection, kernel_wait_max_gap_ns: int = KERNEL_WAIT_MAX_GAP_NS
) -> pl.DataFrame:
    """Per rank: span, busy, compute, communication, memory, idle (ns and shares).

    An idle gap shorter than `kernel_wait_max_gap_ns` whose kernel was
    launched before the gap began counts as kernel wait (HTA's
    `consecutive_kernel_delay`, 30 µs).
    """
    return run_analysis(con, "time_breakdown", breakdown_kernel_wait_max_gap_ns=kernel_wait_max_gap_ns)


def idle_breakdown(
    con: duckdb.DuckDBPyConnection, kernel_wait_max_gap_ns: int = KERNEL_WAIT_MAX_GAP_NS
) -> pl.DataFrame:
    """Per rank and stream: idle time between kernels by cause (HTA's split)."""
    return run_analysis(con, "idle_breakdown", breakdown_kernel_wait_max_gap_ns=kernel_wait_max_gap_ns)


def idle_intervals(
    con: duckdb.DuckDBPyConnection, kernel_wait_max_gap_ns: int = KERNEL_WAIT_MAX_GAP_NS
) -> pl.DataFrame:
    """Per rank, stream and cause: the idle gaps' count, total, p50, p95, max."""
    return run_analysis(con, "idle_intervals", breakdown_kernel_wait_max_gap_ns=kernel_wait_max_gap_ns)


def annotation_gpu_time(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per rank and user annotation name: its ranges, the GPU activities
    launched inside them and their GPU time."""
    return run_analysis(con, "annotation_gpu_time")


def operator_kernels(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per rank, CPU operator and kernel name: the activities the operator
    launched, their GPU time and launch delay."""
    return run_analysis(con, "operator_kernels")


def comm_overlap(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per rank: communication time, the part under compute, the exposed part."""
    return run_analysis(con, "comm_overlap")


def kernel_stats(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per rank and kernel name: count, total, mean, p50, p95 duration."""
    return run_analysis(con, "kernel_stats")


def memcpy_stats(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per rank, kind, direction and the memory at each end: copies, bytes,
    time, bandwidth and share of the rank's span; `pageable` where an end is
    pageable host memory."""
    return run_analysis(con, "memcpy_stats")


# --- findings ----------------------------------------------------------------

_IDLE_CAUSES = {
    "host_wait": (
        "waiting on the host",
        "The CPU does not issue work fast enough: each gap ends with a kernel launched after the GPU ran dry. "
        "Fewer, larger kernels (torch.compile, fused optimizers), CUDA graphs, a faster data loader and no "
        "synchronising calls (.item(), .cpu(), prints of tensors) in the step keep the queue full.",
    ),
    "kernel_wait": (
        "between back-to-back kernels",
        "The kernels were queued, but each gap is the launch overhead between many short kernels. Fusing "
        "them (torch.compile, fused optimizers) or capturing the step in a CUDA graph removes the gaps.",
    ),
    "other": (
        "for reasons the launches do not explain",
        "The next kernel was queued long before it started: it most likely waited on an event, such as a "
        "stream waiting on a communication kernel or a copy, or on a synchronisation.",
    ),
}


# The same causes where most of the rank's kernels already run from CUDA or
# HIP graph replays (analysis.launch.graph_launches, GRAPH_MOSTLY_SHARE):
# advice to capture a graph would be advice to do what the job does.
_GRAPH_IDLE_ADVICE = {
    "host_wait": (
        "Most of its kernels already run from CUDA graphs, so these gaps lie between graph replays: the CPU "
        "prepares the next replay (its inputs, the Python between steps) slower than the GPU runs one. Capture "
        "more of the step in each graph, and keep synchronising calls (.item(), .cpu()) out of the loop."
    ),
    "kernel_wait": (
        "Most of its kernels already run from CUDA graphs, so these gaps lie between a graph's own nodes, not "
        "between CPU launches: each short node still pays its start-up on the GPU. Fewer, larger kernels "
        "(torch.compile's fusion, fused optimizers) shrink them."
    ),
}


# The share of a rank's span past which `gpu_idle` names the busy time of
# activities whose launch call the trace lacks (time_breakdown).
UNLAUNCHED_NOTE_SHARE = 0.01


def gpu_idle_findings(con: duckdb.DuckDBPyConnection, idle_share_max: float = 0.3) -> list[Finding]:
    """`gpu_idle`: a rank whose GPU idles more than `idle_share_max` of its span;
    it names the activities without a launch call in the trace where their
    busy time is more than UNLAUNCHED_NOTE_SHARE of the span."""
    rows = time_breakdown(con).filter(pl.col("idle_share") > idle_share_max)
    if rows.is_empty():
        return []
    from gpulens.analysis.launch import GRAPH_MOSTLY_SHARE, for_platform, graph_kernel_shares, hip_ranks, stall_idle_ns

    graph_shares = graph_kernel_shares(con)
    hip = hip_ranks(con)
    stalls = stall_idle_ns(con)
    findings = []
    for row in rows.iter_rows(named=True):
        shares = {
            "host_wait": row["idle_host_wait_share"],
            "kernel_wait": row["idle_kernel_wait_share"],
            "other": row["idle_other_share"],
        }
        cause = max(shares, key=lambda name: shares[name] or 0.0)
        phrase, advice = _IDLE_CAUSES[cause]
        graph_share = graph_shares.get((row["run"], row["rank"])) or 0.0
        if graph_share >= GRAPH_MOSTLY_SHARE:
            advice = _GRAPH_IDLE_ADVICE.get(cause, advice)
        advice = for_platform(advice, (row["run"], row["rank"]) in hip)
        data_ns, sync_ns = stalls.get((row["run"], row["rank"]), (0, 0))
        # what the trace says the host was doing meanwhile, from the stall views
        waits = ([f"{format_duration_ns(data_ns)} while the loop waited on its DataLoader"] if data_ns else []) + (
            [f"{format_duration_ns(sync_ns)} after synchronising calls drained the GPU"] if sync_ns else [])
        if waits:
            advice = f"Of that, {' and '.join(waits)}. " + advice
        advice += _unlaunched_note(row)
        findings.append(
            Finding(
                id="gpu_idle",
                severity="warning",
                title=(
                    f"Rank {row['rank']}'s GPU was idle {row['idle_share']:.0%} of the time, "
                    f"mostly {phrase} ({shares[cause]:.0%} of the idle time)"
                ),
                detail=(
                    f"Over {format_duration_ns(row['span_ns'])} from the first kernel to the last (complete profiler "
                    f"steps only), no kernel ran for {format_duration_ns(row['idle_ns'])}. " + advice
                ),
                subject={"run": row["run"], "rank": row["rank"]},
                evidence={
                    "idle_share": row["idle_share"],
                    "idle_ns": row["idle_ns"],
                    "span_ns": row["span_ns"],
                    "compute_share": row["compute_share"],
                    "non_compute_share": row["non_compute_share"],
                    "idle_host_wait_share": row["idle_host_wait_share"],
                    "idle_kernel_wait_share": row["idle_kernel_wait_share"],
                    "idle_other_share": row["idle_other_share"],
                    "idle_gap_count": row["idle_gap_count"],
                    "unlaunched_count": row["unlaunched_count"],
                    "unlaunched_busy_ns": row["unlaunched_busy_ns"],
                    "main_cause": cause,
                    "graph_kernel_share": graph_share,
                    "data_loader_idle_ns": data_ns,
                    "sync_idle_ns": sync_ns,
                },
                page="kernels",
            )
        )
    return findings


def _unlaunched_note(row: dict) -> str:
    """What the breakdown counts that HTA's leaves out, where it matters."""
    busy_ns, span_ns = row["unlaunched_busy_ns"] or 0, row["span_ns"] or 0
    if not span_ns or busy_ns <= UNLAUNCHED_NOTE_SHARE * span_ns:
        return ""
    count = row["unlaunched_count"]
    return (
        f" The breakdown counts {count:,} GPU activit{'ies' if count != 1 else 'y'} whose launch call is not in the "
        f"trace (launched before the profiler started, while the GPU ran behind the CPU): "
        f"{format_duration_ns(busy_ns)} ({busy_ns / span_ns:.1%} of the span) when only they ran. Holistic Trace "
        "Analysis leaves them out, so its idle share is higher by about that much."
    )


def exposed_communication_findings(
    con: duckdb.DuckDBPyConnection, exposed_share_max: float = 0.1
) -> list[Finding]:
    """`exposed_communication`: communication with no compute under it takes
    more than `exposed_share_max` of the rank's span."""
    rows = comm_overlap(con).filter(pl.col("exposed_share") > exposed_share_max)
    findings = []
    for row in rows.iter_rows(named=True):
        overlap = row["overlap_share"]
        findings.append(
            Finding(
                id="exposed_communication",
                severity="warning",
                title=(
                    f"Rank {row['rank']} only communicated, with no compute beside it, for "
                    f"{row['exposed_share']:.0%} of its GPU time ({overlap:.0%} of its communication overlaps compute)"
                ),
                detail=(
                    f"Communication kernels ran for {format_duration_ns(row['comm_ns'])}, of which "
                    f"{format_duration_ns(row['exposed_ns'])} with no compute kernel beside them: the GPU only "
                    "communicated. Overlap gradient communication with the backward pass (DDP/FSDP bucketing, "
                    "a bucket size that lets the first all-reduce start early), prefetch FSDP all-gathers, and "
                    "check for stragglers, whose late arrival makes every other rank wait inside NCCL."
                ),
                subject={"run": row["run"], "rank": row["rank"]},
                evidence={
                    "exposed_share": row["exposed_share"],
                    "exposed_ns": row["exposed_ns"],
                    "comm_ns": row["comm_ns"],
                    "overlapped_ns": row["overlapped_ns"],
                    "overlap_share": overlap,
                    "span_ns": row["span_ns"],
                },
                page="communication",
            )
        )
    return findings


def pageable_memcpy_findings(con: duckdb.DuckDBPyConnection, pageable_share_max: float = 0.01) -> list[Finding]:
    """`pageable_memcpy`: copies to or from pageable host memory take more
    than `pageable_share_max` of the rank's span.

    Below that they cost little, however common (a loss read back with
    `.item()` each step is one 4-byte pageable copy); above it they are
    what pinning memory removes.
    """
    stats = memcpy_stats(con)
    if stats.is_empty():
        return []
    rows = (stats.filter(pl.col("pageable"))
            .group_by("run", "rank")
            .agg(pl.col("copy_count").sum(), pl.col("bytes").sum(), pl.col("total_ns").sum(), pl.col("time_share").sum(),
                 pl.col("direction").sort_by("total_ns", descending=True).first().alias("main_direction"))
            .filter(pl.col("time_share") > pageable_share_max)
            .sort("run", "rank"))
    findings = []
    for row in rows.iter_rows(named=True):
        rate = row["bytes"] / row["total_ns"] if row["bytes"] and row["total_ns"] else None
        speed = f" at {rate:.1f} GB/s" if rate else ""
        findings.append(
            Finding(
                id="pageable_memcpy",
                severity="warning",
                title=(
                    f"Rank {row['rank']} spent {row['time_share']:.1%} of its GPU time copying to or from pageable "
                    f"host memory ({row['copy_count']:,} copies, mostly {row['main_direction']}{speed})"
                ),
                detail=(
                    f"{format_duration_ns(row['total_ns'])} of copies had pageable (not pinned) host memory at one end. "
                    "The driver stages such a copy through a pinned buffer of its own, so it runs below the link's "
                    "speed, and the CPU thread that launched it waits for it instead of launching the next kernels. "
                    "Pin the host memory (DataLoader(pin_memory=True), tensor.pin_memory()) and copy with "
                    "non_blocking=True; keep values such as the loss on the GPU rather than reading them back every step."
                ),
                subject={"run": row["run"], "rank": row["rank"]},
                evidence={
                    "time_share": row["time_share"],
                    "total_ns": row["total_ns"],
                    "copy_count": row["copy_count"],
                    "bytes": row["bytes"],
                    "main_direction": row["main_direction"],
                },
                page="kernels",
            )
        )
    return findings


def breakdown_findings(
    con: duckdb.DuckDBPyConnection,
    idle_share_max: float = 0.3,
    exposed_share_max: float = 0.1,
    pageable_share_max: float = 0.01,
) -> list[Finding]:
    """`gpu_idle`, `exposed_communication` and `pageable_memcpy` findings, per rank."""
    return (gpu_idle_findings(con, idle_share_max) + exposed_communication_findings(con, exposed_share_max)
            + pageable_memcpy_findings(con, pageable_share_max))


