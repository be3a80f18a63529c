-- Trace time cut into segments of constant phase, step and power sample:
-- the base of step_energy and phase_energy.
--
-- For each rank joined to a telemetry GPU (power_trace_gpus), its window is
-- cut at every phase change on that GPU (gpu_phases: the kernels' phases,
-- merged when the trace file was ingested), every profiler step start
-- and end, and every telemetry sample time. Within a segment:
--   phase: what the GPU was doing: 'compute' if any compute kernel ran (a
--     kernel of no known category counts as compute), else 'communication'
--     if a communication kernel ran, else 'memory' (copies, sets), else
--     'idle'. Compute wins over overlapped communication because it drives
--     the power;
--   step: the profiler step the segment lies in, NULL outside steps;
--   power_w: the power of the telemetry sample whose interval (previous ts,
--     ts] holds the segment: an as-of match, the first sample at or after
--     the segment's end. NULL where no sample interval covers it (before the
--     GPU's first sample, across a gap longer than power_max_gap_s, or a
--     sample without power); energy_j = power_w × the segment's duration.
-- So a sample interval's energy is split over the phases and steps in it by
-- their time (time-weighted shares): at 1 Hz telemetry and millisecond
-- kernels, the power of one phase is not told apart from the others of the
-- same second; only phases that last seconds show their own power.
--
-- How: one sweep over the boundaries in time order keeps running counts of
-- the kernels of each kind in flight, of the sample times passed and of
-- the steps started; the segment's sample is then the next sample by number
-- and its step the last one started (equality joins). This is the as-of
-- match DuckDB's ASOF JOIN would make, without its nested-loop plan, which
-- it picks when it under-estimates one side and which takes minutes on
-- traces of a million kernels.
-- requires: power_trace_gpus, step_windows, gpu_phases
-- param: power_max_gap_s = 60
with gpus as (
    select run, rank, host, gpu_index, window_start_ns, window_end_ns
    from power_trace_gpus
    where unmatched_reason is null
),
kernel_phases as (
    -- the GPU's phase segments (gpu_phases, found at ingest), disjoint in
    -- time; idle time is the gaps between them
    select
        gpu_phases.run,
        gpu_phases.rank,
        gpu_phases.start_ns,
        gpu_phases.end_ns,
        gpu_phases.phase as kind
    from gpu_phases
    join gpus
        on gpu_phases.run = gpus.run
        and gpu_phases.rank = gpus.rank
        and gpu_phases.device = gpus.gpu_index
),
near_telemetry as (
    -- the GPU's samples around the window only (a sample inside it can
    -- reach back no further than a gap), then each one's interval
    select
        gpus.run,
        gpus.rank,
        gpus.window_start_ns,
        gpus.window_end_ns,
        epoch_ns(telemetry.ts) as ts_ns,
        telemetry.power_w
    from telemetry
    join gpus
        on telemetry.host = gpus.host
        and telemetry.gpu_index = gpus.gpu_index
        and telemetry.ts >= to_timestamp(gpus.window_start_ns / 1e9 - getvariable('power_max_gap_s') - 1)
        and telemetry.ts <= to_timestamp(gpus.window_end_ns / 1e9 + getvariable('power_max_gap_s') + 1)
),
intervals as (
    select
        *,
        lag(ts_ns) over (partition by run, rank order by ts_ns) as prev_ts_ns
    from near_telemetry
),
trace_samples as (
    -- samples whose interval reaches into the window, numbered in time order
    select
        run,
        rank,
        ts_ns,
        ts_ns < window_end_ns as is_boundary,
        case
            when power_w is not null and (ts_ns - prev_ts_ns) / 1e9 <= getvariable('power_max_gap_s') then power_w
        end as power_w,
        prev_ts_ns,
        row_number() over (partition by run, rank order by ts_ns) as sample_no
    from intervals
    where ts_ns > window_start_ns
        and (prev_ts_ns is null or prev_ts_ns < window_end_ns)
),
numbered_steps as (
    select
        step_windows.run,
        step_windows.rank,
        step_windows.step,
        step_windows.start_ns,
        step_windows.end_ns,
        row_number() over (partition by step_windows.run, step_windows.rank order by step_windows.start_ns) as step_no
    from step_windows
    semi join gpus using (run, rank)
),
edges as (
    -- d_kernels counts kernels in flight, three kinds packed in one number
    -- (compute in bits 0-19, communication in 20-39, memory in 40-59): one
    -- running sum instead of three, each window aggregate being a pass
    select
        run, rank, start_ns as t,
        case kind when 'compute' then 1 when 'communication' then 1048576 else 1099511627776 end as d_kernels,
        0 as d_samples,
        0 as d_steps
    from kernel_phases
    union all
    select run, rank, end_ns, case kind when 'compute' then -1 when 'communication' then -1048576 else -1099511627776 end, 0, 0
    from kernel_phases
    union all
    select run, rank, start_ns, 0, 0, 1
    from numbered_steps
    union all
    select run, rank, end_ns, 0, 0, 0
    from numbered_steps
    union all
    select run, rank, ts_ns, 0, 1, 0
    from trace_samples
    where is_boundary
),
sweep as (
    -- edges at one instant may come in any order: only the last of them
    -- has the full running counts, and the others end empty segments
    select
        run,
        rank,
        t as start_ns,
        lead(t) over w as end_ns,
        (sum(d_kernels) over w)::bigint as kernels_in_flight,
        (sum(d_samples) over w)::bigint + 1 as sample_no,
        (sum(d_steps) over w)::bigint as step_no
    from edges
    window w as (partition by run, rank order by t rows between unbounded preceding and current row)
),
segments as (
    select
        sweep.run,
        sweep.rank,
        sweep.start_ns,
        sweep.end_ns,
        case
            when (sweep.kernels_in_flight & 1048575) > 0 then 'compute'
            when ((sweep.kernels_in_flight >> 20) & 1048575) > 0 then 'communication'
            when (sweep.kernels_in_flight >> 40) > 0 then 'memory'
            else 'idle'
        end as phase,
        sweep.sample_no,
        sweep.step_no
    from sweep
    where sweep.end_ns > sweep.start_ns
)
select
    segments.run,
    segments.rank,
    gpus.host,
    gpus.gpu_index,
    case when segments.start_ns < numbered_steps.end_ns then numbered_steps.step end as step,
    segments.phase,
    segments.start_ns,
    segments.end_ns,
    segments.end_ns - segments.start_ns as dur_ns,
    trace_samples.ts_ns as sample_ts_ns,
    case when trace_samples.prev_ts_ns <= segments.start_ns then trace_samples.power_w end as power_w,
    case when trace_samples.prev_ts_ns <= segments.start_ns then trace_samples.power_w end
        * (segments.end_ns - segments.start_ns) / 1e9 as energy_j
from segments
join gpus using (run, rank)
left join trace_samples using (run, rank, sample_no)
left join numbered_steps using (run, rank, step_no)
