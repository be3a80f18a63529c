-- Which link each process group's collectives cross, and its nominal peak.
--
-- One row per (run, process_group). A group is inside one node when the
-- hosts of its ranks are known (runs.host) and are all one host; it crosses
-- the network when its ranks are known to sit on more than one host. Where
-- hosts are unknown (a trace that records no host name), a group of at most
-- comm_max_ranks_per_node ranks is assumed to be one node and a larger one
-- to cross the network; a group whose size is unknown has no link (NULL).
--
-- link_kind / peak_bytes_per_s, one direction, as busbw is:
--   inside a node: the GPU fabric (nvlink, xgmi) over all the GPU's links,
--     else the GPU's host PCIe link ('pcie'), from hardware_peaks
--     (collector/hardware.py); the lowest peak among the group's GPUs;
--   across nodes: one network port per GPU (rail-optimised nodes, as DGX
--     and HGX systems wire them) of kind comm_network_kind, whose peak is
--     comm_network_peak_bytes_per_s. The two params go together:
--     analysis.communication sets both from collector.hardware's table.
-- A GPU model the hardware table does not know gives NULL, never a guess.
-- Where the collector inventoried a group's host and none of its GPUs has
-- an active NVLink or XGMI link (devices.link_count 0: a PCIe card, or an
-- SXM board in a VM that passes one GPU through), the fabric the model
-- would have is not there, and the group's link is the host PCIe link.
-- A group of one rank crosses no link: its link_scope is NULL.
--
-- Group members are the group's rank list where the trace records it
-- (group_ranks), else the ranks that logged its collectives.
-- requires: collectives, runs, hardware_peaks, devices
-- param: comm_max_ranks_per_node = 8
-- param: comm_network_kind = ib_ndr
-- param: comm_network_peak_bytes_per_s = 50000000000
with groups as (
    select
        run,
        process_group,
        max(coalesce(group_size, array_length(group_ranks))) as group_size,
        any_value(group_ranks) as group_ranks
    from collectives
    group by run, process_group
),

members as (
    select run, process_group, unnest(group_ranks) as rank
    from groups
    where group_ranks is not null
    union
    select distinct run, process_group, rank
    from collectives
),

member_devices as (
    select
        m.run,
        m.process_group,
        m.rank,
        r.host,
        case when not coalesce(inventory.no_fabric, false) then p.link_kind end as fabric_kind,
        case when not coalesce(inventory.no_fabric, false) then p.link_peak_bytes_per_s end as fabric_peak_bytes_per_s,
        p.pcie_peak_bytes_per_s
    from members as m
    left join (
        select run, rank, any_value(host) as host, any_value(device_name) as device_name
        from runs
        group by run, rank
    ) as r
        on r.run = m.run and r.rank = m.rank
    left join hardware_peaks as p
        on p.device_name = r.device_name
    left join (
        select host, bool_and(coalesce(link_count, 0) = 0) as no_fabric
        from devices
        group by host
    ) as inventory
        on inventory.host = r.host
),

placement as (
    select
        g.run,
        g.process_group,
        g.group_size,
        count(distinct d.host) as hosts_seen,
        count(*) filter (where d.host is null) as members_without_host,
        -- A group's GPUs are all of one kind in practice; where they are
        -- not, the slowest link bounds the collective.
        min(d.fabric_peak_bytes_per_s) as fabric_peak_bytes_per_s,
        min(d.fabric_kind) as fabric_kind,
        count(*) filter (where d.fabric_peak_bytes_per_s is null) as members_without_fabric,
        min(d.pcie_peak_bytes_per_s) as pcie_peak_bytes_per_s,
        count(*) filter (where d.pcie_peak_bytes_per_s is null) as members_without_pcie
    from groups as g
    join member_devices as d
        on d.run = g.run and d.process_group is not distinct from g.process_group
    group by g.run, g.process_group, g.group_size
),

scoped as (
    select
        *,
        case
            when group_size = 1 then null
            when hosts_seen > 1 then 'network'
            when hosts_seen = 1 and members_without_host = 0 then 'node'
            when group_size is null then null
            when group_size <= getvariable('comm_max_ranks_per_node') then 'node'
            else 'network'
        end as link_scope
    from placement
)

select
    run,
    process_group,
    group_size,
    hosts_seen,
    link_scope,
    case
        when link_scope = 'network' then getvariable('comm_network_kind')
        when link_scope = 'node' and members_without_fabric = 0 then fabric_kind
        when link_scope = 'node' and members_without_pcie = 0 then 'pcie'
    end as link_kind,
    case
        when link_scope = 'network' then getvariable('comm_network_peak_bytes_per_s')::double
        when link_scope = 'node' and members_without_fabric = 0 then fabric_peak_bytes_per_s
        when link_scope = 'node' and members_without_pcie = 0 then pcie_peak_bytes_per_s
    end as peak_bytes_per_s
from scoped
