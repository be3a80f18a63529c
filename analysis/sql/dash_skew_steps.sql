-- Arrival skew per rank and profiler step: the rank × step heat map of the
-- Communication page.
--
-- One row per (run, rank, step) with collectives in collective_skew. A
-- collective instance belongs to the step whose window (step_windows of
-- rank 0's clock would do; each rank's own is used) holds the rank's
-- arrival; arrivals outside every step have step NULL. Where step windows
-- overlap, the step that started last holds it (an as-of join: each
-- instance counted once, and no range join of every collective against
-- every step).
--   collectives: the rank's collective instances in the step;
--   mean_lateness_ns: the mean of lateness_ns (arrival - the instance's
--     median arrival; positive: later than most);
--   waited_ns: the sum of arrival_skew_ns (time the rank waited for the
--     last rank); last_count: instances where it was the last to arrive.
-- requires: collective_skew, step_windows
select
    s.run,
    s.rank,
    case when s.start_ns < w.end_ns then w.step end as step,
    count(*) as collectives,
    avg(s.lateness_ns) as mean_lateness_ns,
    sum(s.arrival_skew_ns)::bigint as waited_ns,
    count(*) filter (where s.is_last) as last_count
from collective_skew s
asof left join step_windows w
    on w.run = s.run
    and w.rank = s.rank
    and s.start_ns >= w.start_ns
group by all
order by s.run, step, s.rank
