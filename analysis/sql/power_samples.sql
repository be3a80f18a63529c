-- Power samples of each GPU, each with the interval it closes: the base of
-- the power analyses over time (power_headroom, power_cap_whatif).
--
-- One row per telemetry row. A sample at `ts` closes the interval
-- (previous ts, ts] of the same GPU: `power_w` is the driver's average over
-- (about) that interval, so power integrates by the right-rectangle rule,
-- energy = power_w × interval_s. `interval_s` is NULL for a GPU's first
-- sample; `gap` marks an interval longer than power_max_gap_s (the collector
-- was down or the GPU lost): power in between is unknown, so integrals skip
-- it, while the cumulative counters still count it (they ran on).
--
-- Cumulative counters (energy_j, power/thermal violation ns) become
-- per-interval increments; a counter that went down was reset (driver
-- reload), and its new value is the increment since the reset.
-- param: power_max_gap_s = 60
-- requires: host_telemetry
with ordered as (
    select
        host,
        gpu_index,
        ts,
        epoch_ns(ts) as ts_ns,
        power_w,
        power_max_w,
        power_limit_w,
        energy_j,
        power_violation_ns,
        thermal_violation_ns,
        -- one lag of a struct: a third of the cost of four lags
        lag(struct_pack(
            ts_ns := epoch_ns(ts),
            energy_j := energy_j,
            power_violation_ns := power_violation_ns,
            thermal_violation_ns := thermal_violation_ns
        )) over (partition by host, gpu_index order by ts) as prev
    from host_telemetry
)
select
    host,
    gpu_index,
    ts,
    ts_ns,
    prev.ts_ns as prev_ts_ns,
    (ts_ns - prev.ts_ns) / 1e9 as interval_s,
    (ts_ns - prev.ts_ns) / 1e9 > getvariable('power_max_gap_s') as gap,
    power_w,
    power_max_w,
    power_limit_w,
    energy_j,
    case
        when energy_j >= prev.energy_j then energy_j - prev.energy_j
        when energy_j < prev.energy_j then energy_j
    end as energy_increment_j,
    case
        when power_violation_ns >= prev.power_violation_ns then power_violation_ns - prev.power_violation_ns
        when power_violation_ns < prev.power_violation_ns then power_violation_ns
    end as power_violation_increment_ns,
    case
        when thermal_violation_ns >= prev.thermal_violation_ns then thermal_violation_ns - prev.thermal_violation_ns
        when thermal_violation_ns < prev.thermal_violation_ns then thermal_violation_ns
    end as thermal_violation_increment_ns
from ordered
