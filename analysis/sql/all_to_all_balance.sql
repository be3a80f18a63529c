-- Does each rank of an all_to_all receive about as much as the others?
-- An all_to_all ends when its last transfer does, so the rank that
-- receives the most sets every rank's time. In a mixture-of-experts
-- layer that is the rank whose experts the router picked most often.
--
-- One row per run, process group and rank, over the group's all_to_all
-- instances (keyed as in comm_calls) that at least two ranks logged with
-- their element counts (Kineto's In/Out msg nelems; NCCL logs have none).
-- received_bytes, sent_bytes: Out (In) msg nelems × the element size,
--   summed over those instances. The element size is bytes over the
--   larger count (collectives.bytes is that count × the dtype's size).
-- received_vs_mean: the rank's received bytes over the mean rank's, both
--   summed over the same instances (1: an even share; 2: twice the mean),
--   so a big call weighs more than a small one. The mean is over the ranks
--   that were traced: ranks_seen says how many at most, against the
--   group's group_size.
-- max_received_vs_mean: the largest such ratio at one instance.
-- most_received_share: the share of its instances at which this rank
--   received strictly more than every other traced rank (a tie marks no
--   one).
-- peer_imbalance: from the per-peer split sizes where the trace records
--   them (uneven all_to_all_single): the mean over those instances of the
--   largest peer's share over the mean peer's, received side. NULL where no
--   instance has splits (an even split, or not recorded). Splits PyTorch
--   cut to their first 30 peers are left out (split_instances counts the
--   rest).
-- mean_dur_ns: the rank's mean all_to_all kernel time (NULL where only CPU
--   ops timed it).
-- requires: comm_calls
with calls as (
    select
        run,
        rank,
        process_group,
        seq,
        group_size,
        dur_ns,
        round(out_nelems * (bytes / greatest(in_nelems, out_nelems)))::bigint as received_bytes,
        round(in_nelems * (bytes / greatest(in_nelems, out_nelems)))::bigint as sent_bytes,
        case
            when not coalesce(split_sizes_truncated, false) and array_length(out_split_sizes) >= 2
                then list_max(out_split_sizes) / nullif(list_avg(out_split_sizes), 0)
        end as peer_imbalance
    from comm_calls
    where op = 'all_to_all'
        and bytes > 0
        and in_nelems is not null
        and out_nelems is not null
),

instances as (
    select
        run,
        process_group,
        seq,
        count(*) as ranks_seen,
        avg(received_bytes) as mean_received_bytes,
        -- The two largest: equal means a tie for the most.
        max(received_bytes, 2) as top_two_bytes
    from calls
    group by run, process_group, seq
    having count(*) >= 2
),

per_instance as (
    select
        c.*,
        i.ranks_seen,
        i.mean_received_bytes,
        c.received_bytes / nullif(i.mean_received_bytes, 0) as received_vs_mean,
        c.received_bytes = i.top_two_bytes[1] and i.top_two_bytes[1] > i.top_two_bytes[2] as received_most
    from calls as c
    join instances as i
        on i.run = c.run
        and i.process_group is not distinct from c.process_group
        and i.seq = c.seq
)

select
    run,
    process_group,
    rank,
    count(*) as instances,
    max(ranks_seen) as ranks_seen,
    max(group_size) as group_size,
    sum(received_bytes)::bigint as received_bytes,
    sum(sent_bytes)::bigint as sent_bytes,
    sum(received_bytes) / nullif(sum(mean_received_bytes), 0) as received_vs_mean,
    max(received_vs_mean) as max_received_vs_mean,
    avg(received_most::double) as most_received_share,
    avg(peer_imbalance) as peer_imbalance,
    count(peer_imbalance) as split_instances,
    avg(dur_ns) as mean_dur_ns
from per_instance
group by run, process_group, rank
order by run, process_group, rank
