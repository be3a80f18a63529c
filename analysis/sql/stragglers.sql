-- Which ranks hold the others back? A straggler ranking per run.
--
-- One row per run and rank that took part in collective instances seen by
-- at least two ranks (collective_skew), most likely straggler first
-- (straggler_order = 1).
--
-- Who arrives last at an instance whose ranks all arrive within a few
-- microseconds is launch jitter, not a straggler. So the share of last
-- arrivals counts only decisive instances: those whose spread (latest
-- minus median arrival) is at least straggler_min_spread_ns.
--
-- instances: collective instances the rank took part in.
-- decisive_instances: those that were decisive.
-- last_count, share_last: how many / what share of the decisive instances
--   the rank arrived strictly last at (NULL share where none was decisive).
-- expected_share_last: the share a rank would have by chance, if arrival
--   order were random: the mean of 1 / ranks_seen over its decisive
--   instances (0.5 for two ranks, 0.125 for eight).
-- score: share_last corrected for chance,
--   (share_last - expected) / (1 - expected): 1 = last every time,
--   0 = as often as chance, below 0 = less often.
-- mean_lateness_ns / median_lateness_ns / max_lateness_ns: the rank's
--   arrival minus the instance's median arrival, over all its instances
--   (the median is robust to a single hiccup, the mean is not).
-- lateness_z: the rank's mean lateness as a z-score among the run's ranks
--   (NULL where all ranks are alike).
-- wait_caused_ns: over the instances it arrived last at, the sum of their
--   spread: how long the typical rank waited for it in total.
-- ranks_seen, group_size: the most ranks traced at one of its instances,
--   and the largest group it took part in; fewer seen than the group
--   holds means "last" is last among the ranks traced.
-- evidence: the same numbers as a JSON string, for reports.
-- requires: collective_skew
-- param: straggler_min_spread_ns = 10000
with marked as (
    select
        *,
        spread_ns >= getvariable('straggler_min_spread_ns') as decisive
    from collective_skew
),

per_rank as (
    select
        run,
        rank,
        count(*) as instances,
        count(*) filter (where decisive) as decisive_instances,
        count(*) filter (where decisive and is_last) as last_count,
        avg(1.0 / ranks_seen) filter (where decisive) as expected_share_last,
        avg(lateness_ns) as mean_lateness_ns,
        round(median(lateness_ns))::bigint as median_lateness_ns,
        max(lateness_ns) as max_lateness_ns,
        coalesce(sum(spread_ns) filter (where is_last), 0)::bigint as wait_caused_ns,
        max(ranks_seen) as ranks_seen,
        max(group_size) as group_size
    from marked
    group by run, rank
),

scored as (
    select
        *,
        last_count / nullif(decisive_instances, 0)::double as share_last,
        (last_count / nullif(decisive_instances, 0)::double - expected_share_last)
            / (1 - expected_share_last) as score,
        (mean_lateness_ns - avg(mean_lateness_ns) over (partition by run))
            / nullif(stddev_pop(mean_lateness_ns) over (partition by run), 0) as lateness_z
    from per_rank
)

select
    run,
    rank,
    score,
    row_number() over (
        partition by run order by score desc nulls last, mean_lateness_ns desc, rank
    ) as straggler_order,
    instances,
    decisive_instances,
    last_count,
    share_last,
    expected_share_last,
    round(mean_lateness_ns)::bigint as mean_lateness_ns,
    median_lateness_ns,
    max_lateness_ns,
    lateness_z,
    wait_caused_ns,
    ranks_seen,
    group_size,
    json_object(
        'instances', instances,
        'decisive_instances', decisive_instances,
        'last_count', last_count,
        'share_last', round(share_last, 4),
        'expected_share_last', round(expected_share_last, 4),
        'mean_lateness_ns', round(mean_lateness_ns)::bigint,
        'median_lateness_ns', median_lateness_ns,
        'max_lateness_ns', max_lateness_ns,
        'lateness_z', round(lateness_z, 3),
        'wait_caused_ns', wait_caused_ns,
        'ranks_seen', ranks_seen,
        'group_size', group_size
    )::varchar as evidence
from scored
order by run, straggler_order
