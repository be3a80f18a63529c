-- What telemetry the dataset covers: one row per GPU (host, gpu_index) with
-- its model, first and last sample and sampling interval. The dashboard's
-- Overview lists it and the Telemetry page picks its time range and bucket
-- width from it.
--   first_ts, last_ts: the GPU's first and last sample (UTC);
--   samples: its telemetry rows;
--   interval_s: the typical time between its samples, the span over the
--     samples (NULL with fewer than two);
--   model, vendor: from its latest devices row, else the telemetry's vendor.
-- requires: telemetry, devices
with per_gpu as (
    select
        host,
        gpu_index,
        any_value(vendor) as vendor,
        min(ts) as first_ts,
        max(ts) as last_ts,
        count(*) as samples
    from telemetry
    group by host, gpu_index
),
models as (
    select host, gpu_index, arg_max(model, ts) as model, arg_max(vendor, ts) as vendor
    from devices
    group by host, gpu_index
)
select
    per_gpu.host,
    per_gpu.gpu_index,
    models.model,
    coalesce(models.vendor, per_gpu.vendor) as vendor,
    per_gpu.first_ts,
    per_gpu.last_ts,
    per_gpu.samples,
    case when per_gpu.samples > 1
        then (epoch_us(per_gpu.last_ts) - epoch_us(per_gpu.first_ts)) / 1e6 / (per_gpu.samples - 1)
    end as interval_s
from per_gpu
left join models using (host, gpu_index)
order by per_gpu.host, per_gpu.gpu_index
