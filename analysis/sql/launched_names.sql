-- Per kernel name of a rank, its launched kernels (those with a launch
-- call, in the complete profiler steps: kernels.scoped): how many, their GPU time and their launch calls' time, counted at
-- ingest (kernel_names) and added up over the rank's trace files. The
-- totals short_kernels and launch_outliers take their shares of.
-- requires: kernel_names
select
    run,
    rank,
    name,
    sum(launched_count)::bigint as all_kernel_count,
    sum(launched_gpu_ns)::bigint as all_gpu_ns,
    sum(launch_call_total_ns)::bigint as all_launch_call_ns
from kernel_names
where launched_count > 0
group by run, rank, name
