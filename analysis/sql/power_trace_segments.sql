-- Trace time cut into cells of one step and one power sample, with the
-- time of each GPU phase in each: the base of step_energy and phase_energy.
--
-- For each rank joined to a telemetry GPU (power_trace_gpus: its phases are
-- those of the trace's device, its power that of the telemetry gpu_index
-- the evidence names), its window is
-- cut at every profiler step start and end and every telemetry sample
-- time. One row per cell and phase the GPU was in during it:
--   phase: what the GPU was doing: 'compute' if any compute kernel ran (a
--     kernel of no known category counts as compute), else 'communication'
--     if a communication kernel ran, else 'memory' (copies, sets), else
--     'idle'. Compute wins over overlapped communication because it drives
--     the power;
--   start_ns, end_ns: the cell; dur_ns: the time of the phase within it;
--   step: the profiler step the cell lies in, NULL outside steps;
--   power_w: the power of the telemetry sample whose interval (previous ts,
--     ts] holds the cell: an as-of match, the first sample at or after the
--     cell's end. NULL where no sample interval covers it (before the GPU's
--     first sample, across a gap longer than power_max_gap_s, or a sample
--     without power); energy_j = power_w × dur_ns.
--     Which reading: the driver's average (power_w) covers its own window,
--     power_average_window_s (NVML's is 1 s), so an interval shorter than
--     that takes the instantaneous reading (power_instant_w) where the GPU
--     gives one: the average still holds the second before. On a real H100
--     sampled at 4 Hz, the instantaneous readings integrated to within
--     0.1-2.3 % of the energy counter over each phase of a job, the averages
--     to within 1.6-19 % (lagging each change of load by up to a second).
-- So a sample interval's energy is split over the phases and steps in it by
-- their time (time-weighted shares): at 1 Hz telemetry and millisecond
-- kernels, the power of one phase is not told apart from the others of the
-- same second; only phases that last seconds show their own power.
--
-- How: the phases come tiled and with running totals from ingest
-- (gpu_phases: each tile carries the time of each phase before it, and
-- tiles are cut at multiples of 2^bucket_bits ns, 2^24 unless the device's
-- span is hours: collector.derive.bucket_bits).
-- The time of a phase up to an instant t is then one equality join on t's
-- bucket, and a cell's phase times are the differences at its two ends, so
-- the work grows with the steps and samples, not with the kernels. The
-- cells come from one sweep over the step and sample bounds in time order,
-- counting the samples passed and the steps started: a cell's sample is
-- the next one by number and its step the last one started (equality
-- joins; DuckDB's ASOF JOIN picks a nested-loop plan when it
-- under-estimates a side).
-- requires: power_trace_gpus, step_windows, gpu_phases
-- param: power_max_gap_s = 60
-- param: power_average_window_s = 1
with gpus as (
    select run, rank, host, device, gpu_index, window_start_ns, window_end_ns
    from power_trace_gpus
    where unmatched_reason is null
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
        telemetry.power_w,
        telemetry.power_instant_w
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
            when prev_ts_ns is null or (ts_ns - prev_ts_ns) / 1e9 > getvariable('power_max_gap_s') then null
            when (ts_ns - prev_ts_ns) / 1e9 < getvariable('power_average_window_s') and power_instant_w is not null
                then power_instant_w
            else power_w
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
    select run, rank, window_start_ns as t, 0 as d_samples, 0 as d_steps
    from gpus
    union all
    select run, rank, window_end_ns, 0, 0
    from gpus
    union all
    select run, rank, start_ns, 0, 1
    from numbered_steps
    union all
    select run, rank, end_ns, 0, 0
    from numbered_steps
    union all
    select run, rank, ts_ns, 1, 0
    from trace_samples
    where is_boundary
),
sweep as (
    -- edges at one instant may come in any order: only the last of them
    -- has the full running counts, and the others end empty cells
    select
        run,
        rank,
        t as start_ns,
        lead(t) over (partition by run, rank order by t) as end_ns,  -- lead takes no frame (Spark refuses one)
        (sum(d_samples) over w)::bigint + 1 as sample_no,
        (sum(d_steps) over w)::bigint as step_no
    from edges
    window w as (partition by run, rank order by t rows between unbounded preceding and current row)
),
cells as (
    select *
    from sweep
    where end_ns > start_ns
),
phase_buckets as (
    -- each device's tile width (one per device)
    select distinct run, rank, device, bucket_bits
    from gpu_phases
),
cut_buckets as (
    -- each cell bound, with the bucket it starts and the one it ends (a
    -- bound on a bucket's edge is the end of the tile before it)
    select distinct
        cuts.run,
        cuts.rank,
        gpus.device,
        cuts.t,
        unnest([cuts.t >> widths.bucket_bits, (cuts.t - 1) >> widths.bucket_bits]) as bucket
    from (
        select run, rank, start_ns as t from cells
        union
        select run, rank, end_ns from cells
    ) as cuts
    join gpus using (run, rank)
    join phase_buckets as widths
        on widths.run = cuts.run
        and widths.rank = cuts.rank
        and widths.device = gpus.device
),
phase_time_at as (
    -- each phase's time up to t: the tile holding t (two tiles meeting at
    -- t agree), its total before it plus its own part up to t
    select
        c.run,
        c.rank,
        c.t,
        max(p.compute_before_ns + case when p.phase = 'compute' then c.t - p.start_ns else 0 end) as compute_ns,
        max(p.communication_before_ns + case when p.phase = 'communication' then c.t - p.start_ns else 0 end)
            as communication_ns,
        max(p.memory_before_ns + case when p.phase = 'memory' then c.t - p.start_ns else 0 end) as memory_ns
    from cut_buckets as c
    join gpu_phases as p
        on p.run = c.run
        and p.rank = c.rank
        and p.device = c.device
        and p.bucket = c.bucket
        and c.t between p.start_ns and p.end_ns
    group by c.run, c.rank, c.t
),
cell_phases as (
    select
        cells.run,
        cells.rank,
        cells.start_ns,
        cells.end_ns,
        cells.sample_no,
        cells.step_no,
        coalesce(e.compute_ns - s.compute_ns, 0) as compute_ns,
        coalesce(e.communication_ns - s.communication_ns, 0) as communication_ns,
        coalesce(e.memory_ns - s.memory_ns, 0) as memory_ns
    from cells
    left join phase_time_at as s
        on s.run = cells.run
        and s.rank = cells.rank
        and s.t = cells.start_ns
    left join phase_time_at as e
        on e.run = cells.run
        and e.rank = cells.rank
        and e.t = cells.end_ns
),
segments as (
    select run, rank, start_ns, end_ns, sample_no, step_no, 'compute' as phase, compute_ns as dur_ns
    from cell_phases
    union all
    select run, rank, start_ns, end_ns, sample_no, step_no, 'communication', communication_ns
    from cell_phases
    union all
    select run, rank, start_ns, end_ns, sample_no, step_no, 'memory', memory_ns
    from cell_phases
    union all
    select run, rank, start_ns, end_ns, sample_no, step_no, 'idle',
        (end_ns - start_ns) - compute_ns - communication_ns - memory_ns
    from cell_phases
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
    segments.dur_ns,
    trace_samples.ts_ns as sample_ts_ns,
    case when trace_samples.prev_ts_ns <= segments.start_ns then trace_samples.power_w end as power_w,
    case when trace_samples.prev_ts_ns <= segments.start_ns then trace_samples.power_w end
        * segments.dur_ns / 1e9 as energy_j
from segments
join gpus using (run, rank)
left join trace_samples using (run, rank, sample_no)
left join numbered_steps using (run, rank, step_no)
where segments.dur_ns > 0
