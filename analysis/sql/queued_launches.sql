-- The GPU activities that pass through their stream's launch queue: one row
-- per kernel, memcpy or memset whose launch call is in the trace and is not
-- a graph launch (cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch). It joins
-- the queue when that call starts (enter_ns) and leaves it when it starts on
-- the GPU (leave_ns), as Holistic Trace Analysis counts (TraceCounters.
-- get_queue_length_time_series).
-- requires: kernels
--
-- Where this differs from HTA: HTA counts only the activities of the calls
-- it lists (cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel,
-- cudaMemcpyAsync, cudaMemsetAsync and their HIP twins), so it misses those
-- of any other launch call, such as cuLaunchKernelEx (Triton's and NCCL's
-- kernels on recent PyTorch) or a synchronous cudaMemcpy: each of those
-- enqueues one activity too, so gpulens counts them (launch_call_name says
-- which call it was). On a trace without such calls the two agree.
-- Not entries:
--   kernels replayed from a CUDA or HIP graph: the graph launch enqueues the
--     graph, not each of its kernels (counting each kernel from the call's
--     start, and until its end, gave queues past CUDA's 1,024), and HTA
--     leaves them out too;
--   activities without a launch call in the trace (launched before the
--     profiler started).
-- scoped: the activity counts in per-rank aggregates (kernels.scoped: its
-- launch call started before the rank's last, cut-short profiler step).
select
    run,
    rank,
    device,
    stream,
    correlation_id,
    launch_call_name,
    launch_call_start_ns as enter_ns,
    start_ns as leave_ns,
    scoped
from kernels
where launch_call_name is not null
    and not starts_with(launch_call_name, 'cudaGraphLaunch')
    and not starts_with(launch_call_name, 'cuGraphLaunch')
    and not starts_with(launch_call_name, 'hipGraphLaunch')
    and launch_call_start_ns is not null
    and start_ns is not null
