-- The distributions of launch delay and launch-call time, as histograms
-- computed in the database (a run of ten million kernels draws as a few
-- dozen bars).
--
-- One row per (run, metric, bin) with at least one kernel:
--   metric: 'launch_delay_ns' (call return to kernel start) or
--     'launch_call_ns' (the launch call's CPU time), from kernel_launches,
--     leaving out kernels replayed from a graph (graph_launch);
--   bin_low_ns, bin_high_ns: the bin [low, high): ten bins per decade on a
--     log scale from 1 ns; values below 1 ns (a zero delay) fall in the bin
--     [0, 1);
--   kernels: how many kernels fall in it; share: of the run's kernels with
--     that metric.
-- requires: kernel_launches
with joint as (
    -- one pass: both bins of each kernel at once, a few thousand groups
    select
        run,
        case when launch_delay_ns < 1 then -1 else floor(log10(launch_delay_ns) * 10)::int end as delay_bin,
        case when launch_call_ns < 1 then -1 else floor(log10(launch_call_ns) * 10)::int end as call_bin,
        count(*) as kernels
    from kernel_launches
    where not graph_launch
    group by all
),
binned as (
    select run, 'launch_delay_ns' as metric, delay_bin as bin, sum(kernels)::bigint as kernels
    from joint
    where delay_bin is not null
    group by all
    union all
    select run, 'launch_call_ns', call_bin, sum(kernels)::bigint
    from joint
    where call_bin is not null
    group by all
)
select
    run,
    metric,
    case when bin < 0 then 0 else pow(10, bin / 10) end as bin_low_ns,
    case when bin < 0 then 1 else pow(10, (bin + 1) / 10) end as bin_high_ns,
    kernels,
    kernels / sum(kernels) over (partition by run, metric) as share
from binned
order by run, metric, bin_low_ns
