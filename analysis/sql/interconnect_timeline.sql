-- Interconnect use over time: achieved throughput against the nominal peak,
-- per time bucket, for charts of when the links are busy.
--
-- One row per GPU, interconnect (link), direction and bucket of
-- interconnect_bucket_s seconds (buckets aligned to the Unix epoch;
-- bucket_start is the bucket's first instant).
--   achieved_bytes_per_s: the mean of the bucket's samples; max_bytes_per_s
--     the highest; utilisation = achieved / peak (fraction 0-1).
-- requires: interconnect_links
-- param: interconnect_bucket_s = 60
with per_bucket as (
    select
        host,
        gpu_index,
        -- buckets counted from the epoch, in whole microseconds
        make_timestamp(
            epoch_us(ts) // (getvariable('interconnect_bucket_s') * 1e6)::bigint
            * (getvariable('interconnect_bucket_s') * 1e6)::bigint
        )::timestamptz as bucket_start,
        struct_pack(samples := count(link_tx_bytes_per_s), mean := avg(link_tx_bytes_per_s), max := max(link_tx_bytes_per_s)) as link_tx_bytes_per_s,
        struct_pack(samples := count(link_rx_bytes_per_s), mean := avg(link_rx_bytes_per_s), max := max(link_rx_bytes_per_s)) as link_rx_bytes_per_s,
        struct_pack(samples := count(pcie_tx_bytes_per_s), mean := avg(pcie_tx_bytes_per_s), max := max(pcie_tx_bytes_per_s)) as pcie_tx_bytes_per_s,
        struct_pack(samples := count(pcie_rx_bytes_per_s), mean := avg(pcie_rx_bytes_per_s), max := max(pcie_rx_bytes_per_s)) as pcie_rx_bytes_per_s,
        struct_pack(samples := count(pcie_bytes_per_s), mean := avg(pcie_bytes_per_s), max := max(pcie_bytes_per_s)) as pcie_bytes_per_s
    from telemetry
    group by host, gpu_index, bucket_start
),
per_metric as (
    select *
    from per_bucket
    unpivot (stats for metric in (link_tx_bytes_per_s, link_rx_bytes_per_s, pcie_tx_bytes_per_s, pcie_rx_bytes_per_s, pcie_bytes_per_s))
)
select
    per_metric.host,
    per_metric.gpu_index,
    links.link,
    links.direction,
    per_metric.bucket_start,
    per_metric.stats.mean as achieved_bytes_per_s,
    per_metric.stats.max as max_bytes_per_s,
    links.peak_bytes_per_s,
    per_metric.stats.mean / nullif(links.peak_bytes_per_s, 0) as utilisation,
    per_metric.stats.samples as samples
from per_metric
join interconnect_links as links using (host, gpu_index, metric)
where per_metric.stats.samples > 0
order by per_metric.host, per_metric.gpu_index, links.link, links.direction, per_metric.bucket_start
