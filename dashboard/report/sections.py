"""What the report shows: one section per question, its tables and columns.

A table is an analysis view (`analysis/sql/<name>.sql`) under its own name:
that name is its key in the JSON report, so CI scripts can rely on it.
`columns` are those the HTML and Markdown show (the JSON has every
column); `where` keeps part of a long table (the note says which).
`pages` are the dashboard pages whose findings belong to the section, for
findings of modules the report does not map to a section itself
(`build._MODULE_SECTIONS`).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class TableSpec:
    name: str
    title: str
    columns: tuple[str, ...] = ()
    where: pl.Expr | None = None
    # Row order, where the analysis does not fix one (JSON must be stable).
    sort: tuple[str, ...] = ()
    note: str | None = None
    # Shown in the Markdown report (the key tables).
    key: bool = False
    # Rows the HTML shows before folding the rest away.
    html_rows: int = 50
    # Left out of the HTML and Markdown when it has no rows (after `where`):
    # a table about something most jobs do not have. The JSON keeps it.
    omit_if_empty: bool = False


@dataclass(frozen=True)
class SectionSpec:
    id: str
    title: str
    about: str
    # traces | telemetry | both: what the section needs to say anything.
    needs: str
    pages: tuple[str, ...]
    tables: tuple[TableSpec, ...]


SECTIONS: tuple[SectionSpec, ...] = (
    SectionSpec(
        id="launch",
        title="Kernel launch and queuing",
        about=(
            "Per profiler step and rank: the total kernel launch and queuing time (TKLQT), how long the GPU sat "
            "idle, launch delays, short kernels, and whether the step was CPU-bound (the GPU waits for launches) "
            "or GPU-bound (kernels queue up); where the trace records them, how long each step waited on its "
            "DataLoader and on synchronising calls (.item(), copies to the host)."
        ),
        needs="traces",
        pages=("launch", "kernels"),
        tables=(
            TableSpec(
                "step_launch_summary", "Launch and queuing per step",
                ("run", "rank", "step", "step_ns", "is_last", "kernel_count", "tklqt_ns", "gpu_idle_share",
                 "launch_delay_p50_ns", "launch_delay_p95_ns", "short_kernel_count", "verdict"),
                sort=("run", "rank", "step"), html_rows=40,
            ),
            TableSpec(
                "graph_launches", "CUDA and HIP graph replays per rank",
                ("run", "rank", "replays", "graph_kernels", "graph_gpu_ns", "replay_call_ns", "kernel_share",
                 "gpu_time_share"),
                where=pl.col("replays") > 0, sort=("run", "rank"), omit_if_empty=True,
                note="ranks whose kernels CUDA or HIP graph replays ran; the launch delays and short kernels "
                     "leave those kernels out",
            ),
            TableSpec(
                "data_loading", "Data loading per step",
                ("run", "rank", "step", "step_ns", "is_last", "load_count", "load_ns", "load_gpu_idle_ns", "load_share",
                 "load_gpu_idle_share"),
                sort=("run", "rank", "step"), omit_if_empty=True, html_rows=40,
                note="each step's fetches from a DataLoader (next() on its iterator) and the GPU idle time within "
                     "them",
            ),
            TableSpec(
                "host_syncs", "Synchronising calls per step",
                ("run", "rank", "step", "step_ns", "is_last", "sync_count", "sync_ns", "sync_gpu_idle_ns",
                 "sync_gpu_idle_share", "sync_calls", "sync_ops"),
                sort=("run", "rank", "step"), omit_if_empty=True, html_rows=40,
                note="calls that made the CPU wait for the GPU, and the GPU idle time after those that drained it",
            ),
            TableSpec(
                "kernel_stats", "Kernels taking the most GPU time (top 5 per rank)",
                ("run", "rank", "time_rank", "name", "category", "kernel_count", "total_ns", "mean_ns", "time_share"),
                where=pl.col("time_rank") <= 5, note="top 5 kernels per rank by total GPU time", html_rows=40,
            ),
        ),
    ),
    SectionSpec(
        id="time",
        title="GPU time breakdown",
        about=(
            "Where each rank's GPU time goes over its complete profiler steps: compute, exposed communication, "
            "memory copies and idle, with the idle time split by cause (waiting on the host, on another kernel, "
            "other), and how much communication runs under compute."
        ),
        needs="traces",
        pages=("time",),
        tables=(
            TableSpec(
                "time_breakdown", "Time breakdown per rank",
                ("run", "rank", "span_ns", "compute_share", "communication_share", "memory_share", "idle_share",
                 "idle_host_wait_share", "idle_kernel_wait_share", "idle_other_share"),
                key=True,
            ),
            TableSpec(
                "comm_overlap", "Communication overlapped with compute",
                ("run", "rank", "comm_ns", "overlapped_ns", "exposed_ns", "overlap_share", "exposed_share"),
            ),
            TableSpec(
                "idle_breakdown", "Idle time per stream",
                ("run", "rank", "stream", "kernel_count", "idle_ns", "idle_host_wait_share", "idle_kernel_wait_share",
                 "idle_other_share"),
            ),
            TableSpec(
                "memcpy_stats", "Memory copies and sets",
                ("run", "rank", "kind", "direction", "src_memory", "dst_memory", "pageable", "copy_count", "bytes",
                 "total_ns", "bytes_per_s", "time_share"),
                note="pageable: an end is pageable host memory, which the driver stages through a pinned buffer",
            ),
        ),
    ),
    SectionSpec(
        id="communication",
        title="Communication",
        about=(
            "Collectives per process group, op and message size: bus bandwidth (nccl-tests factors) against "
            "the nominal peak of the link they cross; which ranks arrive last and hold the others back; "
            "calls much slower than usual; and whether all_to_all spreads its data evenly over the ranks."
        ),
        needs="traces",
        pages=("communication",),
        tables=(
            TableSpec(
                "stragglers", "Straggler ranking",
                ("run", "straggler_order", "rank", "score", "share_last", "expected_share_last", "decisive_instances",
                 "mean_lateness_ns", "wait_caused_ns"),
                key=True,
            ),
            TableSpec(
                "collective_stats", "Collective bandwidth by op and message size",
                ("run", "process_group", "op", "size_bucket_bytes", "group_size", "count", "mean_ns",
                 "busbw_bytes_per_s", "transfer_busbw_bytes_per_s", "link_kind", "peak_bytes_per_s",
                 "transfer_busbw_share_of_peak"),
                key=True,
            ),
            TableSpec(
                "collective_outliers", "Unusually slow collective calls",
                ("run", "process_group", "op", "size_bucket_bytes", "seq", "transfer_ns", "median_ns", "ratio_to_median"),
            ),
            TableSpec(
                "all_to_all_balance", "all_to_all data received per rank, against the group's mean rank",
                ("run", "process_group", "rank", "instances", "received_bytes", "received_vs_mean",
                 "max_received_vs_mean", "most_received_share", "peer_imbalance", "mean_dur_ns"),
            ),
        ),
    ),
    SectionSpec(
        id="power",
        title="Power headroom",
        about=(
            "Per GPU: power percentiles against the enforced limit, the time held back by power or heat, and "
            "energy. Per node: coincident power (the sum over its GPUs at one instant) against the budget, and "
            "how many more such nodes that budget could carry at p99 (power oversubscription)."
        ),
        needs="telemetry",
        pages=("power",),
        tables=(
            TableSpec(
                "power_headroom", "Power per GPU",
                ("host", "gpu_index", "p50_w", "p99_w", "max_w", "limit_w", "headroom_w", "power_throttled_share",
                 "thermal_throttled_share", "energy_j", "samples"),
                key=True,
            ),
            TableSpec(
                "node_power", "Coincident power per node",
                ("host", "gpus", "ticks", "budget_w", "coincident_p50_w", "coincident_p99_w", "coincident_max_w",
                 "node_headroom_w", "extra_nodes_at_p99"),
                key=True,
            ),
            TableSpec(
                "job_energy", "Energy per job and Slurm step",
                ("job", "step", "job_user", "hosts", "gpus", "gpu_hours", "energy_j", "mean_power_w", "p99_power_w",
                 "throttled_s"),
                omit_if_empty=True,
            ),
            TableSpec(
                "job_gpus", "The GPUs each job held",
                ("job", "host", "gpu_index", "hold_no", "held_s", "mean_util_pct", "idle_s", "longest_idle_s"),
                omit_if_empty=True,
            ),
        ),
    ),
    SectionSpec(
        id="interconnect",
        title="Interconnect",
        about=(
            "Achieved NVLink/XGMI and PCIe throughput per GPU and direction against the nominal peak: the "
            "untapped bandwidth."
        ),
        needs="telemetry",
        pages=("interconnect",),
        tables=(
            TableSpec(
                "interconnect_usage", "Interconnect use per GPU",
                ("host", "gpu_index", "link", "direction", "achieved_bytes_per_s", "p95_bytes_per_s", "peak_bytes_per_s",
                 "utilisation", "p95_utilisation"),
            ),
        ),
    ),
    SectionSpec(
        id="energy",
        title="Energy per step and phase",
        about=(
            "Telemetry aligned to trace time: each rank matched to the GPU it ran on, then the energy and mean "
            "power of each profiler step and of each phase (compute, communication, memory, idle). At 1 Hz "
            "telemetry and millisecond kernels, a phase's power is the power of the seconds it falls in."
        ),
        needs="both",
        pages=("energy",),
        tables=(
            TableSpec(
                "power_trace_gpus", "Which GPU each rank ran on",
                ("run", "rank", "host", "device", "gpu_index", "matched_by", "telemetry_covers", "unmatched_reason"),
            ),
            TableSpec(
                "step_energy", "Energy per step",
                ("run", "rank", "gpu_index", "step", "step_ns", "is_last", "energy_j", "mean_power_w", "coverage_share",
                 "compute_energy_j", "communication_energy_j", "idle_energy_j"),
                html_rows=40,
            ),
            TableSpec(
                "phase_energy", "Energy per phase",
                ("run", "rank", "gpu_index", "phase", "time_ns", "time_share", "energy_j", "energy_share", "mean_power_w"),
            ),
        ),
    ),
)
