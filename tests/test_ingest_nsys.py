"""Nsight Systems SQLite exports → kernels, api_calls, annotations and runs.

The exports are built here, table by table, with the columns `nsys export
--type sqlite` writes (a subset of each table's columns, types as nsys
declares them).
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from gpulens.collector.derive import derive_trace_tables
from gpulens.collector.errors import TraceError
from gpulens.collector.ingest import nsys
from gpulens.collector.schema import TRACE_SCHEMAS
from conftest import update_sqlite

EPOCH_NS = 1_700_000_000_000_000_000
PID = 4242
MAIN_TID, LAUNCH_TID = 4242, 4251
# globalTid: hardware/VM ids above bit 48, pid in bits 24-47, tid in bits 0-23.
GLOBAL_PID = (1 << 48) + (PID << 24)

ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

STRINGS = {
    1: ELEMENTWISE,
    2: "vectorized_elementwise_kernel",
    3: NCCL,
    4: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    5: "cudaMemsetAsync_v3020",
    6: "cudaMemcpyAsync_v3020",
    7: "cudaLaunchKernel_v7000",
    8: "ProfilerStep#3",
    9: "cudaGetDeviceCount_v3020",
}

SCHEMA = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "TARGET_INFO_SESSION_START_TIME": "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT",
    "TARGET_INFO_GPU": "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER, totalMemory INTEGER, smCount INTEGER, uuid TEXT, chipName TEXT",
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, "
        "shortName INTEGER NOT NULL, mangledName INTEGER, registersPerThread INTEGER NOT NULL, "
        "gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, "
        "blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, "
        "staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, gridId INTEGER NOT NULL"
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, "
        "correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, "
        "copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER, dstDeviceId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, "
        "bytes INTEGER NOT NULL, memKind INTEGER"
    ),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, "
        "color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, "
        "jsonTextId INTEGER, jsonText TEXT"
    ),
    "ENUM_CUDA_MEMCPY_OPER": "id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL",
}

ROWS = {
    "StringIds": list(STRINGS.items()),
    "TARGET_INFO_SESSION_START_TIME": [(EPOCH_NS, "2023-11-14T22:13:20.000Z", "2023-11-14T23:13:20.000+01:00")],
    "TARGET_INFO_GPU": [(0, 0, "NVIDIA H100 80GB HBM3", "0000:18:00.0", 1, 85_520_809_984, 132, "GPU-5e8f2c31-8d0b-4c59-9b8e-1f0b7a3c2d11", "GH100")],
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        (1_000_000, 1_012_000, 0, 1, 7, 11, GLOBAL_PID, 1, 2, None, 16, 512, 1, 1, 128, 1, 1, 0, 0, 101),
        (1_020_000, 1_120_000, 0, 1, 13, 12, GLOBAL_PID, 3, 4, None, 96, 2, 1, 1, 640, 1, 1, 0, 0, 102),
    ],
    "CUPTI_ACTIVITY_KIND_RUNTIME": [
        (940_000, 944_000, 1, GLOBAL_PID + MAIN_TID, 9, 5, 0, None),
        (890_000, 902_000, 1, GLOBAL_PID + MAIN_TID, 10, 6, 0, None),
        (990_000, 996_000, 1, GLOBAL_PID + MAIN_TID, 11, 7, 0, None),
        (1_005_000, 1_009_000, 1, GLOBAL_PID + LAUNCH_TID, 12, 7, 0, None),
    ],
    # copyKind 1 = HtoD; srcKind 1 = pageable, dstKind 3 = device.
    "CUPTI_ACTIVITY_KIND_MEMCPY": [(900_000, 905_000, 0, 1, 7, 10, GLOBAL_PID, 4096, 1, 1, 3, None, 0)],
    "CUPTI_ACTIVITY_KIND_MEMSET": [(950_000, 951_000, 0, 1, 7, 9, GLOBAL_PID, 0, 1024, 3)],
    "NVTX_EVENTS": [
        # push/pop (59) with a registered string, push/pop with text,
        # start/end (60), a mark (34) and a domain (75), which are not ranges.
        (850_000, 1_200_000, 59, None, None, None, None, GLOBAL_PID + MAIN_TID, None, 8, 0, None, None),
        (860_000, 1_100_000, 59, None, None, None, "forward", GLOBAL_PID + MAIN_TID, None, None, 0, None, None),
        (1_015_000, 1_125_000, 60, 1, None, None, "nccl:all_reduce", GLOBAL_PID + LAUNCH_TID, GLOBAL_PID + LAUNCH_TID, None, 0, None, None),
        (1_150_000, None, 34, None, None, None, "checkpoint", GLOBAL_PID + MAIN_TID, None, None, 0, None, None),
        (800_000, None, 75, None, None, None, "NCCL", GLOBAL_PID + MAIN_TID, None, None, 1, None, None),
    ],
    "ENUM_CUDA_MEMCPY_OPER": [(1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"), (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host")],
}


# A second process in the same export (`nsys profile torchrun ...` records
# every rank's process). CUPTI numbers correlation ids per process, so its
# launch reuses id 11, which pid 4242 also has.
OTHER_PID = 5353
OTHER_GLOBAL_PID = (1 << 48) + (OTHER_PID << 24)
SECOND_PROCESS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": [(1_030_000, 1_040_000, 1, 1, 7, 11, OTHER_GLOBAL_PID, 1, 2, None, 16, 512, 1, 1, 128, 1, 1, 0, 0, 201)],
    "CUPTI_ACTIVITY_KIND_RUNTIME": [(1_021_000, 1_025_000, 1, OTHER_GLOBAL_PID + OTHER_PID, 11, 7, 0, None)],
    "NVTX_EVENTS": [(1_018_000, 1_050_000, 59, None, None, None, "forward", OTHER_GLOBAL_PID + OTHER_PID, None, None, 0, None, None)],
}

# A process with no GPU work (a launcher), with a runtime call and a range.
LAUNCHER_PID = 777
LAUNCHER_GLOBAL_PID = (1 << 48) + (LAUNCHER_PID << 24)
LAUNCHER = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": [(800_000, 801_000, 1, LAUNCHER_GLOBAL_PID + LAUNCHER_PID, 11, 9, 0, None)],
    "NVTX_EVENTS": [(700_000, 1_300_000, 59, None, None, None, "launch", LAUNCHER_GLOBAL_PID + LAUNCHER_PID, None, None, 0, None, None)],
}

GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def build_export(path: Path, leave_out: tuple[str, ...] = (), extra_rows: dict[str, list[tuple]] | None = None,
                 empty: tuple[str, ...] = ()) -> Path:
    """An nsys SQLite export with the tables above, less `leave_out`, plus
    `extra_rows`; the tables in `empty` have no rows."""
    conn = sqlite3.connect(path)
    with conn:
        for table, columns in SCHEMA.items():
            if table in leave_out:
                continue
            conn.execute(f"CREATE TABLE {table} ({columns})")
            rows = [] if table in empty else ROWS[table] + (extra_rows or {}).get(table, [])
            if rows:
                conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    conn.close()
    return path


def _rows(table, columns: list[str]) -> list[dict]:
    return [{column: row[column] for column in columns} for row in table.to_pylist()]


KERNEL_COLUMNS = ["run", "rank", "device", "stream", "name", "category", "kind", "start_ns", "end_ns", "dur_ns", "correlation_id", "external_id", "grid", "block", "bytes"]


def test_sniff_accepts_nsys_export(tmp_path: Path) -> None:
    path = build_export(tmp_path / "report.sqlite")
    assert nsys.sniff(path.read_bytes()[:65536], path) is True


def test_sniff_rejects_other_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE measurements (ts INTEGER, value REAL)")
    conn.commit()
    conn.close()
    assert nsys.sniff(path.read_bytes()[:65536], path) is False


def test_sniff_rejects_json(tmp_path: Path) -> None:
    assert nsys.sniff(b'{"traceEvents": []}', tmp_path / "trace.json") is False


def test_gpu_activities_become_kernel_rows_on_the_epoch(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite"), "r1")
    e = EPOCH_NS
    assert _rows(parsed.tables["kernels"], KERNEL_COLUMNS) == [
        {"run": "r1", "rank": 0, "device": 0, "stream": 7, "name": "Memcpy HtoD (Pageable -> Device)", "category": "memory", "kind": "memcpy", "start_ns": e + 900_000, "end_ns": e + 905_000, "dur_ns": 5_000, "correlation_id": 10, "external_id": None, "grid": None, "block": None, "bytes": 4096},
        {"run": "r1", "rank": 0, "device": 0, "stream": 7, "name": "Memset (Device)", "category": "memory", "kind": "memset", "start_ns": e + 950_000, "end_ns": e + 951_000, "dur_ns": 1_000, "correlation_id": 9, "external_id": None, "grid": None, "block": None, "bytes": 1024},
        {"run": "r1", "rank": 0, "device": 0, "stream": 7, "name": ELEMENTWISE, "category": "compute", "kind": "kernel", "start_ns": e + 1_000_000, "end_ns": e + 1_012_000, "dur_ns": 12_000, "correlation_id": 11, "external_id": None, "grid": "[512, 1, 1]", "block": "[128, 1, 1]", "bytes": None},
        {"run": "r1", "rank": 0, "device": 0, "stream": 13, "name": NCCL, "category": "communication", "kind": "kernel", "start_ns": e + 1_020_000, "end_ns": e + 1_120_000, "dur_ns": 100_000, "correlation_id": 12, "external_id": None, "grid": "[2, 1, 1]", "block": "[640, 1, 1]", "bytes": None},
    ]


def test_runtime_calls_become_api_calls(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite"), "r1")
    e = EPOCH_NS
    columns = ["run", "rank", "pid", "tid", "name", "start_ns", "end_ns", "dur_ns", "correlation_id"]
    assert _rows(parsed.tables["api_calls"], columns) == [
        {"run": "r1", "rank": 0, "pid": PID, "tid": MAIN_TID, "name": "cudaMemcpyAsync", "start_ns": e + 890_000, "end_ns": e + 902_000, "dur_ns": 12_000, "correlation_id": 10},
        {"run": "r1", "rank": 0, "pid": PID, "tid": MAIN_TID, "name": "cudaMemsetAsync", "start_ns": e + 940_000, "end_ns": e + 944_000, "dur_ns": 4_000, "correlation_id": 9},
        {"run": "r1", "rank": 0, "pid": PID, "tid": MAIN_TID, "name": "cudaLaunchKernel", "start_ns": e + 990_000, "end_ns": e + 996_000, "dur_ns": 6_000, "correlation_id": 11},
        {"run": "r1", "rank": 0, "pid": PID, "tid": LAUNCH_TID, "name": "cudaLaunchKernel", "start_ns": e + 1_005_000, "end_ns": e + 1_009_000, "dur_ns": 4_000, "correlation_id": 12},
    ]


def test_nvtx_ranges_and_marks_become_annotations(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite"), "r1")
    e = EPOCH_NS
    columns = ["run", "rank", "pid", "tid", "name", "kind", "step", "start_ns", "end_ns", "dur_ns"]
    assert _rows(parsed.tables["annotations"], columns) == [
        {"run": "r1", "rank": 0, "pid": PID, "tid": MAIN_TID, "name": "ProfilerStep#3", "kind": "profiler_step", "step": 3, "start_ns": e + 850_000, "end_ns": e + 1_200_000, "dur_ns": 350_000},
        {"run": "r1", "rank": 0, "pid": PID, "tid": MAIN_TID, "name": "forward", "kind": "nvtx", "step": None, "start_ns": e + 860_000, "end_ns": e + 1_100_000, "dur_ns": 240_000},
        {"run": "r1", "rank": 0, "pid": PID, "tid": LAUNCH_TID, "name": "nccl:all_reduce", "kind": "nvtx", "step": None, "start_ns": e + 1_015_000, "end_ns": e + 1_125_000, "dur_ns": 110_000},
        # nvtxMark: an instant, as a Kineto trace's.
        {"run": "r1", "rank": 0, "pid": PID, "tid": MAIN_TID, "name": "checkpoint", "kind": "instant", "step": None, "start_ns": e + 1_150_000, "end_ns": e + 1_150_000, "dur_ns": 0},
    ]


def test_runs_row_describes_the_export(tmp_path: Path) -> None:
    path = build_export(tmp_path / "report.sqlite")
    parsed = nsys.parse(path, "r1")
    columns = ["run", "rank", "world_size", "host", "pid", "device_name", "source_path", "source_format", "epoch_offset_ns", "time_base", "backend", "nccl_version", "metadata_json"]
    metadata = ('{"gpus": [{"busLocation": "0000:18:00.0", "id": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5e8f2c31-8d0b-4c59-9b8e-1f0b7a3c2d11"}], "pids": [4242], '
                '"time_note": "ts from the session start, placed on the epoch by TARGET_INFO_SESSION_START_TIME"}')
    assert _rows(parsed.tables["runs"], columns) == [
        {"run": "r1", "rank": 0, "world_size": None, "host": None, "pid": PID, "device_name": "NVIDIA H100 80GB HBM3", "source_path": str(path.resolve()), "source_format": "nsys", "epoch_offset_ns": EPOCH_NS, "time_base": "epoch", "backend": "cuda", "nccl_version": None, "metadata_json": metadata},
    ]


_COLLECTIVE_COLUMNS = ["rank", "op", "bytes", "seq", "start_ns", "end_ns", "cpu_start_ns", "cpu_end_ns", "kernel_name",
                       "correlation_id"]


def test_each_nccl_kernel_is_a_collective_its_op_from_its_name(tmp_path: Path) -> None:
    # Its launch (1,005,000) is before the nccl: range starts: the name says.
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite"), "r1")
    e = EPOCH_NS
    assert _rows(parsed.tables["collectives"], _COLLECTIVE_COLUMNS) == [
        {"rank": 0, "op": "all_reduce", "bytes": None, "seq": None, "start_ns": e + 1_020_000, "end_ns": e + 1_120_000,
         "cpu_start_ns": None, "cpu_end_ns": None, "kernel_name": NCCL, "correlation_id": 12},
    ]


def test_an_nccl_range_around_the_launch_gives_the_collectives_op_and_cpu_time(tmp_path: Path) -> None:
    ranges = [(1_003_000, 1_011_000, 59, None, None, None, "nccl:all_gather", GLOBAL_PID + LAUNCH_TID, None, None, 0, None, None)]
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite", extra_rows={"NVTX_EVENTS": ranges}), "r1")
    row = _rows(parsed.tables["collectives"], ["op", "cpu_start_ns", "cpu_end_ns"])[0]
    assert row == {"op": "all_gather", "cpu_start_ns": EPOCH_NS + 1_003_000, "cpu_end_ns": EPOCH_NS + 1_011_000}


def test_collectives_are_not_counted_as_events_read(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite"), "r1")
    assert parsed.events == sum(parsed.tables[t].num_rows for t in ("kernels", "api_calls", "annotations"))


def test_without_session_start_times_stay_trace_relative(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite", leave_out=("TARGET_INFO_SESSION_START_TIME",)), "r1")
    assert parsed.tables["kernels"].column("start_ns").to_pylist() == [900_000, 950_000, 1_000_000, 1_020_000]
    assert _rows(parsed.tables["runs"], ["epoch_offset_ns", "time_base"]) == [{"epoch_offset_ns": None, "time_base": "trace"}]


def test_without_session_start_the_runs_row_says_why_times_are_trace_relative(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite", leave_out=("TARGET_INFO_SESSION_START_TIME",)), "r1")
    metadata = json.loads(parsed.tables["runs"].column("metadata_json")[0].as_py())
    assert metadata["time_note"] == "ts from the session start: the export has no TARGET_INFO_SESSION_START_TIME"


def test_missing_memset_and_nvtx_tables_are_fine(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite", leave_out=("CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS")), "r1")
    assert parsed.tables["kernels"].column("kind").to_pylist() == ["memcpy", "kernel", "kernel"]
    assert "annotations" not in parsed.tables


def test_rank_comes_from_file_name(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "train_rank-2.sqlite"), "r1")
    assert set(parsed.tables["kernels"].column("rank").to_pylist()) == {2}
    assert parsed.tables["runs"].column("rank").to_pylist() == [2]


def test_tables_follow_the_contract_schemas(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite"), "r1")
    for name, table in parsed.tables.items():
        assert table.schema.equals(TRACE_SCHEMAS[name], check_metadata=True)


def test_gzipped_export_is_read(tmp_path: Path) -> None:
    plain = build_export(tmp_path / "report.sqlite")
    packed = tmp_path / "report.sqlite.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    parsed = nsys.parse(packed, "r1")
    assert (parsed.rows("kernels"), parsed.rows("api_calls"), parsed.rows("annotations")) == (4, 4, 4)
    assert parsed.tables["runs"].column("source_path").to_pylist() == [str(packed.resolve())]


def test_truncated_gzip_raises(tmp_path: Path) -> None:
    plain = build_export(tmp_path / "report.sqlite")
    packed = tmp_path / "report.sqlite.gz"
    whole = gzip.compress(plain.read_bytes())
    packed.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TraceError, match="truncated or corrupt gzip"):
        nsys.parse(packed, "r1")


def test_file_that_is_not_sqlite_raises(tmp_path: Path) -> None:
    path = tmp_path / "report.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    with pytest.raises(TraceError, match="not a readable nsys SQLite export"):
        nsys.parse(path, "r1")


def test_sqlite_without_nsys_tables_raises(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE measurements (ts INTEGER, value REAL)")
    conn.commit()
    conn.close()
    with pytest.raises(TraceError, match="not an nsys SQLite export"):
        nsys.parse(path, "r1")


def test_export_missing_a_needed_column_raises(tmp_path: Path) -> None:
    path = build_export(tmp_path / "report.sqlite", leave_out=("CUPTI_ACTIVITY_KIND_KERNEL",))
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL)")
    conn.commit()
    conn.close()
    with pytest.raises(TraceError, match="unexpected schema: no such column"):
        nsys.parse(path, "r1")


def test_runs_row_records_ingestion_and_events_are_counted(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite"), "r1")
    assert parsed.tables["runs"].column("ingested_at").null_count == 0
    assert parsed.events == 12


def test_each_process_with_gpu_work_is_a_rank_in_pid_order(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite", extra_rows=SECOND_PROCESS), "r1")
    assert _rows(parsed.tables["kernels"], ["rank", "kind", "start_ns", "correlation_id"]) == [
        {"rank": 0, "kind": "memcpy", "start_ns": EPOCH_NS + 900_000, "correlation_id": 10},
        {"rank": 0, "kind": "memset", "start_ns": EPOCH_NS + 950_000, "correlation_id": 9},
        {"rank": 0, "kind": "kernel", "start_ns": EPOCH_NS + 1_000_000, "correlation_id": 11},
        {"rank": 0, "kind": "kernel", "start_ns": EPOCH_NS + 1_020_000, "correlation_id": 12},
        {"rank": 1, "kind": "kernel", "start_ns": EPOCH_NS + 1_030_000, "correlation_id": 11},
    ]


def test_runtime_calls_take_their_process_rank(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite", extra_rows=SECOND_PROCESS), "r1")
    assert _rows(parsed.tables["api_calls"], ["rank", "pid", "correlation_id"]) == [
        {"rank": 0, "pid": PID, "correlation_id": 10},
        {"rank": 0, "pid": PID, "correlation_id": 9},
        {"rank": 0, "pid": PID, "correlation_id": 11},
        {"rank": 0, "pid": PID, "correlation_id": 12},
        {"rank": 1, "pid": OTHER_PID, "correlation_id": 11},
    ]


def test_kernels_link_to_launch_calls_of_their_own_process(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite", extra_rows=SECOND_PROCESS), "r1")
    kernels = derive_trace_tables(parsed.tables)["kernels"]
    launched_as_11 = [row for row in _rows(kernels, ["rank", "kind", "correlation_id", "launch_call_start_ns", "launch_delay_ns"])
                      if row["kind"] == "kernel" and row["correlation_id"] == 11]
    assert launched_as_11 == [
        {"rank": 0, "kind": "kernel", "correlation_id": 11, "launch_call_start_ns": EPOCH_NS + 990_000, "launch_delay_ns": 4_000},
        {"rank": 1, "kind": "kernel", "correlation_id": 11, "launch_call_start_ns": EPOCH_NS + 1_021_000, "launch_delay_ns": 5_000},
    ]


def test_nvtx_ranges_take_their_process_rank(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite", extra_rows=SECOND_PROCESS), "r1")
    assert _rows(parsed.tables["annotations"], ["rank", "pid", "name"]) == [
        {"rank": 0, "pid": PID, "name": "ProfilerStep#3"},
        {"rank": 0, "pid": PID, "name": "forward"},
        {"rank": 0, "pid": PID, "name": "nccl:all_reduce"},
        {"rank": 1, "pid": OTHER_PID, "name": "forward"},
        {"rank": 0, "pid": PID, "name": "checkpoint"},
    ]


def test_runs_has_a_row_per_process_saying_the_rank_is_its_order(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite", extra_rows=SECOND_PROCESS), "r1")
    runs = [{**row, "metadata_json": json.loads(row["metadata_json"])} for row in _rows(parsed.tables["runs"], ["rank", "pid", "metadata_json"])]
    rank_source = "process order in the export (by pid, among processes with GPU work), not the job's rank"
    assert [(run["rank"], run["pid"], run["metadata_json"]["pids"], run["metadata_json"]["rank_source"]) for run in runs] == [
        (0, PID, [PID], rank_source),
        (1, OTHER_PID, [OTHER_PID], rank_source),
    ]


def test_several_processes_ignore_the_file_name_rank(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "train_rank-2.sqlite", extra_rows=SECOND_PROCESS), "r1")
    assert parsed.tables["runs"].column("rank").to_pylist() == [0, 1]


def test_rows_of_processes_without_gpu_work_are_left_out(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite", extra_rows=LAUNCHER), "r1")
    assert set(parsed.tables["api_calls"].column("pid").to_pylist()) == {PID}
    assert set(parsed.tables["annotations"].column("pid").to_pylist()) == {PID}
    runs = _rows(parsed.tables["runs"], ["rank", "pid", "metadata_json"])
    assert [(run["rank"], run["pid"], json.loads(run["metadata_json"])["pids_without_gpu_work"]) for run in runs] == [(0, PID, [LAUNCHER_PID])]


def test_gpu_rows_without_global_pid_make_one_rank(tmp_path: Path) -> None:
    path = build_export(tmp_path / "report.sqlite", leave_out=GPU_TABLES, extra_rows=SECOND_PROCESS)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
                 "streamId INTEGER NOT NULL, correlationId INTEGER, bytes INTEGER NOT NULL, memKind INTEGER)")
    conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (950000, 951000, 0, 7, 9, 1024, 3)")
    conn.commit()
    conn.close()
    parsed = nsys.parse(path, "r1")
    assert _rows(parsed.tables["api_calls"], ["rank", "pid"]) == [{"rank": 0, "pid": PID}] * 4 + [{"rank": 0, "pid": OTHER_PID}]
    assert _rows(parsed.tables["runs"], ["rank", "pid"]) == [{"rank": 0, "pid": None}]


# A CUDA graph launched twice and traced as a whole (nsys's default
# --cuda-graph-trace=graph): CUPTI_ACTIVITY_KIND_GRAPH_TRACE rows, and no
# kernel rows for the nodes it ran. Each launch is a cudaGraphLaunch call.
GRAPH_TRACE_SCHEMA = (
    "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
    "streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, graphId INTEGER NOT NULL"
)
GRAPH_LAUNCHES = {"StringIds": [(20, "cudaGraphLaunch_v10000")],
                  "CUPTI_ACTIVITY_KIND_RUNTIME": [(1_130_000, 1_140_000, 1, GLOBAL_PID + MAIN_TID, 30, 20, 0, None),
                                                  (1_150_000, 1_158_000, 1, GLOBAL_PID + MAIN_TID, 31, 20, 0, None)]}
GRAPH_EXECUTIONS = [(1_142_000, 1_300_000, 0, 1, 7, 30, GLOBAL_PID, 109), (1_300_000, 1_450_000, 0, 1, 7, 31, GLOBAL_PID, 109)]


def _with_graph_trace(path: Path) -> Path:
    build_export(path, extra_rows=GRAPH_LAUNCHES)
    update_sqlite(path, f"CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE ({GRAPH_TRACE_SCHEMA})")
    for row in GRAPH_EXECUTIONS:
        update_sqlite(path, f"INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES {row}")
    return path


def test_graphs_traced_whole_become_one_kernel_row_per_execution(tmp_path: Path) -> None:
    parsed = nsys.parse(_with_graph_trace(tmp_path / "report.sqlite"), "r1")
    e = EPOCH_NS
    graphs = [row for row in _rows(parsed.tables["kernels"], KERNEL_COLUMNS) if row["kind"] == "graph"]
    assert graphs == [
        {"run": "r1", "rank": 0, "device": 0, "stream": 7, "name": "CUDA graph 109", "category": "compute", "kind": "graph", "start_ns": e + 1_142_000, "end_ns": e + 1_300_000, "dur_ns": 158_000, "correlation_id": 30, "external_id": None, "grid": None, "block": None, "bytes": None},
        {"run": "r1", "rank": 0, "device": 0, "stream": 7, "name": "CUDA graph 109", "category": "compute", "kind": "graph", "start_ns": e + 1_300_000, "end_ns": e + 1_450_000, "dur_ns": 150_000, "correlation_id": 31, "external_id": None, "grid": None, "block": None, "bytes": None},
    ]


def test_graphs_traced_whole_are_warned_of_and_counted_in_runs(tmp_path: Path) -> None:
    parsed = nsys.parse(_with_graph_trace(tmp_path / "report.sqlite"), "r1")
    assert parsed.warnings == [
        "2 CUDA graph executions traced whole (nsys --cuda-graph-trace=graph, the default): each is one kernels "
        "row (kind graph), since the kernels it ran are not in the export; profile with --cuda-graph-trace=node to see them"]
    assert json.loads(parsed.tables["runs"].column("metadata_json")[0].as_py())["graph_executions_traced_whole"] == 2


def test_graph_executions_link_to_their_launch_calls(tmp_path: Path) -> None:
    parsed = nsys.parse(_with_graph_trace(tmp_path / "report.sqlite"), "r1")
    kernels = derive_trace_tables(parsed.tables)["kernels"]
    graphs = [row for row in kernels.to_pylist() if row["kind"] == "graph"]
    assert [(row["launch_call_name"], row["launch_delay_ns"]) for row in graphs] == [("cudaGraphLaunch", 2_000), ("cudaGraphLaunch", 142_000)]


def test_an_export_of_graphs_traced_whole_alone_is_ingested(tmp_path: Path) -> None:
    path = _with_graph_trace(tmp_path / "report.sqlite")
    update_sqlite(path, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    update_sqlite(path, "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    update_sqlite(path, "DELETE FROM CUPTI_ACTIVITY_KIND_MEMSET")
    assert nsys.parse(path, "r1").tables["kernels"].column("kind").to_pylist() == ["graph", "graph"]


def test_export_without_gpu_tables_raises(tmp_path: Path) -> None:
    path = build_export(tmp_path / "report.sqlite", leave_out=GPU_TABLES)
    with pytest.raises(TraceError, match=r"no GPU events \(kernels, memcpy or memset\)"):
        nsys.parse(path, "r1")


def test_export_with_empty_gpu_tables_raises(tmp_path: Path) -> None:
    path = build_export(tmp_path / "report.sqlite", empty=GPU_TABLES)
    with pytest.raises(TraceError, match=r"no GPU events \(kernels, memcpy or memset\)"):
        nsys.parse(path, "r1")


def test_export_with_only_memcpy_and_memset_is_ingested(tmp_path: Path) -> None:
    parsed = nsys.parse(build_export(tmp_path / "report.sqlite", leave_out=("CUPTI_ACTIVITY_KIND_KERNEL",)), "r1")
    assert parsed.tables["kernels"].column("kind").to_pylist() == ["memcpy", "memset"]
    assert _rows(parsed.tables["runs"], ["rank", "pid"]) == [{"rank": 0, "pid": PID}]


def test_text_in_a_numeric_column_names_the_table_and_column(tmp_path: Path) -> None:
    # SQLite stores any value in any column, whatever its declared type.
    path = build_export(tmp_path / "report.sqlite")
    update_sqlite(path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 'dev' WHERE correlationId = 12")
    with pytest.raises(TraceError) as error:
        nsys.parse(path, "r1")
    assert (error.value.path, error.value.problem) == (
        str(path), "CUPTI_ACTIVITY_KIND_KERNEL.deviceId holds text where a number belongs")


@pytest.mark.parametrize(("table", "column", "correlation_id"), [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "start", 12),
    ("CUPTI_ACTIVITY_KIND_KERNEL", '"end"', 12),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "start", 12),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", '"end"', 10),
])
def test_text_time_names_the_table_and_column_instead_of_reading_as_the_session_start(
        tmp_path: Path, table: str, column: str, correlation_id: int) -> None:
    # SQLite's arithmetic reads 'abc' as 0, which on the epoch is the session start.
    path = build_export(tmp_path / "report.sqlite")
    update_sqlite(path, f"UPDATE {table} SET {column} = 'abc' WHERE correlationId = {correlation_id}")
    with pytest.raises(TraceError) as error:
        nsys.parse(path, "r1")
    assert (error.value.path, error.value.problem) == (
        str(path), f"{table}.{column.strip(chr(34))} holds text where a number belongs")


def test_text_session_start_names_the_table_and_column(tmp_path: Path) -> None:
    path = build_export(tmp_path / "report.sqlite")
    update_sqlite(path, "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = '2023-11-14T22:13:20Z'")
    with pytest.raises(TraceError) as error:
        nsys.parse(path, "r1")
    assert (error.value.path, error.value.problem) == (
        str(path), "TARGET_INFO_SESSION_START_TIME.utcEpochNs holds text where a number belongs")
