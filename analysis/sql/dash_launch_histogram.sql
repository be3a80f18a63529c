-- The distributions of launch delay and launch-call time, as histograms
-- computed in the database (a run of ten million kernels draws as a few
-- dozen bars).
--
-- One row per (run, metric, bin) with at least one kernel:
--   metric: 'launch_delay_ns' (call return to kernel start) or
--     'launch_call_ns' (the launch call's CPU time), from kernel_launches;
--   bin_low_ns, bin_high_ns: the bin [low, high): ten bins per decade on a
--     log scale from 1 ns; values below 1 ns (a zero delay) fall in the bin
--     [0, 1);
--   kernels: how many kernels fall in it; share: of the run's kernels with
--     that metric.
-- requires: kernel_launches
with values_ as (
    unpivot (select run, launch_delay_ns, launch_call_ns from kernel_launches)
    on launch_delay_ns, launch_call_ns
    into name metric value value_ns
),
binned as (
    select
        run,
        metric,
        case when value_ns < 1 then -1 else floor(log10(value_ns) * 10)::int end as bin,
        count(*) as kernels
    from values_
    where value_ns is not null
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
