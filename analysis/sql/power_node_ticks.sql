-- The power of each node at each tick: the sum over its GPUs (coincident power).
--
-- One row per (host, ts). The collector samples every GPU of a node on one
-- wall-clock grid, so the GPUs of one tick share `ts` and a node's power is
-- a plain sum per (host, ts).
--   gpus: GPUs of the host that ever reported power;
--   complete: every one of them reported power at this tick. A tick with a
--     GPU missing (lost, a failed sample) would under-count the node, so
--     node statistics (node_power, power_cap_whatif_node) use complete ticks.
--   capped_node_w: the same sum with each GPU's power clipped at the what-if
--     cap power_cap_w (NULL = each sample's enforced limit);
--   gpus_at_cap: GPUs at or above that cap at this tick.
-- param: power_cap_w = null
-- requires: host_telemetry
with gpus as (
    select
        host,
        count(distinct gpu_index) filter (where power_w is not null) as gpus
    from host_telemetry
    group by host
),
ticks as (
    select
        host,
        ts,
        count(power_w) as gpus_reporting,
        sum(power_w) as node_w,
        -- least skips NULLs: a GPU without a cap keeps its power
        sum(least(power_w, coalesce(getvariable('power_cap_w')::double, power_limit_w))) filter (where power_w is not null) as capped_node_w,
        count(*) filter (where power_w >= coalesce(getvariable('power_cap_w')::double, power_limit_w)) as gpus_at_cap
    from host_telemetry
    group by host, ts
)
select
    ticks.host,
    ticks.ts,
    gpus.gpus,
    ticks.gpus_reporting,
    gpus.gpus > 0 and ticks.gpus_reporting = gpus.gpus as complete,
    ticks.node_w,
    ticks.capped_node_w,
    ticks.gpus_at_cap
from ticks
join gpus using (host)
