-- The GPU activities that pass through their stream's launch queue, as
-- Holistic Trace Analysis counts them (TraceCounters.
-- get_queue_length_time_series): one row per kernel, memcpy or memset whose
-- launch call is in the trace and is one of the calls that enqueue a single
-- activity on a stream: cudaLaunchKernel, cudaLaunchKernelExC,
-- cuLaunchKernel, cudaMemcpyAsync, cudaMemsetAsync, hipLaunchKernel,
-- hipExtModuleLaunchKernel, hipMemcpyAsync, hipMemsetAsync,
-- hipMemcpyWithStream (HTA's list).
-- requires: kernels
--
-- An activity joins its stream's queue when its launch call starts
-- (enter_ns) and leaves it when it starts on the GPU (leave_ns): from then
-- on the stream's hardware queue no longer holds it. Not entries:
--   kernels replayed from a CUDA or HIP graph: the cudaGraphLaunch call
--     enqueues the graph, not each of its kernels (counting each kernel from
--     the call's start, and until its end, gave queues past CUDA's 1,024);
--   activities without a launch call in the trace, and those of
--     synchronous calls (cudaMemcpy), which return only once done.
-- scoped: the activity counts in per-rank aggregates (kernels.scoped: its
-- launch call started before the rank's last, cut-short profiler step).
select
    run,
    rank,
    device,
    stream,
    correlation_id,
    launch_call_start_ns as enter_ns,
    start_ns as leave_ns,
    scoped
from kernels
where launch_call_name in (
        'cudaLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernel', 'cudaMemcpyAsync', 'cudaMemsetAsync',
        'hipLaunchKernel', 'hipExtModuleLaunchKernel', 'hipMemcpyAsync', 'hipMemsetAsync', 'hipMemcpyWithStream'
    )
    and launch_call_start_ns is not null
    and start_ns is not null
