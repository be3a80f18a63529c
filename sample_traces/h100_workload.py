"""The job behind `sample_traces/h100-training/`: one GPU, five phases.

    python sample_traces/h100_workload.py --traces DIR --phases phases.json

Run by `sample_traces/record_h100.sh` with `gpulens collect` sampling the
GPU beside it. Each phase leaves a clear mark in the telemetry:

1. idle (8 s): the GPU's floor.
2. PCIe copies (3 s host-to-device, 3 s device-to-host, pinned 1 GiB
   buffers): the PCIe counters, one direction at a time.
3. training, GPU-bound: a 6-layer transformer (d_model 2048, batch 8 x
   1024 tokens, bf16 autocast, fused AdamW) under DistributedDataParallel
   on NCCL (world size 1), profiled for 5 steps into DIR/train.
4. training, launch-bound: the same model at batch 1 x 64 tokens, whose
   kernels are shorter than their launches, profiled into DIR/small-batch.
5. a bf16 8192^3 matrix-product loop (10 s): the power limit.
6. idle (8 s).

Each phase's start and end (epoch ns) and what it achieved are written to
--phases as they happen, and the current phase's name to --phase-file, so
a script beside it can wait for the steady part of the training.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

VOCAB = 32_000


class Phases:
    def __init__(self, path: Path, phase_file: Path | None) -> None:
        self.path, self.phase_file, self.phases = path, phase_file, []

    def start(self, name: str) -> dict:
        torch.cuda.synchronize()
        phase = {"name": name, "start_ns": time.time_ns()}
        self.phases.append(phase)
        self.mark(name)
        print(f"phase {name}", flush=True)
        return phase

    def mark(self, name: str) -> None:
        if self.phase_file is not None:
            self.phase_file.write_text(name)

    def end(self, phase: dict, **facts) -> None:
        torch.cuda.synchronize()
        phase["end_ns"] = time.time_ns()
        phase.update(facts)
        self.path.write_text(json.dumps(self.phases, indent=1))


def idle(phases: Phases, name: str, seconds: float) -> None:
    phase = phases.start(name)
    time.sleep(seconds)
    phases.end(phase)


def copies(phases: Phases, seconds_each: float) -> None:
    size = 2**30
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(size, dtype=torch.uint8, device="cuda")
    for name, copy in (("h2d", lambda: device.copy_(host, non_blocking=True)),
                       ("d2h", lambda: host.copy_(device, non_blocking=True))):
        phase = phases.start(f"pcie-{name}")
        copies_done, deadline = 0, time.monotonic() + seconds_each
        while time.monotonic() < deadline:
            for _ in range(4):
                copy()
            torch.cuda.synchronize()
            copies_done += 4
        elapsed_s = (time.time_ns() - phase["start_ns"]) / 1e9
        phases.end(phase, bytes=copies_done * size, gb_per_s=round(copies_done * size / elapsed_s / 1e9, 2))
    del host, device
    torch.cuda.empty_cache()


def make_model(layers: int, d_model: int) -> nn.Module:
    layer = nn.TransformerEncoderLayer(d_model, nhead=16, dim_feedforward=4 * d_model, batch_first=True,
                                       norm_first=True, dropout=0.0)
    encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    return nn.Sequential(nn.Embedding(VOCAB, d_model), encoder, nn.Linear(d_model, VOCAB))


def train(phases: Phases, name: str, model: nn.Module, optimizer, batch: int, tokens: int, seconds: float,
          profile_from: int, trace_dir: Path, steady_mark: str | None = None) -> None:
    """Train for `seconds` (and at least until the profiled steps are done),
    profiling steps profile_from .. profile_from + 4 into trace_dir."""
    trace_dir.mkdir(parents=True, exist_ok=True)
    tokens_in = torch.randint(0, VOCAB, (batch, tokens), device="cuda")
    targets = torch.randint(0, VOCAB, (batch * tokens,), device="cuda")
    loss_fn = nn.CrossEntropyLoss()
    schedule = torch.profiler.schedule(wait=profile_from - 3, warmup=3, active=5, repeat=1)
    phase = phases.start(name)
    step_times_ns: list[int] = []
    deadline = time.monotonic() + seconds
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=schedule,
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(trace_dir), use_gzip=True),
        record_shapes=True,
    ) as profiler:
        step = 0
        while step < profile_from + 6 or time.monotonic() < deadline:
            started = time.perf_counter_ns()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(tokens_in).reshape(-1, VOCAB).float(), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            profiler.step()
            if step == profile_from + 6 and steady_mark:
                phases.mark(steady_mark)  # the profiled steps are behind us: a check beside us perturbs nothing
            step_times_ns.append(time.perf_counter_ns() - started)
            step += 1
    torch.cuda.synchronize()
    steady = sorted(step_times_ns[3:])
    phases.end(phase, steps=step, batch=batch, tokens=tokens, median_step_ms=round(steady[len(steady) // 2] / 1e6, 2),
               profiled_steps=f"{profile_from}-{profile_from + 4}")


def gemm_burn(phases: Phases, seconds: float) -> None:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    phase = phases.start("gemm")
    products, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(50):
            a @ b
        torch.cuda.synchronize()
        products += 50
    elapsed_s = (time.time_ns() - phase["start_ns"]) / 1e9
    phases.end(phase, products=products, tflop_per_s=round(products * 2 * 8192**3 / elapsed_s / 1e12, 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, required=True)
    parser.add_argument("--phases", type=Path, required=True)
    parser.add_argument("--phase-file", type=Path)
    parser.add_argument("--train-seconds", type=float, default=25.0)
    args = parser.parse_args()
    phases = Phases(args.phases, args.phase_file)
    torch.cuda.init()

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))

    idle(phases, "idle-start", 8)
    copies(phases, 3)

    model = DistributedDataParallel(make_model(6, 2048).cuda(), bucket_cap_mb=100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    train(phases, "train", model, optimizer, 8, 1024, args.train_seconds, 10, args.traces / "train", "train-steady")
    train(phases, "small-batch", model, optimizer, 1, 64, 10, 100, args.traces / "small-batch")
    del model, optimizer
    torch.cuda.empty_cache()

    gemm_burn(phases, 10)
    idle(phases, "idle-end", 8)
    dist.destroy_process_group()
    phases.mark("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
