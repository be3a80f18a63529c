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
        dur_ns
    from scoped_kernels
    where dur_ns >= 0
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
        -- both from one list aggregate: one sort of each group, not two
        quantile_cont(dur_ns, [0.5, 0.95]) as quantiles_ns,
        min(dur_ns) as min_ns,
        max(dur_ns) as max_ns
    from durations
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
    quantiles_ns[1] as p50_ns,
    quantiles_ns[2] as p95_ns,
    min_ns,
    max_ns,
    total_ns / sum(total_ns) over (partition by run, rank) as time_share,
    row_number() over (partition by run, rank order by total_ns desc, name) as time_rank
from per_name
order by run, rank, time_rank
