-- The power-cap what-if over a range of caps at once, for a curve: per node
-- and cap, how often a GPU would be held back and how many more nodes the
-- budget would carry at p99 (power_cap_whatif_node's figures, one cap per
-- row, from one pass over the telemetry).
--
-- One row per (host, power_cap_w) for dash_cap_points caps evenly spaced
-- from dash_cap_min_w to dash_cap_max_w, over complete ticks (every GPU of
-- the node reported power, as in power_node_ticks).
--   any_above_cap_share: share of ticks with a GPU at or above the cap;
--   capped_coincident_p99_w: p99 of the node's power with each GPU clipped
--     at the cap;
--   budget_w: node_power's (node_budget_w, else the sum of the limits);
--   capped_extra_nodes_at_p99 = budget_w / capped_coincident_p99_w - 1.
-- param: dash_cap_min_w = 200
-- param: dash_cap_max_w = 700
-- param: dash_cap_points = 8
-- requires: host_telemetry, node_power
with caps as (
    select
        getvariable('dash_cap_min_w')::double
            + i * (getvariable('dash_cap_max_w')::double - getvariable('dash_cap_min_w')::double)
            / greatest(getvariable('dash_cap_points')::int - 1, 1) as cap_w
    from (select unnest(generate_series(0, greatest(getvariable('dash_cap_points')::int, 1) - 1)) as i) as t
),
gpus as (
    select host, count(distinct gpu_index) as gpus
    from host_telemetry
    where power_w is not null
    group by host
),
tick_powers as (
    -- each node tick's GPU powers once, then every cap applied to the list
    -- (a cross join of the ticks, not of every sample, with the caps)
    select host, ts, list(power_w) as powers_w
    from host_telemetry
    where power_w is not null
    group by host, ts
),
ticks as (
    select
        t.host,
        caps.cap_w,
        t.ts,
        array_length(t.powers_w) as gpus_reporting,
        list_sum(list_transform(t.powers_w, lambda p: least(p, caps.cap_w))) as capped_node_w,
        array_length(list_filter(t.powers_w, lambda p: p >= caps.cap_w)) as gpus_at_cap
    from tick_powers t
    cross join caps
),
per_cap as (
    select
        ticks.host,
        ticks.cap_w,
        count(*) as ticks,
        avg((ticks.gpus_at_cap > 0)::double) as any_above_cap_share,
        quantile_cont(ticks.capped_node_w, 0.99) as capped_coincident_p99_w
    from ticks
    join gpus on gpus.host = ticks.host and ticks.gpus_reporting = gpus.gpus
    group by ticks.host, ticks.cap_w
)
select
    per_cap.host,
    per_cap.cap_w as power_cap_w,
    per_cap.ticks,
    per_cap.any_above_cap_share,
    per_cap.capped_coincident_p99_w,
    node_power.budget_w,
    node_power.budget_w / nullif(per_cap.capped_coincident_p99_w, 0) - 1 as capped_extra_nodes_at_p99
from per_cap
join node_power using (host)
order by per_cap.host, per_cap.cap_w
