-- How much of each GPU's interconnect bandwidth is used: achieved throughput
-- against the nominal peak, i.e. the untapped bandwidth.
--
-- One row per GPU, interconnect (link: 'nvlink' | 'xgmi' | 'pcie') and
-- direction ('tx' | 'rx' | 'both'), over all samples; a throughput the GPU
-- never reported has no row (interconnect_links names them).
--   achieved_bytes_per_s: the mean over the samples (idle time included);
--   p95_bytes_per_s (quantile_cont), max_bytes_per_s: the busy end;
--   peak_bytes_per_s: the nominal peak in that direction (NULL if unknown);
--   utilisation = achieved / peak, p95_utilisation = p95 / peak, fractions 0-1;
--   untapped_bytes_per_s = peak - achieved.
-- requires: interconnect_links
with per_gpu as (
    -- aggregate the wide columns first, then unpivot the few result rows
    select
        host,
        gpu_index,
        struct_pack(samples := count(link_tx_bytes_per_s), mean := avg(link_tx_bytes_per_s),
            p95 := quantile_cont(link_tx_bytes_per_s, 0.95), max := max(link_tx_bytes_per_s)) as link_tx_bytes_per_s,
        struct_pack(samples := count(link_rx_bytes_per_s), mean := avg(link_rx_bytes_per_s),
            p95 := quantile_cont(link_rx_bytes_per_s, 0.95), max := max(link_rx_bytes_per_s)) as link_rx_bytes_per_s,
        struct_pack(samples := count(pcie_tx_bytes_per_s), mean := avg(pcie_tx_bytes_per_s),
            p95 := quantile_cont(pcie_tx_bytes_per_s, 0.95), max := max(pcie_tx_bytes_per_s)) as pcie_tx_bytes_per_s,
        struct_pack(samples := count(pcie_rx_bytes_per_s), mean := avg(pcie_rx_bytes_per_s),
            p95 := quantile_cont(pcie_rx_bytes_per_s, 0.95), max := max(pcie_rx_bytes_per_s)) as pcie_rx_bytes_per_s,
        struct_pack(samples := count(pcie_bytes_per_s), mean := avg(pcie_bytes_per_s),
            p95 := quantile_cont(pcie_bytes_per_s, 0.95), max := max(pcie_bytes_per_s)) as pcie_bytes_per_s
    from telemetry
    group by host, gpu_index
),
per_metric as (
    select *
    from per_gpu
    unpivot (stats for metric in (link_tx_bytes_per_s, link_rx_bytes_per_s, pcie_tx_bytes_per_s, pcie_rx_bytes_per_s, pcie_bytes_per_s))
)
select
    per_metric.host,
    per_metric.gpu_index,
    links.link,
    links.direction,
    per_metric.stats.mean as achieved_bytes_per_s,
    per_metric.stats.p95 as p95_bytes_per_s,
    per_metric.stats.max as max_bytes_per_s,
    links.peak_bytes_per_s,
    per_metric.stats.mean / nullif(links.peak_bytes_per_s, 0) as utilisation,
    per_metric.stats.p95 / nullif(links.peak_bytes_per_s, 0) as p95_utilisation,
    links.peak_bytes_per_s - per_metric.stats.mean as untapped_bytes_per_s,
    per_metric.stats.samples as samples
from per_metric
join interconnect_links as links using (host, gpu_index, metric)
where per_metric.stats.samples > 0
order by per_metric.host, per_metric.gpu_index, links.link, links.direction
