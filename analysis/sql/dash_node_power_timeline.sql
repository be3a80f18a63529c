-- Each node's coincident power over time (the sum over its GPUs at each
-- tick, complete ticks only: power_node_ticks), downsampled to time buckets
-- for charts, with the same sum under the what-if cap power_cap_w.
--
-- One row per (host, bucket_start), buckets of timeline_bucket_s seconds
-- (telemetry_timeline's), within timeline_start_us / timeline_end_us.
--   node_w_min / _mean / _max: coincident power over the bucket's ticks;
--   capped_node_w_mean / _max: the same with every GPU clipped at the cap;
--   ticks: complete ticks in the bucket.
-- requires: power_node_ticks, telemetry_timeline
with ticks as (
    select
        host,
        epoch_us(ts) // greatest(1, (getvariable('timeline_bucket_s')::double * 1e6)::bigint) as bucket,
        node_w,
        capped_node_w
    from power_node_ticks
    where complete
        and (getvariable('timeline_start_us') is null or ts >= make_timestamp(getvariable('timeline_start_us')::bigint)::timestamptz)
        and (getvariable('timeline_end_us') is null or ts < make_timestamp(getvariable('timeline_end_us')::bigint)::timestamptz)
)
select
    host,
    to_timestamp(bucket * greatest(1, (getvariable('timeline_bucket_s')::double * 1e6)::bigint) / 1e6) as bucket_start,
    count(*) as ticks,
    min(node_w) as node_w_min,
    avg(node_w) as node_w_mean,
    max(node_w) as node_w_max,
    avg(capped_node_w) as capped_node_w_mean,
    max(capped_node_w) as capped_node_w_max
from ticks
group by host, bucket
order by host, bucket_start
