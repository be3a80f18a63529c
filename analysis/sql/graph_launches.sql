-- How much of each rank's launched GPU work a CUDA or HIP graph replayed,
-- and how much was launched kernel by kernel: the graph coverage that
-- torch.compile(mode="reduce-overhead") or a graph-capturing inference
-- server aims to raise.
--
-- One row per (run, rank) with launched kernels (kernel_launches):
--   replays              graph replay calls (graph_launch: cudaGraphLaunch,
--                        cuGraphLaunch, hipGraphLaunch), counted by their
--                        correlation id
--   graph_kernels        GPU activities those replays ran (kernels, copies,
--                        sets; nsys's whole-graph rows count one each)
--   graph_gpu_ns         their GPU time
--   replay_call_ns       the replay calls' CPU time, each call once
--   launched_kernels, launched_gpu_ns   every launched activity of the rank
--   kernel_share         graph_kernels / launched_kernels
--   gpu_time_share       graph_gpu_ns / launched_gpu_ns
-- A rank without graphs has 0 replays and NULL graph times.
-- requires: kernel_launches
with replays as (
    -- the distinct calls over the replayed kernels alone: counting them
    -- with a filter over every launched kernel took 1 s on 10M kernels
    select run, rank, count(distinct correlation_id) as replays
    from kernel_launches
    where graph_launch
    group by run, rank
),
launched as (
    select
        run,
        rank,
        count(*) filter (where graph_launch) as graph_kernels,
        sum(dur_ns) filter (where graph_launch)::bigint as graph_gpu_ns,
        sum(launch_call_ns) filter (where graph_launch)::bigint as replay_call_ns,
        count(*) as launched_kernels,
        sum(dur_ns)::bigint as launched_gpu_ns,
        count(*) filter (where graph_launch) / count(*) as kernel_share,
        sum(dur_ns) filter (where graph_launch) / nullif(sum(dur_ns), 0) as gpu_time_share
    from kernel_launches
    group by run, rank
)
select
    launched.run,
    launched.rank,
    coalesce(replays.replays, 0) as replays,
    launched.graph_kernels,
    launched.graph_gpu_ns,
    launched.replay_call_ns,
    launched.launched_kernels,
    launched.launched_gpu_ns,
    launched.kernel_share,
    launched.gpu_time_share
from launched
left join replays using (run, rank)
order by launched.run, launched.rank
