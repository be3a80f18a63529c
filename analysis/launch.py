"""Kernel launch and queuing: is the CPU keeping the GPU fed?

Each function runs one SQL file of `analysis/sql/` (the definitions are in
its header) and returns a Polars frame; thresholds are keyword arguments
with the SQL's defaults:

- `kernel_launches`: per GPU activity, the launch call's CPU time, the
  launch delay (call return to kernel start, clipped at 0, as HTA) and the
  launch-and-queue time (call start to kernel start), with its step;
- `step_launch_summary`: per profiler step and rank, the total kernel launch
  and queuing time (TKLQT), GPU busy and idle time, launch-delay percentiles
  and the verdict: cpu_bound, gpu_bound, balanced or unknown;
- `launch_rank_summary`: the same per rank over its complete steps, with
  the rank's dominant verdict;
- `short_kernels`, `launch_outliers`: per kernel name, the kernels shorter
  than their launch call, and launch-delay or launch-call outliers;
- `queue_length`: per stream over the complete steps, the launch queue
  (launched, not yet started) summarised as HTA summarises it, and the
  time it was full (CUDA's 1,024 pending launches);
- `launch_flip`: across runs named by batch size (`bs8`, `batch16`, ...),
  the batch size where the verdict flips from cpu_bound to gpu_bound;
- `graph_launches`: per rank, the share of its launched kernels and GPU
  time that CUDA or HIP graph replays ran (the per-kernel launch analyses
  leave those kernels out: one call launched them all);
- `data_loading`: per profiler step, the time the training loop spent
  fetching its next batch from a DataLoader, and how much of it the GPU
  sat idle;
- `host_syncs`: per profiler step, the calls that made the CPU wait for
  the GPU (`.item()`, copies to the host, synchronize) and the GPU idle
  time that followed each where it drained the queue.

`launch_findings` turns them into findings: `cpu_bound_launches`,
`short_kernels`, `launch_delay_outliers`, `data_loader_stall`,
`host_sync_stall`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import duckdb
import polars as pl

from gpulens.analysis.findings import Finding, format_duration_ns
from gpulens.analysis.names import short_kernel_name
from gpulens.analysis.registry import run_analysis
from gpulens.collector.wording import counted

PAGE = "kernels"
TOP_NAMES = 5


def kernel_launches(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    return run_analysis(con, "kernel_launches")


def step_launch_summary(
    con: duckdb.DuckDBPyConnection,
    *,
    short_kernel_max_call_ns: int = 50_000,
    launch_delay_outlier_ns: int = 100_000,
    launch_cpu_bound_min_idle_share: float = 0.2,
    launch_cpu_bound_max_delay_ns: int = 20_000,
    launch_gpu_bound_max_idle_share: float = 0.1,
    launch_gpu_bound_min_delay_ns: int = 100_000,
) -> pl.DataFrame:
    return run_analysis(con, "step_launch_summary", **_params(locals()))


def launch_rank_summary(
    con: duckdb.DuckDBPyConnection,
    *,
    short_kernel_max_call_ns: int = 50_000,
    launch_delay_outlier_ns: int = 100_000,
    launch_cpu_bound_min_idle_share: float = 0.2,
    launch_cpu_bound_max_delay_ns: int = 20_000,
    launch_gpu_bound_max_idle_share: float = 0.1,
    launch_gpu_bound_min_delay_ns: int = 100_000,
) -> pl.DataFrame:
    return run_analysis(con, "launch_rank_summary", **_params(locals()))


def short_kernels(con: duckdb.DuckDBPyConnection, *, short_kernel_max_call_ns: int = 50_000) -> pl.DataFrame:
    return run_analysis(con, "short_kernels", short_kernel_max_call_ns=short_kernel_max_call_ns)


def launch_outliers(
    con: duckdb.DuckDBPyConnection,
    *,
    launch_delay_outlier_ns: int = 100_000,
    launch_call_outlier_ns: int = 50_000,
) -> pl.DataFrame:
    return run_analysis(con, "launch_outliers", **_params(locals()))


def queue_length(con: duckdb.DuckDBPyConnection, *, queue_full_length: int = 1024) -> pl.DataFrame:
    return run_analysis(con, "queue_length", queue_full_length=queue_full_length)


def launch_flip(
    con: duckdb.DuckDBPyConnection,
    *,
    launch_cpu_bound_min_idle_share: float = 0.2,
    launch_cpu_bound_max_delay_ns: int = 20_000,
    launch_gpu_bound_max_idle_share: float = 0.1,
    launch_gpu_bound_min_delay_ns: int = 100_000,
) -> pl.DataFrame:
    return run_analysis(con, "launch_flip", **_params(locals()))


def graph_launches(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    return run_analysis(con, "graph_launches")


def data_loading(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    return run_analysis(con, "data_loading")


def host_syncs(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    return run_analysis(con, "host_syncs")


def stall_idle_ns(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, int], tuple[int, int]]:
    """Per (run, rank): the GPU idle time (where known, complete steps) that
    data_loading and host_syncs put down to waiting on the DataLoader and
    to synchronising calls; ranks with neither are absent."""
    totals: dict[tuple[str, int], list[int]] = {}
    for position, (frame, column) in enumerate(((data_loading(con), "load_gpu_idle_ns"),
                                                 (host_syncs(con), "sync_gpu_idle_ns"))):
        for row in frame.filter(~pl.col("is_last")).group_by("run", "rank").agg(pl.col(column).sum()).iter_rows():
            totals.setdefault((row[0], row[1]), [0, 0])[position] = int(row[2] or 0)
    return {key: (data_ns, sync_ns) for key, (data_ns, sync_ns) in totals.items()}


def graph_kernel_shares(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, int], float]:
    """Per (run, rank): the share of its launched kernels that graph replays
    ran (graph_launches.kernel_share), for findings whose advice depends on it."""
    return {(row["run"], row["rank"]): row["kernel_share"] for row in graph_launches(con).iter_rows(named=True)}


def hip_ranks(con: duckdb.DuckDBPyConnection) -> set[tuple[str, int]]:
    """The (run, rank)s whose kernels HIP calls launched (an AMD GPU under
    ROCm), so that advice names HIP graphs where it would name CUDA's."""
    rows = con.sql("select distinct run, rank from kernels where starts_with(launch_call_name, 'hip')").fetchall()
    return {(run, rank) for run, rank in rows}


def for_platform(advice: str, hip: bool) -> str:
    """`advice`, written for CUDA, in HIP's words where the rank ran on HIP
    (torch.compile's 'reduce-overhead' captures HIP graphs on ROCm)."""
    return advice.replace("CUDA graph", "HIP graph") if hip else advice


def _params(arguments: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in arguments.items() if name != "con"}


# --- findings -----------------------------------------------------------------------------


def launch_findings(
    con: duckdb.DuckDBPyConnection,
    *,
    short_kernel_min_count: int = 100,
    short_kernel_min_share: float = 0.2,
    short_kernel_warning_share: float = 0.5,
    outlier_min_count: int = 10,
    outlier_min_share: float = 0.01,
    data_loader_min_idle_share: float = 0.1,
    sync_min_idle_share: float = 0.1,
) -> list[Finding]:
    """Findings from the launch tables, one per rank of a run and kind.

    cpu_bound_launches (warning): the rank's dominant verdict is cpu_bound.
    short_kernels: at least `short_kernel_min_count` short kernels making up
        at least `short_kernel_min_share` of the rank's launched kernels;
        a warning from `short_kernel_warning_share` on, else info.
    launch_delay_outliers (info): at least `outlier_min_count` kernels, and
        `outlier_min_share` of the rank's, started over 100 µs after their
        launch call returned.
    data_loader_stall (warning): over the rank's complete steps (from its
        first kernel on), the GPU sat idle while the loop fetched its next
        batch for at least `data_loader_min_idle_share` of the steps' time.
    host_sync_stall (warning): over the rank's complete steps, the GPU sat
        idle after synchronising calls drained it for at least
        `sync_min_idle_share` of the steps' time.
    """
    ranks = launch_rank_summary(con)
    verdicts = {(row["run"], row["rank"]): row["verdict"] for row in ranks.iter_rows(named=True)}
    cpu_bound = [row for row in ranks.iter_rows(named=True) if row["verdict"] == "cpu_bound"]
    graph_shares = graph_kernel_shares(con) if cpu_bound else {}
    findings = [_cpu_bound_finding(row, graph_shares.get((row["run"], row["rank"])) or 0.0) for row in cpu_bound]
    findings += _short_kernel_findings(short_kernels(con), short_kernel_min_count, short_kernel_min_share,
                                       short_kernel_warning_share)
    if findings:
        hip = hip_ranks(con)
        findings = [replace(f, detail=for_platform(f.detail, (f.subject["run"], f.subject["rank"]) in hip)) for f in findings]
    findings += _outlier_findings(launch_outliers(con), verdicts, outlier_min_count, outlier_min_share)
    findings += _data_loader_findings(data_loading(con), data_loader_min_idle_share)
    findings += _host_sync_findings(host_syncs(con), sync_min_idle_share)
    return findings


# Above this share of a rank's launched kernels replayed from CUDA or HIP
# graphs, the advice to capture one would describe what the job does.
GRAPH_MOSTLY_SHARE = 0.5


def _cpu_bound_finding(row: dict[str, Any], graph_share: float) -> Finding:
    if graph_share >= GRAPH_MOSTLY_SHARE:
        advice = ("Most of its kernels already run from CUDA graphs, so the GPU waits on what the CPU does between "
                  "replays and on the kernels still launched one by one: capture more of the step in each graph, "
                  "fuse the rest, raise the batch size, and keep host synchronisation (.item(), .cpu(), data "
                  "loading) out of the step.")
    else:
        advice = ("Cut launch overhead: capture the step in a CUDA graph (torch.compile mode='reduce-overhead'), "
                  "fuse small kernels, raise the batch size, and keep host synchronisation (.item(), .cpu(), data "
                  "loading) out of the step.")
    return Finding(
        id="cpu_bound_launches",
        severity="warning",
        title=(f"Rank {row['rank']} of {row['run']} is CPU-bound: the GPU idles {row['gpu_idle_share']:.0%} "
               f"of step time while kernels typically start {row['step_launch_delay_p50_ns'] / 1_000:.1f} µs "
               f"after their launch returns"),
        detail=("The GPU waits for the CPU to launch work: kernels start almost as soon as they are launched, "
                "and between them the GPU has nothing to do. " + advice),
        subject={"run": row["run"], "rank": row["rank"]},
        evidence={
            "gpu_idle_share": row["gpu_idle_share"],
            "launch_delay_mean_ns": row["launch_delay_mean_ns"],
            "launch_delay_p50_ns": row["step_launch_delay_p50_ns"],
            "tklqt_share": row["tklqt_share"],
            "short_kernel_count": row["short_kernel_count"],
            "cpu_bound_steps": row["cpu_bound_steps"],
            "step_count": row["step_count"],
            "verdict_share": row["verdict_share"],
            "graph_kernel_share": graph_share,
        },
        page=PAGE,
    )


def _top_names(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": row["name"], "kernel_count": row["kernel_count"]} for row in rows[:TOP_NAMES]]


def _by_rank(frame: pl.DataFrame, order: str = "name_rank") -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Rows per (run, rank), in `order`."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in frame.sort("run", "rank", order).iter_rows(named=True):
        groups.setdefault((row["run"], row["rank"]), []).append(row)
    return groups


def _short_kernel_findings(short: pl.DataFrame, min_count: int, min_share: float, warning_share: float) -> list[Finding]:
    findings = []
    for (run, rank), rows in _by_rank(short).items():
        first = rows[0]
        count, share = first["rank_short_kernel_count"], first["rank_short_kernel_share"]
        if count < min_count or share < min_share:
            continue
        names = _top_names(rows)
        findings.append(Finding(
            id="short_kernels",
            severity="warning" if share >= warning_share else "info",
            title=(f"{share:.0%} of the kernels of rank {rank} of {run} ({count:,}) run for less time than "
                   f"their launch call takes; most often {short_kernel_name(names[0]['name'])}"),
            detail=("The CPU spends longer launching these kernels than the GPU spends running them, so the "
                    "GPU cannot be kept busy with them. Fuse them (torch.compile, fused optimisers and "
                    "layers) or replay them as a CUDA graph."),
            subject={"run": run, "rank": rank},
            evidence={
                "short_kernel_count": count,
                "short_kernel_share": share,
                "short_gpu_time_share": first["rank_short_gpu_time_share"],
                "short_launch_call_share": first["rank_short_launch_call_share"],
                "top_names": names,
            },
            page=PAGE,
        ))
    return findings


def _outlier_findings(outliers: pl.DataFrame, verdicts: dict[tuple[str, int], str], min_count: int,
                      min_share: float) -> list[Finding]:
    findings = []
    delays = outliers.filter(pl.col("outlier_kind") == "launch_delay")
    for (run, rank), rows in _by_rank(delays).items():
        count = rows[0]["rank_outlier_count"]
        share = sum(row["kernel_share"] for row in rows)
        if count < min_count or share < min_share:
            continue
        gpu_bound = verdicts.get((run, rank)) == "gpu_bound"
        cause = ("The rank is GPU-bound, so this is mostly kernels queuing behind earlier GPU work: expected, "
                 "and a sign the CPU runs ahead." if gpu_bound else
                 "The rank is not GPU-bound, so look at what the kernels wait for: stream or event waits, "
                 "communication on another stream, or a full launch queue after a host synchronisation.")
        findings.append(Finding(
            id="launch_delay_outliers",
            severity="info",
            title=(f"{count:,} kernels of rank {rank} of {run} ({share:.1%}) started more than 100 µs after "
                   f"their launch call returned; most often {short_kernel_name(rows[0]['name'])}"),
            detail=cause,
            subject={"run": run, "rank": rank},
            evidence={
                "outlier_count": count,
                "outlier_share": share,
                "max_launch_delay_ns": max(row["max_ns"] for row in rows),
                "verdict": verdicts.get((run, rank)),
                "top_names": _top_names(rows),
            },
            page=PAGE,
        ))
    return findings


def _stalled_ranks(per_step: pl.DataFrame, idle_column: str,
                   min_idle_share: float) -> list[tuple[tuple[str, int], list[dict[str, Any]], int, int]]:
    """Each rank whose steps' `idle_column` (where known) sums to at least
    `min_idle_share` of those steps' time: (run, rank), its rows, the steps'
    time and the idle time."""
    stalled = []
    for key, rows in _by_rank(per_step.filter(pl.col(idle_column).is_not_null()), "step").items():
        step_ns = sum(row["step_ns"] for row in rows)
        idle_ns = sum(row[idle_column] for row in rows)
        if step_ns and idle_ns / step_ns >= min_idle_share:
            stalled.append((key, rows, step_ns, idle_ns))
    return stalled


def _data_loader_findings(loading: pl.DataFrame, min_idle_share: float) -> list[Finding]:
    """`data_loader_stall`, per rank, over its steps whose fetches' GPU idle
    time is known (complete steps, from the rank's first kernel on)."""
    findings = []
    for (run, rank), rows, step_ns, idle_ns in _stalled_ranks(loading, "load_gpu_idle_ns", min_idle_share):
        load_ns = sum(row["load_ns"] for row in rows)
        steps = len(rows)
        findings.append(Finding(
            id="data_loader_stall",
            severity="warning",
            title=(f"Rank {rank} of {run} waits on its DataLoader: the GPU sat idle {idle_ns / step_ns:.0%} of "
                   f"step time while the next batch loaded"),
            detail=(f"Fetching each step's batch took {format_duration_ns(load_ns / steps)} on average, and for "
                    f"{format_duration_ns(idle_ns / steps)} of it no kernel ran: the loop blocks on next() until "
                    "the batch arrives. Load in worker processes (num_workers > 0, persistent_workers=True), let "
                    "them fetch further ahead (prefetch_factor), pin host memory (pin_memory=True) and copy with "
                    "non_blocking=True, and take decoding and augmentation off the loop (faster storage, "
                    "decoding on the GPU)."),
            subject={"run": run, "rank": rank},
            evidence={
                "load_gpu_idle_share": idle_ns / step_ns,
                "load_share": load_ns / step_ns,
                "load_gpu_idle_ns": idle_ns,
                "load_ns": load_ns,
                "step_count": steps,
            },
            page=PAGE,
        ))
    return findings


# What the CPU operators behind a synchronising call are, in Python's words.
_SYNC_OP_WORDS = {
    "aten::_local_scalar_dense": ".item()",
    "aten::item": ".item()",
    "aten::_to_copy": "a copy to the host (.cpu(), .to('cpu'), .tolist())",
    "aten::copy_": "a copy to the host (.cpu(), .to('cpu'), .tolist())",
    "aten::nonzero": "torch.nonzero (its output size needs the GPU's answer)",
    "aten::is_nonzero": "a tensor used as a Python bool",
}


def _host_sync_findings(syncs: pl.DataFrame, min_idle_share: float) -> list[Finding]:
    """`host_sync_stall`, per rank, over its steps whose drained time is known."""
    findings = []
    for (run, rank), rows, step_ns, idle_ns in _stalled_ranks(syncs, "sync_gpu_idle_ns", min_idle_share):
        steps = len(rows)
        calls = sorted({name for row in rows for name in row["sync_calls"]})
        ops = sorted({name for row in rows for name in row["sync_ops"]})
        behind = sorted({_SYNC_OP_WORDS.get(op, op) for op in ops})
        findings.append(Finding(
            id="host_sync_stall",
            severity="warning",
            title=(f"Rank {rank} of {run} waits on the GPU {counted(round(sum(row['sync_count'] for row in rows) / steps), 'time')} "
                   f"a step, and the drained GPU then sat idle {idle_ns / step_ns:.0%} of step time"),
            detail=(f"Synchronising calls ({', '.join(calls)}"
                    + (f", from {', '.join(behind)}" if behind else "") + ") make the CPU wait until the GPU has "
                    "finished its queue; the GPU then idles until the CPU launches again, "
                    f"{format_duration_ns(idle_ns / steps)} a step here. Keep values on the GPU (sum losses and "
                    "metrics as tensors, read them every N steps), copy to pinned memory with non_blocking=True, "
                    "and take torch.cuda.synchronize() and prints of tensors out of the step"
                    + ("; cudaFree or hipFree is the caching allocator handing memory back (torch.cuda.empty_cache(), "
                       "or a retry after running out): keep the memory cached, or leave headroom."
                       if any(call in ("cudaFree", "hipFree", "cuMemFree") for call in calls) else ".")),
            subject={"run": run, "rank": rank},
            evidence={
                "sync_gpu_idle_share": idle_ns / step_ns,
                "sync_gpu_idle_ns": idle_ns,
                "sync_count": sum(row["sync_count"] for row in rows),
                "sync_ns": sum(row["sync_ns"] for row in rows),
                "step_count": steps,
                "sync_calls": calls,
                "sync_ops": ops,
            },
            page=PAGE,
        ))
    return findings
