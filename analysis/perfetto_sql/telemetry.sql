-- The telemetry samples of the GPU each exported rank ran on, over its
-- window: every sample inside it, and the last one at or before its start
-- and the first at or after its end, so that a counter has a value over the
-- whole window (samples come a second or so apart; a trace may be shorter).
--
-- One row per (rank, sample). export_windows gives each rank's host and
-- gpu_index (power_trace_gpus); ts_ns: the sample's epoch ns.
with samples as (
    select w.rank, w.window_start_ns, w.window_end_ns, epoch_ns(t.ts) as ts_ns, t.*
    from telemetry as t
    join export_windows as w on t.host = w.host and t.gpu_index = w.gpu_index
),
edges as (
    select
        rank,
        max(ts_ns) filter (where ts_ns <= window_start_ns) as first_ns,
        min(ts_ns) filter (where ts_ns >= window_end_ns) as last_ns
    from samples
    group by rank
)
select
    samples.rank,
    samples.ts_ns,
    samples.vendor,
    samples.power_w,
    samples.power_instant_w,
    samples.power_limit_w,
    samples.sm_clock_mhz,
    samples.sm_active_pct,
    samples.gpu_util_pct,
    samples.temp_c,
    samples.link_tx_bytes_per_s,
    samples.link_rx_bytes_per_s,
    samples.pcie_tx_bytes_per_s,
    samples.pcie_rx_bytes_per_s,
    samples.throttle_reasons
from samples
join edges using (rank)
where samples.ts_ns >= coalesce(edges.first_ns, samples.window_start_ns)
    and samples.ts_ns <= coalesce(edges.last_ns, samples.window_end_ns)
order by samples.rank, samples.ts_ns
