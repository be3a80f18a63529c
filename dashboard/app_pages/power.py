"""Power headroom: per-GPU power against limits, node power against its budget,
what a power cap would buy (oversubscription what-if), and, where kernel
traces ran under the telemetry, the energy of each profiler step and phase."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpulens.analysis import jobs, power, timeline
from gpulens.collector.wording import counted
from gpulens.dashboard import charts
from gpulens.dashboard.escape import markdown_code, markdown_text
from gpulens.dashboard.app_pages.common import (
    DEFAULT_GPUS_MAX, NO_TELEMETRY, caption_dataset, caption_hosts_shown, chart, default_hosts, fmt_share, frame,
    host_scope, hosts_of, naive, require_dataset, require_tables, run_picker, table, with_kernels,
)

CURVE_POINTS = 8

st.title("Power headroom")
ds = require_dataset()
caption_dataset(ds)
require_tables(ds, ("telemetry",), "telemetry", NO_TELEMETRY)

# A fleet opens on its first hosts, as the telemetry page does: every power
# analysis reads each sample of the hosts it is asked about (16 hosts of 8
# GPUs, a day at 1 Hz: 11 s of queries for all, 2.5 s for the first two).
coverage = frame(ds, timeline.telemetry_coverage)
hosts_all = hosts_of(coverage)
hosts = hosts_all
if len(hosts_all) > 1:
    hosts_first = default_hosts(coverage)
    hosts = st.multiselect("Hosts", hosts_all, default=hosts_first, key="power_hosts",
                           help=None if len(hosts_first) == len(hosts_all) else
                           f"The page opens on the first hosts up to {DEFAULT_GPUS_MAX} GPUs in all. "
                           "Add hosts here; the fleet's extra nodes under the budget always count every host.")
    if not hosts:
        st.info("Pick at least one host.", icon=":material/info:")
        st.stop()
scope = host_scope(hosts, hosts_all)

headroom = frame(ds, power.power_headroom, hosts=scope)
if headroom.is_empty() or headroom["power_samples"].sum() == 0:
    st.info("The telemetry has no power readings." if scope is None else
            "The hosts picked have no power readings: pick others under Hosts.", icon=":material/info:")
    st.stop()

st.header("Per GPU")
left, right = st.columns(2)
with left:
    chart(charts.power_percentiles_figure(headroom), key="power_percentiles")
with right:
    chart(charts.power_distribution_figure(frame(ds, timeline.power_histogram, hosts=scope)), key="power_histogram")
table(
    headroom.select(
        "host", "gpu_index", "limit_w", "p50_w", "p99_w", "max_w", "headroom_w", "headroom_pct",
        (pl.col("power_throttled_share") * 100).round(1).alias("power_throttled_pct"),
        (pl.col("thermal_throttled_share") * 100).round(1).alias("thermal_throttled_pct"),
        (pl.col("energy_j") / 3.6e6).round(4).alias("energy_kwh"), "samples",
    ).with_columns(pl.col(pl.Float64).round(1)),
    hide_index=True, width="stretch",
)

caption_hosts_shown(hosts, hosts_all)

st.header("Per node: coincident power against the budget")
nodes = frame(ds, power.node_power, hosts=scope)
limits = headroom.filter(pl.col("limit_w").is_not_null())
limit_sum = float(nodes["limit_sum_w"].max() or 0) if nodes.height else 0.0
gpu_limit = float(limits["limit_w"].max()) if limits.height else float(headroom["max_w"].max())
cap_floor = float(headroom["limit_min_w"].min() or 0) if "limit_min_w" in headroom.columns else 0.0
cap_floor = max(50.0, min(cap_floor or gpu_limit * 0.3, gpu_limit * 0.3))
budget_default = limit_sum or float(nodes["coincident_max_w"].max() or 1000.0)

with st.container(border=True):
    st.markdown("**What-if**: a per-GPU power cap and the power provisioned per node.")
    c1, c2 = st.columns(2)
    cap_w = c1.slider("Per-GPU power cap (W)", min_value=int(cap_floor), max_value=int(round(gpu_limit)),
                      value=int(round(gpu_limit)), step=5, key="power_cap_w")
    budget_w = c2.slider("Node power budget (W)", min_value=int(budget_default * 0.3), max_value=int(budget_default * 1.5),
                         value=int(budget_default), step=50, key="power_budget_w",
                         help="Power provisioned for each node's GPUs; by default the sum of their enforced limits.")

# The fleet's figures count every host, whichever are shown.
fleet = frame(ds, power.node_power, node_budget_w=float(budget_w), hosts=None)
capped_nodes = frame(ds, power.power_cap_whatif_node, power_cap_w=float(cap_w), node_budget_w=float(budget_w), hosts=scope)
if capped_nodes.height:
    first = capped_nodes.row(0, named=True)
    several = capped_nodes.height > 1
    m = st.columns(4)
    m[0].metric("Coincident p99" + (" (first node)" if several else ""), f"{first['coincident_p99_w']:,.0f} W",
                help="99th percentile of the sum of the node's GPUs' power at one tick")
    m[1].metric("Extra nodes at p99, uncapped", f"{first['extra_nodes_at_p99']:+.2f}",
                help="budget / coincident p99 - 1: how many more such nodes the same budget carries")
    m[2].metric(f"Extra nodes at p99, capped at {cap_w} W", f"{first['capped_extra_nodes_at_p99']:+.2f}",
                delta=f"{first['capped_extra_nodes_at_p99'] - first['extra_nodes_at_p99']:+.2f}")
    m[3].metric("Ticks with a GPU at the cap", fmt_share(first["any_above_cap_share"]),
                help="How often the cap would have held at least one GPU back")
    if fleet.height and fleet["fleet_extra_nodes_at_p99"][0] is not None:
        st.caption(f"Over all {counted(fleet.height, 'node')}: {fleet['fleet_budget_w'][0]:,.0f} W provisioned carries "
                   f"{counted(fleet['fleet_extra_nodes_at_p99'][0], 'more node')} at the mean node's p99.")

if coverage.height:
    first_ts, last_ts = naive(coverage["first_ts"].min()), naive(coverage["last_ts"].max())
    interval_s = float(coverage["interval_s"].median() or 1.0)
    bucket_s = timeline.bucket_seconds(max((last_ts - first_ts).total_seconds(), interval_s), interval_s)
    node_series = frame(ds, timeline.node_power_timeline, bucket_s=bucket_s, power_cap_w=float(cap_w), hosts=scope)
    chart(charts.node_power_figure(node_series, float(budget_w), float(cap_w)), key="power_node")

curve = frame(ds, timeline.power_cap_curve, cap_floor, gpu_limit, CURVE_POINTS, node_budget_w=float(budget_w), hosts=scope)
if curve.height:
    curve = curve.group_by("power_cap_w").agg(pl.col("capped_extra_nodes_at_p99").mean(), pl.col("any_above_cap_share").mean())
chart(charts.cap_curve_figure(curve, float(cap_w)), key="power_cap_curve")

with st.expander(f"Per GPU under a {cap_w} W cap"):
    whatif = frame(ds, power.power_cap_whatif, power_cap_w=float(cap_w), hosts=scope)
    if whatif.height:
        table(whatif.select("host", "gpu_index", "cap_w", "limit_w", "samples_above_cap",
                                   (pl.col("above_cap_share") * 100).round(1).alias("above_cap_pct"),
                                   pl.col("energy_above_cap_j").round(0), "cap_above_limit"),
                     hide_index=True, width="stretch")

# --- jobs: what each Slurm job or Kubernetes pod held and drew -------------------------------
job_energy = frame(ds, jobs.job_energy)
if job_energy.height:
    st.header("Jobs")
    names = job_energy["job"].unique().sort().to_list()
    job = st.selectbox("Job", names, key="power_job",
                       help="The Slurm job or Kubernetes pod of the processes the collector saw on the GPUs.")
    table(
        job_energy.filter(pl.col("job") == job).select(
            "step", "job_user", "hosts", "gpus", pl.col("gpu_hours").round(3), (pl.col("energy_j") / 3.6e6).round(4)
            .alias("energy_kwh"), pl.col("mean_power_w").round(1), pl.col("p99_power_w").round(1), "throttled_s"),
        hide_index=True, width="stretch")
    held = frame(ds, jobs.job_gpus).filter(pl.col("job") == job)
    with st.expander(f"The GPUs {markdown_text(job)} held"):
        table(held.select("host", "gpu_index", "hold_no", "held_s", pl.col("mean_util_pct").round(1), "idle_s",
                          "longest_idle_s"),
              hide_index=True, width="stretch")

# --- the traces' steps and phases, priced in energy ------------------------------------------
# Telemetry joined to kernel traces: what each profiler step and each phase
# (computing, communicating alone, copying alone, idle) cost in joules.
runs = with_kernels(frame(ds, timeline.trace_runs))
if runs.height:
    st.header("Energy per step and phase")
    run = run_picker(runs, key="power_run")
    matched = frame(ds, power.power_trace_gpus).filter(pl.col("run") == run)
    unmatched = matched.filter(pl.col("unmatched_reason").is_not_null())
    if matched.height and unmatched.height == matched.height:
        reasons = sorted(set(unmatched["unmatched_reason"].to_list()))
        st.info(f"{markdown_code(run)} cannot be joined to the telemetry: " + markdown_text("; ".join(reasons)) + ".", icon=":material/info:")
    else:
        steps = frame(ds, power.step_energy).filter(pl.col("run") == run)
        phases = frame(ds, power.phase_energy).filter(pl.col("run") == run)
        left, right = st.columns(2)
        with left:
            chart(charts.step_energy_figure(steps), key="power_step_energy")
        with right:
            chart(charts.phase_energy_figure(phases), key="power_phase_energy")
        if unmatched.height:
            st.caption("Not joined: " + markdown_text("; ".join(f"rank {row['rank']}: {row['unmatched_reason']}"
                                                               for row in unmatched.iter_rows(named=True))))
    with st.expander("Which GPU each rank ran on"):
        table(matched.select("rank", "host", "device", "gpu_index", "matched_by", "host_inferred",
                             "telemetry_covers", "unmatched_reason"),
                     hide_index=True, width="stretch")
