-- What would a per-GPU power cap do to each node: how often would any of its
-- GPUs be held back, how far would the node's coincident peak come down, and
-- how many more nodes would its budget then carry?
--
-- One row per host, for the cap power_cap_w (NULL = each sample's enforced
-- limit), over complete ticks (power_node_ticks).
--   any_above_cap_share: share of ticks with at least one GPU at or above the cap;
--   capped_coincident_p99_w, capped_coincident_max_w: the node's coincident
--     power with every GPU's power clipped at the cap (demand above the cap
--     assumed held at it);
--   capped_extra_nodes_at_p99 = budget_w / capped_coincident_p99_w - 1, beside
--     the uncapped extra_nodes_at_p99 of node_power (same budget_w);
--   energy_above_cap_j: the sum over the node's GPUs of power_cap_whatif's.
-- requires: power_node_ticks, power_cap_whatif, node_power
with capped as (
    select
        host,
        count(*) filter (where complete) as ticks,
        avg((gpus_at_cap > 0)::double) filter (where complete) as any_above_cap_share,
        quantile_cont(capped_node_w, 0.99) filter (where complete) as capped_coincident_p99_w,
        max(capped_node_w) filter (where complete) as capped_coincident_max_w
    from power_node_ticks
    group by host
),
energy as (
    select
        host,
        sum(energy_j) as energy_j,
        sum(energy_above_cap_j) as energy_above_cap_j
    from power_cap_whatif
    group by host
)
select
    node_power.host,
    getvariable('power_cap_w')::double as power_cap_w,
    node_power.gpus,
    capped.ticks,
    capped.any_above_cap_share,
    node_power.budget_w,
    node_power.coincident_p99_w,
    capped.capped_coincident_p99_w,
    node_power.coincident_max_w,
    capped.capped_coincident_max_w,
    node_power.extra_nodes_at_p99,
    node_power.budget_w / nullif(capped.capped_coincident_p99_w, 0) - 1 as capped_extra_nodes_at_p99,
    energy.energy_j,
    energy.energy_above_cap_j,
    energy.energy_above_cap_j / nullif(energy.energy_j, 0) as energy_above_cap_share
from node_power
left join capped using (host)
left join energy using (host)
order by node_power.host
