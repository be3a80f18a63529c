"""Run the compiled Kineto scanner over hostile input and compare it with
msgspec: each input gives the same tables on both paths, or both refuse it.

    python tests/hostile/fuzz_scanner.py --scanner BUILD/_kineto_scan.so --seconds 60 --seed 47

`--scanner` loads that build of `_kineto_scan` (sanitize.sh builds one
with AddressSanitizer and UBSan) in place of the installed one. Inputs:
the hostile corpus (corpus.py), then seeded mutations (bytes flipped,
cut, repeated, spliced) of the shared traces (../shared/traces/kineto)
until `--seconds` have passed. Exits 1 on the first disagreement, naming
the input (kept under --keep); prints one summary line otherwise.
"""

from __future__ import annotations

import argparse
import gzip
import random
import sys
import tempfile
import time
from pathlib import Path

from mutation import load_scanner, mutate

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1].parent / "shared" / "traces" / "kineto"
ODD = [b'"', b"\\", b"{", b"[", b"]", b"}", b",", b":", b"\\u", b"\\ud800", b"1e999", b"NaN", b"-",
       b"99999999999999999999999", b"\x00", b"\xff"]


def _outcome(path: Path, native: bool):
    from gpulens.collector.errors import TraceError
    from gpulens.collector.ingest import kineto, kineto_native

    saved = kineto_native._SCANNER
    if not native:
        kineto_native._SCANNER = None
    try:
        parsed = kineto.parse(path, "r")
        return {name: table.drop_columns(["ingested_at"]) if name == "runs" else table
                for name, table in parsed.tables.items()}
    except TraceError:
        return "refused"
    finally:
        kineto_native._SCANNER = saved


def _agree(path: Path) -> bool:
    native, plain = _outcome(path, True), _outcome(path, False)
    if isinstance(native, str) or isinstance(plain, str):
        return native == plain
    return native.keys() == plain.keys() and all(native[name].equals(plain[name]) for name in native)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scanner", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=47)
    parser.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "gpulens-fuzz")
    parser.add_argument("--record", action="store_true", help="add the counts to tests/hostile/results.json")
    args = parser.parse_args()
    if args.scanner is not None:
        load_scanner("gpulens.collector.ingest._kineto_scan", args.scanner)
    from gpulens.collector.ingest import kineto_native

    if not kineto_native.available():
        print("fuzz_scanner: the compiled scanner is not available", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    from corpus import corpus

    args.keep.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpulens-fuzz-"))
    cases, _ = corpus(work / "corpus")
    tried = 0
    for case in cases:
        if case.name.startswith("kineto_"):
            tried += 1
            if not _agree(case.path):
                print(f"fuzz_scanner: {case.path}: the scanner and msgspec disagree", file=sys.stderr)
                return 1
    seeds = [gzip.decompress(p.read_bytes()) for p in sorted(SHARED.glob("*.json.gz"))] if SHARED.is_dir() else []
    seeds = [seed[:2_000_000] for seed in seeds]  # a mutated cut is as hostile as the whole, and faster
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.seconds
    mutated = 0
    while seeds and time.monotonic() < deadline:
        path = work / "mutated.json"
        path.write_bytes(mutate(rng.choice(seeds), rng, ODD, edits=8, repeats=50, splice_bytes=32))
        mutated += 1
        if not _agree(path):
            kept = args.keep / f"disagree-{args.seed}-{mutated}.json"
            kept.write_bytes(path.read_bytes())
            print(f"fuzz_scanner: {kept}: the scanner and msgspec disagree (seed {args.seed}, input {mutated})",
                  file=sys.stderr)
            return 1
    if args.record:
        from hostile_figures import record

        record(scanner_corpus_inputs=tried, scanner_fuzz_mutations=mutated, scanner_fuzz_seconds=args.seconds,
               scanner_fuzz_seed=args.seed)
    print(f"fuzz_scanner: {tried} corpus inputs and {mutated} mutations of {len(seeds)} shared traces "
          f"(seed {args.seed}): the scanner ({kineto_native._SCANNER.__file__}) and msgspec agree on every one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
