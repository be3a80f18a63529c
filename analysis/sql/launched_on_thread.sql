-- The GPU activities of the complete profiler steps, each with the CPU
-- thread whose runtime call launched it and when that call started: what
-- ties GPU time to the CPU-side ranges and operators around the call
-- (annotation_gpu_time, operator_kernels).
-- requires: kernels, api_calls
--
-- The launch call is the runtime call with the activity's correlation id
-- that started at its launch_call_start_ns (kernels). Activities without a
-- launch call in the trace are left out.
-- One row per activity:
--   correlation_id, name, dur_ns, launch_delay_ns   as in kernels
--   pid, tid            the process and thread of the launch call
--   call_start_ns       when the launch call started
select
    k.run,
    k.rank,
    k.correlation_id,
    k.name,
    k.dur_ns,
    k.launch_delay_ns,
    c.pid,
    c.tid,
    c.start_ns as call_start_ns
from kernels as k
join api_calls as c
    on c.run = k.run
    and c.rank = k.rank
    and c.correlation_id = k.correlation_id
    and c.start_ns = k.launch_call_start_ns
where k.scoped
