-- How much of its power budget does each node use at once, and how many more
-- such nodes could the same budget carry (power oversubscription)?
--
-- One row per host. Coincident power is the sum over the node's GPUs at one
-- tick (power_node_ticks, complete ticks only: every GPU reported).
--   coincident_p50_w, coincident_p99_w: percentiles of that sum
--     (quantile_cont, linear interpolation); coincident_max_w its highest.
--   limit_sum_w: the sum of the GPUs' enforced limits (each GPU's last).
--   budget_w: the power provisioned for the node's GPUs: node_budget_w where
--     set (one figure for every node), else limit_sum_w.
--   extra_nodes_at_p99 = budget_w / coincident_p99_w - 1: how many more nodes
--     like this one the budget provisioned for it would carry if each node
--     were provisioned at this node's p99 coincident power. A fraction: 0.4
--     means ten such nodes' budgets carry four more nodes; negative means the
--     node already draws more than its budget 1% of the time.
--   fleet_budget_w, fleet_extra_nodes_at_p99: the same over every node with
--     power data: floor(sum of budget_w / mean coincident_p99_w) - nodes,
--     the whole number of extra nodes the total budget carries at the mean
--     node's p99 (the same on every row).
-- A host with no power readings has a row with NULL statistics.
-- requires: power_node_ticks, host_telemetry
-- param: node_budget_w = null
with gpu_limits as (
    select
        host,
        gpu_index,
        arg_max(power_limit_w, ts) filter (where power_limit_w is not null) as limit_w
    from host_telemetry
    where power_w is not null
    group by host, gpu_index
),
limits as (
    select host, sum(limit_w) as limit_sum_w
    from gpu_limits
    group by host
),
coincident as (
    select
        host,
        any_value(gpus) as gpus,
        count(*) filter (where complete) as ticks,
        quantile_cont(node_w, 0.50) filter (where complete) as coincident_p50_w,
        quantile_cont(node_w, 0.99) filter (where complete) as coincident_p99_w,
        max(node_w) filter (where complete) as coincident_max_w
    from power_node_ticks
    group by host
),
budgeted as (
    select
        coincident.*,
        limits.limit_sum_w,
        coalesce(getvariable('node_budget_w')::double, limits.limit_sum_w) as budget_w
    from coincident
    left join limits using (host)
)
select
    host,
    gpus,
    ticks,
    budget_w,
    limit_sum_w,
    coincident_p50_w,
    coincident_p99_w,
    coincident_max_w,
    budget_w - coincident_p99_w as node_headroom_w,
    budget_w / nullif(coincident_p99_w, 0) - 1 as extra_nodes_at_p99,
    sum(case when coincident_p99_w is not null then budget_w end) over () as fleet_budget_w,
    floor(
        sum(case when coincident_p99_w is not null then budget_w end) over ()
        / nullif(avg(coincident_p99_w) over (), 0)
    )::bigint - count(coincident_p99_w) over () as fleet_extra_nodes_at_p99
from budgeted
order by host
