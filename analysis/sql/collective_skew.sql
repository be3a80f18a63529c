-- Which rank arrives last at each collective, and how late?
--
-- One row per collective instance and rank. An instance is one call of a
-- collective on one process group, seen by every rank that logged it. A
-- collective cannot finish before its last rank arrives, so every other
-- rank waits for that one: in NCCL its kernel starts early and spins.
--
-- Arrival: the rank's start_ns for the call, the start of its GPU kernel
--   where the trace has one, else of its CPU op (NCCL logs: the time the
--   call was enqueued). Ranks of one run must share a clock: ranks whose
--   times are trace-relative (runs.time_base = 'trace') are left out, and
--   hosts' clocks are taken as synchronised (NTP/PTP: microseconds apart).
-- Instance key: (run, process_group, op, seq), see comm_calls: c10d's
--   sequence number where the trace has it, else the calls numbered in
--   start order per rank (seq_source = 'order').
-- Point-to-point ops (send, recv, send_recv) have no common arrival and are
-- left out, as are instances that only one rank logged.
--
-- arrival_skew_ns: the instance's latest arrival minus this rank's arrival
--   (how long this rank waited for the last one; 0 for the last).
-- lateness_ns: this rank's arrival minus the instance's median arrival
--   (positive: later than most).
-- spread_ns: the instance's latest arrival minus its median arrival (how
--   long the typical rank waited for the last one).
-- is_last: this rank arrived strictly after every other rank of the
--   instance (a tie for last marks no one); last_rank is that rank.
-- requires: comm_calls
with keyed as (
    select run, rank, process_group, op, seq, seq_source, start_ns, bytes, group_size
    from comm_calls
    where start_ns is not null
        and shared_clock
        and op not in ('send', 'recv', 'send_recv')
),

instances as (
    select
        run,
        process_group,
        op,
        seq,
        count(*) as ranks_seen,
        -- The two latest arrivals: equal means a tie for last.
        max(start_ns, 2) as latest_two_ns,
        arg_max(rank, (start_ns, -rank)) as latest_rank,  -- of a tie, the lowest rank: the same whatever the files' order
        median(start_ns) as median_start_ns
    from keyed
    group by run, process_group, op, seq
    having count(*) >= 2
),

marked as (
    select
        *,
        latest_two_ns[1] as latest_start_ns,
        latest_two_ns[1] > latest_two_ns[2] as has_last
    from instances
)

select
    k.run,
    k.process_group,
    k.seq,
    k.seq_source,
    k.op,
    k.rank,
    k.start_ns,
    k.bytes,
    k.group_size,
    i.ranks_seen,
    i.latest_start_ns - k.start_ns as arrival_skew_ns,
    round(k.start_ns - i.median_start_ns)::bigint as lateness_ns,
    round(i.latest_start_ns - i.median_start_ns)::bigint as spread_ns,
    i.has_last and k.rank = i.latest_rank as is_last,
    case when i.has_last then i.latest_rank end as last_rank
from keyed as k
join marked as i
    on i.run = k.run
    and i.process_group is not distinct from k.process_group
    and i.op = k.op
    and i.seq = k.seq
