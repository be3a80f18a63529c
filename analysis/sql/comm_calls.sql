-- Each rank's collective calls, keyed to their instance, sized and timed.
-- The common ground of collective_stats, collective_skew and
-- collective_outliers.
--
-- One row per row of `collectives` (one rank's call of one collective).
-- seq, seq_source: the instance key within (run, process_group, op). c10d's
--   sequence number where the trace records it for every call of that
--   (run, process_group, op) (seq_source = 'trace'; ranks agree on it);
--   otherwise (NCCL 2.17-era and older PyTorch traces) the calls are
--   numbered 1, 2, ... in start order within (run, rank, process_group, op)
--   (seq_source = 'order'). The fallback assumes every rank's trace covers
--   the same calls: a rank whose profiling window caught one call more at
--   the start is numbered off by one.
-- instance_rank: NULL for collectives (an instance spans the group's
--   ranks); the rank itself for point-to-point ops (send, recv, send_recv),
--   whose calls on different ranks are not one operation: each call is
--   its own instance. Key instances by (run, process_group, op, seq,
--   instance_rank).
-- group_size: as the trace gives it, else the length of its rank list.
-- size_bucket_bytes: the power of two at or below `bytes`, i.e. the bucket
--   [2^k, 2^(k+1)); 0 for empty messages; NULL where the size is unknown.
-- dur_ns: the call's GPU kernel time (end_ns - start_ns); NULL where the
--   trace timed it by its CPU op only (kernel_name NULL: an asynchronous
--   launch, not the transfer) or not at all.
-- shared_clock: the rank's times can be compared with other ranks' (epoch
--   time; false where runs.time_base = 'trace').
-- in_nelems, out_nelems, in_split_sizes, out_split_sizes,
--   split_sizes_truncated: as in collectives (all_to_all_balance reads them).
-- requires: collectives, runs
with calls as (
    select
        c.run,
        c.rank,
        c.process_group,
        c.op,
        c.seq as trace_seq,
        c.bytes,
        coalesce(c.group_size, array_length(c.group_ranks)) as group_size,
        c.in_nelems,
        c.out_nelems,
        c.in_split_sizes,
        c.out_split_sizes,
        c.split_sizes_truncated,
        c.start_ns,
        c.end_ns,
        case
            when c.kernel_name is not null and c.end_ns >= c.start_ns then c.end_ns - c.start_ns
        end as dur_ns,
        not coalesce(r.trace_relative, false) as shared_clock,
        -- floor(log2(bytes)) in floating point; corrected below so that
        -- exact powers of two and their neighbours land in the right bucket.
        floor(log2(nullif(c.bytes, 0)))::integer as log2_guess
    from collectives as c
    left join (
        select run, rank, bool_or(time_base = 'trace') as trace_relative
        from runs
        group by run, rank
    ) as r
        on r.run = c.run and r.rank = c.rank
),

seq_coverage as (
    select run, process_group, op, bool_and(trace_seq is not null) as has_seq
    from calls
    group by run, process_group, op
),

covered as (
    select c.*, s.has_seq
    from calls as c
    join seq_coverage as s
        on s.run = c.run
        and s.process_group is not distinct from c.process_group
        and s.op is not distinct from c.op
),

-- Only calls without c10d's numbers need numbering (a sort); keep it to them.
numbered as (
    select *, trace_seq as seq, 'trace' as seq_source
    from covered
    where has_seq
    union all by name
    select
        *,
        row_number() over (partition by run, rank, process_group, op order by start_ns, end_ns) as seq,
        'order' as seq_source
    from covered
    where not has_seq
)

select
    run,
    rank,
    process_group,
    op,
    seq,
    seq_source,
    case when op in ('send', 'recv', 'send_recv') then rank end as instance_rank,
    bytes,
    case
        when bytes is null then null
        when bytes = 0 then 0::bigint
        when (1::bigint << log2_guess) > bytes then 1::bigint << (log2_guess - 1)
        when (1::bigint << (log2_guess + 1)) <= bytes then 1::bigint << (log2_guess + 1)
        else 1::bigint << log2_guess
    end as size_bucket_bytes,
    group_size,
    start_ns,
    end_ns,
    dur_ns,
    shared_clock,
    in_nelems,
    out_nelems,
    in_split_sizes,
    out_split_sizes,
    split_sizes_truncated
from numbered
