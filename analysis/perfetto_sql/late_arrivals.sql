-- Each exported rank's latest arrival, inside its window, at a collective
-- it arrived last at (collective_skew): the moment a straggler finding
-- points to. One row per rank that arrived last at least once.
--   start_ns: its arrival; lateness_ns: how far after the median rank.
-- requires: collective_skew
select s.rank, arg_max(s.start_ns, s.lateness_ns) as start_ns, max(s.lateness_ns) as lateness_ns
from collective_skew as s
join export_windows as w
    on s.rank = w.rank and s.start_ns >= w.window_start_ns and s.start_ns < w.window_end_ns
where s.run = getvariable('export_run') and s.is_last
group by s.rank
order by s.rank
