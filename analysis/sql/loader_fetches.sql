-- Each time the training loop fetched a batch from a DataLoader: the ranges
-- PyTorch's profiler records around `next()` on a DataLoader iterator,
-- `enumerate(DataLoader)#<iterator class>.__next__` (single-process and
-- worker-process loaders alike), as user ranges (Kineto) or NVTX ranges
-- (nsys); not their GPU-side copies. The building block of data_loading,
-- and of host_syncs, which leaves fetch time to it.
--
-- One row per fetch: run, rank, start_ns, end_ns.
select run, rank, start_ns, end_ns
from annotations
where kind in ('user', 'nvtx')
    and name like 'enumerate(DataLoader)#%'
    and end_ns > start_ns
