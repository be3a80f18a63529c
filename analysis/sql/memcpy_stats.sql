-- Memory copies and sets per rank and kind of copy: how many, how many bytes,
-- how long, how fast, and from which memory to which.
-- requires: scoped_kernels, rank_unions
--
-- Over the GPU activities of the complete profiler steps (scoped_kernels),
-- one row per run, rank, kind (memcpy, memset), direction and the memory at
-- each end, read from the name every ingester gives a copy (Kineto's, which
-- the Nsight Systems and ROCm readers follow): `Memcpy HtoD (Pinned ->
-- Device)`, `Memset (Device)`.
--   direction               HtoD, DtoH, DtoD, PtoP, ...; `set` for a memset
--   src_memory, dst_memory  Pageable, Pinned, Device, ...; ROCm's `Host`
--                           does not say whether it is pinned
--   pageable                an end is pageable host memory: the driver
--                           stages the copy through a pinned buffer of its
--                           own and the launching CPU thread waits for it,
--                           so it runs below the link's speed and overlaps
--                           nothing on the CPU (pinned memory and
--                           non_blocking=True avoid both)
--   copy_count, bytes, total_ns, mean_bytes
--   bytes_per_s             bytes over the time spent copying (NULL without bytes)
--   time_share              total_ns over the rank's span (its first kernel's
--                           start to its last kernel's end: time_breakdown's,
--                           from rank_unions, which ingest summed per file)
with spans as (
    select run, rank, span_end_ns - span_start_ns as span_ns
    from rank_unions
),
by_name as (
    -- Names are few: read each once, not once per copy.
    select
        run,
        rank,
        kind,
        name,
        count(*) as copy_count,
        count(bytes) as with_bytes,
        sum(bytes) as bytes,
        sum(dur_ns) as total_ns,
        sum(dur_ns) filter (where bytes is not null) as with_bytes_ns
    from scoped_kernels
    where kind in ('memcpy', 'memset')
    group by run, rank, kind, name
),
copies as (
    select
        *,
        coalesce(nullif(regexp_extract(name, '^Memcpy (\S+)', 1), ''), case when kind = 'memset' then 'set' else 'unknown' end) as direction,
        nullif(regexp_extract(name, '\((\w+) -> \w+\)', 1), '') as src_memory,
        coalesce(nullif(regexp_extract(name, '-> (\w+)\)', 1), ''), nullif(regexp_extract(name, '^Memset \((\w+)\)', 1), '')) as dst_memory
    from by_name
)
select
    run,
    rank,
    kind,
    direction,
    src_memory,
    dst_memory,
    coalesce(src_memory = 'Pageable' or dst_memory = 'Pageable', false) as pageable,
    sum(copy_count)::bigint as copy_count,
    sum(bytes)::bigint as bytes,
    sum(total_ns)::bigint as total_ns,
    sum(bytes) / nullif(sum(with_bytes), 0) as mean_bytes,
    sum(bytes) / nullif(sum(with_bytes_ns), 0) * 1e9 as bytes_per_s,
    sum(total_ns) / nullif(any_value(spans.span_ns), 0) as time_share
from copies
join spans using (run, rank)
group by run, rank, kind, direction, src_memory, dst_memory
order by run, rank, total_ns desc, direction, src_memory, dst_memory
