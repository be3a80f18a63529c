-- Kernel launches: for every GPU activity (kernel, memcpy, memset), how long
-- its launching runtime call took and how long it waited before it started.
-- requires: kernels
--
-- A GPU activity links to the runtime call that launched it (cudaLaunchKernel,
-- cudaMemcpyAsync, hipLaunchKernel, ...) by (run, rank, correlation_id);
-- activities without such a call are left out.
--   launch_call_ns   the launch call's duration (CPU time spent launching);
--                    for a graph replay (graph_launch) on its first kernel
--                    only, NULL on the others: the one call counts once
--   launch_delay_ns  kernel start - (call start + call duration), clipped at
--                    0: the time from the call's return to the kernel's start
--                    (HTA's "launch delay")
--   launch_queue_ns  kernel start - call start: launch plus queuing time; its
--                    sum over a step is the TKLQT (step_launch_summary)
--   step             the profiler step whose window contains the call's
--                    start; NULL outside every step or without steps
--   scoped           the kernel counts in per-rank aggregates (kernels.scoped:
--                    its call started before the rank's last, cut-short step)
--   graph_launch     the call replays a CUDA or HIP graph (cudaGraphLaunch,
--                    cuGraphLaunch, hipGraphLaunch and their suffixed
--                    forms): every kernel of the replay carries the one
--                    call's correlation id, so a kernel's delay is mostly
--                    the graph's earlier kernels running, and the call's
--                    time is shared by all of them. The per-kernel launch
--                    analyses (short_kernels, launch_outliers, the launch
--                    histogram, their step counts) leave these kernels out,
--                    as ingest leaves them out of each step's delay
--                    statistics (collector.derive.GRAPH_LAUNCH_PREFIXES, the
--                    same names); the queue time (TKLQT) keeps them, since
--                    each did wait from the call to its start.
-- Full nanosecond precision; nothing is rounded. For the kernel's other
-- columns (end_ns, device, external_id) join kernels on (run, rank,
-- correlation_id); this view keeps to what launch analyses read, as it has
-- a row per kernel.
--
-- The launch call and the step are found when a trace file is ingested
-- (collector/derive.py: the earliest call with the kernel's correlation
-- id; steps made disjoint, one ending where the next starts) and stored on
-- the kernel with launch_delay_ns and launch_queue_ns, so this view is a
-- scan (launch_queue_ns is NULL exactly where the kernel has no call).
select
    run,
    rank,
    stream,
    name,
    kind,
    category,
    correlation_id,
    start_ns,
    dur_ns,
    launch_call_name,
    coalesce(
        launch_call_name like 'cudaGraphLaunch%'
        or launch_call_name like 'cuGraphLaunch%'
        or launch_call_name like 'hipGraphLaunch%',
        false
    ) as graph_launch,
    launch_call_start_ns,
    launch_call_ns,
    launch_delay_ns,
    launch_queue_ns,
    step,
    scoped
from kernels
where launch_queue_ns is not null
