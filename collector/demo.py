"""`gpulens demo`: a complete, reproducible dataset from a seed, offline.

    make_demo(Path("demo"), seed=0, straggler_rank=5, capped_gpu=3)

writes, in seconds and without waiting for a clock:

- telemetry, devices, events and processes of a simulated 8-GPU node
  (`collector.sim`), sampled every second on a fixed grid that starts at
  `DEMO_START_NS` (2026-01-01T00:00:00Z) and lasts `minutes`, as the
  collector daemon would have recorded them (same rows, same
  throttle_start/stop events);
- for the `training` profile, the PyTorch-profiler (Kineto) traces of an
  8-rank data-parallel job on that node (`collector.sim_trace`), with
  `straggler_rank` computing slower, kept raw under `raw/kineto/` (gzip)
  and ingested into `traces/run=demo-training/`. The trace's clock is
  placed in the middle of the telemetry, and its host is the node's, so
  the joined analyses (step_energy) match ranks to GPUs.
- the processes table shows each rank's process (the trace's pid) on its
  GPU, as part of Slurm job `DEMO_SLURM_JOB` (step 0, SLURM_PROCID = the
  rank); with `gpu_binding="shuffled"` rank r runs on GPU (3r) mod 8
  while its trace still calls the device r, as under a real binding
  (CUDA_VISIBLE_DEVICES), so only the process evidence puts its energy on
  the right GPU. The inference node's processes belong to one Kubernetes
  pod (`DEMO_POD`).

Everything is a function of the arguments: the same arguments give
byte-identical files. To get there, three things that are naturally
machine- or time-dependent are pinned: node files are named after their
first timestamp and a sequence number (not the writer's pid), trace tables
are named after their source trace (not a hash of its absolute path), and
the runs table records the source path relative to the dataset and the
demo's own end time as `ingested_at`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpulens.collector.errors import DatasetError, TraceError, UsageError
from gpulens.collector.jobs import JobIdentity
from gpulens.collector.sim import PROFILES, SimBackend
from gpulens.collector.throttle import LIMITING_REASONS
from gpulens.collector.parquet_io import new_temporary_file
from gpulens.collector.writer import DatasetWriter

# 2026-01-01T00:00:00Z: where the demo's clock starts.
DEMO_START_NS = 1_767_225_600_000_000_000
DEMO_GPUS = 8
DEMO_RUN = "demo-training"
DEMO_HOSTS = {"training": "sim-node-00", "inference": "sim-infer-00"}
DEFAULT_STRAGGLER_RANK = 5
DEFAULT_CAPPED_GPU = 3
TRACE_STEPS = 10
RAW_DIR = Path("raw") / "kineto"
INTERVAL_NS = 1_000_000_000
SLOW_EVERY_NS = 10_000_000_000
DEMO_SLURM_JOB = "4242"
DEMO_SLURM_USER = "demo"
# (namespace, pod name, pod UID) of the inference node's server.
DEMO_POD = ("serving", "llm-server-0", "5e1f0c2a-7b3d-4c9e-8a6f-2d4b1e9c7a05")
GPU_BINDINGS = ("identity", "shuffled")
# The folders a demo writes, all of which --force replaces.
_DEMO_FOLDERS = ("telemetry", "devices", "events", "processes", "traces", "raw")


class _PinnedNameWriter(DatasetWriter):
    """A DatasetWriter whose file names do not depend on the process."""

    def _file_name(self, table: pa.Table) -> str:
        first_ts = pc.min(table["ts"]).value if table.num_rows else 0
        return f"part-{first_ts}-demo-{next(self._sequence):05d}.parquet"


def make_demo(
    out_dir: Path,
    seed: int = 0,
    straggler_rank: int | None = DEFAULT_STRAGGLER_RANK,
    capped_gpu: int | None = DEFAULT_CAPPED_GPU,
    minutes: float = 3,
    profile: str = "training",
    steps: int = TRACE_STEPS,
    kernels_per_step: int = 200,
    force: bool = False,
    jobs: int | None = None,
    gpu_binding: str = "identity",
) -> Path:
    """Write a demo dataset at `out_dir` and return it.

    `profile` is `training` (telemetry and traces; `straggler_rank` is
    planted in the traces, `capped_gpu` draws more than its power limit) or
    `inference` (bursty telemetry only; `capped_gpu` None by default there).
    `gpu_binding` is `identity` (rank r on GPU r) or `shuffled` (rank r on
    GPU (3r) mod 8, its trace still naming device r).
    `out_dir` must not hold a dataset already unless `force`, which removes
    the folders a demo writes first. Raises UsageError for bad arguments,
    DatasetError if the folder cannot be written.
    """
    out_dir = Path(out_dir)
    if profile not in PROFILES:
        raise UsageError(f"unknown demo profile {profile!r}; choose one of {', '.join(PROFILES)}")
    if not minutes > 0:
        raise UsageError(f"--minutes must be positive, got {minutes}")
    if capped_gpu is not None and not 0 <= capped_gpu < DEMO_GPUS:
        raise UsageError(f"--capped-gpu {capped_gpu} is not one of the {DEMO_GPUS} simulated GPUs (0-{DEMO_GPUS - 1})")
    if profile == "training" and straggler_rank is not None and not 0 <= straggler_rank < DEMO_GPUS:
        raise UsageError(f"--straggler-rank {straggler_rank} is not one of the {DEMO_GPUS} ranks (0-{DEMO_GPUS - 1})")
    if gpu_binding not in GPU_BINDINGS:
        raise UsageError(f"unknown --gpu-binding {gpu_binding!r}; choose one of {', '.join(GPU_BINDINGS)}")
    _prepare(out_dir, force)

    host = DEMO_HOSTS[profile]
    ticks = max(1, int(round(minutes * 60)))
    end_ns = DEMO_START_NS + (ticks - 1) * INTERVAL_NS
    # The sim leaves the last GPU capped in training when none is named;
    # "no capped GPU" must mean none.
    backend = SimBackend(gpus=DEMO_GPUS, profile=profile, seed=seed, capped_gpu=capped_gpu,
                         gpu_processes=demo_processes(profile, seed, gpu_binding))
    if capped_gpu is None:
        backend.capped_gpu = None
    # Built beside the dataset and moved in whole at the end: a demo stopped
    # halfway (Ctrl-C) leaves no half dataset, and --force keeps the old one
    # until the new one is complete. (Its files name their paths relative
    # to the dataset, so the bytes are the same wherever it is built.)
    staging = _staging_beside(out_dir)
    try:
        _write_node(staging, backend, host, ticks)
        if profile == "training":
            middle_ns = DEMO_START_NS + (ticks // 2) * INTERVAL_NS
            _write_traces(staging, seed, straggler_rank, steps, kernels_per_step, middle_ns, end_ns, jobs)
        _move_in(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def rank_gpu(rank: int, gpu_binding: str) -> int:
    """The physical GPU rank `rank` runs on under `gpu_binding`."""
    return (rank * 3) % DEMO_GPUS if gpu_binding == "shuffled" else rank


def demo_processes(profile: str, seed: int, gpu_binding: str) -> dict[int, tuple[int, JobIdentity]]:
    """Per GPU: the pid and job of the process the demo node shows on it."""
    from gpulens.collector.sim_trace import rank_pid

    if profile == "inference":
        namespace, pod, uid = DEMO_POD
        return {gpu: (4000 + gpu, JobIdentity(k8s_pod_uid=uid, k8s_namespace=namespace, k8s_pod_name=pod,
                                              nspid=(4000 + gpu, 100 + gpu))) for gpu in range(DEMO_GPUS)}
    processes = {}
    for rank in range(DEMO_GPUS):
        pid = rank_pid(seed, rank)
        processes[rank_gpu(rank, gpu_binding)] = (pid, JobIdentity(
            slurm_job_id=DEMO_SLURM_JOB, slurm_step_id="0", slurm_procid=rank, slurm_job_user=DEMO_SLURM_USER,
            nspid=(pid,)))
    return processes


def _prepare(out_dir: Path, force: bool) -> None:
    existing = [name for name in _DEMO_FOLDERS if (out_dir / name).exists()]
    if existing and not force:
        raise UsageError(f"{out_dir}: already holds a dataset ({', '.join(existing)}); use --force to replace it")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DatasetError(f"{out_dir}: cannot write the demo ({error.strerror or error})") from error


def _staging_beside(out_dir: Path) -> Path:
    try:
        return Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.demo-", dir=out_dir.parent))
    except OSError as error:
        raise DatasetError(f"{out_dir}: cannot write the demo ({error.strerror or error})") from error


def _move_in(staging: Path, out_dir: Path) -> None:
    """The built demo's folders into `out_dir`, replacing those it holds."""
    try:
        for name in _DEMO_FOLDERS:
            if (out_dir / name).exists():
                shutil.rmtree(out_dir / name)
            if (staging / name).exists():
                os.replace(staging / name, out_dir / name)
    except OSError as error:
        raise DatasetError(f"{out_dir}: cannot write the demo ({error.strerror or error})") from error


# --- the node: telemetry, devices, events, processes ---------------------------------


def _write_node(out_dir: Path, backend: SimBackend, host: str, ticks: int) -> None:
    """Sample `backend` on a 1 s grid as the daemon would, without waiting."""
    from gpulens.collector.daemon import _nominal_peaks

    writer = _PinnedNameWriter(out_dir, host)
    devices = backend.discover()
    for device in devices:
        writer.add("devices", {**asdict(device), **_nominal_peaks(device), "ts": DEMO_START_NS // 1000})
    _event(writer, DEMO_START_NS, "collector_start", None,
           f"backend={backend.name} gpus={len(devices)} interval_s=1.0 (gpulens demo, profile={backend.profile}, seed={backend.seed})")
    limiting: dict[int, frozenset[str]] = {d.gpu_index: frozenset() for d in devices}
    last_slow = None
    for tick in range(ticks):
        ts_ns = DEMO_START_NS + tick * INTERVAL_NS
        slot = ts_ns // SLOW_EVERY_NS
        slow, last_slow = slot != last_slow, slot
        for device in devices:
            sample = backend.sample(device.gpu_index, ts_ns, slow)
            row = sample.values
            row.update(ts=ts_ns // 1000, gpu_index=device.gpu_index, gpu_uuid=device.gpu_uuid, vendor=device.vendor)
            writer.add("telemetry", row)
            now = frozenset(row.get("throttle_reasons") or ()) & LIMITING_REASONS
            if now != limiting[device.gpu_index]:
                before = limiting[device.gpu_index]
                kind = "throttle_start" if now and not before else "throttle_stop" if before and not now else None
                if kind is not None:
                    _event(writer, ts_ns, kind, device, ",".join(sorted(now or before)))
                limiting[device.gpu_index] = now
            for process in sample.processes or ():
                writer.add("processes", {
                    "ts": ts_ns // 1000, "gpu_index": device.gpu_index, "gpu_uuid": device.gpu_uuid,
                    "pid": process.pid, "process_name": process.process_name, "used_mem_bytes": process.used_mem_bytes,
                    **(process.job.columns() if process.job is not None else {}),
                })
    end_ns = DEMO_START_NS + (ticks - 1) * INTERVAL_NS
    _event(writer, end_ns, "collector_stop", None, f"ticks={ticks} skipped=0")
    writer.flush()


def _event(writer: DatasetWriter, ts_ns: int, kind: str, device: Any, detail: str) -> None:
    writer.add_event(
        ts_ns, kind, detail,
        gpu_index=None if device is None else device.gpu_index,
        gpu_uuid=None if device is None else device.gpu_uuid,
    )


# --- the traces: raw Kineto files, ingested ---------------------------------------------


def _write_traces(out_dir: Path, seed: int, straggler_rank: int | None, steps: int, kernels_per_step: int,
                  trace_start_ns: int, ingested_ns: int, jobs: int | None) -> None:
    from gpulens.collector.ingest import ingest_paths
    from gpulens.collector.ingest.batch import trace_stem
    from gpulens.collector.sim_trace import _TRACE_START_NS, write_training_traces

    raw_dir = out_dir / RAW_DIR
    # sim_trace puts a trace's first event _TRACE_START_NS after its base time.
    paths = write_training_traces(
        raw_dir, ranks=DEMO_GPUS, steps=steps, seed=seed, straggler_rank=straggler_rank,
        kernels_per_step=kernels_per_step, gzip=True, base_time_ns=trace_start_ns - _TRACE_START_NS,
    )
    report = ingest_paths(paths, out_dir, run=DEMO_RUN, jobs=jobs)
    if report.failures:
        failure = report.failures[0]
        raise TraceError(failure.path, f"demo trace failed to ingest: {failure.problem}")
    for result in report.results:
        pin_source(out_dir, DEMO_RUN, Path(result.path), trace_stem(Path(result.path).name), ingested_ns)


def pin_source(out_dir: Path, run: str, raw_path: Path, name: str, ingested_ns: int) -> None:
    """Name one source's tables `name`; record its path relative to the dataset
    and `ingested_ns` as its ingest time, so a sample's bytes do not depend on
    where or when it was ingested."""
    from gpulens.collector.ingest.store import run_dir, source_id

    folder = run_dir(out_dir, run)
    old = source_id(raw_path)
    for table_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        source = table_dir / f"{old}.parquet"
        if not source.exists():
            continue
        destination = table_dir / f"{name}.parquet"
        if table_dir.name == "runs":
            runs = pq.read_table(source)
            relative = raw_path.resolve().relative_to(out_dir.resolve()).as_posix()
            runs = _replace(runs, "source_path", pa.array([relative] * runs.num_rows, type=pa.string()))
            stamp = pa.array([ingested_ns // 1000] * runs.num_rows, type=pa.int64()).cast(runs.schema.field("ingested_at").type)
            runs = _replace(runs, "ingested_at", stamp)
            _write_trace_table(runs, destination)
            source.unlink()
        else:
            os.replace(source, destination)


def _replace(table: pa.Table, column: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(column), table.schema.field(column), values)


def _write_trace_table(table: pa.Table, destination: Path) -> None:
    """Write as collector.ingest.store does (zstd, dictionaries for text), atomically."""
    text = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    temporary = None
    try:
        temporary = new_temporary_file(destination.parent, prefix=".demo-")
        pq.write_table(table, temporary, compression="zstd", use_dictionary=text)
        os.replace(temporary, destination)
    except OSError as error:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise DatasetError(f"{destination}: cannot write ({error.strerror or error})") from error


# --- the command ------------------------------------------------------------------------------


def _optional_int(value: str | None, option: str) -> int | None:
    if value is None or str(value).lower() in ("none", "-1", ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{option} {value!r} is not a number or 'none'") from None


@click.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("gpulens-demo"),
              show_default=True, help="Folder to write the dataset to.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed: the same seed gives byte-identical files.")
@click.option("--straggler-rank", default=str(DEFAULT_STRAGGLER_RANK), show_default=True,
              help="Rank that computes 15-30 % slower in the traces, or 'none' (training only).")
@click.option("--capped-gpu", default=None,
              help=f"GPU that sits at its power limit, or 'none' [default: {DEFAULT_CAPPED_GPU} for training, none for inference].")
@click.option("--minutes", type=float, default=3.0, show_default=True, help="Telemetry span in simulated minutes (1 sample/s).")
@click.option("--profile", type=click.Choice(PROFILES), default="training", show_default=True,
              help="training: telemetry and 8-rank Kineto traces; inference: bursty telemetry only.")
@click.option("--steps", type=int, default=TRACE_STEPS, show_default=True, help="Profiler steps in the traces (training).")
@click.option("--gpu-binding", type=click.Choice(GPU_BINDINGS), default="identity", show_default=True,
              help="identity: rank r on GPU r; shuffled: rank r on GPU (3r) mod 8, its trace still naming device r "
                   "(training).")
@click.option("--force", is_flag=True, help="Replace the dataset already in --out.")
def demo(out_dir: Path, seed: int, straggler_rank: str, capped_gpu: str | None, minutes: float, profile: str,
         steps: int, gpu_binding: str, force: bool) -> None:
    """Write a simulated 8-GPU node's dataset: telemetry and, for training, traces.

    No GPU and no waiting: the sim backend is sampled on a 1 s grid from
    2026-01-01T00:00:00Z, and for `training` an 8-rank DDP job's Kineto
    traces (a planted straggler rank) are written to OUT/raw/kineto/ and
    ingested as run `demo-training`. The same options give the same bytes.

        gpulens demo --out demo && gpulens report demo -o report.html
    """
    straggler = _optional_int(straggler_rank, "--straggler-rank")
    capped = _optional_int(capped_gpu, "--capped-gpu") if capped_gpu is not None else (DEFAULT_CAPPED_GPU if profile == "training" else None)
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    make_demo(out_dir, seed=seed, straggler_rank=straggler, capped_gpu=capped, minutes=minutes, profile=profile,
              steps=steps, force=force, gpu_binding=gpu_binding)
    what = "telemetry" if profile == "inference" else f"telemetry and {DEMO_GPUS}-rank traces (run {DEMO_RUN})"
    click.echo(f"{out_dir}: demo dataset written ({profile}, {what}, seed {seed})", err=True)


__all__ = ["DEMO_RUN", "DEMO_SLURM_JOB", "DEMO_START_NS", "demo", "demo_processes", "make_demo", "pin_source",
           "rank_gpu"]
