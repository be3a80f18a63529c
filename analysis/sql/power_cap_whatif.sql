-- What would a per-GPU power cap have cost: how often would it have held
-- each GPU back, and how much energy lay above it?
--
-- One row per GPU. power_cap_w is the cap in watts for every GPU; NULL (the
-- default) means each sample's enforced limit, i.e. how often the GPU sat at
-- its present limit.
--   samples_above_cap, above_cap_share: samples with power_w at or above
--     the cap (at: a GPU held by its cap reads the cap), and their share of
--     the samples with power;
--   above_cap_s: the time of those samples' intervals;
--   energy_j: the right-rectangle integral of power_w (intervals shorter than
--     power_max_gap_s, see power_samples); energy_above_cap_j: the part of
--     it above the cap, the energy the cap would have withheld (as time
--     stretched rather than saved, if the work stays the same);
--   cap_above_limit: the cap is above the GPU's enforced limit. Power never
--     exceeded that limit, so demand above it is unknown and the figures
--     under-state what such a cap would allow.
-- The node view of the same cap is power_cap_whatif_node.
-- requires: power_samples
-- param: power_cap_w = null
with capped as (
    select
        *,
        coalesce(getvariable('power_cap_w')::double, power_limit_w) as cap_w
    from power_samples
    where power_w is not null
),
per_gpu as (
    select
        host,
        gpu_index,
        arg_max(power_limit_w, ts) filter (where power_limit_w is not null) as limit_w,
        count(*) as samples,
        count(*) filter (where power_w >= cap_w) as samples_above_cap,
        sum(interval_s) filter (where power_w >= cap_w and not gap) as above_cap_s,
        sum(power_w * interval_s) filter (where not gap) as energy_j,
        sum(case when power_w > cap_w then (power_w - cap_w) * interval_s else 0 end) filter (where not gap) as energy_above_cap_j
    from capped
    group by host, gpu_index
)
select
    host,
    gpu_index,
    coalesce(getvariable('power_cap_w')::double, limit_w) as cap_w,
    limit_w,
    coalesce(getvariable('power_cap_w')::double, limit_w) > limit_w as cap_above_limit,
    samples,
    samples_above_cap,
    samples_above_cap / samples as above_cap_share,
    coalesce(above_cap_s, 0) as above_cap_s,
    energy_j,
    energy_above_cap_j,
    energy_above_cap_j / nullif(energy_j, 0) as energy_above_cap_share
from per_gpu
order by host, gpu_index
