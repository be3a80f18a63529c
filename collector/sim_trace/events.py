"""One rank's timelines in a simulated trace: their moving state (`_Rank`) and
the writers of its Kineto events (ops and the GPU activities they launch,
annotations, collectives), each formatted as Kineto writes it.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Generator

from gpulens.collector.sim_trace.job import Collective, Kernel

LAUNCH_QUEUE_DEPTH = 1024

COMPUTE_STREAM = 7
COMM_STREAM = 24

# --- generating the events ------------------------------------------------------

@dataclass
class _Rank:
    """The moving state of one rank's timelines while a step is generated."""

    rank: int
    device: int
    pid: int
    main_tid: int
    autograd_tid: int
    rng: random.Random
    cpu_ns: int
    tid: int = 0
    compute_free_ns: int = 0
    comm_free_ns: int = 0
    # Compute slow-down this step (>1 for the straggler).
    slow: float = 1.0
    # Mean Python time between ops: module code in forward and the
    # optimizer, the C++ autograd engine in backward.
    gap_ns: int = 20_000
    ext_id: int = 0
    corr_id: int = 0
    ev_idx: int = 0
    # First kernel start since a GPU-side annotation opened.
    region_start_ns: int | None = None
    queue: deque[int] = field(default_factory=deque)
    cpu: list[str] = field(default_factory=list)
    gpu: list[str] = field(default_factory=list)


def _us(ns: int) -> str:
    """Kineto's µs with three decimals, exact (from integer ns)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _x(cat: str, name: str, pid: int, tid: int, ts_ns: int, dur_ns: int, args: str) -> str:
    # `name` is already a JSON string literal (quotes included).
    return (
        f'  {{\n    "ph": "X", "cat": "{cat}", "name": {name}, "pid": {pid}, "tid": {tid},\n'
        f'    "ts": {ts_ns // 1000}.{ts_ns % 1000:03d}, "dur": {dur_ns // 1000}.{dur_ns % 1000:03d},\n'
        f'    "args": {{\n      {args}\n    }}\n  }}'
    )


def _flow(ph: str, corr: int, pid: int, tid: int, ts_ns: int) -> str:
    end = ', "bp": "e"' if ph == "f" else ""
    return (
        f'  {{\n    "ph": "{ph}", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {ts_ns // 1000}.{ts_ns % 1000:03d},\n'
        f'    "cat": "ac2g", "name": "ac2g"{end}\n  }}'
    )


def _runtime(r: _Rank, name: str, cbid: int, ts_ns: int, dur_ns: int, ext: int, cat: str = "cuda_runtime") -> int:
    r.corr_id += 1
    args = f'"External id": {ext},      "cbid": {cbid}, "correlation": {r.corr_id}'
    r.cpu.append(_x(cat, f'"{name}"', r.pid, r.tid, ts_ns, dur_ns, args))
    return r.corr_id


def _gpu_activity(r: _Rank, k: Kernel, ext: int, corr: int, start_ns: int, dur_ns: int, stream: int) -> None:
    head = f'"External id": {ext},      "queued": 0, "device": {r.device}, "context": 1,      "stream": {stream}, "correlation": {corr}'
    if k.cat == "kernel":
        args = head + k.tail
    else:
        args = f'{head},      "bytes": {k.bytes}, "memory bandwidth (GB/s)": {k.bytes / dur_ns:.6f}'
    r.gpu.append(_x(k.cat, k.name, r.device, stream, start_ns, dur_ns, args))
    r.gpu.append(_flow("f", corr, r.device, stream, start_ns))


def _launch(r: _Rank, k: Kernel) -> None:
    """One op (outer, optional inner) launching one GPU activity on stream 7.

    The hot path of the synthesiser: times first, then each side's events
    as one formatted string (a few million of these per run).
    """
    rnd = r.rng.random
    t0 = r.cpu_ns
    outer_ext = r.ext_id + 1
    outer_ev = r.ev_idx
    inner_start = t = t0 + 3_000 + int(rnd() * 4_000)
    if k.inner is not None:
        launch_ext = r.ext_id = outer_ext + 1
        r.ev_idx += 2
        t += 4_000 + int(rnd() * 8_000)
    else:
        launch_ext = r.ext_id = outer_ext
        r.ev_idx += 1
    # Launch queue full: the call blocks until the oldest kernel retires.
    queue = r.queue
    while queue and queue[0] <= t:
        queue.popleft()
    rt_dur = 2_500 + int(rnd() * 3_500)
    if len(queue) >= LAUNCH_QUEUE_DEPTH:
        free_at = queue[len(queue) - LAUNCH_QUEUE_DEPTH]
        while queue and queue[0] <= free_at:
            queue.popleft()
        rt_dur = max(rt_dur, free_at - t + 2_000)
    corr = r.corr_id = r.corr_id + 1
    ready = t + 2_500 + int(rnd() * 3_000)
    start = max(ready, r.compute_free_ns + 1_000 + int(rnd() * 1_000))
    dur = int(k.dur_ns * (r.slow if k.compute else 1.0) * (0.97 + 0.06 * rnd()))
    r.compute_free_ns = start + dur
    queue.append(start + dur)
    if r.region_start_ns is None:
        r.region_start_ns = start
    rt = t
    t += rt_dur
    inner = ""
    pid, tid = r.pid, r.tid
    if k.inner is not None:
        t += 1_000 + int(rnd() * 1_500)
        d = t - inner_start
        inner = (
            f'  {{\n    "ph": "X", "cat": "cpu_op", "name": {k.inner}, "pid": {pid}, "tid": {tid},\n'
            f'    "ts": {inner_start // 1000}.{inner_start % 1000:03d}, "dur": {d // 1000}.{d % 1000:03d},\n'
            f'    "args": {{\n      "External id": {launch_ext},"Record function id": {launch_ext}, "Ev Idx": {outer_ev + 1}\n    }}\n  }},\n'
        )
    t += 1_000 + int(rnd() * 2_000)
    d = t - t0
    rt_ts = f"{rt // 1000}.{rt % 1000:03d}"
    r.cpu.append(
        f'  {{\n    "ph": "X", "cat": "cpu_op", "name": {k.op}, "pid": {pid}, "tid": {tid},\n'
        f'    "ts": {t0 // 1000}.{t0 % 1000:03d}, "dur": {d // 1000}.{d % 1000:03d},\n'
        f'    "args": {{\n      "External id": {outer_ext},"Record function id": {outer_ext}, "Ev Idx": {outer_ev}\n    }}\n  }},\n'
        f"{inner}"
        f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "{k.api}", "pid": {pid}, "tid": {tid},\n'
        f'    "ts": {rt_ts}, "dur": {rt_dur // 1000}.{rt_dur % 1000:03d},\n'
        f'    "args": {{\n      "External id": {launch_ext},      "cbid": {k.cbid}, "correlation": {corr}\n    }}\n  }},\n'
        f'  {{\n    "ph": "s", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {rt_ts},\n    "cat": "ac2g", "name": "ac2g"\n  }}'
    )
    if k.cat == "kernel":
        device = r.device
        ts = f"{start // 1000}.{start % 1000:03d}"
        r.gpu.append(
            f'  {{\n    "ph": "X", "cat": "kernel", "name": {k.name}, "pid": {device}, "tid": {COMPUTE_STREAM},\n'
            f'    "ts": {ts}, "dur": {dur // 1000}.{dur % 1000:03d},\n'
            f'    "args": {{\n      "External id": {launch_ext},      "queued": 0, "device": {device}, "context": 1,'
            f'      "stream": {COMPUTE_STREAM}, "correlation": {corr}{k.tail}\n    }}\n  }},\n'
            f'  {{\n    "ph": "f", "id": {corr}, "pid": {device}, "tid": {COMPUTE_STREAM}, "ts": {ts},\n'
            f'    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
        )
    else:
        _gpu_activity(r, k, launch_ext, corr, start, dur, COMPUTE_STREAM)
    # Python between ops; now and then a longer stall (GC, logging).
    gap = r.gap_ns // 2 + int(rnd() * r.gap_ns)
    if rnd() < 0.002:
        gap += 50_000 + int(rnd() * 250_000)
    r.cpu_ns = t + gap


def _open(r: _Rank) -> tuple[int, int, int, int]:
    """Reserve a place for an annotation whose end is not known yet."""
    r.ext_id += 1
    r.ev_idx += 1
    r.cpu.append("")
    r.region_start_ns = None
    return len(r.cpu) - 1, r.cpu_ns, r.ext_id, r.ev_idx - 1


def _close(r: _Rank, token: tuple[int, int, int, int], name: str, gpu: bool = False) -> None:
    slot, t0, ext, ev = token
    r.cpu_ns += 2_000
    args = f'"External id": {ext},"Record function id": {ext}, "Ev Idx": {ev}'
    r.cpu[slot] = _x("user_annotation", name, r.pid, r.tid, t0, r.cpu_ns - t0, args)
    if gpu and r.region_start_ns is not None:
        start = r.region_start_ns
        r.gpu.append(_x("gpu_user_annotation", name, r.device, COMPUTE_STREAM, start, r.compute_free_ns - start, f'"External id": {ext}'))


def _cpu_only(r: _Rank, name: str, dur_ns: int) -> None:
    token = _open(r)
    r.cpu_ns += dur_ns
    _close(r, token, name)


def _wait_comm(r: _Rank) -> None:
    """The compute stream waits for the NCCL stream (DDP's work.wait())."""
    ext = r.ext_id
    _runtime(r, "cudaStreamWaitEvent", 147, r.cpu_ns, 1_500, ext)
    r.cpu_ns += 4_000
    r.compute_free_ns = max(r.compute_free_ns, r.comm_free_ns)


def _run_collective(r: _Rank, c: Collective, seq: int) -> Generator[int, int, None]:
    """Launch one collective; yields the time the rank's NCCL kernel can start
    and receives the time it ends (set by the slowest rank)."""
    rnd = r.rng.random
    t0 = r.cpu_ns
    ext = r.ext_id = r.ext_id + 1
    slot = len(r.cpu)
    r.cpu.append("")
    ev = r.ev_idx
    r.ev_idx += 1
    t = t0 + 4_000 + int(rnd() * 3_000)
    _runtime(r, "cudaEventRecord", 135, t, 1_500, ext)
    t += 4_000
    _runtime(r, "cudaStreamWaitEvent", 147, t, 1_200, ext)
    t += 6_000 + int(rnd() * 4_000)
    ann = r.ext_id = r.ext_id + 1
    ann_ev = r.ev_idx
    r.ev_idx += 1
    ann_start = t
    t += 10_000 + int(rnd() * 8_000)
    launch_dur = 6_000 + int(rnd() * 6_000)
    corr = _runtime(r, "cuLaunchKernelEx", 652, t, launch_dur, ext, cat="cuda_driver")
    r.cpu.append(_flow("s", corr, r.pid, r.tid, t))
    ready = max(t + 5_000 + int(rnd() * 4_000), r.compute_free_ns + 1_500, r.comm_free_ns + 1_500)
    t += launch_dur + 6_000 + int(rnd() * 4_000)
    args = f'"External id": {ann},"Record function id": {ann}, "Ev Idx": {ann_ev}'
    r.cpu.append(_x("user_annotation", c.annotation, r.pid, r.tid, ann_start, t - ann_start, args))
    t += 3_000
    _runtime(r, "cudaEventRecord", 135, t, 1_000, ext)
    t += 5_000 + int(rnd() * 3_000)
    args = f'"External id": {ext},"Record function id": {ext}, "Ev Idx": {ev}, {c.args}, "Seq": {seq}'
    r.cpu[slot] = _x("cpu_op", '"record_param_comms"', r.pid, r.tid, t0, t - t0, args)
    r.cpu_ns = t + 4_000 + int(rnd() * 8_000)

    end = yield ready
    end += int(rnd() * 3_000)
    r.comm_free_ns = end
    _gpu_activity(r, c.kernel, ext, corr, ready, end - ready, COMM_STREAM)
    r.gpu.append(_x("gpu_user_annotation", c.annotation, r.device, COMM_STREAM, ready, end - ready, f'"External id": {ann}'))
