-- How close does each GPU run to its power limit, how long was it held back,
-- and how much energy did it use?
--
-- One row per GPU (host, gpu_index) over all its telemetry.
--   p50_w, p95_w, p99_w: percentiles of the sampled power (power_w), by
--     quantile_cont (linear interpolation between the two nearest samples,
--     numpy's default); max_w is the highest sample, peak_w the highest
--     the driver saw between samples (power_max_w) where it reports that.
--   limit_w: the enforced power limit at the GPU's last sample (a limit
--     changed during the span shows as limit_min_w < limit_w or the like).
--   headroom_w = limit_w - p99_w: what the GPU leaves unused 99% of the time;
--     headroom_pct = 100 * headroom_w / limit_w. (Against p99, not max:
--     one spike should not hide a GPU that idles at half its limit.)
--   power_throttled_share, thermal_throttled_share: share of time held back
--     by the power limit or by heat. From the cumulative violation counters
--     where the GPU has them (increments over the span / the span, exact),
--     else the share of samples whose throttle reasons include a power
--     (thermal) reason; *_throttle_source says which ('counters' |
--     'reasons'); NULL when the GPU reports neither.
--   throttled_share = power + thermal share, at most 1 (the two counted as
--     disjoint: an upper bound when a GPU is held back by both at once).
--   energy_j: from the cumulative energy counter (sum of its increments,
--     resets handled, see power_samples) where it exists, else the
--     right-rectangle integral of power_w over intervals shorter than
--     power_max_gap_s; energy_source says which ('counter' | 'power_integral').
--   vendor: the collector backend's vendor at the GPU's last sample
--     (nvidia | amd | sim), which tool to check the limit with.
-- A GPU with no power readings has a row with NULL statistics.
-- requires: power_samples, host_telemetry
with per_gpu as (
    -- what needs no previous sample, straight from the samples
    select
        host,
        gpu_index,
        count(*) as samples,
        count(power_w) as power_samples,
        min(ts) as first_ts,
        max(ts) as last_ts,
        quantile_cont(power_w, [0.50, 0.95, 0.99]) as quantiles_w,
        max(power_w) as max_w,
        max(greatest(power_w, power_max_w)) as peak_w,
        avg(power_w) as mean_w,
        arg_max(power_limit_w, ts) filter (where power_limit_w is not null) as limit_w,
        arg_max(vendor, ts) as vendor,
        min(power_limit_w) as limit_min_w,
        -- the share of samples whose throttle reasons include a power
        -- (thermal) reason: collector.throttle's POWER_REASONS and
        -- THERMAL_REASONS (tests/test_power.py checks they match)
        avg(list_has_any(throttle_reasons, ['sw_power_cap', 'hw_power_brake_slowdown', 'power', 'current', 'ppm'])::double)
            as power_reason_share,
        avg(list_has_any(throttle_reasons, ['sw_thermal_slowdown', 'hw_thermal_slowdown', 'thermal', 'vr_thermal', 'prochot'])::double)
            as thermal_reason_share
    from host_telemetry
    group by host, gpu_index
),
per_interval as (
    -- what needs the previous sample (counters, intervals): power_samples.
    -- Only the columns used here go through its window, which keeps it cheap.
    select
        host,
        gpu_index,
        sum(power_violation_increment_ns) / 1e9
            / nullif(sum(interval_s) filter (where power_violation_increment_ns is not null), 0) as power_counter_share,
        sum(thermal_violation_increment_ns) / 1e9
            / nullif(sum(interval_s) filter (where thermal_violation_increment_ns is not null), 0) as thermal_counter_share,
        sum(energy_increment_j) as counter_energy_j,
        sum(power_w * interval_s) filter (where not gap) as integral_energy_j
    from power_samples
    group by host, gpu_index
),
shares as (
    select
        *,
        coalesce(power_counter_share, power_reason_share) as power_share,
        coalesce(thermal_counter_share, thermal_reason_share) as thermal_share,
        case
            when power_counter_share is not null then 'counters'
            when power_reason_share is not null then 'reasons'
        end as power_throttle_source,
        case
            when thermal_counter_share is not null then 'counters'
            when thermal_reason_share is not null then 'reasons'
        end as thermal_throttle_source
    from per_gpu
    join per_interval using (host, gpu_index)
),
clamped as (
    -- at most 1 (counter increments can outrun the wall clock a little);
    -- least() skips NULLs, so a missing share stays NULL only by the case
    select
        *,
        case when power_share is not null then least(1.0, power_share) end as power_throttled_share,
        case when thermal_share is not null then least(1.0, thermal_share) end as thermal_throttled_share
    from shares
)
select
    host,
    gpu_index,
    quantiles_w[1] as p50_w,
    quantiles_w[2] as p95_w,
    quantiles_w[3] as p99_w,
    max_w,
    peak_w,
    mean_w,
    limit_w,
    limit_min_w,
    limit_w - quantiles_w[3] as headroom_w,
    100 * (limit_w - quantiles_w[3]) / nullif(limit_w, 0) as headroom_pct,
    case
        when power_throttled_share is not null or thermal_throttled_share is not null
            then least(1.0, coalesce(power_throttled_share, 0) + coalesce(thermal_throttled_share, 0))
    end as throttled_share,
    power_throttled_share,
    thermal_throttled_share,
    power_throttle_source,
    thermal_throttle_source,
    coalesce(counter_energy_j, integral_energy_j) as energy_j,
    case
        when counter_energy_j is not null then 'counter'
        when integral_energy_j is not null then 'power_integral'
    end as energy_source,
    samples,
    power_samples,
    first_ts,
    last_ts,
    vendor
from clamped
order by host, gpu_index
