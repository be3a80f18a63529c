-- Which collective instances took much longer than that collective usually
-- takes?
--
-- One row per flagged instance. An instance is one call of a collective on
-- one process group (comm_calls' key: run, process_group, op, seq and, for
-- point-to-point ops, instance_rank); it is
-- compared with the other instances of the same run, process group, op and
-- message-size bucket.
--
-- transfer_ns: the instance's own duration, the shortest GPU kernel time
--   among its ranks. The last rank to arrive waits for no one, so this is
--   the transfer itself; waiting for a late rank shows in collective_skew,
--   not here. With one rank's trace it is that rank's time, waiting and all.
-- median_ns, mad_ns: the median and the median absolute deviation of
--   transfer_ns over the comparison set (`samples` instances).
-- An instance is an outlier where both
--   transfer_ns > median_ns + collective_outlier_mad_k x mad_ns and
--   transfer_ns >= collective_outlier_min_ratio x median_ns,
-- in a set of at least collective_outlier_min_samples instances: the MAD
-- test alone flags trifles when durations barely vary, the ratio alone
-- ignores a set's natural spread. Instances of unknown size are left out:
-- their usual duration is not known.
-- ratio_to_median = transfer_ns / median_ns; excess_ns = transfer_ns -
-- median_ns, the time lost against the usual.
-- requires: comm_calls
-- param: collective_outlier_mad_k = 5
-- param: collective_outlier_min_ratio = 2.0
-- param: collective_outlier_min_samples = 8
with instances as (
    select
        run,
        process_group,
        op,
        size_bucket_bytes,
        seq,
        instance_rank,
        any_value(seq_source) as seq_source,
        max(bytes) as bytes,
        count(*) as ranks_seen,
        min(start_ns) as start_ns,
        min(dur_ns) as transfer_ns,
        arg_min(rank, (dur_ns, rank)) as transfer_rank  -- of equal times, the lowest rank: the same whatever the files' order
    from comm_calls
    where dur_ns is not null
        and size_bucket_bytes is not null
    group by run, process_group, op, size_bucket_bytes, seq, instance_rank
),

centred as (
    -- each instance's time beside its group's median (mad: the median of their distances)
    select
        run,
        process_group,
        op,
        size_bucket_bytes,
        transfer_ns,
        median(transfer_ns) over (partition by run, process_group, op, size_bucket_bytes) as median_ns
    from instances
),

usual as (
    select
        run,
        process_group,
        op,
        size_bucket_bytes,
        count(*) as samples,
        any_value(median_ns) as median_ns,
        median(abs(transfer_ns - median_ns)) as mad_ns
    from centred
    group by run, process_group, op, size_bucket_bytes
    having count(*) >= getvariable('collective_outlier_min_samples')
)

select
    i.run,
    i.process_group,
    i.op,
    i.size_bucket_bytes,
    i.seq,
    i.instance_rank,
    i.seq_source,
    i.bytes,
    i.ranks_seen,
    i.start_ns,
    i.transfer_ns,
    i.transfer_rank,
    u.samples,
    u.median_ns,
    u.mad_ns,
    i.transfer_ns / u.median_ns as ratio_to_median,
    round(i.transfer_ns - u.median_ns)::bigint as excess_ns
from instances as i
join usual as u
    on u.run = i.run
    and u.process_group is not distinct from i.process_group
    and u.op is not distinct from i.op
    and u.size_bucket_bytes = i.size_bucket_bytes
where i.transfer_ns > u.median_ns + getvariable('collective_outlier_mad_k') * u.mad_ns
    and i.transfer_ns >= getvariable('collective_outlier_min_ratio') * u.median_ns
order by i.run, i.process_group, i.op, i.size_bucket_bytes, i.seq
