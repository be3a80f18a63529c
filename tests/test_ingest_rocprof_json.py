"""rocprofv3 JSON (`--output-format json`, rocprofiler-sdk's
`<pid>_results.json`) → the same trace tables as the rocpd database and the
CSV files. The file below has the shape rocprofiler-sdk writes (its
serialisation of buffer records: kernel dispatches with agent and queue,
memory copies, HIP, HSA and RCCL API calls, correlation ids, an RCCL
kernel), with the run of tests/test_ingest_rocpd.py in it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpulens.collector.derive import derive_trace_tables
from gpulens.collector.errors import TraceError
from gpulens.collector.ingest import rocpd, rocprof_json
from gpulens.collector.ingest.formats import detect_format
from test_ingest_rocpd import GEMM, HSA_TID, MAIN_TID, MI250, PID, RCCL, write_rocpd

# strings.buffer_records: one entry per buffer tracing kind, in the enum's order.
KINDS = ["NONE", "HSA_CORE_API", "HSA_AMD_EXT_API", "HSA_IMAGE_EXT_API", "HSA_FINALIZE_EXT_API", "HIP_RUNTIME_API",
         "HIP_COMPILER_API", "MARKER_CORE_API", "MARKER_CONTROL_API", "MARKER_NAME_API", "MEMORY_COPY",
         "KERNEL_DISPATCH", "PAGE_MIGRATION", "SCRATCH_MEMORY", "CORRELATION_ID_RETIREMENT", "RCCL_API"]
OPERATIONS = {
    "HSA_CORE_API": ["hsa_init", "hsa_shut_down", "hsa_signal_wait_scacquire"],
    "HIP_RUNTIME_API": ["hipApiName", "hipLaunchKernel", "hipMemcpyAsync"],
    "MARKER_CORE_API": ["roctxMarkA", "roctxRangePushA", "roctxRangePop"],
    "MEMORY_COPY": ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST", "MEMORY_COPY_HOST_TO_DEVICE"],
    "KERNEL_DISPATCH": ["NONE", "KERNEL_DISPATCH_ENQUEUE", "KERNEL_DISPATCH_COMPLETE"],
    "RCCL_API": ["ncclAllReduce", "ncclBroadcast"],
}
HSA, HIP, MARKER, COPY, DISPATCH, RCCL_API = (KINDS.index(name) for name in (
    "HSA_CORE_API", "HIP_RUNTIME_API", "MARKER_CORE_API", "MEMORY_COPY", "KERNEL_DISPATCH", "RCCL_API"))
# Agent handles, as rocprofiler-sdk numbers them (not the GPU indices).
CPU_AGENT, GPU0_AGENT, GPU1_AGENT = 0x7F10, 0x7F20, 0x7F30


def _id(handle: int) -> dict:
    return {"handle": handle}


def _correlation(internal: int) -> dict:
    return {"internal": internal, "external": {"value": 0}, "ancestor": 0}


def _api(kind: int, operation: str, tid: int, start: int, end: int, correlation: int) -> dict:
    return {"size": 64, "kind": kind, "operation": OPERATIONS[KINDS[kind]].index(operation),
            "correlation_id": _correlation(correlation), "start_timestamp": start, "end_timestamp": end, "thread_id": tid}


def _dispatch(kernel_id: int, agent: int, queue: int, start: int, end: int, grid: int, workgroup: int,
              correlation: int) -> dict:
    return {"size": 128, "kind": DISPATCH, "operation": 2, "thread_id": MAIN_TID,
            "correlation_id": _correlation(correlation), "start_timestamp": start, "end_timestamp": end,
            "dispatch_info": {"size": 96, "agent_id": _id(agent), "queue_id": _id(queue), "kernel_id": kernel_id,
                              "dispatch_id": kernel_id, "private_segment_size": 0, "group_segment_size": 0,
                              "workgroup_size": {"x": workgroup, "y": 1, "z": 1}, "grid_size": {"x": grid, "y": 1, "z": 1}}}


def tool_entry(pid: int = PID) -> dict:
    return {
        "metadata": {"pid": pid, "init_time": 10, "fini_time": 9000, "command": ["python", "train.py"]},
        "agents": [
            {"size": 400, "id": _id(CPU_AGENT), "type": 1, "node_id": 0, "logical_node_id": 0,
             "logical_node_type_id": 0, "name": "AMD EPYC 7763", "product_name": "AMD EPYC 7763 64-Core Processor"},
            {"size": 400, "id": _id(GPU0_AGENT), "type": 2, "node_id": 1, "logical_node_id": 1,
             "logical_node_type_id": 0, "name": "gfx90a", "product_name": MI250},
            {"size": 400, "id": _id(GPU1_AGENT), "type": 2, "node_id": 2, "logical_node_id": 2,
             "logical_node_type_id": 1, "name": "gfx90a", "product_name": MI250},
        ],
        "kernel_symbols": [
            {"size": 80, "kernel_id": 1, "kernel_name": GEMM + "@kd", "formatted_kernel_name": GEMM},
            {"size": 80, "kernel_id": 2, "kernel_name": RCCL + "@kd", "formatted_kernel_name": RCCL},
        ],
        "strings": {"buffer_records": [{"kind": kind, "operations": OPERATIONS.get(kind, [])} for kind in KINDS]},
        "buffer_records": {
            "kernel_dispatch": [
                _dispatch(1, GPU0_AGENT, 1, 2000, 2600, 262144, 256, 101),
                _dispatch(2, GPU1_AGENT, 2, 2100, 4100, 163840, 640, 102),
            ],
            "memory_copy": [{
                "size": 72, "kind": COPY, "operation": 2, "thread_id": MAIN_TID, "correlation_id": _correlation(103),
                "start_timestamp": 1700, "end_timestamp": 1900, "dst_agent_id": _id(GPU0_AGENT),
                "src_agent_id": _id(CPU_AGENT), "bytes": 4_194_304}],
            "hip_api": [
                _api(HIP, "hipLaunchKernel", MAIN_TID, 1000, 1200, 101),
                _api(HIP, "hipLaunchKernel", MAIN_TID, 1300, 1400, 102),
                _api(HIP, "hipMemcpyAsync", MAIN_TID, 1500, 1600, 103),
            ],
            "hsa_api": [_api(HSA, "hsa_signal_wait_scacquire", HSA_TID, 2000, 2100, 105)],
            "rccl_api": [_api(RCCL_API, "ncclAllReduce", MAIN_TID, 1250, 1450, 106)],
            "marker_api": [_api(MARKER, "roctxRangePushA", MAIN_TID, 900, 910, 104)],
            "scratch_memory": [],
        },
    }


def write_rocprof_json(path: Path, entries: list[dict] | None = None) -> Path:
    path.write_text(json.dumps({"rocprofiler-sdk-tool": entries if entries is not None else [tool_entry()]}))
    return path


def _parsed(tmp_path: Path, name: str = "4242_results.json"):
    return rocprof_json.parse(write_rocprof_json(tmp_path / name), "job")


def _rows(table) -> list[dict]:
    return table.to_pylist()


def test_a_rocprofv3_json_file_is_detected_as_such(tmp_path: Path) -> None:
    assert detect_format(write_rocprof_json(tmp_path / "4242_results.json")) == "rocprof_json"


def test_a_gzipped_rocprofv3_json_file_is_detected_too(tmp_path: Path) -> None:
    path = tmp_path / "4242_results.json.gz"
    path.write_bytes(gzip.compress(write_rocprof_json(tmp_path / "plain.json").read_bytes()))
    assert detect_format(path) == "rocprof_json"


def test_a_kineto_trace_is_not_taken_for_rocprofv3_json() -> None:
    assert not rocprof_json.sniff(b'{"schemaVersion": 1, "traceEvents": []}', Path("t.json"))


def test_dispatches_and_copies_become_kernel_rows(tmp_path: Path) -> None:
    kernels = _rows(_parsed(tmp_path).tables["kernels"])
    assert [(k["name"], k["kind"], k["category"], k["device"], k["stream"], k["start_ns"], k["dur_ns"], k["correlation_id"],
             k["grid"], k["block"], k["bytes"]) for k in kernels] == [
        ("Memcpy HtoD (Host -> Device)", "memcpy", "memory", 0, None, 1700, 200, 103, None, None, 4_194_304),
        (GEMM, "kernel", "compute", 0, 1, 2000, 600, 101, "[1024, 1, 1]", "[256, 1, 1]", None),
        (RCCL, "kernel", "communication", 1, 2, 2100, 2000, 102, "[256, 1, 1]", "[640, 1, 1]", None),
    ]


def test_hip_hsa_and_rccl_calls_become_api_calls(tmp_path: Path) -> None:
    calls = _rows(_parsed(tmp_path).tables["api_calls"])
    assert [(c["name"], c["pid"], c["tid"], c["start_ns"], c["dur_ns"], c["correlation_id"]) for c in calls] == [
        ("hipLaunchKernel", PID, MAIN_TID, 1000, 200, 101),
        ("ncclAllReduce", PID, MAIN_TID, 1250, 200, 106),
        ("hipLaunchKernel", PID, MAIN_TID, 1300, 100, 102),
        ("hipMemcpyAsync", PID, MAIN_TID, 1500, 100, 103),
        ("hsa_signal_wait_scacquire", PID, HSA_TID, 2000, 100, 105),
    ]


def test_the_rccl_kernel_is_a_collective(tmp_path: Path) -> None:
    collectives = _rows(_parsed(tmp_path).tables["collectives"])
    assert [(c["start_ns"], c["end_ns"], c["kernel_name"], c["correlation_id"]) for c in collectives] == [
        (2100, 4100, RCCL, 102)]


def test_kernels_link_to_the_hip_calls_that_launched_them(tmp_path: Path) -> None:
    kernels = _rows(derive_trace_tables(_parsed(tmp_path).tables)["kernels"])
    assert [(k["name"], k["launch_call_name"], k["launch_delay_ns"]) for k in kernels] == [
        ("Memcpy HtoD (Host -> Device)", "hipMemcpyAsync", 100),
        (GEMM, "hipLaunchKernel", 800),
        (RCCL, "hipLaunchKernel", 700),
    ]


def test_the_same_run_gives_the_rows_its_rocpd_database_gives(tmp_path: Path) -> None:
    # The database of tests/test_ingest_rocpd.py holds the same kernels and HIP/HSA calls.
    from_json = _parsed(tmp_path)
    from_db = rocpd.parse(write_rocpd(tmp_path / "4242_results.db"), "job")
    gpu_columns = ("name", "kind", "category", "device", "start_ns", "end_ns", "dur_ns", "correlation_id", "grid", "block")
    kernels = [{c: k[c] for c in gpu_columns} for k in _rows(from_json.tables["kernels"]) if k["kind"] == "kernel"]
    assert kernels == [{c: k[c] for c in gpu_columns} for k in _rows(from_db.tables["kernels"]) if k["kind"] == "kernel"]
    calls = [{c: k[c] for c in ("name", "pid", "tid", "start_ns", "dur_ns", "correlation_id")}
             for k in _rows(from_json.tables["api_calls"]) if k["name"] != "ncclAllReduce"]
    assert calls == [{c: k[c] for c in ("name", "pid", "tid", "start_ns", "dur_ns", "correlation_id")}
                     for k in _rows(from_db.tables["api_calls"])]


def test_runs_row_describes_the_process(tmp_path: Path) -> None:
    (run,) = _rows(_parsed(tmp_path).tables["runs"])
    assert (run["run"], run["rank"], run["pid"], run["device_name"], run["source_format"], run["time_base"],
            run["epoch_offset_ns"], run["backend"]) == ("job", 0, PID, MI250, "rocprof_json", "trace", None, "rocm")
    metadata = json.loads(run["metadata_json"])
    assert (metadata["skipped_records"], metadata["command"], metadata["gpus"]) == (
        {"marker_api": 1}, "python train.py", {"0": MI250, "1": MI250})


def test_rank_comes_from_the_file_name(tmp_path: Path) -> None:
    (run,) = _rows(_parsed(tmp_path, name="rank3_results.json").tables["runs"])
    assert (run["rank"], json.loads(run["metadata_json"])["rank_source"]) == (3, "file name")


def test_a_file_without_gpu_work_is_an_error_naming_it(tmp_path: Path) -> None:
    entry = tool_entry()
    entry["buffer_records"]["kernel_dispatch"] = entry["buffer_records"]["memory_copy"] = []
    path = write_rocprof_json(tmp_path / "4242_results.json", [entry])
    with pytest.raises(TraceError, match="no GPU events"):
        rocprof_json.parse(path, "job")


def test_a_record_missing_its_times_is_one_error_line(tmp_path: Path) -> None:
    entry = tool_entry()
    del entry["buffer_records"]["kernel_dispatch"][0]["start_timestamp"]
    path = write_rocprof_json(tmp_path / "4242_results.json", [entry])
    with pytest.raises(TraceError, match=r"4242_results.json: unexpected rocprofv3 JSON \(KeyError: 'start_timestamp'\)"):
        rocprof_json.parse(path, "job")
