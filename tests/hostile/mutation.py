"""What the two fuzzers (fuzz_scanner.py, fuzz_nvsmi.py) share: loading a
build of a compiled scanner in place of the installed one, and seeded
mutations of an input."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path


def load_scanner(module_name: str, path: Path) -> None:
    """Import the build at `path` as `module_name` (an AddressSanitizer
    build, say), so that the code importing that name gets it."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[module_name] = module


def mutate(data: bytes, rng: random.Random, odd: list[bytes], edits: int, repeats: int, splice_bytes: int) -> bytes:
    """`data` after 1 to `edits` edits: a byte flipped, the rest cut, a run
    repeated up to `repeats` times, one of `odd` put in, or `splice_bytes`
    copied from elsewhere."""
    data = bytearray(data)
    for _ in range(rng.randint(1, edits)):
        kind = rng.randrange(5)
        at = rng.randrange(len(data)) if data else 0
        if kind == 0 and data:
            data[at] = rng.randrange(256)
        elif kind == 1:
            del data[at:]
        elif kind == 2:
            data[at:at] = data[at : at + rng.randint(1, 64)] * rng.randint(2, repeats)
        elif kind == 3:
            data[at:at] = rng.choice(odd)
        elif data:
            other = rng.randrange(len(data))
            data[at : at + splice_bytes] = data[other : other + splice_bytes]
    return bytes(data)
