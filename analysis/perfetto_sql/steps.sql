-- The profiler steps of each exported rank inside its window.
-- One row per (rank, step): its name (ProfilerStep#N), start and length.
select a.rank, a.step, a.name, min(a.start_ns) as start_ns, max(a.end_ns) - min(a.start_ns) as dur_ns
from annotations as a
join export_windows as w
    on a.rank = w.rank and a.start_ns >= w.window_start_ns and a.end_ns <= w.window_end_ns
where a.run = getvariable('export_run') and a.kind = 'profiler_step' and a.step is not null
group by a.rank, a.step, a.name
order by a.rank, start_ns
