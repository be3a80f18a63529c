"""A generator of malformed trace inputs, for all four formats.

`corpus(folder)` writes one good file per format and many bad ones, and
returns each as a `Case`: its path, and whether ingest must accept it (an
odd value costs that value, not the file) or refuse it with one line. The
sanitizer run (`sanitize.sh`) feeds the same files to the compiled scanner.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from test_ingest_kineto import event, gpu, synthetic_trace  # noqa: E402
from test_ingest_nccl_log import TWO_NODES_LOG  # noqa: E402
from test_ingest_nsys import GLOBAL_PID, build_export  # noqa: E402
from test_ingest_rocprof import KERNEL_TRACE  # noqa: E402


INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    accepted: bool  # ingested (perhaps with a warning), else refused with one line naming it


def _kineto_variants() -> dict[str, tuple[bytes, bool]]:
    good = json.dumps(synthetic_trace()).encode()
    trace = synthetic_trace()
    deep = b"[" * 100_000 + b"]" * 100_000
    variants = {
        "truncated": (good[: len(good) // 2], False),
        "empty": (b"", False),
        "blank": (b"   \n", False),
        "garbage": (bytes(range(256)) * 16, False),
        "not_an_object": (b"[1, 2, 3]", False),
        "trace_events_a_number": (b'{"traceEvents": 7}', False),
        "no_gpu_events": (json.dumps({"traceEvents": [event("cpu_op", "aten::mm", 1.0, 2.0)]}).encode(), False),
        "wrong_types": (good.replace(b'"dur": 30.002', b'"dur": {"a": 1}').replace(b'"pid": 100', b'"pid": "x"'), True),
        "nan_and_inf": (good.replace(b'"ts": 1100.123', b'"ts": NaN').replace(b'"dur": 50.5', b'"dur": Infinity'), True),
        "huge_numbers": (good.replace(b'"correlation": 500', b'"correlation": 123456789012345678901234567890'), True),
        "deep_nesting": (good.replace(b'"args": {', b'"args": {"deep": ' + deep + b", ", 1), True),
        "lone_surrogate": (good.replace(b"aten::mm", b"aten::mm\\udc00"), True),
        "duplicate_keys": (good.replace(b'"ph": "X", ', b'"ph": "X", "ph": "X", ', 3), True),
        "latin1_name": (good.replace(b"aten::mm", b"aten::mm\xe9"), True),
    }
    trace["distributedInfo"] = {"rank": 2**70, "world_size": 2**70}
    variants["rank_beyond_int64"] = (json.dumps(trace).encode(), True)
    doubled = synthetic_trace()
    doubled["traceEvents"] += doubled["traceEvents"]
    variants["duplicate_events"] = (json.dumps(doubled).encode(), True)
    return variants


def corpus(folder: Path) -> tuple[list[Case], dict[str, Path]]:
    """The bad cases, and one good file per format (`kineto`, `nsys`,
    `rocprof`, `nccl`), written under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    good = {
        "kineto": folder / "good_kineto.json",
        "nsys": build_export(folder / "good_nsys.sqlite"),
        "rocprof": folder / "good_kernel_trace.csv",
        "nccl": folder / "good_nccl.log",
    }
    good["kineto"].write_text(json.dumps(synthetic_trace()))
    good["rocprof"].write_text(KERNEL_TRACE)
    good["nccl"].write_text(TWO_NODES_LOG)
    cases: list[Case] = []

    def add(name: str, data: bytes, accepted: bool, suffix: str) -> None:
        path = folder / f"{name}{suffix}"
        path.write_bytes(data)
        cases.append(Case(name, path, accepted))

    for name, (data, accepted) in _kineto_variants().items():
        add(f"kineto_{name}", data, accepted, ".json")
    kineto = good["kineto"].read_bytes()
    add("kineto_gzip_truncated", gzip.compress(kineto)[:-20], False, ".json.gz")
    add("kineto_gzip_garbage", b"\x1f\x8b" + os.urandom(64), False, ".json.gz")
    nsys = good["nsys"].read_bytes()
    add("nsys_truncated", nsys[: len(nsys) // 3], False, ".sqlite")
    add("nsys_garbage", b"SQLite format 3\x00" + bytes(1000), False, ".sqlite")
    # A kernel at INT64_MAX: the session start pushes it past int64; its times are NULL, counted.
    beyond = build_export(folder / "nsys_start_int64_max.sqlite", extra_rows={"CUPTI_ACTIVITY_KIND_KERNEL": [
        (INT64_MAX, INT64_MAX, 0, 1, 7, 13, GLOBAL_PID, 1, 2, None, 16, 512, 1, 1, 128, 1, 1, 0, 0, 101)]})
    cases.append(Case("nsys_start_int64_max", beyond, True))
    other = folder / "nsys_other_sqlite.sqlite"
    connection = sqlite3.connect(other)
    connection.execute("create table t (a)")
    connection.commit()
    connection.close()
    cases.append(Case("nsys_other_sqlite", other, False))
    rocprof = KERNEL_TRACE.encode()
    add("rocprof_truncated_row", rocprof[: rocprof.rindex(b",1552")], False, "_kernel_trace.csv")
    add("rocprof_text_for_number", rocprof.replace(b"1552000000103565", b"abc"), False, "_kernel_trace.csv")
    add("rocprof_header_only", rocprof.split(b"\n")[0] + b"\n", False, "_kernel_trace.csv")
    add("nccl_garbage", b"NCCL INFO " + bytes(range(256)), False, ".log")
    add("wrong_format_png", b"\x89PNG\r\n\x1a\n" + bytes(100), False, ".json")
    fifo = folder / "fifo.json"
    os.mkfifo(fifo)
    cases.append(Case("fifo", fifo, False))
    return cases, good
