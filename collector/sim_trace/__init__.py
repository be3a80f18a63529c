"""A seeded synthesiser of PyTorch-profiler (Kineto) traces: `gpulens demo` data.

It writes one Chrome-trace JSON per rank of a data-parallel training job on
H100 nodes, in the layout Kineto itself writes (same keys, same multi-line
event format, times in µs with three decimals relative to
`baseTimeNanoseconds`), so ingesters, HTA and Perfetto read it like a real
trace. It is a product feature (demos, load tests, the ingest benchmark),
not a test helper.

The model, per profiler step and rank:
- CPU: data loading, two pinned host→device copies, a DDP forward of a
  transformer (`layers` blocks of layer norm, GEMMs, flash attention, GELU,
  residual adds), backward on the autograd thread, a per-parameter AdamW
  (many tiny kernels: the CPU-bound phase), then `loss.item()`, which
  synchronises. Each op launches through cudaLaunchKernel (correlation id,
  ac2g flow); a full launch queue (1024 kernels) makes the launch call block.
- GPU: compute on stream 7; NCCL on stream 24, overlapping backward: one
  all_reduce per layer's gradient bucket (bf16), a reduce_scatter of the
  embedding gradient, an all_gather of the updated embedding shard and a
  float all_reduce of the loss, each as `record_param_comms` with the full
  collective arguments and an incrementing `Seq`.
- Coupling: a collective's kernels end together on every rank, when the
  last rank has arrived plus the transfer time (bytes over the bus
  bandwidth, nccl-tests factors). A planted `straggler_rank` computes
  15-30 % slower, so it arrives last; the others' NCCL kernels start
  earlier and last longer (they wait) — the usual signature.

Every number comes from the seed: the same arguments give byte-identical
files (floats are formatted from integers or with a fixed precision).

The job (which kernels and collectives, their sizes and durations) is
`job`; one rank's event writers are `events`; this module runs the ranks
through their steps and writes the files.
"""

from __future__ import annotations

import gzip as gzip_module
import os
import random
from pathlib import Path
from typing import BinaryIO, Generator

from gpulens.collector.errors import UsageError
from gpulens.collector.sim_trace.events import (COMM_STREAM, COMPUTE_STREAM, _close, _cpu_only, _launch, _open, _Rank,
                                        _run_collective, _runtime, _us, _wait_comm)
from gpulens.collector.sim_trace.job import MIN_KERNELS_PER_STEP, Plan, build_plan, device_properties_json, distributed_info_json

GPUS_PER_HOST = 8
# Profiling usually starts after wait/warm-up steps; c10d's first few
# sequence numbers go to DDP's initial parameter broadcast.
FIRST_PROFILER_STEP = 2
_SEQ_AT_START = 3
# CUPTI numbers every API call since the process started, so the first
# correlation id of a profiled step is already large (warm-up steps).
_CORRELATION_AT_START = 40_000
# Where the trace starts, relative to baseTimeNanoseconds.
_TRACE_START_NS = 3_600_000_000_000


def _rank_step(r: _Rank, plan: Plan, step: int, seq0: int) -> Generator[int, int, None]:
    """All events of one profiler step on one rank; yields at each collective."""
    rnd = r.rng.random
    seq = seq0
    r.tid = r.main_tid
    step_name = f'"ProfilerStep#{step}"'
    step_token = _open(r)
    r.cpu_ns += 20_000
    # Data loading is CPU-only; every few steps a slow batch.
    r.gap_ns = 24_000
    load_ns = 800_000 + int(rnd() * 400_000)
    if rnd() < 0.03:
        load_ns += 6_000_000
    _cpu_only(r, '"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"', load_ns)
    for k in plan.head:
        _launch(r, k)
    _cpu_only(r, '"Optimizer.zero_grad#AdamW.zero_grad"', 40_000 + int(rnd() * 80_000))

    token = _open(r)
    for k in plan.forward:
        _launch(r, k)
    _close(r, token, '"DistributedDataParallel.forward"', gpu=True)

    # Backward on the autograd thread; DDP launches a bucket's all_reduce as
    # soon as its gradients are ready, overlapping the rest of backward.
    r.tid = r.autograd_tid
    r.gap_ns = 8_000
    r.cpu_ns += 30_000
    for k in plan.backward_head:
        _launch(r, k)
    yield from _run_collective(r, plan.head_bucket, seq)
    seq += 1
    for _ in range(plan.layers):
        for k in plan.layer_backward:
            _launch(r, k)
        yield from _run_collective(r, plan.layer_bucket, seq)
        seq += 1
    for k in plan.embedding_backward:
        _launch(r, k)
    yield from _run_collective(r, plan.reduce_scatter, seq)
    seq += 1

    r.tid = r.main_tid
    r.gap_ns = 24_000
    r.cpu_ns += 25_000
    _wait_comm(r)
    token = _open(r)
    for k in plan.optimizer:
        _launch(r, k)
    _close(r, token, '"Optimizer.step#AdamW.step"', gpu=True)
    yield from _run_collective(r, plan.all_gather, seq)
    seq += 1
    yield from _run_collective(r, plan.loss_all_reduce, seq)
    _wait_comm(r)
    _launch(r, plan.item)
    # loss.item(): cudaStreamSynchronize returns when the copy has landed.
    sync_start = r.cpu_ns - 2_000
    sync_end = max(sync_start + 3_000, r.compute_free_ns + 2_000)
    _runtime(r, "cudaStreamSynchronize", 131, sync_start, sync_end - sync_start, r.ext_id)
    r.cpu_ns = sync_end + 10_000 + int(rnd() * 20_000)
    _close(r, step_token, step_name)


def _advance(gen: Generator[int, int, None], value: int | None) -> int | None:
    try:
        return next(gen) if value is None else gen.send(value)
    except StopIteration:
        return None


def _run_step(ranks: list[_Rank], plan: Plan, step: int, seq0: int, rng: random.Random) -> None:
    """Advance every rank through one step, meeting at each collective."""
    gens = [_rank_step(r, plan, step, seq0) for r in ranks]
    ready = [_advance(g, None) for g in gens]
    for c in plan.step_collectives:
        if any(t is None for t in ready):
            raise RuntimeError("ranks disagree on the collective sequence")
        end = max(ready) + c.xfer_ns + int(rng.random() * 2_000)  # type: ignore[type-var]
        ready = [_advance(g, end) for g in gens]
    if any(t is not None for t in ready):
        raise RuntimeError("ranks disagree on the collective sequence")


def _metadata(r: _Rank, host_ts_ns: int, end_ns: int) -> list[str]:
    ts = _us(host_ts_ns)

    def meta(name: str, pid: int | str, tid: int | str, key: str, value: str) -> str:
        return f'  {{\n    "name": "{name}", "ph": "M", "ts": {ts}, "pid": {pid}, "tid": {tid},\n    "args": {{\n      "{key}": {value}\n    }}\n  }}'

    events = [
        meta("process_name", r.pid, 0, "name", '"python3.11"'),
        meta("process_name", r.device, 0, "name", '"python3.11"'),
        meta("process_labels", r.device, 0, "labels", f'"GPU {r.device}"'),
        meta("process_sort_index", r.device, 0, "sort_index", str(16_777_216 + r.device)),
    ]
    for stream in (COMPUTE_STREAM, COMM_STREAM):
        events.append(meta("thread_name", r.device, stream, "name", f'"stream {stream} "'))
        events.append(meta("thread_sort_index", r.device, stream, "sort_index", str(stream)))
    for tid, label in ((r.main_tid, "python"), (r.autograd_tid, "pt_autograd_0")):
        events.append(meta("thread_name", r.pid, tid, "name", f'"thread {tid} ({label})"'))
        events.append(meta("thread_sort_index", r.pid, tid, "sort_index", str(tid)))
    dur = end_ns - host_ts_ns
    events.append(
        f'  {{\n    "ph": "X", "cat": "Trace", "ts": {ts}, "dur": {_us(dur)},\n    "pid": "Spans", "tid": "PyTorch Profiler",\n'
        f'    "name": "PyTorch Profiler (0)",\n    "args": {{\n      "Op count": 0\n    }}\n  }}'
    )
    events.append(f'  {{\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {ts}\n  }}')
    events.append(f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", "ts": {_us(end_ns)}\n  }}')
    return events


def _mix(*values: int) -> int:
    """A reproducible 63-bit integer from a few integers (splitmix64)."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 31)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
    return x >> 1


def rank_pid(seed: int, rank: int) -> int:
    """The pid of `rank`'s process in the traces of `seed`."""
    return 10_000 + _mix(seed, rank, 1) % 3_000_000


def write_training_traces(
    out_dir: Path,
    ranks: int = 8,
    steps: int = 10,
    seed: int = 0,
    straggler_rank: int | None = None,
    kernels_per_step: int = 200,
    gzip: bool = False,
    base_time_ns: int = 1_767_225_600_000_000_000,
    world_hosts: int | None = None,
) -> list[Path]:
    """Write one Kineto trace per rank of a simulated DDP job; return the paths.

    `kernels_per_step` is the exact number of GPU activities (kernels,
    copies, memsets, NCCL kernels) per rank and step; the transformer's
    depth follows from it (at least `MIN_KERNELS_PER_STEP`). Ranks fill
    nodes of 8 GPUs, or spread evenly over `world_hosts` nodes; collectives
    that span nodes run at network rather than NVLink bandwidth. Files are named as
    `tensorboard_trace_handler` names them, with the rank in front:
    `rank-<r>.<host>_<pid>.<ms>.pt.trace.json[.gz]`.
    """
    if ranks < 1:
        raise UsageError(f"ranks must be at least 1, got {ranks}")
    if steps < 1:
        raise UsageError(f"steps must be at least 1, got {steps}")
    if straggler_rank is not None and not 0 <= straggler_rank < ranks:
        raise UsageError(f"straggler rank {straggler_rank} is not one of the {ranks} ranks")
    if world_hosts is None:
        per_host = min(ranks, GPUS_PER_HOST)
    elif world_hosts < 1 or ranks % world_hosts:
        raise UsageError(f"{ranks} ranks do not spread evenly over {world_hosts} hosts")
    else:
        per_host = ranks // world_hosts
    plan = build_plan(kernels_per_step, ranks, multi_host=per_host < ranks)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    states: list[_Rank] = []
    for rank in range(ranks):
        pid = rank_pid(seed, rank)
        start = _TRACE_START_NS + _mix(seed, rank, 2) % 400_000
        states.append(
            _Rank(rank=rank, device=rank % per_host, pid=pid, main_tid=pid, autograd_tid=pid + 29 + rank % 7,
                  rng=random.Random(_mix(seed, rank, 3)), cpu_ns=start, compute_free_ns=start, comm_free_ns=start,
                  corr_id=_CORRELATION_AT_START + _mix(seed, rank, 5) % 20_000)
        )
    coordinator_rng = random.Random(_mix(seed, 0xC0FFEE))
    starts = [r.cpu_ns for r in states]

    # Names need the end time: write under temporary names, then rename.
    temp_paths = [out_dir / f".rank-{r.rank}.{os.getpid()}.partial" for r in states]
    raw = [open(p, "wb") for p in temp_paths]
    sinks: list[BinaryIO] = [
        gzip_module.GzipFile(filename="", mode="wb", fileobj=h, mtime=0, compresslevel=3) if gzip else h for h in raw
    ]
    paths: list[Path] = []
    try:
        for r, sink in zip(states, sinks):
            sink.write(_header(r, ranks, per_host).encode())
        for i in range(steps):
            step = FIRST_PROFILER_STEP + i
            slow_factor = 1.15 + 0.15 * coordinator_rng.random()
            for r in states:
                r.slow = slow_factor if r.rank == straggler_rank else 1.0 + 0.02 * r.rng.random()
            _run_step(states, plan, step, _SEQ_AT_START + step * len(plan.step_collectives), coordinator_rng)
            for r, sink in zip(states, sinks):
                chunk = ",\n".join(r.cpu + r.gpu)
                sink.write((chunk if i == 0 else ",\n" + chunk).encode())
                r.cpu.clear()
                r.gpu.clear()
        for r, start, sink in zip(states, starts, sinks):
            end = max(r.cpu_ns, r.compute_free_ns, r.comm_free_ns)
            sink.write((",\n" + ",\n".join(_metadata(r, start, end)) + _footer(r, seed, base_time_ns)).encode())
            stamp_ms = (base_time_ns + end) // 1_000_000
            host = _host_name(r.rank, per_host)
            suffix = ".pt.trace.json.gz" if gzip else ".pt.trace.json"
            paths.append(out_dir / f"rank-{r.rank}.{host}_{r.pid}.{stamp_ms}{suffix}")
    finally:
        for sink, handle in zip(sinks, raw):
            sink.close()
            handle.close()
        if len(paths) != len(temp_paths):
            for temp in temp_paths:
                temp.unlink(missing_ok=True)
    for temp, path in zip(temp_paths, paths):
        os.replace(temp, path)
    return paths


def _header(r: _Rank, ranks: int, per_host: int) -> str:
    return (
        '{\n  "schemaVersion": 1,\n'
        f'  "deviceProperties": {device_properties_json(per_host)},\n'
        f'  "distributedInfo": {distributed_info_json(r.rank, ranks)},\n'
        # What `prof.add_metadata_json("hostname", ...)` adds; Kineto itself
        # records no host name.
        f'  "hostname": "{_host_name(r.rank, per_host)}",\n'
        '  "record_shapes": 0,\n  "traceEvents": [\n'
    )


def _host_name(rank: int, per_host: int) -> str:
    return f"sim-node-{rank // per_host:02d}"


def _footer(r: _Rank, seed: int, base_time_ns: int) -> str:
    token = f"{_mix(seed, r.rank, 4):016x}"[:8]
    return (
        f'\n  ],\n  "traceName": "/tmp/tmp{token}.json",\n  "displayTimeUnit": "ms",\n'
        f'  "baseTimeNanoseconds": {base_time_ns}\n}}\n'
    )


# Besides this module's own: what callers import from `job` through the package.
__all__ = ["FIRST_PROFILER_STEP", "GPUS_PER_HOST", "MIN_KERNELS_PER_STEP", "rank_pid", "write_training_traces"]
