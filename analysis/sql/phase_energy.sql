-- Where does a rank's GPU energy go: compute, communication, memory or idle?
--
-- One row per (run, rank, phase) of each rank joined to a telemetry GPU, over
-- the rank's trace window (power_trace_gpus: its kernels and profiler
-- steps). Phase precedence and the alignment of telemetry to trace time are
-- power_trace_segments': each telemetry sample interval's energy is split
-- over the phases in it by their time (time-weighted shares).
--   time_ns, time_share: the phase's time and its share of the window;
--   covered_ns, coverage_share: the part of that time telemetry covers;
--   energy_j: energy over the covered time (coverage_share says how much of
--     the phase that is); energy_share: its share of the rank's covered energy;
--   mean_power_w = energy_j / covered time.
-- requires: power_trace_segments
with per_phase as (
    select
        run,
        rank,
        any_value(host) as host,
        any_value(gpu_index) as gpu_index,
        phase,
        sum(dur_ns) as time_ns,
        sum(dur_ns) filter (where power_w is not null) as covered_ns,
        sum(energy_j) as energy_j
    from power_trace_segments
    group by run, rank, phase
)
select
    run,
    rank,
    host,
    gpu_index,
    phase,
    time_ns,
    time_ns / sum(time_ns) over rank_window as time_share,
    coalesce(covered_ns, 0) as covered_ns,
    coalesce(covered_ns, 0) / time_ns as coverage_share,
    energy_j,
    energy_j / nullif(sum(energy_j) over rank_window, 0) as energy_share,
    energy_j / nullif(covered_ns / 1e9, 0) as mean_power_w
from per_phase
window rank_window as (partition by run, rank)
order by run, rank, phase
