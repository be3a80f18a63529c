-- How fast do the collectives move data, against the link they cross?
--
-- One row per run, process group, collective op and message-size bucket.
-- A row of `collectives` is one rank's call of one collective, so `count`,
-- `bytes` and `total_ns` add up every rank's calls; `ranks` is the most
-- ranks that logged one instance.
--
-- size_bucket_bytes: the power of two at or below the message size, i.e.
--   the bucket [2^k, 2^(k+1)); NULL where the trace gives no size. Sizes are
--   as the trace gives them: max(input, output) elements x element size,
--   the "size" of nccl-tests (all_gather counts its output, reduce_scatter
--   its input).
-- Times: a call's GPU kernel interval (end_ns - start_ns). Calls timed only
--   by their CPU op (no kernel found: kernel_name is NULL) or not at all
--   count in `count` and `bytes` but not in the times or bandwidths;
--   `timed_count` says how many calls were timed.
-- algbw_bytes_per_s: each call's bytes / time, aggregated over the bucket
--   as sum(bytes) / sum(time), so long calls weigh more.
-- busbw_bytes_per_s: algbw x the nccl-tests bus factor, n = group size:
--   all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
--   broadcast, reduce, send, recv and the rest 1.
-- peak_bytes_per_s, link_kind, link_scope: the nominal one-direction peak
--   of the link between the group's GPUs (see comm_group_links);
--   busbw_share_of_peak = busbw / peak.
-- An early rank's kernel also waits for the last rank to arrive, so busbw
-- is what the job got, waiting included (see collective_skew). The last
-- rank to arrive waits for no one: its kernel time is the transfer alone.
-- instances: collective instances (comm_calls' key) in the bucket; a
--   point-to-point call is an instance of its own.
-- transfer_ns: over the instances, the sum of the shortest kernel time
--   among their ranks (a one-rank trace: that rank's time, waiting and all).
-- transfer_busbw_bytes_per_s: instance bytes / transfer time x the bus
--   factor: the bandwidth of the link itself, stragglers aside;
--   transfer_busbw_share_of_peak = that / peak.
-- requires: comm_calls, comm_group_links
with instances as (
    select
        run,
        process_group,
        op,
        size_bucket_bytes,
        seq,
        instance_rank,
        max(group_size) as group_size,
        count(*) as calls,
        count(distinct rank) as ranks,
        sum(bytes)::bigint as bytes,
        count(dur_ns) as timed_calls,
        sum(dur_ns)::bigint as total_ns,
        sum(bytes) filter (where dur_ns is not null)::bigint as timed_bytes,
        max(bytes) as instance_bytes,
        min(dur_ns) as transfer_ns
    from comm_calls
    group by run, process_group, op, size_bucket_bytes, seq, instance_rank
),

stats as (
    select
        run,
        process_group,
        op,
        size_bucket_bytes,
        max(group_size) as group_size,
        sum(calls)::bigint as count,
        max(ranks) as ranks,
        sum(bytes)::bigint as bytes,
        sum(timed_calls)::bigint as timed_count,
        sum(total_ns)::bigint as total_ns,
        sum(timed_bytes)::bigint as timed_bytes,
        count(*) as instances,
        sum(transfer_ns)::bigint as transfer_ns,
        sum(instance_bytes) filter (where transfer_ns is not null)::bigint as transfer_bytes
    from instances
    group by run, process_group, op, size_bucket_bytes
),

bandwidth as (
    select
        *,
        total_ns / nullif(timed_count, 0) as mean_ns,
        timed_bytes * 1e9 / nullif(total_ns, 0) as algbw_bytes_per_s,
        transfer_bytes * 1e9 / nullif(transfer_ns, 0) as transfer_algbw_bytes_per_s,
        case
            when group_size is null then null
            when op = 'all_reduce' then 2.0 * (group_size - 1) / group_size
            when op in ('all_gather', 'reduce_scatter', 'all_to_all') then (group_size - 1) / group_size::double
            else 1.0
        end as bus_factor
    from stats
)

select
    b.run,
    b.process_group,
    b.op,
    b.size_bucket_bytes,
    b.group_size,
    b.count,
    b.ranks,
    b.bytes,
    b.timed_count,
    b.total_ns,
    b.mean_ns,
    b.algbw_bytes_per_s,
    b.bus_factor,
    b.algbw_bytes_per_s * b.bus_factor as busbw_bytes_per_s,
    l.link_scope,
    l.link_kind,
    l.peak_bytes_per_s,
    b.algbw_bytes_per_s * b.bus_factor / l.peak_bytes_per_s as busbw_share_of_peak,
    b.instances,
    b.transfer_ns,
    b.transfer_algbw_bytes_per_s * b.bus_factor as transfer_busbw_bytes_per_s,
    b.transfer_algbw_bytes_per_s * b.bus_factor / l.peak_bytes_per_s as transfer_busbw_share_of_peak
from bandwidth as b
left join comm_group_links as l
    on l.run = b.run and l.process_group is not distinct from b.process_group
order by b.run, b.process_group, b.op, b.size_bucket_bytes
