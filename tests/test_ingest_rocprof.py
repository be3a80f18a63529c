"""rocprofv3 CSV traces → kernels, api_calls, annotations and runs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpulens.collector.derive import derive_trace_tables
from gpulens.collector.errors import TraceError
from gpulens.collector.ingest import rocprof
from gpulens.collector.ingest.formats import detect_format
from gpulens.collector.ingest.store import source_id, table_path, write_source
from gpulens.collector.schema import TRACE_SCHEMAS

# rocprofv3 (ROCm 6.4) --kernel-trace on an MI300X node: relative agent ids
# ("Agent 1" is logical node 1; node 0 is the CPU). Names with commas are quoted.
KERNEL_TRACE = """\
"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"
"KERNEL_DISPATCH","Agent 1",1,0,4242,1,33,"__amd_rocclr_fillBufferAligned",101,1552000000100000,1552000000103565,0,0,12,4,48,256,1,1,256,1,1
"KERNEL_DISPATCH","Agent 1",1,2,4242,3,57,"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",105,1552000000300000,1552000000312000,0,0,16,0,32,256,1,1,131072,1,1
"KERNEL_DISPATCH","Agent 1",2,3,4242,2,81,"ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",103,1552000000200000,1552000000290000,0,0,64,0,96,256,1,1,1024,1,1
"""

AGENT_INFO = """\
"Node_Id","Logical_Node_Id","Agent_Type","Cpu_Cores_Count","Simd_Count","Wave_Front_Size","Cu_Count","Name","Vendor_Name","Product_Name","Model_Name"
0,0,"CPU",96,0,0,0,"AMD EPYC 9654 96-Core Processor","CPU","AMD EPYC 9654 96-Core Processor",""
2,1,"GPU",0,1216,64,304,"gfx942","AMD","AMD Instinct MI300X","ip discovery"
3,2,"GPU",0,1216,64,304,"gfx942","AMD","AMD Instinct MI300X","ip discovery"
"""

# ROCm 6.2's layout: numeric agent ids, no stream, no thread.
OLD_KERNEL_TRACE = """\
"Kind","Agent_Id","Queue_Id","Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp","Private_Segment_Size","Group_Segment_Size","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"
"KERNEL_DISPATCH",4,139690710949888,15,"matrixTranspose(float*, float*, int)",7,671599758568,671599825328,0,0,4,4,1,1024,1024,1
"""

HIP_API_TRACE = """\
"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"
"HIP_RUNTIME_API","hipMemsetAsync",4242,4242,101,1552000000090000,1552000000095000
"HIP_RUNTIME_API","hipLaunchKernel",4242,4250,105,1552000000280000,1552000000286500
"HIP_RUNTIME_API_EXT","hipExtLaunchKernel",4242,4242,103,1552000000180000,1552000000184000
"""

MARKER_TRACE = """\
"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"
"MARKER_CORE_API","ProfilerStep#2",4242,4242,2,1552000000050000,1552000000400000
"MARKER_CORE_API","forward",4242,4242,3,1552000000060000,1552000000200000
"""

COPY_TRACE = """\
"Kind","Direction","Stream_Id","Source_Agent_Id","Destination_Agent_Id","Correlation_Id","Start_Timestamp","End_Timestamp"
"MEMORY_COPY","MEMORY_COPY_HOST_TO_DEVICE",0,"Agent 0","Agent 2",120,1552000000500000,1552000000540000
"MEMORY_COPY","MEMORY_COPY_DEVICE_TO_HOST",0,"Agent 1","Agent 0",121,1552000000600000,1552000000620000
"""

OLD_COPY_TRACE = """\
"Kind","Direction","Source_Agent_Id","Destination_Agent_Id","Correlation_Id","Start_Timestamp","End_Timestamp"
"MEMORY_COPY","HOST_TO_DEVICE",0,1,0,14955949675563,14955950239443
"""

KERNEL_COLUMNS = ["run", "rank", "device", "stream", "name", "category", "kind", "start_ns", "end_ns", "dur_ns", "correlation_id", "grid", "block", "bytes"]
FILL_BUFFER = "__amd_rocclr_fillBufferAligned"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
RCCL = "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def _rows(table, columns: list[str]) -> list[dict]:
    return [{column: row[column] for column in columns} for row in table.to_pylist()]


TRACES = {"kernel_trace": KERNEL_TRACE, "hip_api_trace": HIP_API_TRACE, "marker_api_trace": MARKER_TRACE,
          "memory_copy_trace": COPY_TRACE, "agent_info": AGENT_INFO}


def _process(folder: Path, *kinds: str, pid: int = 4242) -> list[Path]:
    """Files of one process as rocprofv3 names them (`<pid>_<kind>.csv`)."""
    folder.mkdir(parents=True, exist_ok=True)
    return [_write(folder, f"{pid}_{kind}.csv", TRACES[kind]) for kind in kinds]


def _metadata(parsed) -> dict:
    return json.loads(parsed.tables["runs"].column("metadata_json")[0].as_py())


def test_sniff_accepts_each_trace_header() -> None:
    for text in (KERNEL_TRACE, OLD_KERNEL_TRACE, HIP_API_TRACE, MARKER_TRACE, COPY_TRACE, OLD_COPY_TRACE):
        assert rocprof.sniff(text.encode(), Path("1_trace.csv")) is True


def test_sniff_rejects_agent_info_and_other_csv() -> None:
    assert rocprof.sniff(AGENT_INFO.encode(), Path("4242_agent_info.csv")) is False
    assert rocprof.sniff(b"ts,host,gpu_index,power_w\n1,a,0,300\n", Path("power.csv")) is False
    assert rocprof.sniff(b'{"traceEvents": []}', Path("trace.json")) is False


def test_kernel_trace_gives_exact_kernel_rows(tmp_path: Path) -> None:
    _write(tmp_path, "4242_agent_info.csv", AGENT_INFO)
    parsed = rocprof.parse(_write(tmp_path, "4242_kernel_trace.csv", KERNEL_TRACE), "r1")
    assert _rows(parsed.tables["kernels"], KERNEL_COLUMNS) == [
        {"run": "r1", "rank": 0, "device": 0, "stream": 0, "name": FILL_BUFFER, "category": "memory", "kind": "kernel", "start_ns": 1552000000100000, "end_ns": 1552000000103565, "dur_ns": 3565, "correlation_id": 101, "grid": "[1, 1, 1]", "block": "[256, 1, 1]", "bytes": None},
        {"run": "r1", "rank": 0, "device": 0, "stream": 3, "name": RCCL, "category": "communication", "kind": "kernel", "start_ns": 1552000000200000, "end_ns": 1552000000290000, "dur_ns": 90000, "correlation_id": 103, "grid": "[4, 1, 1]", "block": "[256, 1, 1]", "bytes": None},
        {"run": "r1", "rank": 0, "device": 0, "stream": 2, "name": ELEMENTWISE, "category": "compute", "kind": "kernel", "start_ns": 1552000000300000, "end_ns": 1552000000312000, "dur_ns": 12000, "correlation_id": 105, "grid": "[512, 1, 1]", "block": "[256, 1, 1]", "bytes": None},
    ]


def test_kernel_trace_runs_row_is_trace_relative(tmp_path: Path) -> None:
    _write(tmp_path, "4242_agent_info.csv", AGENT_INFO)
    path = _write(tmp_path, "4242_kernel_trace.csv", KERNEL_TRACE)
    parsed = rocprof.parse(path, "r1")
    columns = ["run", "rank", "world_size", "pid", "device_name", "source_path", "source_format", "epoch_offset_ns", "time_base", "backend"]
    assert _rows(parsed.tables["runs"], columns) == [
        {"run": "r1", "rank": 0, "world_size": None, "pid": 4242, "device_name": "AMD Instinct MI300X", "source_path": str(path.resolve()), "source_format": "rocprof", "epoch_offset_ns": None, "time_base": "trace", "backend": "rocm"},
    ]


def test_agent_without_agent_info_has_no_device(tmp_path: Path) -> None:
    parsed = rocprof.parse(_write(tmp_path, "4242_kernel_trace.csv", KERNEL_TRACE), "r1")
    assert parsed.tables["kernels"].column("device").to_pylist() == [None, None, None]


def test_type_relative_agent_is_the_gpu_index(tmp_path: Path) -> None:
    text = KERNEL_TRACE.replace('"Agent 1"', '"GPU 3"')
    parsed = rocprof.parse(_write(tmp_path, "4242_kernel_trace.csv", text), "r1")
    assert parsed.tables["kernels"].column("device").to_pylist() == [3, 3, 3]


def test_old_kernel_trace_uses_queue_as_stream(tmp_path: Path) -> None:
    parsed = rocprof.parse(_write(tmp_path, "199_kernel_trace.csv", OLD_KERNEL_TRACE), "r1")
    assert _rows(parsed.tables["kernels"], KERNEL_COLUMNS) == [
        {"run": "r1", "rank": 0, "device": None, "stream": 139690710949888, "name": "matrixTranspose(float*, float*, int)", "category": "compute", "kind": "kernel", "start_ns": 671599758568, "end_ns": 671599825328, "dur_ns": 66760, "correlation_id": 7, "grid": "[256, 256, 1]", "block": "[4, 4, 1]", "bytes": None},
    ]


def test_hip_api_trace_gives_api_calls(tmp_path: Path) -> None:
    parsed = rocprof.parse_process(_process(tmp_path, "kernel_trace", "hip_api_trace"), "r1")
    columns = ["run", "rank", "pid", "tid", "name", "start_ns", "end_ns", "dur_ns", "correlation_id"]
    assert _rows(parsed.tables["api_calls"], columns) == [
        {"run": "r1", "rank": 0, "pid": 4242, "tid": 4242, "name": "hipMemsetAsync", "start_ns": 1552000000090000, "end_ns": 1552000000095000, "dur_ns": 5000, "correlation_id": 101},
        {"run": "r1", "rank": 0, "pid": 4242, "tid": 4242, "name": "hipExtLaunchKernel", "start_ns": 1552000000180000, "end_ns": 1552000000184000, "dur_ns": 4000, "correlation_id": 103},
        {"run": "r1", "rank": 0, "pid": 4242, "tid": 4250, "name": "hipLaunchKernel", "start_ns": 1552000000280000, "end_ns": 1552000000286500, "dur_ns": 6500, "correlation_id": 105},
    ]
    assert "annotations" not in parsed.tables


def test_marker_trace_gives_annotations(tmp_path: Path) -> None:
    parsed = rocprof.parse_process(_process(tmp_path, "kernel_trace", "marker_api_trace"), "r1")
    columns = ["run", "rank", "pid", "tid", "name", "kind", "step", "start_ns", "end_ns", "dur_ns"]
    assert _rows(parsed.tables["annotations"], columns) == [
        {"run": "r1", "rank": 0, "pid": 4242, "tid": 4242, "name": "ProfilerStep#2", "kind": "profiler_step", "step": 2, "start_ns": 1552000000050000, "end_ns": 1552000000400000, "dur_ns": 350000},
        {"run": "r1", "rank": 0, "pid": 4242, "tid": 4242, "name": "forward", "kind": "nvtx", "step": None, "start_ns": 1552000000060000, "end_ns": 1552000000200000, "dur_ns": 140000},
    ]
    assert "api_calls" not in parsed.tables


def test_memory_copy_trace_gives_memcpy_rows_on_the_gpu_end(tmp_path: Path) -> None:
    _write(tmp_path, "4242_agent_info.csv", AGENT_INFO)
    parsed = rocprof.parse(_write(tmp_path, "4242_memory_copy_trace.csv", COPY_TRACE), "r1")
    assert _rows(parsed.tables["kernels"], KERNEL_COLUMNS) == [
        {"run": "r1", "rank": 0, "device": 1, "stream": 0, "name": "Memcpy HtoD (Host -> Device)", "category": "memory", "kind": "memcpy", "start_ns": 1552000000500000, "end_ns": 1552000000540000, "dur_ns": 40000, "correlation_id": 120, "grid": None, "block": None, "bytes": None},
        {"run": "r1", "rank": 0, "device": 0, "stream": 0, "name": "Memcpy DtoH (Device -> Host)", "category": "memory", "kind": "memcpy", "start_ns": 1552000000600000, "end_ns": 1552000000620000, "dur_ns": 20000, "correlation_id": 121, "grid": None, "block": None, "bytes": None},
    ]


def test_old_memory_copy_direction_names_are_read(tmp_path: Path) -> None:
    parsed = rocprof.parse(_write(tmp_path, "197_memory_copy_trace.csv", OLD_COPY_TRACE), "r1")
    assert _rows(parsed.tables["kernels"], ["name", "kind", "stream", "dur_ns"]) == [
        {"name": "Memcpy HtoD (Host -> Device)", "kind": "memcpy", "stream": None, "dur_ns": 563880},
    ]


def test_rank_comes_from_file_name(tmp_path: Path) -> None:
    parsed = rocprof.parse(_write(tmp_path, "rank3_4242_kernel_trace.csv", KERNEL_TRACE), "r1")
    assert set(parsed.tables["kernels"].column("rank").to_pylist()) == {3}
    assert parsed.tables["runs"].column("rank").to_pylist() == [3]


def test_tables_follow_the_contract_schemas(tmp_path: Path) -> None:
    parsed = rocprof.parse(_write(tmp_path, "4242_kernel_trace.csv", KERNEL_TRACE), "r1")
    for name, table in parsed.tables.items():
        assert table.schema.equals(TRACE_SCHEMAS[name], check_metadata=True)


def test_gzipped_trace_is_read(tmp_path: Path) -> None:
    _write(tmp_path, "4242_agent_info.csv", AGENT_INFO)
    path = tmp_path / "4242_kernel_trace.csv.gz"
    path.write_bytes(gzip.compress(KERNEL_TRACE.encode()))
    parsed = rocprof.parse(path, "r1")
    assert parsed.tables["kernels"].column("device").to_pylist() == [0, 0, 0]


def test_header_only_kernel_trace_has_no_gpu_events(tmp_path: Path) -> None:
    path = _write(tmp_path, "12_kernel_trace.csv", KERNEL_TRACE.splitlines()[0] + "\n")
    with pytest.raises(TraceError) as error:
        rocprof.parse(path, "r1")
    assert (error.value.path, error.value.problem) == (str(path), "no GPU events (kernels or memory copies)")


def test_malformed_row_names_its_line_and_column(tmp_path: Path) -> None:
    text = KERNEL_TRACE + '"KERNEL_DISPATCH","Agent 1",1,0,4242,4,33,"k",106,not-a-time,1552000000400000,0,0,12,4,48,256,1,1,256,1,1\n'
    with pytest.raises(TraceError) as error:
        rocprof.parse(_write(tmp_path, "4242_kernel_trace.csv", text), "r1")
    line = len(KERNEL_TRACE.splitlines()) + 1
    assert error.value.problem == f"malformed rocprofv3 CSV (line {line}: Start_Timestamp is 'not-a-time', not an integer)"


def test_row_cut_short_names_its_line(tmp_path: Path) -> None:
    # A process killed mid-write leaves its last row short.
    text = KERNEL_TRACE + '"KERNEL_DISPATCH","Agent 1",1,0,4242\n'
    with pytest.raises(TraceError) as error:
        rocprof.parse(_write(tmp_path, "4242_kernel_trace.csv", text), "r1")
    header_fields = len(KERNEL_TRACE.splitlines()[0].split(","))
    assert error.value.problem == (f"malformed rocprofv3 CSV (line {len(KERNEL_TRACE.splitlines()) + 1}: "
                                   f"5 fields where the header has {header_fields})")


def test_unknown_csv_raises(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="unknown header"):
        rocprof.parse(_write(tmp_path, "4242_agent_info.csv", AGENT_INFO), "r1")


def test_runs_row_records_ingestion_and_events_are_counted(tmp_path: Path) -> None:
    parsed = rocprof.parse_process(_process(tmp_path, "kernel_trace", "hip_api_trace"), "r1")
    assert parsed.tables["runs"].column("ingested_at").null_count == 0
    assert parsed.events == 6


# --- one process's files together --------------------------------------------------


def test_process_key_is_shared_by_the_trace_files_of_one_process(tmp_path: Path) -> None:
    names = ["4242_kernel_trace.csv", "4242_hip_api_trace.csv.gz", "4242_marker_api_trace.csv", "4243_kernel_trace.csv",
             "4242_agent_info.csv", "results.csv"]
    assert {name: rocprof.process_key(tmp_path / name) for name in names} == {
        "4242_kernel_trace.csv": str(tmp_path.resolve() / "4242_*"),
        "4242_hip_api_trace.csv.gz": str(tmp_path.resolve() / "4242_*"),
        "4242_marker_api_trace.csv": str(tmp_path.resolve() / "4242_*"),
        "4243_kernel_trace.csv": str(tmp_path.resolve() / "4243_*"),
        "4242_agent_info.csv": None,
        "results.csv": None,
    }


def test_process_files_give_one_source_with_every_table(tmp_path: Path) -> None:
    files = _process(tmp_path, "kernel_trace", "hip_api_trace", "marker_api_trace", "memory_copy_trace", "agent_info")
    parsed = rocprof.parse_process(files[:4], "r1")
    assert {name: table.num_rows for name, table in parsed.tables.items()} == {
        "kernels": 5, "api_calls": 3, "annotations": 2, "collectives": 1, "runs": 1}
    assert _rows(parsed.tables["kernels"], ["name", "kind", "device", "start_ns"]) == [
        {"name": FILL_BUFFER, "kind": "kernel", "device": 0, "start_ns": 1552000000100000},
        {"name": RCCL, "kind": "kernel", "device": 0, "start_ns": 1552000000200000},
        {"name": ELEMENTWISE, "kind": "kernel", "device": 0, "start_ns": 1552000000300000},
        {"name": "Memcpy HtoD (Host -> Device)", "kind": "memcpy", "device": 1, "start_ns": 1552000000500000},
        {"name": "Memcpy DtoH (Device -> Host)", "kind": "memcpy", "device": 0, "start_ns": 1552000000600000},
    ]


def test_rccl_kernel_is_a_collective_of_unknown_op(tmp_path: Path) -> None:
    # RCCL's Generic kernel runs any collective, and the trace says no more.
    files = _process(tmp_path, "kernel_trace", "hip_api_trace", "agent_info")
    parsed = rocprof.parse_process(files[:2], "r1")
    assert _rows(parsed.tables["collectives"], ["rank", "op", "bytes", "start_ns", "end_ns", "kernel_name", "correlation_id"]) == [
        {"rank": 0, "op": None, "bytes": None, "start_ns": 1552000000200000, "end_ns": 1552000000290000, "kernel_name": RCCL,
         "correlation_id": 103},
    ]


def test_process_runs_row_names_the_file_prefix_and_files(tmp_path: Path) -> None:
    files = _process(tmp_path, "memory_copy_trace", "kernel_trace", "hip_api_trace", "agent_info")
    parsed = rocprof.parse_process(files[:3], "r1")
    assert _rows(parsed.tables["runs"], ["rank", "pid", "device_name", "source_path"]) == [
        {"rank": 0, "pid": 4242, "device_name": "AMD Instinct MI300X", "source_path": str(tmp_path.resolve() / "4242_*")},
    ]
    assert _metadata(parsed)["files"] == ["4242_hip_api_trace.csv", "4242_kernel_trace.csv", "4242_memory_copy_trace.csv"]


def test_process_kernels_get_their_launching_hip_call_when_written(tmp_path: Path) -> None:
    files = _process(tmp_path / "job", "kernel_trace", "hip_api_trace", "marker_api_trace", "memory_copy_trace")
    key = rocprof.process_key(files[0])
    write_source(tmp_path / "out", "r1", source_id(key), rocprof.parse_process(files, "r1").tables)
    kernels = pq.read_table(table_path(tmp_path / "out", "r1", "kernels", source_id(key)))
    assert _rows(kernels, ["correlation_id", "launch_call_name", "launch_delay_ns", "step"]) == [
        {"correlation_id": 101, "launch_call_name": "hipMemsetAsync", "launch_delay_ns": 5000, "step": 2},
        {"correlation_id": 103, "launch_call_name": "hipExtLaunchKernel", "launch_delay_ns": 16000, "step": 2},
        {"correlation_id": 105, "launch_call_name": "hipLaunchKernel", "launch_delay_ns": 13500, "step": 2},
        {"correlation_id": 120, "launch_call_name": None, "launch_delay_ns": None, "step": None},
        {"correlation_id": 121, "launch_call_name": None, "launch_delay_ns": None, "step": None},
    ]


def test_process_gives_one_rank_summary_row(tmp_path: Path) -> None:
    files = _process(tmp_path, "kernel_trace", "hip_api_trace", "memory_copy_trace")
    summary = derive_trace_tables(rocprof.parse_process(files, "r1").tables)["rank_summary"]
    columns = ["rank", "kernel_count", "busy_ns", "compute_union_ns", "comm_union_ns", "memory_union_ns"]
    # busy: fill 3,565 + RCCL 90,000 + elementwise 12,000 + copies 40,000 and 20,000 ns
    assert _rows(summary, columns) == [
        {"rank": 0, "kernel_count": 5, "busy_ns": 165565, "compute_union_ns": 12000, "comm_union_ns": 90000, "memory_union_ns": 63565},
    ]


def test_process_with_memory_copies_only_is_accepted(tmp_path: Path) -> None:
    parsed = rocprof.parse_process(_process(tmp_path, "memory_copy_trace", "hip_api_trace"), "r1")
    assert (parsed.rows("kernels"), parsed.rows("api_calls")) == (2, 3)


def test_process_without_gpu_events_raises_naming_a_file_and_the_option_that_records_kernels(tmp_path: Path) -> None:
    hip, marker = _process(tmp_path, "hip_api_trace", "marker_api_trace")
    with pytest.raises(TraceError) as error:
        rocprof.parse_process([hip, marker], "r1")
    assert (error.value.path, error.value.problem) == (
        str(hip),
        "no GPU events (kernels or memory copies): only API traces (4242_hip_api_trace.csv, 4242_marker_api_trace.csv);"
        " rocprofv3 records kernels with --kernel-trace",
    )


def test_process_with_header_only_kernel_trace_names_it(tmp_path: Path) -> None:
    hip = _process(tmp_path, "hip_api_trace")
    kernel = _write(tmp_path, "4242_kernel_trace.csv", KERNEL_TRACE.splitlines()[0] + "\n")
    with pytest.raises(TraceError) as error:
        rocprof.parse_process([*hip, kernel], "r1")
    assert (error.value.path, error.value.problem) == (str(kernel), "no GPU events (kernels or memory copies)")


def test_lone_hip_api_trace_has_no_gpu_events(tmp_path: Path) -> None:
    path = _write(tmp_path, "4242_hip_api_trace.csv", HIP_API_TRACE)
    with pytest.raises(TraceError, match="no GPU events"):
        rocprof.parse(path, "r1")


def test_process_files_of_another_process_raise(tmp_path: Path) -> None:
    other = _process(tmp_path, "hip_api_trace", pid=4243)[0]
    with pytest.raises(TraceError) as error:
        rocprof.parse_process([*_process(tmp_path, "kernel_trace"), other], "r1")
    assert error.value.path == str(other)


def test_process_with_agent_info_among_its_traces_raises(tmp_path: Path) -> None:
    files = _process(tmp_path, "kernel_trace", "agent_info")
    with pytest.raises(TraceError) as error:
        rocprof.parse_process(files, "r1")
    assert error.value.path == str(files[1])


# --- ranks ----------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["rank3", "rank-3", "rank_3"])
def test_rank_comes_from_a_folder_named_for_it(tmp_path: Path, folder: str) -> None:
    # rocprofv3 -d out/rank%rank% (or rank%env{RANK}%) puts its %hostname% folder below.
    files = _process(tmp_path / folder / "node01", "kernel_trace", "hip_api_trace")
    parsed = rocprof.parse_process(files, "r1")
    assert (parsed.tables["runs"].column("rank").to_pylist(), set(parsed.tables["kernels"].column("rank").to_pylist()),
            _metadata(parsed)["rank_source"]) == ([3], {3}, f"folder name ({folder})")


def test_rank_folder_word_must_stand_alone(tmp_path: Path) -> None:
    parsed = rocprof.parse(_process(tmp_path / "frank3" / "rank3x", "kernel_trace")[0], "r1")
    assert _metadata(parsed)["rank_source"] == "default (the trace does not say)"


def test_rank_in_file_name_wins_over_folder(tmp_path: Path) -> None:
    (tmp_path / "rank1").mkdir()
    parsed = rocprof.parse(_write(tmp_path / "rank1", "rank2_4242_kernel_trace.csv", KERNEL_TRACE), "r1")
    assert (parsed.tables["runs"].column("rank").to_pylist(), _metadata(parsed)["rank_source"]) == ([2], "file name")


def test_rank_without_a_source_is_0_by_default(tmp_path: Path) -> None:
    parsed = rocprof.parse_process(_process(tmp_path / "node01" / "4242", "kernel_trace"), "r1")
    assert (parsed.tables["runs"].column("rank").to_pylist(), _metadata(parsed)["rank_source"]) == (
        [0], "default (the trace does not say)")


# --- missing columns ---------------------------------------------------------------


def test_sniff_claims_a_file_named_like_a_trace_whatever_its_header() -> None:
    assert rocprof.sniff(b'"Kind","Agent_Id","Kernel_Name"\n', Path("13_kernel_trace.csv.gz")) is True


def test_kernel_trace_without_correlation_id_names_the_column(tmp_path: Path) -> None:
    text = (
        '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name","Start_Timestamp",'
        '"End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X",'
        '"Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
        '"KERNEL_DISPATCH","Agent 1",1,0,4242,1,33,"__amd_rocclr_fillBufferAligned",1552000000100000,1552000000103565,'
        '0,0,12,4,48,256,1,1,256,1,1\n'
    )
    path = _write(tmp_path, "13_kernel_trace.csv", text)
    with pytest.raises(TraceError) as error:
        rocprof.parse(path, "r1")
    assert (detect_format(path), error.value.problem) == ("rocprof", "rocprofv3 kernel_trace CSV lacks the column Correlation_Id")


def test_api_trace_without_columns_names_them_all(tmp_path: Path) -> None:
    text = '"Domain","Function","Correlation_Id","Start_Timestamp","End_Timestamp"\n"HIP_RUNTIME_API","hipMemsetAsync",101,1,2\n'
    with pytest.raises(TraceError) as error:
        rocprof.parse(_write(tmp_path, "4242_hip_api_trace.csv", text), "r1")
    assert error.value.problem == "rocprofv3 hip_api_trace CSV lacks the columns Process_Id, Thread_Id"


# Only the columns the header check requires: a rocprofv3 version or a tool
# that writes fewer than ROCm 6.4 does.
MINIMAL_KERNEL_TRACE = """\
Kind,Agent_Id,Kernel_Name,Correlation_Id,Start_Timestamp,End_Timestamp
KERNEL_DISPATCH,GPU 1,"matrixTranspose(float*, float*, int)",7,671599758568,671599825328
"""


def test_kernel_trace_with_only_the_required_columns_has_no_stream_grid_or_block(tmp_path: Path) -> None:
    parsed = rocprof.parse(_write(tmp_path, "4_kernel_trace.csv", MINIMAL_KERNEL_TRACE), "r1")
    assert _rows(parsed.tables["kernels"], KERNEL_COLUMNS) == [
        {"run": "r1", "rank": 0, "device": 1, "stream": None, "name": "matrixTranspose(float*, float*, int)", "category": "compute", "kind": "kernel", "start_ns": 671599758568, "end_ns": 671599825328, "dur_ns": 66760, "correlation_id": 7, "grid": None, "block": None, "bytes": None},
    ]


def test_header_only_kernel_trace_with_only_the_required_columns_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "4_kernel_trace.csv", MINIMAL_KERNEL_TRACE.splitlines()[0] + "\n")
    with pytest.raises(TraceError) as error:
        rocprof.parse_process([path], "r1")
    assert (error.value.path, error.value.problem) == (str(path), "no GPU events (kernels or memory copies)")


def test_a_bug_met_in_one_file_of_a_process_names_that_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _process(tmp_path, "kernel_trace", "memory_copy_trace")

    def broken(table, agents):
        raise KeyError("Direction")

    monkeypatch.setattr(rocprof, "_copy_columns", broken)
    with pytest.raises(TraceError) as error:
        rocprof.parse_process(files, "r1")
    assert (error.value.path, error.value.problem) == (str(files[1]), "unexpected error: KeyError: 'Direction'")
