-- Which kernels take each rank's GPU time: per kernel name, how many ran,
-- their total time, and the spread of their durations.
-- requires: scoped_kernels
--
-- Kernels of the complete profiler steps (scoped_kernels), one row per run,
-- rank and name (memcpy and memset activities under their own names).
--   total_ns        the sum of the durations (overlapping kernels each count)
--   mean_ns         total_ns / kernel_count
--   p50_ns, p95_ns  duration percentiles, interpolated linearly between the
--                   two nearest kernels (quantile_cont; numpy's default)
--   time_share      total_ns over the rank's summed kernel time, 0-1
--   time_rank       1 for the name with the most time on the rank
with durations as (
    select
        run,
        rank,
        name,
        category,
        kind,
        end_ns - start_ns as dur_ns
    from scoped_kernels
    where start_ns is not null
        and end_ns >= start_ns
),

per_name as (
    select
        run,
        rank,
        name,
        any_value(category) as category,
        any_value(kind) as kind,
        count(*) as kernel_count,
        sum(dur_ns)::bigint as total_ns,
        avg(dur_ns) as mean_ns,
        quantile_cont(dur_ns, 0.5) as p50_ns,
        quantile_cont(dur_ns, 0.95) as p95_ns,
        min(dur_ns) as min_ns,
        max(dur_ns) as max_ns
    from durations
    group by run, rank, name
)

select
    *,
    total_ns / sum(total_ns) over (partition by run, rank) as time_share,
    row_number() over (partition by run, rank order by total_ns desc, name) as time_rank
from per_name
order by run, rank, time_rank
