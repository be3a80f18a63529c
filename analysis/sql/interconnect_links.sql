-- Each GPU's interconnects, with their nominal peaks: the key that turns the
-- throughput columns of telemetry into rows of interconnect_usage and
-- interconnect_timeline.
--
-- One row per GPU seen in telemetry and per throughput column (metric).
--   link: 'nvlink' | 'xgmi' for the GPU-to-GPU fabric (link_*_bytes_per_s,
--     summed over the GPU's links; the kind from devices.link_kind, else the
--     hardware table, else the vendor; 'link' when none says) or 'pcie';
--   direction: 'tx' | 'rx', or 'both' for AMD's PCIe figure
--     (pcie_bytes_per_s), which does not split them;
--   peak_bytes_per_s: the nominal peak in that direction (twice the
--     per-direction peak for 'both'), from the GPU's latest devices row, else
--     the hardware table by model (hardware_peaks); NULL when unknown.
-- requires: hardware_peaks
with gpus as (
    select host, gpu_index, any_value(vendor) as vendor
    from telemetry
    group by host, gpu_index
),
devices_latest as (
    select host, gpu_index, model, link_kind, link_peak_bytes_per_s, pcie_peak_bytes_per_s
    from devices
    qualify row_number() over (partition by host, gpu_index order by ts desc) = 1
),
metrics(metric, interconnect, direction, peak_factor) as (
    values
        ('link_tx_bytes_per_s', 'link', 'tx', 1.0),
        ('link_rx_bytes_per_s', 'link', 'rx', 1.0),
        ('pcie_tx_bytes_per_s', 'pcie', 'tx', 1.0),
        ('pcie_rx_bytes_per_s', 'pcie', 'rx', 1.0),
        ('pcie_bytes_per_s', 'pcie', 'both', 2.0)
)
select
    gpus.host,
    gpus.gpu_index,
    metrics.metric,
    case
        when metrics.interconnect = 'pcie' then 'pcie'
        else coalesce(
            devices_latest.link_kind,
            hardware_peaks.link_kind,
            case lower(gpus.vendor) when 'nvidia' then 'nvlink' when 'amd' then 'xgmi' end,
            'link'
        )
    end as link,
    metrics.direction,
    metrics.peak_factor * case
        -- the collector leaves the fabric peak NULL for a GPU without links
        when metrics.interconnect = 'link' and devices_latest.host is not null then devices_latest.link_peak_bytes_per_s
        when metrics.interconnect = 'link' then hardware_peaks.link_peak_bytes_per_s
        else coalesce(devices_latest.pcie_peak_bytes_per_s, hardware_peaks.pcie_peak_bytes_per_s)
    end as peak_bytes_per_s
from gpus
cross join metrics
left join devices_latest using (host, gpu_index)
left join hardware_peaks on hardware_peaks.device_name = devices_latest.model
