-- The collectives of each exported rank that overlap its window, with
-- what a reader of the timeline wants beside each: op, bytes, process
-- group, sequence number, group size, dtype and the NCCL kernel.
-- start_ns/end_ns: the GPU kernel's interval where the trace has one, else
-- the CPU op's (collectives).
select
    c.rank, c.op, c.bytes, c.process_group, c.process_group_desc, c.seq, c.group_size, c.dtype,
    c.kernel_name, c.correlation_id, c.start_ns, c.end_ns - c.start_ns as dur_ns
from collectives as c
join export_windows as w
    on c.rank = w.rank and c.start_ns < w.window_end_ns and c.end_ns > w.window_start_ns
where c.run = getvariable('export_run') and c.start_ns is not null and c.end_ns is not null
order by c.rank, c.start_ns
