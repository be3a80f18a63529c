"""Record one large, real PyTorch-profiler trace on a GPU, for the ingest benchmark.

    python bench/record_real_trace.py --out DIR [--steps 64] [--batch 1] [--tokens 64]
    python bench/ingest_vs_hta.py --skip-simulated --trace-set "real H100, 64 steps=DIR"

The synthesised runs of `bench/ingest_vs_hta.py` are what a trace of any
size looks like to the parsers; this is the same measure on what a real
profiler wrote. The model is the one of `sample_traces/h100_workload.py`
(a 6-layer transformer, d_model 2048, bf16 autocast, fused AdamW, under
DistributedDataParallel on NCCL, world size 1, so the trace holds a real
NCCL kernel and its `record_param_comms` each step). At batch 1 x 64
tokens its kernels are shorter than their launches: about 7,000 events a
step, the densest trace per second of GPU time.

The profiler records `--steps` steps after 3 warm-up steps, with shapes,
into DIR as `tensorboard_trace_handler` writes it (one gzipped file per
rank). What was recorded (steps, events, median step time, versions) is
printed as one JSON line and written to DIR/../recorded.json, and to
bench/results/record_real_trace-<date>.json (bench/results.py).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "bench"))

import results  # noqa: E402


def workload_module():
    """sample_traces/h100_workload.py, for its model (sample_traces is no package)."""
    spec = importlib.util.spec_from_file_location("h100_workload", REPO_ROOT / "sample_traces" / "h100_workload.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the trace (made; must be empty)")
    parser.add_argument("--steps", type=int, default=64, help="profiled steps")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    record = results.start("record_real_trace", {name: (str(value) if isinstance(value, Path) else value)
                                                 for name, value in vars(args).items()})
    args.out.mkdir(parents=True, exist_ok=True)
    if any(args.out.iterdir()):
        raise SystemExit(f"{args.out}: not empty; the benchmark reads every file in it as a rank")

    workload = workload_module()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29532")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    model = DistributedDataParallel(workload.make_model(6, 2048).cuda(), bucket_cap_mb=100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    vocab = workload.VOCAB
    tokens_in = torch.randint(0, vocab, (args.batch, args.tokens), device="cuda")
    targets = torch.randint(0, vocab, (args.batch * args.tokens,), device="cuda")
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(tokens_in).reshape(-1, vocab).float(), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(5):  # compile-once work (cuBLAS handles, NCCL's first call) stays out of the trace
        step()
    torch.cuda.synchronize()
    step_ns: list[int] = []
    schedule = torch.profiler.schedule(wait=0, warmup=3, active=args.steps, repeat=1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=schedule,
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(args.out), use_gzip=True),
        record_shapes=True,
    ) as profiler:
        for _ in range(3 + args.steps):
            started = time.perf_counter_ns()
            step()
            profiler.step()
            step_ns.append(time.perf_counter_ns() - started)
    torch.cuda.synchronize()
    dist.destroy_process_group()

    traces = sorted(args.out.iterdir())
    events = sum(len(re.findall(rb'"ph"\s*:', gzip.decompress(p.read_bytes()))) for p in traces)
    profiled = sorted(step_ns[3:])
    recorded = {
        "files": [p.name for p in traces],
        "bytes": sum(p.stat().st_size for p in traces),
        "events": events,
        "profiled_steps": args.steps,
        "batch": args.batch,
        "tokens": args.tokens,
        "median_profiled_step_ms": round(profiled[len(profiled) // 2] / 1e6, 2),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "python": platform.python_version(),
    }
    print(json.dumps(recorded))
    (args.out.parent / "recorded.json").write_text(json.dumps(recorded, indent=1) + "\n")
    record.add(recorded)
    print(f"recorded in {record.write()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
