-- Per run, collective op and message-size bucket, the figures two runs are
-- compared on (collective_stats summed over process groups).
--
-- One row per (run, op, size_bucket_bytes).
--   count, bytes, total_ns, timed_count: summed over the run's groups and ranks;
--   mean_ns = total_ns / timed_count;
--   busbw_bytes_per_s: bytes over kernel time x the bus factor, as in
--     collective_stats (the time-weighted mean over the groups);
--   peak_bytes_per_s: the lowest nominal link peak among the groups.
-- requires: collective_stats
select
    run,
    op,
    size_bucket_bytes,
    sum(count)::bigint as count,
    sum(bytes)::double as bytes,
    sum(timed_count)::bigint as timed_count,
    sum(total_ns)::bigint as total_ns,
    sum(total_ns) / nullif(sum(timed_count), 0) as mean_ns,
    sum(busbw_bytes_per_s * total_ns) / nullif(sum(total_ns) filter (where busbw_bytes_per_s is not null), 0) as busbw_bytes_per_s,
    min(peak_bytes_per_s) as peak_bytes_per_s
from collective_stats
group by run, op, size_bucket_bytes
order by run, op, size_bucket_bytes
