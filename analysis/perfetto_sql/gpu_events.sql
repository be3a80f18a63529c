-- The collector's events (throttle start and stop, XID errors, a GPU lost
-- or reset) of the GPU each exported rank ran on, inside its window.
-- One row per (rank, event): ts_ns (epoch ns), kind, detail, value.
select w.rank, epoch_ns(e.ts) as ts_ns, e.kind, e.detail, e.value
from events as e
join export_windows as w
    on e.host = w.host and e.gpu_index = w.gpu_index
    and epoch_ns(e.ts) >= w.window_start_ns and epoch_ns(e.ts) <= w.window_end_ns
order by w.rank, ts_ns
