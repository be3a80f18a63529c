"""Power, energy and interconnect use: from telemetry, and joined to traces.

Each question is one SQL file in `analysis/sql/` (also a view of the same
name on a connection from `open_dataset`); the functions here run it with
other thresholds and return a Polars frame. The definitions (percentiles,
headroom, shares, energy) are in each file's header.

- `power_headroom`: per GPU, power p50/p95/p99/max against the enforced
  limit, headroom (limit - p99), time held back by power and by heat,
  energy.
- `node_power`: per node, coincident power (the sum over its GPUs at each
  tick) against a provisioned budget, and how many more such nodes the
  budget carries at p99 (power oversubscription).
- `power_cap_whatif` / `power_cap_whatif_node`: what a per-GPU cap would
  have held back, per GPU and per node.
- `interconnect_usage` / `interconnect_timeline`: NVLink/XGMI/PCIe
  throughput against the nominal peak: the untapped bandwidth.
- `step_energy` / `phase_energy`: telemetry aligned to trace time (an
  as-of match: each instant takes the sample whose interval holds it):
  energy and mean power per profiler step, and per phase (compute,
  communication, memory, idle). `power_trace_gpus` says which trace rank
  was matched to which telemetry GPU, or why not.

`power_findings` turns them into verdicts: `power_capped_gpu`,
`thermal_throttling`, `power_headroom`, `untapped_interconnect`,
`no_power_data`.
"""

from __future__ import annotations

from typing import Any, Iterable

import duckdb
import polars as pl

from gpulens.analysis.findings import Finding
from gpulens.analysis.registry import run_analysis
from gpulens.collector.wording import counted

POWER_PAGE = "power"
INTERCONNECT_PAGE = "interconnect"


def _run(con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> pl.DataFrame:
    """`run_analysis`, leaving out params given as None (the SQL default)."""
    return run_analysis(con, name, **{key: value for key, value in params.items() if value is not None})


def hosts_param(hosts: Iterable[str] | None) -> tuple[str, ...] | None:
    """`telemetry_hosts` (host_telemetry.sql) for the hosts an analysis is
    limited to: None (every host) stays None; names become a sorted tuple,
    one cache key whatever their order."""
    return None if hosts is None else tuple(sorted(set(hosts)))


# Each power analysis below takes `hosts`: the host names it is limited to
# (None: every host). Only those hosts' samples are read, so a question
# about a few nodes of a fleet costs what those nodes' samples cost.


def power_headroom(con: duckdb.DuckDBPyConnection, max_gap_s: float | None = None,
                   hosts: Iterable[str] | None = None) -> pl.DataFrame:
    """Per GPU: power percentiles, limit, headroom, throttled shares, energy.

    `max_gap_s`: sample intervals longer than this are not integrated when
    energy comes from power (default: power_samples.sql's).
    """
    return _run(con, "power_headroom", power_max_gap_s=max_gap_s, telemetry_hosts=hosts_param(hosts))


def node_power(con: duckdb.DuckDBPyConnection, node_budget_w: float | None = None,
               hosts: Iterable[str] | None = None) -> pl.DataFrame:
    """Per node: coincident power p50/p99/max against the budget, extra nodes at p99.

    `node_budget_w`: the power provisioned for each node's GPUs; None means
    the sum of their enforced limits. The fleet columns (fleet_budget_w,
    fleet_extra_nodes_at_p99) are over the nodes asked for.
    """
    return _run(con, "node_power", node_budget_w=node_budget_w, telemetry_hosts=hosts_param(hosts))


def power_cap_whatif(
    con: duckdb.DuckDBPyConnection,
    power_cap_w: float | None = None,
    max_gap_s: float | None = None,
    hosts: Iterable[str] | None = None,
) -> pl.DataFrame:
    """Per GPU: how often and by how much energy `power_cap_w` would have held it back.

    None means each sample's enforced limit.
    """
    return _run(con, "power_cap_whatif", power_cap_w=power_cap_w, power_max_gap_s=max_gap_s,
                telemetry_hosts=hosts_param(hosts))


def power_cap_whatif_node(
    con: duckdb.DuckDBPyConnection,
    power_cap_w: float | None = None,
    node_budget_w: float | None = None,
    hosts: Iterable[str] | None = None,
) -> pl.DataFrame:
    """Per node: the share of ticks a GPU hits `power_cap_w`, the capped coincident p99, extra nodes."""
    return _run(con, "power_cap_whatif_node", power_cap_w=power_cap_w, node_budget_w=node_budget_w,
                telemetry_hosts=hosts_param(hosts))


def interconnect_usage(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per GPU, interconnect and direction: achieved bytes/s against the nominal peak."""
    return run_analysis(con, "interconnect_usage")


def interconnect_timeline(con: duckdb.DuckDBPyConnection, bucket_s: float = 60) -> pl.DataFrame:
    """`interconnect_usage` per time bucket of `bucket_s` seconds."""
    return run_analysis(con, "interconnect_timeline", interconnect_bucket_s=bucket_s)


def power_trace_gpus(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Per trace rank: the telemetry host and GPU it was matched to, or why not."""
    return run_analysis(con, "power_trace_gpus")


def step_energy(con: duckdb.DuckDBPyConnection, max_gap_s: float | None = None) -> pl.DataFrame:
    """Per profiler step: energy (NULL unless telemetry covers it), mean power, per-phase energy."""
    return _run(con, "step_energy", power_max_gap_s=max_gap_s)


def phase_energy(con: duckdb.DuckDBPyConnection, max_gap_s: float | None = None) -> pl.DataFrame:
    """Per rank and phase (compute, communication, memory, idle): time, energy, mean power."""
    return _run(con, "phase_energy", power_max_gap_s=max_gap_s)


# --- findings ----------------------------------------------------------------


def _gpu_subject(row: dict[str, Any]) -> dict[str, Any]:
    return {"host": row["host"], "gpu_index": row["gpu_index"]}


def _source_words(source: str | None) -> str:
    return "its violation counters" if source == "counters" else "the throttle reasons of its samples"


# How to read a GPU's enforced power limit, by the telemetry's vendor.
_LIMIT_COMMANDS = {"amd": "amd-smi static --limit"}
_DEFAULT_LIMIT_COMMAND = "nvidia-smi -q -d POWER"


def capped_findings(headroom: pl.DataFrame, min_share: float = 0.05) -> list[Finding]:
    """`power_capped_gpu`: a GPU held back by its power limit at least `min_share` of the time."""
    findings = []
    for row in headroom.filter(pl.col("power_throttled_share") >= min_share).iter_rows(named=True):
        findings.append(
            Finding(
                id="power_capped_gpu",
                severity="warning",
                title=(
                    f"GPU {row['gpu_index']} on {row['host']} was held back by its power limit "
                    f"{row['power_throttled_share']:.0%} of the time"
                    + ("" if row["limit_w"] is None else f" (limit {row['limit_w']:.0f} W)")
                ),
                detail=(
                    f"Measured from {_source_words(row['power_throttle_source'])}. A capped GPU lowers its "
                    "clocks, so it finishes its share of each step later and its peers wait for it in "
                    "collectives. Check the enforced limit "
                    f"({_LIMIT_COMMANDS.get(row.get('vendor') or '', _DEFAULT_LIMIT_COMMAND)}; a limit below the default "
                    "was set by someone), the board's cooling and power delivery, or whether this part simply "
                    "draws more than its peers for the same work."
                ),
                subject=_gpu_subject(row),
                evidence={
                    "power_throttled_share": row["power_throttled_share"],
                    "throttle_source": row["power_throttle_source"],
                    "p99_w": row["p99_w"],
                    "max_w": row["max_w"],
                    "limit_w": row["limit_w"],
                    "samples": row["samples"],
                },
                page=POWER_PAGE,
            )
        )
    return findings


def thermal_findings(headroom: pl.DataFrame, min_share: float = 0.01) -> list[Finding]:
    """`thermal_throttling`: a GPU held back by heat at least `min_share` of the time."""
    findings = []
    for row in headroom.filter(pl.col("thermal_throttled_share") >= min_share).iter_rows(named=True):
        findings.append(
            Finding(
                id="thermal_throttling",
                severity="warning",
                title=(
                    f"GPU {row['gpu_index']} on {row['host']} was held back by heat "
                    f"{row['thermal_throttled_share']:.0%} of the time"
                ),
                detail=(
                    f"Measured from {_source_words(row['thermal_throttle_source'])}. A GPU that slows down "
                    "to stay within its temperature limit runs its kernels longer than its peers. Check the "
                    "airflow or coolant of the node and this GPU's position in it, fan and pump health, the "
                    "inlet temperature, and dust."
                ),
                subject=_gpu_subject(row),
                evidence={
                    "thermal_throttled_share": row["thermal_throttled_share"],
                    "throttle_source": row["thermal_throttle_source"],
                    "p99_w": row["p99_w"],
                    "limit_w": row["limit_w"],
                    "samples": row["samples"],
                },
                page=POWER_PAGE,
            )
        )
    return findings


def no_power_findings(headroom: pl.DataFrame) -> list[Finding]:
    """`no_power_data`: a host whose GPUs have telemetry but no power readings."""
    missing = headroom.filter(pl.col("power_samples") == 0)
    if missing.is_empty():
        return []
    findings = []
    for (host,), group in missing.group_by("host", maintain_order=True):
        gpus = sorted(group["gpu_index"].to_list())
        findings.append(
            Finding(
                id="no_power_data",
                severity="info",
                title=f"No power readings from {counted(len(gpus), 'GPU')} on {host}: power analyses skip them",
                detail=(
                    "Their telemetry rows carry no power_w. The device or driver may not report board power "
                    "(some virtualised GPUs and MIG slices do not), or the backend could not read it; "
                    "the collector's events table says whether samples failed."
                ),
                subject={"host": host},
                evidence={"gpu_indexes": gpus, "samples": int(group["samples"].sum())},
                page=POWER_PAGE,
            )
        )
    return findings


def unjoined_trace_findings(matched: pl.DataFrame, headroom: pl.DataFrame) -> list[Finding]:
    """`trace_not_joined`: a trace run with kernels on known GPUs, none of
    whose ranks could be joined to the telemetry, in a dataset that has
    power telemetry (elsewhere no join is expected, and none is missed)."""
    if headroom.is_empty() or headroom["power_samples"].sum() == 0 or matched.is_empty():
        return []
    findings = []
    runs = matched.filter(pl.col("gpu_index").is_not_null())
    for (run,), group in runs.group_by("run", maintain_order=True):
        reasons = group["unmatched_reason"]
        if reasons.null_count():
            continue  # some rank is joined: its steps have energy
        distinct = sorted(set(reasons.to_list()))
        findings.append(
            Finding(
                id="trace_not_joined",
                severity="info",
                title=f"Run {run} cannot be joined to the telemetry, so its steps have no energy: {distinct[0]}",
                detail=(
                    "Energy per step and per phase need the trace's times on the epoch, the host it ran on, and "
                    "power telemetry of its GPU over the trace. rocprofv3 traces are placed on the epoch when "
                    "ingested on their node, or into the dataset its collector writes; `gpulens ingest --host` "
                    "names the host of a trace that names none."
                ),
                subject={"run": run},
                evidence={"ranks": group["rank"].to_list(), "reasons": distinct},
                page=POWER_PAGE,
            )
        )
    return findings


def headroom_findings(nodes: pl.DataFrame, min_extra_nodes: float = 0.2) -> list[Finding]:
    """`power_headroom`: a node whose budget would carry `min_extra_nodes` more such nodes at p99."""
    findings = []
    for row in nodes.filter(pl.col("extra_nodes_at_p99") >= min_extra_nodes).iter_rows(named=True):
        findings.append(
            Finding(
                id="power_headroom",
                severity="info",
                title=(
                    f"{row['host']} draws at most {row['coincident_p99_w']:.0f} W 99% of the time against a "
                    f"{row['budget_w']:.0f} W budget: room for {row['extra_nodes_at_p99']:.2f} more such nodes"
                ),
                detail=(
                    "Provisioned at the node's p99 coincident power (the sum over its GPUs at one instant) "
                    "rather than at the sum of the GPU limits, the same power budget would carry more "
                    "nodes (power oversubscription), with the GPU power caps or a node-level cap as the "
                    "safety net for the rare peaks above it. Across all nodes with power data the total "
                    f"budget carries {row['fleet_extra_nodes_at_p99']} more nodes at the mean node's p99."
                ),
                subject={"host": row["host"]},
                evidence={
                    "extra_nodes_at_p99": row["extra_nodes_at_p99"],
                    "budget_w": row["budget_w"],
                    "coincident_p99_w": row["coincident_p99_w"],
                    "coincident_max_w": row["coincident_max_w"],
                    "limit_sum_w": row["limit_sum_w"],
                    "gpus": row["gpus"],
                    "ticks": row["ticks"],
                    "fleet_extra_nodes_at_p99": row["fleet_extra_nodes_at_p99"],
                },
                page=POWER_PAGE,
            )
        )
    return findings


def untapped_findings(usage: pl.DataFrame, max_p95_utilisation: float = 0.25) -> list[Finding]:
    """`untapped_interconnect`: a node's interconnect whose busiest GPU stays below `max_p95_utilisation`.

    Per host and link kind, over every GPU and direction with a known peak:
    the highest p95 utilisation. Fires when even that is below the threshold.
    """
    known = usage.filter(pl.col("peak_bytes_per_s").is_not_null() & pl.col("p95_utilisation").is_not_null())
    if known.is_empty():
        return []
    links = (
        known.group_by("host", "link")
        .agg(
            pl.col("p95_utilisation").max().alias("max_p95_utilisation"),
            pl.col("utilisation").mean().alias("mean_utilisation"),
            pl.col("p95_bytes_per_s").max().alias("max_p95_bytes_per_s"),
            pl.col("peak_bytes_per_s").max(),
            pl.col("gpu_index").n_unique().alias("gpus"),
        )
        .filter(pl.col("max_p95_utilisation") < max_p95_utilisation)
        .sort("host", "link")
    )
    findings = []
    for row in links.iter_rows(named=True):
        findings.append(
            Finding(
                id="untapped_interconnect",
                severity="info",
                title=(
                    f"{row['link']} on {row['host']} stays below {row['max_p95_utilisation']:.0%} of its "
                    f"{row['peak_bytes_per_s'] / 1e9:.0f} GB/s peak 95% of the time"
                ),
                detail=(
                    "Across its GPUs and both directions the link is mostly idle: bandwidth is there to "
                    "spare. Work limited elsewhere could use it: larger tensor- or expert-parallel groups "
                    "within the node, fewer gradient-accumulation steps between all-reduces, or data "
                    "loaded to the GPUs faster (PCIe)."
                ),
                subject={"host": row["host"], "link": row["link"]},
                evidence={
                    "max_p95_utilisation": row["max_p95_utilisation"],
                    "mean_utilisation": row["mean_utilisation"],
                    "max_p95_bytes_per_s": row["max_p95_bytes_per_s"],
                    "peak_bytes_per_s": row["peak_bytes_per_s"],
                    "gpus": row["gpus"],
                },
                page=INTERCONNECT_PAGE,
            )
        )
    return findings


def power_findings(
    con: duckdb.DuckDBPyConnection,
    capped_min_share: float = 0.05,
    thermal_min_share: float = 0.01,
    headroom_min_extra_nodes: float = 0.2,
    untapped_max_p95_utilisation: float = 0.25,
) -> list[Finding]:
    """Power and interconnect verdicts, with thresholds as keyword arguments."""
    headroom = power_headroom(con)
    return (
        capped_findings(headroom, capped_min_share)
        + thermal_findings(headroom, thermal_min_share)
        + no_power_findings(headroom)
        + unjoined_trace_findings(power_trace_gpus(con), headroom)
        + headroom_findings(node_power(con), headroom_min_extra_nodes)
        + untapped_findings(interconnect_usage(con), untapped_max_p95_utilisation)
    )
