-- The telemetry of some hosts: those named in telemetry_hosts (a list of host
-- names), or every host where it is NULL, the default.
--
-- One row per telemetry row of those hosts, with telemetry's columns. The
-- power analyses and the time lines read telemetry through it, so a page
-- can ask about a few hosts of a fleet without reading the samples of the
-- others: the filter reaches the Parquet scan, and each file holds one
-- host, so the other hosts' files are skipped rather than read and dropped
-- (16 hosts of 8 GPUs, a day at 1 Hz: power_headroom of 2 hosts takes an
-- eighth of its time over all 16).
-- param: telemetry_hosts = null
-- requires: telemetry
select *
from telemetry
where getvariable('telemetry_hosts') is null
    or list_contains(getvariable('telemetry_hosts')::varchar[], host)
