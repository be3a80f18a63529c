-- Kernels of the complete profiler steps: the GPU activities (kernels,
-- memcpy, memset) that per-rank aggregates count (time_breakdown,
-- comm_overlap, kernel_stats).
-- requires: kernels
--
-- The profiler usually stops in the middle of the last ProfilerStep#N, so,
-- like HTA, GPU work whose launching runtime call starts at or after the
-- start of the rank's last profiler step is left out. A kernel that starts
-- before that moment was launched before it and stays; a kernel that starts
-- later stays only if its launch call (api_calls, by run, rank and
-- correlation_id) started before it; one without a known launch call is
-- left out. A rank with no profiler step, or with a single one, counts
-- whole (HTA also filters only when the trace has two steps or more).
--
-- The rule is applied when a trace file is ingested (collector/derive.py),
-- per source file, and stored as kernels.scoped; this view is a filter,
-- with the columns the trace gave (the derived ones stay in kernels).
select
    run,
    rank,
    device,
    stream,
    name,
    category,
    kind,
    start_ns,
    end_ns,
    dur_ns,
    correlation_id,
    external_id,
    grid,
    block,
    bytes
from kernels
where scoped
