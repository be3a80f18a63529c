"""Turn a recording of `sample_traces/record_h100.sh` into a sample dataset.

    python sample_traces/h100_pack.py RECORDING_DIR sample_traces/h100-training

Copies the collector's files (telemetry, devices, events, processes), the
raw traces, the job's phases and the logs; gzips the NCCL log; ingests the
three traces into their runs (h100-train, h100-small-batch, h100-nccl) with
`gpulens ingest`'s own code; and pins each source's tables to its file's
name and its path relative to the dataset, as `gpulens demo` does, so the
sample's files do not depend on where they were packed. The collector
already ingested the training trace live (--watch-traces) on the recording
machine; that copy named its absolute path there, so it is made again here.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from gpulens.collector.demo import pin_source  # noqa: E402
from gpulens.collector.ingest import ingest_paths  # noqa: E402
from gpulens.collector.ingest.batch import trace_stem  # noqa: E402
from gpulens.collector.ingest.store import read_runs  # noqa: E402

COLLECTOR_FOLDERS = ("telemetry", "devices", "events", "processes")
RUNS = {"h100-train": "raw/kineto/train", "h100-small-batch": "raw/kineto/small-batch", "h100-nccl": "raw/nccl"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recording", type=Path, help="OUT_DIR of record_h100.sh")
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    recorded = args.recording / "dataset"
    if args.out.exists():
        shutil.rmtree(args.out)
    for folder in COLLECTOR_FOLDERS:
        shutil.copytree(recorded / folder, args.out / folder)
    shutil.copytree(recorded / "raw", args.out / "raw")
    shutil.copytree(args.recording / "logs", args.out / "logs")
    for log in (args.out / "raw" / "nccl").glob("*.log"):
        with log.open("rb") as plain, gzip.GzipFile(log.with_suffix(".log.gz"), "wb", mtime=0) as packed:
            shutil.copyfileobj(plain, packed)
        log.unlink()

    # The live ingest's time stands for all three: when the collector first had the traces.
    ingested_ns = int(read_runs(recorded, "h100-train", ["ingested_at"]).column(0).cast("int64")[0].as_py()) * 1000
    for run, folder in RUNS.items():
        paths = sorted(p for p in (args.out / folder).iterdir() if p.is_file())
        report = ingest_paths(paths, args.out, run=run)
        if report.failures:
            print(f"{report.failures[0].path}: {report.failures[0].problem}", file=sys.stderr)
            return 1
        for result in report.results:
            pin_source(args.out, run, Path(result.path), trace_stem(Path(result.path).name), ingested_ns)
        print(f"{run}: {len(report.results)} file(s) from {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
