-- Which kernels take each rank's GPU time: per kernel name, how many ran,
-- their total time, and the spread of their durations.
-- requires: kernel_names
--
-- Kernels of the complete profiler steps (scoped_kernels), one row per run,
-- rank and name (memcpy and memset activities under their own names).
--   total_ns        the sum of the durations (overlapping kernels each count)
--   mean_ns         total_ns / kernel_count
--   p50_ns, p95_ns  duration percentiles, interpolated linearly between the
--                   two nearest kernels (quantile_cont; numpy's default)
--   time_share      total_ns over the rank's summed kernel time, 0-1
--   time_rank       1 for the name with the most time on the rank
with per_name as (
    -- found at ingest (kernel_names; a rank traced in several files: counts
    -- and totals add, its quantiles are unknown)
    select
        run,
        rank,
        name,
        any_value(category) as category,
        any_value(kind) as kind,
        sum(kernel_count)::bigint as kernel_count,
        sum(total_ns)::bigint as total_ns,
        sum(total_ns) / sum(kernel_count) as mean_ns,
        case when count(*) = 1 then any_value(p50_ns) end as p50_ns,
        case when count(*) = 1 then any_value(p95_ns) end as p95_ns,
        min(min_ns) as min_ns,
        max(max_ns) as max_ns
    from kernel_names
    where kernel_count > 0
    group by run, rank, name
)

select
    run,
    rank,
    name,
    category,
    kind,
    kernel_count,
    total_ns,
    mean_ns,
    p50_ns,
    p95_ns,
    min_ns,
    max_ns,
    total_ns / sum(total_ns) over (partition by run, rank) as time_share,
    row_number() over (partition by run, rank order by total_ns desc, name) as time_rank
from per_name
order by run, rank, time_rank
