-- Every GPU's telemetry, downsampled to time buckets for charts: per host,
-- GPU and bucket the min, mean and max of each metric, so that a day of
-- 1-second samples draws as ~1,500 points per series and a short spike
-- still shows (in the max).
--
-- One row per (host, gpu_index, bucket_start).
--   bucket_start: the UTC start of the bucket, a multiple of
--     timeline_bucket_s seconds since the epoch;
--   samples: telemetry rows in the bucket;
--   <metric>_min / _mean / _max for power_w, gpu_util_pct, mem_util_pct,
--     sm_active_pct, sm_clock_mhz, mem_clock_mhz, temp_c, mem_used_bytes
--     (NULL where the GPU does not report the metric);
--   power_limit_w: the highest enforced limit in the bucket;
--   mem_total_bytes: the GPU's memory size;
--   power_throttled_share, thermal_throttled_share, throttled_share: the
--     share of the bucket's samples held back by the power limit, by heat,
--     or by either (the reasons of power_samples.sql; NULL where the GPU
--     reports no throttle reasons).
-- timeline_start_us / timeline_end_us (epoch microseconds, NULL = open)
-- keep only samples with start <= ts < end.
-- param: timeline_bucket_s = 60
-- param: timeline_start_us = null
-- param: timeline_end_us = null
-- requires: host_telemetry
with samples as (
    select
        *,
        epoch_us(ts) // greatest(1, (getvariable('timeline_bucket_s')::double * 1e6)::bigint) as bucket,
        list_has_any(throttle_reasons, ['sw_power_cap', 'hw_power_brake_slowdown', 'power', 'current', 'ppm']) as power_throttled,
        list_has_any(throttle_reasons, ['sw_thermal_slowdown', 'hw_thermal_slowdown', 'thermal', 'vr_thermal', 'prochot']) as thermal_throttled
    from host_telemetry
    where (getvariable('timeline_start_us') is null or ts >= make_timestamp(getvariable('timeline_start_us')::bigint)::timestamptz)
        and (getvariable('timeline_end_us') is null or ts < make_timestamp(getvariable('timeline_end_us')::bigint)::timestamptz)
)
select
    host,
    gpu_index,
    to_timestamp(bucket * greatest(1, (getvariable('timeline_bucket_s')::double * 1e6)::bigint) / 1e6) as bucket_start,
    count(*) as samples,
    min(power_w) as power_w_min,
    avg(power_w) as power_w_mean,
    max(power_w) as power_w_max,
    max(power_limit_w) as power_limit_w,
    min(gpu_util_pct) as gpu_util_pct_min,
    avg(gpu_util_pct) as gpu_util_pct_mean,
    max(gpu_util_pct) as gpu_util_pct_max,
    min(mem_util_pct) as mem_util_pct_min,
    avg(mem_util_pct) as mem_util_pct_mean,
    max(mem_util_pct) as mem_util_pct_max,
    min(sm_active_pct) as sm_active_pct_min,
    avg(sm_active_pct) as sm_active_pct_mean,
    max(sm_active_pct) as sm_active_pct_max,
    min(sm_clock_mhz) as sm_clock_mhz_min,
    avg(sm_clock_mhz) as sm_clock_mhz_mean,
    max(sm_clock_mhz) as sm_clock_mhz_max,
    min(mem_clock_mhz) as mem_clock_mhz_min,
    avg(mem_clock_mhz) as mem_clock_mhz_mean,
    max(mem_clock_mhz) as mem_clock_mhz_max,
    min(temp_c) as temp_c_min,
    avg(temp_c) as temp_c_mean,
    max(temp_c) as temp_c_max,
    min(mem_used_bytes) as mem_used_bytes_min,
    avg(mem_used_bytes) as mem_used_bytes_mean,
    max(mem_used_bytes) as mem_used_bytes_max,
    max(mem_total_bytes) as mem_total_bytes,
    avg(power_throttled::double) as power_throttled_share,
    avg(thermal_throttled::double) as thermal_throttled_share,
    avg((power_throttled or thermal_throttled)::double) as throttled_share
from samples
group by host, gpu_index, bucket
order by host, gpu_index, bucket_start
