"""Run the compiled nvidia-smi scanner over mutated logs and compare it with
the pure path: each input gives the same tables and devices rows on both
paths, or the same error.

    python tests/hostile/fuzz_nvsmi.py --scanner BUILD/_nvsmi_scan.so --seconds 10 --seed 44

`--scanner` loads that build of `_nvsmi_scan` (sanitize.sh builds one with
AddressSanitizer and UBSan) in place of the installed one. Inputs: seeded
mutations (bytes flipped, cut, repeated, spliced, odd values put in) of
the nvidia-smi logs of tests/data/import/, read in small blocks, until
`--seconds` have passed. Exits 1 on the first disagreement, naming the
input (kept under --keep); prints one summary line otherwise.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from mutation import load_scanner, mutate

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "import"
NOHEADER_COLUMNS = ["timestamp", "index", "power.draw", "utilization.gpu", "temperature.gpu"]
ODD = [b'"', b",", b"\r", b"\r\n", b"\n", b"\n\n", b" ", b"\t", b"\x00", b"\xff", b"\xc3", b"[N/A]", b"N/A",
       b"-", b".", b"1e5", b"nan", b"inf", b"0x", b"007", b"99999999999999999999", b"2147483648", b"1.5",
       b"0.1234567890123", b" W", b" MiB", b"us", b"timestamp", b"2024/02/30 25:61:61.1234567", b"/", b":"]


def _outcome(path: Path, native: bool, options: dict):
    from gpulens.collector.errors import GpulensError
    from gpulens.collector.imports import nvsmi_native
    from gpulens.collector.imports.nvidia_smi import NvidiaSmiReader

    saved = nvsmi_native._SCANNER
    if not native:
        nvsmi_native._SCANNER = None
    try:
        reader = NvidiaSmiReader(path, **options)
        reader.block_bytes = 512
        return [t for t in reader.tables()], reader.devices
    except GpulensError as error:
        return str(error)
    finally:
        nvsmi_native._SCANNER = saved


def _agree(path: Path, options: dict) -> bool:
    import pyarrow as pa

    native, plain = _outcome(path, True, options), _outcome(path, False, options)
    if isinstance(native, str) or isinstance(plain, str):
        return native == plain
    (native_tables, native_devices), (plain_tables, plain_devices) = native, plain
    if bool(native_tables) != bool(plain_tables):
        return False
    tables_equal = not native_tables or pa.concat_tables(native_tables).equals(pa.concat_tables(plain_tables))
    return tables_equal and native_devices == plain_devices


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scanner", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=44)
    parser.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "gpulens-fuzz")
    parser.add_argument("--record", action="store_true", help="add the counts to tests/hostile/results.json")
    args = parser.parse_args()
    if args.scanner is not None:
        load_scanner("gpulens.collector.imports._nvsmi_scan", args.scanner)
    from gpulens.collector.imports import nvsmi_native

    if not nvsmi_native.available():
        print("fuzz_nvsmi: the compiled scanner is not available", file=sys.stderr)
        return 2
    seeds = [(p.name, p.read_bytes()) for p in sorted(DATA.glob("nvidia-smi-*.csv"))]
    args.keep.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpulens-fuzz-nvsmi-"))
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.seconds
    mutated = 0
    while time.monotonic() < deadline:
        name, seed = rng.choice(seeds)
        options = {"host": "h", "columns": NOHEADER_COLUMNS if "noheader" in name else None,
                   "timezone": rng.choice(["UTC", "Europe/Paris"])}
        path = work / "mutated.csv"
        path.write_bytes(mutate(seed, rng, ODD, edits=6, repeats=20, splice_bytes=16))
        mutated += 1
        try:
            agree = _agree(path, options)
        except Exception as error:  # a crash of either path is a finding too
            print(f"fuzz_nvsmi: {error!r}", file=sys.stderr)
            agree = False
        if not agree:
            kept = args.keep / f"nvsmi-disagree-{args.seed}-{mutated}.csv"
            kept.write_bytes(path.read_bytes())
            print(f"fuzz_nvsmi: {kept}: the scanner and the pure path disagree (seed {args.seed}, input {mutated}, "
                  f"{options})", file=sys.stderr)
            return 1
    if args.record:
        sys.path.insert(0, str(HERE))
        from hostile_figures import record

        record(nvsmi_fuzz_mutations=mutated, nvsmi_fuzz_seconds=args.seconds, nvsmi_fuzz_seed=args.seed)
    print(f"fuzz_nvsmi: {mutated} mutations of {len(seeds)} nvidia-smi logs (seed {args.seed}): the scanner "
          f"({nvsmi_native._SCANNER.__file__}) and the pure path agree on every one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
