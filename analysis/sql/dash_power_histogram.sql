-- The distribution of each GPU's sampled power, as a histogram computed in
-- the database: the Power headroom page draws it against the GPU's limit.
--
-- One row per (host, gpu_index, bin) with samples: bins of
-- dash_power_bin_w watts, [bin_low_w, bin_low_w + dash_power_bin_w);
-- samples in the bin and their share of the GPU's samples with power;
-- limit_w: the GPU's enforced limit at its last sample.
-- param: dash_power_bin_w = 10
-- requires: host_telemetry
with gpu_limits as (
    select host, gpu_index, arg_max(power_limit_w, ts) filter (where power_limit_w is not null) as limit_w
    from host_telemetry
    group by host, gpu_index
),
binned as (
    select
        host,
        gpu_index,
        floor(power_w / getvariable('dash_power_bin_w')::double) * getvariable('dash_power_bin_w')::double as bin_low_w,
        count(*) as samples
    from host_telemetry
    where power_w is not null
    group by all
)
select
    binned.host,
    binned.gpu_index,
    binned.bin_low_w,
    binned.bin_low_w + getvariable('dash_power_bin_w')::double as bin_high_w,
    binned.samples,
    binned.samples / sum(binned.samples) over (partition by binned.host, binned.gpu_index) as share,
    gpu_limits.limit_w
from binned
join gpu_limits using (host, gpu_index)
order by binned.host, binned.gpu_index, binned.bin_low_w
