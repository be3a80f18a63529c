"""The Kineto parser: a hand-written trace with exact values, and the real traces.

Every test runs twice: with the compiled scanner (`kineto_native`) and
with msgspec alone, which must read every trace the same.
"""

from __future__ import annotations

import gzip
import json
import pickle
import random
import re
from decimal import Decimal
from functools import cache
from pathlib import Path

import msgspec
import orjson
import pyarrow as pa
import pytest

from gpulens.collector.derive import derive_trace_tables
from gpulens.collector.errors import TraceError
from gpulens.collector.ingest import kineto, kineto_native, kineto_stream
from gpulens.collector.ingest.arrays import add_or_null, int_array, times_to_ns, us_to_ns
from gpulens.collector.ingest.base import ParsedTrace
from gpulens.collector.ingest.kineto_collectives import parse_group_ranks, parse_split_sizes

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "kineto"


@pytest.fixture(autouse=True, params=["native", "msgspec"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which path reads the events: the compiled scanner or msgspec alone."""
    if request.param == "native" and not kineto_native.available():
        pytest.skip("the compiled scanner is not built here")
    if request.param == "msgspec":
        monkeypatch.setattr(kineto_native, "_SCANNER", None)
    return request.param
BASE_NS = 1_700_000_000_000_000_000
# A value `round(ts * 1000)` gets wrong by 1 ns (the product rounds up).
HARD_TS = "4469105770633.943"
NO_GPU_EVENTS = "no GPU events (kernels, memcpy or memset)"


def event(cat: str, name: str, ts: float, dur: float, pid: int = 100, tid: int = 100, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def gpu(cat: str, name: str, ts: float, dur: float, **args) -> dict:
    return event(cat, name, ts, dur, pid=0, tid=args.get("stream", 7), **{"device": 0, "stream": 7, **args})


def synthetic_events() -> list[dict]:
    ranks_shown = ", ".join(str(3 + 4 * i) for i in range(30))
    return [
        event("user_annotation", "ProfilerStep#7", 1000.0, 9000.0, **{"External id": 1}),
        event("user_annotation", "## forward ##", 1050.0, 500.0, **{"External id": 2}),
        event("cpu_op", "aten::mm", 1100.123, 50.5, **{"External id": 10}),
        event("cuda_runtime", "cudaLaunchKernel", 1110.001, 5.25, **{"External id": 10, "correlation": 500}),
        gpu("kernel", "sm90_xmma_gemm_bf16", 1200.999, 30.002, correlation=500, grid=[132, 1, 1], block=[384, 1, 1],
            **{"External id": 10}),
        event("cuda_runtime", "cudaMemcpyAsync", 1290.0, 3.0, **{"External id": 11, "correlation": 501}),
        gpu("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 1300.5, 2.5, correlation=501, bytes=4096,
            **{"External id": 11}),
        gpu("gpu_memset", "Memset (Device)", 1400.0, 1.0, correlation=502, bytes=512, **{"External id": 12}),
        # A collective with full args, launched under its record_param_comms op.
        event("cpu_op", "record_param_comms", 2000.0, 100.0, **{
            "External id": 20, "Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576,
            "Group size": 32, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]",
            "Process Group Name": "3", "Process Group Description": "dp",
            "Process Group Ranks": f"[{ranks_shown}, ...]", "Global rank start": 3, "Global rank stride": 4,
            "Seq": 42}),
        event("cuda_runtime", "cudaLaunchKernelExC", 2050.0, 4.0, **{"External id": 20, "correlation": 600}),
        gpu("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 2100.0, 400.25,
            correlation=600, stream=13, **{"External id": 20}),
        # Work.wait() is recorded the same way but is not a collective.
        event("cpu_op", "record_param_comms", 2600.0, 5.0, **{"External id": 21, "Collective name": "wait"}),
        # An older PyTorch: a bare record_param_comms, a `nccl:` range with shapes.
        event("cpu_op", "record_param_comms", 3000.0, 80.0, **{"External id": 30}),
        event("user_annotation", "nccl:all_reduce", 3010.0, 60.0,
              **{"External id": 31, "Input Dims": [[1024, 4]], "Input type": ["float"]}),
        event("cuda_runtime", "cudaLaunchKernel", 3020.0, 4.0, **{"External id": 31, "correlation": 700}),
        gpu("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 3500.0, 20.0, correlation=700,
            stream=13, **{"External id": 31}),
        gpu("gpu_user_annotation", "nccl:all_reduce", 3500.0, 20.0, **{"External id": 31}),
        # The float that naive rounding gets wrong, on the kernel timeline.
        gpu("kernel", "vectorized_elementwise_kernel", float(HARD_TS), 1.0, correlation=800),
        # Events gpulens skips.
        {"ph": "X", "cat": "python_function", "name": "train.py(10): step", "pid": 100, "tid": 100, "ts": 1000, "dur": 5},
        {"ph": "s", "cat": "ac2g", "id": 500, "name": "ac2g", "pid": 100, "tid": 100, "ts": 1110.001},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
    ]


def synthetic_trace(**overrides) -> dict:
    trace = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}, {"id": 1, "name": "NVIDIA H100 80GB HBM3"}],
        "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 128, "nccl_version": "2.21.5"},
        "traceEvents": synthetic_events(),
        "traceName": "/tmp/x.json",
        "baseTimeNanoseconds": BASE_NS,
    }
    trace.update(overrides)
    return {k: v for k, v in trace.items() if v is not None}


def write_trace(path: Path, trace: dict) -> Path:
    # Kineto writes ts with three decimals; json writes the shortest repr,
    # so spell HARD_TS exactly as the profiler would.
    text = json.dumps(trace).replace(repr(float(HARD_TS)), HARD_TS)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.fixture
def parsed(tmp_path: Path) -> ParsedTrace:
    return kineto.parse(write_trace(tmp_path / "trace.json", synthetic_trace()), "demo")


def rows(parsed: ParsedTrace, table: str) -> list[dict]:
    return parsed.tables[table].to_pylist()


def kernel(parsed: ParsedTrace, name_prefix: str) -> dict:
    return next(r for r in rows(parsed, "kernels") if r["name"].startswith(name_prefix))


# --- the hand-written trace ------------------------------------------------------


def test_kineto_kernel_times_exact_ns_on_epoch(parsed: ParsedTrace) -> None:
    gemm = kernel(parsed, "sm90_xmma")
    assert (gemm["start_ns"], gemm["dur_ns"], gemm["end_ns"]) == (BASE_NS + 1_200_999, 30_002, BASE_NS + 1_231_001)


def test_kineto_event_without_dur_has_null_duration(tmp_path: Path) -> None:
    trace = synthetic_trace()
    without_dur = dict(gpu("kernel", "no_dur_kernel", 1_500.0, 1.0))
    del without_dur["dur"]
    trace["traceEvents"].append(without_dur)
    kernels = kineto.parse(write_trace(tmp_path / "trace.json", trace), "demo").tables["kernels"].to_pylist()
    row = next(r for r in kernels if r["name"] == "no_dur_kernel")
    assert (row["dur_ns"], row["end_ns"], row["start_ns"] is not None) == (None, None, True)


def test_kineto_end_beyond_int64_is_null_not_wrapped(tmp_path: Path) -> None:
    # 8e15 µs (253 years) after a 2023 base overflows int64 nanoseconds.
    trace = synthetic_trace()
    trace["traceEvents"].append(gpu("kernel", "endless_kernel", 1_500.0, 8e15))
    kernels = kineto.parse(write_trace(tmp_path / "trace.json", trace), "demo").tables["kernels"].to_pylist()
    row = next(r for r in kernels if r["name"] == "endless_kernel")
    assert (row["start_ns"], row["dur_ns"], row["end_ns"]) == (BASE_NS + 1_500_000, 8 * 10**18, None)


def test_int_array_nulls_what_is_no_integer_rather_than_truncating_it() -> None:
    assert int_array([7, 1.5, 2.0, "12", True, 2**63, None]).to_pylist() == [7, None, 2, 12, None, None, None]


def test_int_array_nulls_values_beyond_the_columns_type() -> None:
    assert int_array([1, 2**31, -(2**31)], pa.int32()).to_pylist() == [1, None, -(2**31)]


def test_add_or_null_keeps_sums_in_range_and_nulls_overflows() -> None:
    left = pa.array([1, 2**62, -(2**62), None], pa.int64())
    right = pa.array([2, 2**62, -(2**62) - 1, 5], pa.int64())
    assert add_or_null(left, right).to_pylist() == [3, None, None, None]


def test_kineto_hard_float_converts_exactly(parsed: ParsedTrace) -> None:
    assert kernel(parsed, "vectorized")["start_ns"] == BASE_NS + 4469105770633943


def test_kineto_runs_epoch_offset_is_base_time(parsed: ParsedTrace) -> None:
    run = rows(parsed, "runs")[0]
    assert (run["time_base"], run["epoch_offset_ns"]) == ("epoch", BASE_NS)


def test_kineto_runs_row_from_distributed_info(parsed: ParsedTrace) -> None:
    run = rows(parsed, "runs")[0]
    assert {k: run[k] for k in ("run", "rank", "world_size", "backend", "nccl_version", "device_name", "pid")} == {
        "run": "demo", "rank": 3, "world_size": 128, "backend": "nccl", "nccl_version": "2.21.5",
        "device_name": "NVIDIA H100 80GB HBM3", "pid": 100,
    }


def test_kineto_kernel_links_ids_and_launch_dims(parsed: ParsedTrace) -> None:
    gemm = kernel(parsed, "sm90_xmma")
    assert {k: gemm[k] for k in ("device", "stream", "correlation_id", "external_id", "grid", "block", "kind", "category")} == {
        "device": 0, "stream": 7, "correlation_id": 500, "external_id": 10, "grid": "[132, 1, 1]",
        "block": "[384, 1, 1]", "kind": "kernel", "category": "compute",
    }


def test_kineto_launch_dims_of_any_json_shape_become_text(tmp_path: Path) -> None:
    shapes = [[8, 1, 1], [8.0, 1, 1], "8x1x1", {"x": 8}, [[8], 1], None]
    events = [gpu("kernel", f"k{i}", 1000.0 + i, 1.0, correlation=900 + i, grid=shape) for i, shape in enumerate(shapes)]
    trace = kineto.parse(write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=events)), "demo")
    assert [r["grid"] for r in rows(trace, "kernels")] == ["[8, 1, 1]", "[8.0, 1, 1]", "8x1x1", "{'x': 8}", "[[8], 1]", None]


def test_kineto_launch_call_carries_correlation_and_external_id(parsed: ParsedTrace) -> None:
    launch = next(r for r in rows(parsed, "api_calls") if r["correlation_id"] == 500)
    assert (launch["name"], launch["external_id"], launch["start_ns"], launch["dur_ns"]) == (
        "cudaLaunchKernel", 10, BASE_NS + 1_110_001, 5_250)


def test_kineto_memcpy_and_memset_are_memory_with_bytes(parsed: ParsedTrace) -> None:
    memory = [(r["kind"], r["category"], r["bytes"]) for r in rows(parsed, "kernels") if r["kind"] != "kernel"]
    assert memory == [("memcpy", "memory", 4096), ("memset", "memory", 512)]


def test_kineto_nccl_kernels_are_communication(parsed: ParsedTrace) -> None:
    names = [r["name"][:20] for r in rows(parsed, "kernels") if r["category"] == "communication"]
    assert names == ["ncclDevKernel_AllRed", "ncclKernel_AllReduce"]


def test_kineto_annotations_kinds_and_profiler_step(parsed: ParsedTrace) -> None:
    kinds = [(r["name"], r["kind"], r["step"]) for r in rows(parsed, "annotations")]
    assert kinds == [
        ("ProfilerStep#7", "profiler_step", 7),
        ("## forward ##", "user", None),
        ("nccl:all_reduce", "user", None),
        ("nccl:all_reduce", "gpu_user", None),
    ]


def test_kineto_skipped_categories_not_in_tables(parsed: ParsedTrace) -> None:
    counts = {t: parsed.rows(t) for t in ("kernels", "api_calls", "cpu_ops", "annotations")}
    assert counts == {"kernels": 6, "api_calls": 4, "cpu_ops": 4, "annotations": 4}


def test_kineto_counts_every_event_read(parsed: ParsedTrace) -> None:
    assert parsed.events == len(synthetic_events())


def test_kineto_collective_from_record_param_comms(parsed: ParsedTrace) -> None:
    collective = rows(parsed, "collectives")[0]
    assert {k: v for k, v in collective.items() if k != "group_ranks"} == {
        "run": "demo", "rank": 3, "process_group": "3", "process_group_desc": "dp", "seq": 42, "op": "all_reduce",
        "bytes": 2 * 1048576, "group_size": 32, "dtype": "bfloat16", "in_nelems": 1048576, "out_nelems": 1048576,
        "in_split_sizes": None, "out_split_sizes": None, "split_sizes_truncated": None,
        "start_ns": BASE_NS + 2_100_000, "end_ns": BASE_NS + 2_500_250,
        "cpu_start_ns": BASE_NS + 2_000_000, "cpu_end_ns": BASE_NS + 2_100_000,
        "kernel_name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "correlation_id": 600, "external_id": 20,
    }


def test_kineto_collective_truncated_ranks_rebuilt(parsed: ParsedTrace) -> None:
    assert rows(parsed, "collectives")[0]["group_ranks"] == list(range(3, 128, 4))


def test_kineto_collective_from_legacy_range_shapes(parsed: ParsedTrace) -> None:
    legacy = rows(parsed, "collectives")[1]
    assert {k: legacy[k] for k in ("op", "dtype", "in_nelems", "bytes", "group_size", "start_ns", "cpu_start_ns", "kernel_name")} == {
        "op": "all_reduce", "dtype": "float32", "in_nelems": 4096, "bytes": 16384, "group_size": None,
        "start_ns": BASE_NS + 3_500_000, "cpu_start_ns": BASE_NS + 3_000_000,
        "kernel_name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
    }


def test_kineto_all_to_all_keeps_its_split_sizes(tmp_path: Path) -> None:
    # all_to_all_single on 4 ranks: 8 rows of 1024 bf16 sent unevenly.
    events = [
        event("cpu_op", "record_param_comms", 2000.0, 100.0, **{
            "External id": 20, "Collective name": "all_to_all", "In msg nelems": 8192, "Out msg nelems": 6144,
            "Group size": 4, "dtype": "BFloat16", "In split size": "[4, 2, 1, 1]", "Out split size": "[1, 3, 1, 1]",
            "Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3]", "Seq": 5}),
        event("cuda_runtime", "cudaLaunchKernel", 2050.0, 4.0, **{"External id": 20, "correlation": 600}),
        gpu("kernel", "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 2100.0, 40.0, correlation=600,
            **{"External id": 20}),
    ]
    path = write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=events))
    collective = rows(kineto.parse(path, "r"), "collectives")[0]
    assert {k: collective[k] for k in ("op", "bytes", "in_split_sizes", "out_split_sizes", "split_sizes_truncated")} == {
        "op": "all_to_all", "bytes": 8192 * 2, "in_split_sizes": [4, 2, 1, 1], "out_split_sizes": [1, 3, 1, 1],
        "split_sizes_truncated": False,
    }


def test_split_sizes_of_an_even_split_are_null() -> None:
    assert parse_split_sizes("[]") == (None, False)


def test_split_sizes_missing_are_null() -> None:
    assert parse_split_sizes(None) == (None, False)


def test_split_sizes_cut_by_pytorch_keep_the_values_shown() -> None:
    # PyTorch writes the first 30 sizes of a longer list, then `...`.
    shown = ", ".join(str(64 + i) for i in range(30))
    assert parse_split_sizes(f"[{shown}, ...]") == ([64 + i for i in range(30)], True)


def test_split_sizes_as_a_json_list() -> None:
    assert parse_split_sizes([3, 5]) == ([3, 5], False)


def test_split_sizes_not_a_list_of_numbers_are_null() -> None:
    assert parse_split_sizes("[4, x]") == (None, False)


def test_kineto_wait_op_is_not_a_collective(parsed: ParsedTrace) -> None:
    assert parsed.rows("collectives") == 2


def test_kineto_without_base_time_is_trace_relative(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", synthetic_trace(baseTimeNanoseconds=None))
    run = rows(kineto.parse(path, "r"), "runs")[0]
    assert (run["time_base"], run["epoch_offset_ns"]) == ("trace", None)


def test_kineto_epoch_microseconds_without_base_time_are_epoch(tmp_path: Path) -> None:
    events = [gpu("kernel", "k", 1669783687464181, 12)]
    parsed = kineto.parse(write_trace(tmp_path / "t.json", synthetic_trace(baseTimeNanoseconds=None, traceEvents=events)), "r")
    assert (rows(parsed, "runs")[0]["epoch_offset_ns"], rows(parsed, "kernels")[0]["start_ns"]) == (0, 1669783687464181000)


def test_kineto_rank_from_file_name_when_no_distributed_info(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "job_rank5.json", synthetic_trace(distributedInfo=None))
    run = rows(kineto.parse(path, "r"), "runs")[0]
    assert (run["rank"], orjson.loads(run["metadata_json"])["rank_source"]) == (5, "file name")


def test_kineto_rank_defaults_to_zero_and_says_so(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "trace.json", synthetic_trace(distributedInfo=None))
    run = rows(kineto.parse(path, "r"), "runs")[0]
    assert (run["rank"], orjson.loads(run["metadata_json"])["rank_source"]) == (0, "default (the trace does not say)")


def test_kineto_host_from_trace_handler_file_name(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "node-a7_4242.1700000000000.pt.trace.json", synthetic_trace())
    assert rows(kineto.parse(path, "r"), "runs")[0]["host"] == "node-a7"


def test_kineto_host_from_file_name_without_rank_prefix(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "rank-3.node-a7_4242.1700000000000.pt.trace.json", synthetic_trace())
    assert rows(kineto.parse(path, "r"), "runs")[0]["host"] == "node-a7"


@pytest.mark.parametrize("prefix", ["rank-2.", "rank2_", "RANK_12."])
def test_kineto_host_from_file_name_drops_any_rank_prefix(tmp_path: Path, prefix: str) -> None:
    path = write_trace(tmp_path / f"{prefix}sim-node-00_4242.1700000000000.pt.trace.json", synthetic_trace())
    assert rows(kineto.parse(path, "r"), "runs")[0]["host"] == "sim-node-00"


def test_kineto_host_from_trace_key(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "node-a7_4242.1700000000000.pt.trace.json", synthetic_trace(hostname="gpu-017"))
    assert rows(kineto.parse(path, "r"), "runs")[0]["host"] == "gpu-017"


def test_kineto_streamed_batches_equal_whole_decode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_trace(tmp_path / "t.json", synthetic_trace())
    monkeypatch.setattr(kineto_stream, "BATCH_BYTES", 200)  # a cut every few events
    streamed = kineto.parse(path, "r")
    monkeypatch.setattr(kineto_stream.TraceStream, "batches", _not_streamable)
    whole = kineto.parse(path, "r")
    assert all(streamed.tables[t].drop(["ingested_at"] * (t == "runs")).equals(
        whole.tables[t].drop(["ingested_at"] * (t == "runs"))) for t in whole.tables)


def test_kineto_file_of_one_batch_is_read_in_one_buffer_with_the_rows_of_a_streamed_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_trace(tmp_path / "t.json.gz", synthetic_trace())
    stream = kineto_stream.TraceStream(path)
    sizes = [len(batch) for batch in stream.batches()]
    assert (sizes, stream.metadata.baseTimeNanoseconds) == ([len(synthetic_events())], BASE_NS)
    whole = kineto.parse(path, "r")
    monkeypatch.setattr(kineto_stream, "BATCH_BYTES", 200)  # a cut every few events, read in chunks
    assert _same_tables(whole, kineto.parse(path, "r"))


def test_kineto_stream_cuts_events_into_batches(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", synthetic_trace())
    stream = kineto_stream.TraceStream(path, batch_bytes=200)
    sizes = [len(batch) for batch in stream.batches()]
    assert (len(sizes) > 5, sum(sizes), stream.metadata.baseTimeNanoseconds) == (True, len(synthetic_events()), BASE_NS)


def _not_streamable(self):
    raise kineto_stream.NotStreamable
    yield


def test_kineto_gzip_content_detected_by_magic(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "trace.json.gz", synthetic_trace())
    assert kineto.parse(path, "r").rows("kernels") == 6


def test_kineto_no_gpu_events_is_an_error(tmp_path: Path) -> None:
    events = [e for e in synthetic_events() if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    path = write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=events))
    with pytest.raises(TraceError, match="no GPU events"):
        kineto.parse(path, "r")


def test_kineto_collective_kernels_without_cpu_ops_or_annotations(tmp_path: Path) -> None:
    # activities=[ProfilerActivity.CUDA]: GPU events only, no CPU ops to attach.
    events = [gpu("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 100.0, 50.0,
                  correlation=7)]
    result = kineto.parse(write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=events)), "r")
    assert [(c["op"], c["start_ns"], c["cpu_start_ns"]) for c in rows(result, "collectives")] == [
        ("all_reduce", BASE_NS + 100_000, None)]


def test_kineto_id_beyond_int64_is_null_not_a_lost_file(tmp_path: Path) -> None:
    events = [gpu("kernel", "k", 100.0, 5.0, correlation=2**64 - 1), gpu("kernel", "k", 200.0, 5.0, correlation=9)]
    result = kineto.parse(write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=events)), "r")
    assert [k["correlation_id"] for k in rows(result, "kernels")] == [None, 9]


def test_kineto_invalid_utf8_in_a_name_costs_only_that_character(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", synthetic_trace())
    path.write_bytes(path.read_bytes().replace(b"train.py(10): step", b"caf\xe9.py(10): step"))
    assert kineto.parse(path, "r").tables["kernels"].num_rows == 6


def test_kineto_invalid_utf8_in_a_kernel_name_is_replaced(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", synthetic_trace())
    path.write_bytes(path.read_bytes().replace(b"sm90_xmma_gemm_bf16", b"sm90_xmma_gemm_\xff"))
    assert kernel(kineto.parse(path, "r"), "sm90_xmma_gemm_")["name"] == "sm90_xmma_gemm_\ufffd"


def test_kineto_trace_with_a_byte_order_mark(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", synthetic_trace())
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert kineto.sniff(path.read_bytes(), path)
    assert kineto.parse(path, "r").tables["kernels"].num_rows == 6


# --- instants and metadata events -------------------------------------------------------


def allocation(ts: float, size: int, total: int, device: int = 0, device_type: int = 1, **extra) -> dict:
    """A PyTorch allocator event (`profile_memory=True`), as Kineto writes it."""
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 100, "tid": 100, "ts": ts,
            "args": {"Ev Idx": 7, "Device Type": device_type, "Device Id": device, "Addr": 139926520725504,
                     "Bytes": size, "Total Allocated": total, "Total Reserved": 2 * 2**30, **extra}}


MARKS = [
    {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", "tid": "Trace PyTorch Profiler",
     "ts": 1000.0},
    allocation(1100.5, 4096, 1_000_004_096),
    allocation(1101.0, 512, 512, device=-1, device_type=0),
    allocation(1150.25, -4096, 1_000_000_000),
    {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python3.10"}},
    {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
    {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
    {"ph": "M", "name": "thread_name", "pid": 100, "tid": 100, "args": {"name": "thread 100 (pt_main_thread)"}},
    {"ph": "M", "name": "thread_name", "pid": 100, "tid": 101, "args": {"name": "thread 101 (pt_main_thread)"}},
    # Kineto names a thread again when it learns more: the last name holds.
    {"ph": "M", "name": "thread_name", "pid": 100, "tid": 101, "args": {"name": "thread 101 (pt_autograd_0)"}},
    {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 9999.5},
]


@pytest.fixture
def marked(tmp_path: Path) -> ParsedTrace:
    return kineto.parse(write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=synthetic_events() + MARKS)), "demo")


def test_kineto_allocator_events_become_memory_events(marked: ParsedTrace) -> None:
    assert rows(marked, "memory_events") == [
        {"run": "demo", "rank": 3, "pid": 100, "tid": 100, "name": "[memory]", "ts_ns": BASE_NS + 1_100_500,
         "device_type": "cuda", "device": 0, "addr": 139926520725504, "bytes": 4096,
         "total_allocated_bytes": 1_000_004_096, "total_reserved_bytes": 2 * 2**30},
        {"run": "demo", "rank": 3, "pid": 100, "tid": 100, "name": "[memory]", "ts_ns": BASE_NS + 1_101_000,
         "device_type": "cpu", "device": None, "addr": 139926520725504, "bytes": 512,
         "total_allocated_bytes": 512, "total_reserved_bytes": 2 * 2**30},
        {"run": "demo", "rank": 3, "pid": 100, "tid": 100, "name": "[memory]", "ts_ns": BASE_NS + 1_150_250,
         "device_type": "cuda", "device": 0, "addr": 139926520725504, "bytes": -4096,
         "total_allocated_bytes": 1_000_000_000, "total_reserved_bytes": 2 * 2**30},
    ]


def test_kineto_failed_allocation_is_a_memory_event(tmp_path: Path) -> None:
    failed = {**allocation(1200.0, 2**40, 70 * 2**30), "name": "[OutOfMemory]"}
    parsed = kineto.parse(write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=synthetic_events() + [failed])), "r")
    assert [(r["name"], r["bytes"]) for r in rows(parsed, "memory_events")] == [("[OutOfMemory]", 2**40)]


def test_kineto_allocator_values_written_as_text_are_read_as_integers(tmp_path: Path) -> None:
    odd = allocation(1100.5, 4096, 8192)
    odd["args"].update({"Bytes": "4096", "Device Id": "1", "Addr": 1.5})
    parsed = kineto.parse(write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=synthetic_events() + [odd])), "r")
    row = rows(parsed, "memory_events")[0]
    assert (row["bytes"], row["device"], row["addr"], row["total_allocated_bytes"]) == (4096, 1, None, 8192)


def test_kineto_unknown_device_type_is_named_by_its_number(tmp_path: Path) -> None:
    events = synthetic_events() + [allocation(1100.5, 64, 64, device_type=12), allocation(1101.5, 64, 128, device_type=42)]
    parsed = kineto.parse(write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=events)), "r")
    assert [r["device_type"] for r in rows(parsed, "memory_events")] == ["xpu", "device type 42"]


def test_kineto_other_instants_are_instant_annotations(marked: ParsedTrace) -> None:
    instants = [(r["name"], r["pid"], r["start_ns"], r["end_ns"], r["dur_ns"], r["step"])
                for r in rows(marked, "annotations") if r["kind"] == "instant"]
    assert instants == [
        ("Iteration Start: PyTorch Profiler", None, BASE_NS + 1_000_000, BASE_NS + 1_000_000, 0, None),
        ("Record Window End", None, BASE_NS + 9_999_500, BASE_NS + 9_999_500, 0, None),
    ]


def test_kineto_instants_follow_the_ranges_in_annotations(marked: ParsedTrace) -> None:
    kinds = [r["kind"] for r in rows(marked, "annotations")]
    assert kinds == ["profiler_step", "user", "user", "gpu_user", "instant", "instant"]


def test_kineto_process_and_thread_names_go_to_runs_metadata(marked: ParsedTrace) -> None:
    metadata = orjson.loads(rows(marked, "runs")[0]["metadata_json"])
    # Not the GPU's streams (`stream 7`): their ids are in kernels.stream.
    assert (metadata["process_name"], metadata["thread_names"]) == (
        "python3.10", {"100": "pt_main_thread", "101": "pt_autograd_0"})


def test_kineto_instants_and_metadata_events_are_not_skipped(marked: ParsedTrace) -> None:
    assert skipped_events(marked) == {"ac2g": 1, "python_function": 1}


def test_kineto_trace_without_allocator_events_has_no_memory_events(parsed: ParsedTrace) -> None:
    assert "memory_events" not in parsed.tables


# --- one odd value costs that value or that event, not the trace -----------------------


def odd_trace(tmp_path: Path, change, name: str = "t.json") -> Path:
    """The hand-written trace with `change(events)` applied to its events."""
    events = synthetic_events()
    change(events)
    return write_trace(tmp_path / name, synthetic_trace(traceEvents=events))


def gemm_of(events: list[dict]) -> dict:
    return next(e for e in events if e["name"] == "sm90_xmma_gemm_bf16")


def skipped_events(parsed: ParsedTrace) -> dict[str, int]:
    return orjson.loads(rows(parsed, "runs")[0]["metadata_json"])["skipped_events"]


def test_kineto_times_written_as_text_are_read_as_numbers(tmp_path: Path) -> None:
    path = odd_trace(tmp_path, lambda events: gemm_of(events).update(ts="1200.999", dur="30.002"))
    gemm = kernel(kineto.parse(path, "r"), "sm90_xmma")
    assert (gemm["start_ns"], gemm["dur_ns"], gemm["end_ns"]) == (BASE_NS + 1_200_999, 30_002, BASE_NS + 1_231_001)


def test_kineto_time_text_not_a_number_skips_only_that_event(tmp_path: Path) -> None:
    path = odd_trace(tmp_path, lambda events: gemm_of(events).update(ts="soon"))
    assert [r["name"][:12] for r in rows(kineto.parse(path, "r"), "kernels")] == [
        "Memcpy HtoD ", "Memset (Devi", "ncclDevKerne", "ncclKernel_A", "vectorized_e"]


def test_kineto_time_text_not_a_number_is_counted_as_skipped(tmp_path: Path) -> None:
    path = odd_trace(tmp_path, lambda events: gemm_of(events).update(dur=[30]))
    parsed = kineto.parse(path, "r")
    assert (skipped_events(parsed), parsed.events) == (
        {"ac2g": 1, "python_function": 1, "kernel: ts or dur not a number": 1}, len(synthetic_events()))


def test_kineto_events_skipped_for_their_times_are_a_warning(tmp_path: Path) -> None:
    # Counted in `runs` alone, they would leave the user with fewer kernels and no word why.
    def change(events: list[dict]) -> None:
        gemm_of(events).update(ts="soon")
        next(e for e in events if e.get("cat") == "cpu_op").update(dur={"us": 3})

    assert kineto.parse(odd_trace(tmp_path, change), "r").warnings == [
        "2 events skipped, their ts or dur not a number (cpu_op 1, kernel 1)"]


def test_kineto_trace_whose_only_kernel_has_no_readable_time_says_so(tmp_path: Path) -> None:
    kernel = {"ph": "X", "cat": "kernel", "name": "gemm", "ts": "soon", "dur": 3, "pid": 0, "tid": 7}
    path = write_trace(tmp_path / "t.json", {"traceEvents": [kernel]})
    with pytest.raises(TraceError) as raised:
        kineto.parse(path, "r")
    assert raised.value.problem == ("no GPU events (kernels, memcpy or memset): "
                                    "1 event skipped, its ts or dur not a number")


def test_kineto_time_text_nan_is_null(tmp_path: Path) -> None:
    path = odd_trace(tmp_path, lambda events: gemm_of(events).update(dur="NaN"))
    gemm = kernel(kineto.parse(path, "r"), "sm90_xmma")
    assert (gemm["start_ns"], gemm["dur_ns"], gemm["end_ns"]) == (BASE_NS + 1_200_999, None, None)


def test_kineto_nan_arg_does_not_lose_the_kernel(tmp_path: Path) -> None:
    path = odd_trace(tmp_path, lambda events: gemm_of(events)["args"].update(loss=float("nan"), scale=float("-inf")))
    gemm = kernel(kineto.parse(path, "r"), "sm90_xmma")
    assert (gemm["start_ns"], gemm["dur_ns"], gemm["correlation_id"], gemm["grid"]) == (
        BASE_NS + 1_200_999, 30_002, 500, "[132, 1, 1]")


def test_kineto_nan_time_is_null(tmp_path: Path) -> None:
    path = odd_trace(tmp_path, lambda events: gemm_of(events).update(dur=float("inf")))
    gemm = kernel(kineto.parse(path, "r"), "sm90_xmma")
    assert (gemm["start_ns"], gemm["dur_ns"], gemm["end_ns"]) == (BASE_NS + 1_200_999, None, None)


def test_kineto_number_beyond_a_double_is_null(tmp_path: Path) -> None:
    path = odd_trace(tmp_path, lambda events: gemm_of(events).update(dur=30.002))
    path.write_text(path.read_text().replace('"dur": 30.002', '"dur": 1e999'))
    assert kernel(kineto.parse(path, "r"), "sm90_xmma")["dur_ns"] is None


def test_kineto_nan_text_inside_a_name_is_kept_verbatim(tmp_path: Path) -> None:
    def change(events: list[dict]) -> None:
        gemm_of(events)["args"]["loss"] = float("nan")
        gemm_of(events)["name"] = "gemm(x: NaN, y: -Infinity)"
    parsed = kineto.parse(odd_trace(tmp_path, change), "r")
    assert kernel(parsed, "gemm(")["name"] == "gemm(x: NaN, y: -Infinity)"


def test_kineto_infinity_in_device_properties_becomes_null(tmp_path: Path) -> None:
    trace = synthetic_trace()
    trace["deviceProperties"][0]["clockRate"] = float("inf")
    run = rows(kineto.parse(write_trace(tmp_path / "t.json", trace), "r"), "runs")[0]
    assert (run["device_name"], orjson.loads(run["metadata_json"])["device_properties"][0]) == (
        "NVIDIA H100 80GB HBM3", {"id": 0, "name": "NVIDIA H100 80GB HBM3", "clockRate": None})


def test_kineto_stream_reads_pieces_with_nan(tmp_path: Path) -> None:
    path = odd_trace(tmp_path, lambda events: [e.setdefault("args", {}).update(loss=float("nan")) for e in events])
    stream = kineto_stream.TraceStream(path, batch_bytes=200)
    sizes = [len(batch) for batch in stream.batches()]
    assert (len(sizes) > 5, sum(sizes), stream.metadata.baseTimeNanoseconds) == (True, len(synthetic_events()), BASE_NS)


def test_kineto_odd_values_streamed_equal_whole_decode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def change(events: list[dict]) -> None:
        for i, e in enumerate(events):
            e.setdefault("args", {})["loss"] = float("nan") if i % 3 else 1.5
        gemm_of(events)["ts"] = "1200.999"
        next(e for e in events if e["cat"] == "python_function")["dur"] = "soon"
    path = odd_trace(tmp_path, change)
    monkeypatch.setattr(kineto_stream, "BATCH_BYTES", 200)  # a cut every few events
    streamed = kineto.parse(path, "r")
    monkeypatch.setattr(kineto_stream.TraceStream, "batches", _not_streamable)
    whole = kineto.parse(path, "r")
    assert streamed.rows("kernels") == 6 and all(streamed.tables[t].drop(["ingested_at"] * (t == "runs")).equals(
        whole.tables[t].drop(["ingested_at"] * (t == "runs"))) for t in whole.tables)


def test_kineto_cut_inside_an_event_with_nan_still_fails_the_piece() -> None:
    # So the stream tries the next boundary, as for any wrong cut.
    with pytest.raises(msgspec.DecodeError):
        kineto_stream.decode_events(b'[{"ph": "X", "args": {"loss": NaN}}, {"ph": "X", "name": "a}, {"ph": "X"}]')


def test_kineto_truncated_piece_is_not_reread_for_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_stream.json, "loads", _not_called)
    with pytest.raises(msgspec.DecodeError):
        kineto_stream.decode_events(b'[{"ph": "X", "name": "x: NaN"}, {"ph": "X", "name": "trunc')


def test_kineto_number_beyond_a_double_over_the_repair_limit_is_not_reread(monkeypatch: pytest.MonkeyPatch) -> None:
    # Python's json would take ten times a whole large file's size as objects.
    monkeypatch.setattr(kineto_stream, "_MAX_REPAIR_BYTES", 16)
    with pytest.raises(msgspec.DecodeError):
        kineto_stream.decode_events(b'[{"ph": "X", "cat": "kernel", "ts": 1.0, "dur": 1e999}]')


def test_kineto_nan_over_the_repair_limit_is_read_without_pythons_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_stream, "_MAX_REPAIR_BYTES", 16)
    monkeypatch.setattr(kineto_stream.json, "loads", _not_called)
    events = kineto_stream.decode_events(b'[{"ph": "X", "cat": "kernel", "dur": NaN, "args": {"correlation": 7}}]')
    assert [(e.cat, e.dur, e.args.correlation) for e in events] == [("kernel", None, 7)]


def test_kineto_nan_and_beyond_a_double_in_one_text_are_both_null() -> None:
    events = kineto_stream.decode_events(b'[{"ph": "X", "ts": NaN, "dur": 1e999}, {"ph": "X", "ts": 2.5, "dur": -Infinity}]')
    assert [(e.ts, e.dur) for e in events] == [(None, None), (2.5, None)]


def test_kineto_non_finite_tokens_in_strings_stay_around_escaped_quotes() -> None:
    text = rb'[{"a": "q\"NaN", "b": NaN, "c": "\\\\", "d": -Infinity, "e": "Infinity\\", "f": [Infinity]}]'
    assert kineto_stream._non_finite_tokens_as_null(text) == (
        rb'[{"a": "q\"NaN", "b": null, "c": "\\\\", "d": null, "e": "Infinity\\", "f": [null]}]')


def test_kineto_whole_file_over_the_repair_limit_with_nan_ingests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A file that cannot be streamed is decoded whole: before, a NaN in one
    # over 64 MiB failed it as invalid JSON.
    path = odd_trace(tmp_path, lambda events: gemm_of(events)["args"].update(loss=float("nan")))
    monkeypatch.setattr(kineto_stream.TraceStream, "batches", _not_streamable)
    monkeypatch.setattr(kineto_stream, "_MAX_REPAIR_BYTES", 16)
    gemm = kernel(kineto.parse(path, "r"), "sm90_xmma")
    assert (gemm["start_ns"], gemm["dur_ns"], gemm["correlation_id"]) == (BASE_NS + 1_200_999, 30_002, 500)


def _not_called(*args, **kwargs):
    raise AssertionError("re-read by Python's json")


def test_us_to_ns_gives_the_decimal_written_to_the_nanosecond() -> None:
    # Three decimals, as Kineto writes them, up to 2**43 us (101.8 days).
    rng = random.Random(7)
    texts = [f"{rng.choice('-+')}{rng.randrange(2**43)}.{rng.randrange(1000):03d}" for _ in range(20_000)]
    texts += ["0.0005", "-0.0005", "0.0015", "8796093022207.999", "4469105770633.943"]
    assert us_to_ns([float(t) for t in texts]).to_pylist() == [round(Decimal(t) * 1000) for t in texts]


def test_times_to_ns_reads_decimals_and_large_integers_exactly() -> None:
    values = [Decimal("1712195495502094.565"), Decimal("0.0025"), Decimal("NaN"), 2**60, 1.5, None]
    assert times_to_ns(values).to_pylist() == [1712195495502094565, 2, None, None, 1500, None]


def test_us_to_ns_of_non_finite_or_out_of_range_is_null() -> None:
    values = [1.5, float("nan"), float("inf"), float("-inf"), 1e17, -9.2e15, None]
    assert us_to_ns(values).to_pylist() == [1500, None, None, None, None, -9_200_000_000_000_000_000, None]


@pytest.mark.parametrize("dtype, element_bytes", [
    ("Float8_e4m3fnuz", 1), ("Float8_e5m2fnuz", 1), ("Float8_e4m3fn", 1), ("ComplexHalf", 4), ("BFloat16", 2),
    ("ComplexDouble", 16),
])
def test_collective_bytes_of_every_pytorch_dtype(tmp_path: Path, dtype: str, element_bytes: int) -> None:
    events = synthetic_events()
    for e in events:
        if e.get("args", {}).get("dtype") == "BFloat16":
            e["args"]["dtype"] = dtype
    result = kineto.parse(write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=events)), "r")
    assert rows(result, "collectives")[0]["bytes"] == 1048576 * element_bytes


def test_collective_args_alike_but_for_their_type_are_read_apart() -> None:
    # Each distinct set of args is normalised once: 1 and true (equal keys
    # to Python) must not share a memo; true is no group size.
    from gpulens.collector.ingest.kineto_collectives import fields_from_args
    from gpulens.collector.ingest.kineto_schema import KinetoArgs

    read = [fields_from_args(KinetoArgs(collective_name="allreduce", group_size=size, seq=seq))
            for seq, size in enumerate([1, True, 1.0, 1, 1.5])]
    assert [(fields["group_size"], fields["seq"]) for fields in read] == [(1, 0), (None, 1), (1, 2), (1, 3), (None, 4)]


def test_collective_ranks_written_as_a_list_are_read() -> None:
    from gpulens.collector.ingest.kineto_collectives import fields_from_args
    from gpulens.collector.ingest.kineto_schema import KinetoArgs

    fields = fields_from_args(KinetoArgs(collective_name="allreduce", process_group_ranks=[0, 2, 4, 6], seq=3))
    assert (fields["group_ranks"], fields["group_size"], fields["seq"]) == ([0, 2, 4, 6], 4, 3)


def test_kineto_sniff_needs_trace_events() -> None:
    assert (kineto.sniff(b'{"traceEvents": []}', Path("x")), kineto.sniff(b'{"a": 1}', Path("x"))) == (True, False)


# --- rank lists ------------------------------------------------------------------------


def test_group_ranks_full_list_as_text() -> None:
    assert parse_group_ranks("[0, 1]", 2) == [0, 1]


def test_group_ranks_truncated_with_last_rank_shown() -> None:
    assert parse_group_ranks("[0, 1, 2, ..., 127]", 128) == list(range(128))


def test_group_ranks_truncated_rebuilt_from_start_and_stride() -> None:
    assert parse_group_ranks("[8, ...]", 4, start=8, stride=2) == [8, 10, 12, 14]


def test_group_ranks_unrebuildable_is_null() -> None:
    assert parse_group_ranks("[0, 5, 6, ...]", 40) is None


def test_group_ranks_truncated_without_stride_are_not_guessed() -> None:
    # {0..29} begins 0..63 as well as a flattened mesh group 0..31 + 64..95.
    shown = "[" + ", ".join(map(str, range(30))) + ", ...]"
    assert parse_group_ranks(shown, 64, start=0) is None


def test_group_ranks_truncated_of_a_group_not_strided_are_null() -> None:
    shown = "[" + ", ".join(map(str, range(30))) + ", ...]"
    assert parse_group_ranks(shown, 64, start=0, stride=-1) is None


# --- the real traces -------------------------------------------------------------------

needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason="shared real traces not present")
REAL = sorted(p.name for p in TRACES.glob("*.json.gz")) if TRACES.is_dir() else []
WITHOUT_GPU_EVENTS = {"cpu_only_rank34.json.gz", "no_distributed_info.json.gz"}


class _RawEvent(msgspec.Struct):
    ph: object = None
    cat: object = None
    name: object = None


class _RawTrace(msgspec.Struct):
    traceEvents: list[_RawEvent]


@cache
def raw_counts(name: str) -> dict[str, int]:
    """Rows each table should get, counted straight from the JSON."""
    events = msgspec.json.decode(gzip.decompress((TRACES / name).read_bytes()), type=_RawTrace).traceEvents
    complete = [e for e in events if e.ph == "X"]
    count = lambda *cats: sum(1 for e in complete if e.cat in cats)  # noqa: E731
    instants = [e for e in events if e.ph in ("i", "I")]
    allocator = sum(1 for e in instants if e.name in ("[memory]", "[OutOfMemory]"))
    return {
        "kernels": count("kernel", "gpu_memcpy", "gpu_memset"),
        "api_calls": count("cuda_runtime", "cuda_driver"),
        "cpu_ops": count("cpu_op"),
        # Ranges, then the other instants (the profiler's window marks).
        "annotations": count("user_annotation", "gpu_user_annotation") + len(instants) - allocator,
        "memory_events": allocator,
    }


@cache
def parsed_real(name: str) -> ParsedTrace:
    return kineto.parse(TRACES / name, "real")


@needs_traces
@pytest.mark.parametrize("name", [n for n in REAL if n not in WITHOUT_GPU_EVENTS])
def test_real_trace_rows_equal_raw_event_counts(name: str) -> None:
    parsed = parsed_real(name)
    assert {t: parsed.rows(t) for t in raw_counts(name)} == raw_counts(name)


@needs_traces
@pytest.mark.parametrize("name", sorted(WITHOUT_GPU_EVENTS))
def test_real_trace_without_gpu_events_fails_clearly(name: str) -> None:
    with pytest.raises(TraceError) as error:
        kineto.parse(TRACES / name, "real")
    assert str(error.value) == f"{TRACES / name}: {NO_GPU_EVENTS}"


@needs_traces
def test_real_mi250_kernel_starts_exact_to_the_ns() -> None:
    name = "mi250_rocm6.2_minitoy.json.gz"
    raw = json.loads(gzip.decompress((TRACES / name).read_bytes()), parse_float=Decimal)
    expected = sorted(raw["baseTimeNanoseconds"] + int(e["ts"] * 1000) for e in raw["traceEvents"]
                      if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert sorted(parsed_real(name).tables["kernels"].column("start_ns").to_pylist()) == expected


@needs_traces
def test_real_a100_collectives_have_op_bytes_group() -> None:
    collectives = parsed_real("a100_2rank_allreduce_nccl2.17.json.gz").tables["collectives"].to_pylist()
    filled = {(c["op"], c["group_size"], c["process_group"], tuple(c["group_ranks"]), c["kernel_name"] is not None)
              for c in collectives if c["bytes"]}
    assert (len(collectives), filled) == (21, {("all_reduce", 2, "0", (0, 1), True), ("broadcast", 2, "0", (0, 1), True)})


@needs_traces
def test_real_a100_first_all_reduce_exact() -> None:
    collectives = parsed_real("a100_2rank_allreduce_nccl2.17.json.gz").tables["collectives"].to_pylist()
    first = next(c for c in collectives if c["op"] == "all_reduce")
    # record_param_comms ts 4458676524648.797 dur 189.626; kernel ts 4458676524716.094.
    base = 1711964646000000000
    assert (first["bytes"], first["dtype"], first["external_id"], first["cpu_start_ns"], first["cpu_end_ns"], first["start_ns"]) == (
        8196000, "float32", 2099, base + 4458676524648797, base + 4458676524838423, base + 4458676524716094)


@needs_traces
def test_real_a100_has_no_seq_in_its_args() -> None:
    # NCCL 2.17-era PyTorch does not write "Seq": seq stays NULL, not invented.
    collectives = parsed_real("a100_2rank_allreduce_nccl2.17.json.gz").tables["collectives"]
    assert collectives.column("seq").null_count == 21


@needs_traces
def test_real_v100_every_nccl_kernel_is_an_all_reduce_collective() -> None:
    collectives = parsed_real("v100_2rank_allreduce.json.gz").tables["collectives"].to_pylist()
    assert {(c["op"], c["cpu_start_ns"] is not None) for c in collectives} == {("all_reduce", True)} and len(collectives) == 2020


@needs_traces
def test_real_sampled_rank1_collective_ops() -> None:
    collectives = parsed_real("sampled_128rank_rank1.json.gz").tables["collectives"].to_pylist()
    assert sorted(c["op"] for c in collectives) == ["all_gather"] * 2 + ["all_reduce"] * 4 + ["all_to_all"] * 4


@needs_traces
def test_real_v100_allocator_events_match_the_raw_trace() -> None:
    raw = json.loads(gzip.decompress((TRACES / "v100_2rank_allreduce.json.gz").read_bytes()))["traceEvents"]
    allocator = [e["args"] for e in raw if e.get("ph") == "i" and e.get("name") == "[memory]"]
    memory = parsed_real("v100_2rank_allreduce.json.gz").tables["memory_events"]
    got = memory.select(["device_type", "device", "bytes", "total_allocated_bytes"]).to_pylist()
    kinds = {0: "cpu", 1: "cuda"}
    assert got == [{"device_type": kinds[a["Device Type"]], "device": a["Device Id"] if a["Device Id"] >= 0 else None,
                    "bytes": a["Bytes"], "total_allocated_bytes": a["Total Allocated"]} for a in allocator]
    # 28,010 events, half of them frees; 6.2 GiB at the peak.
    assert (len(got), sum(r["bytes"] < 0 for r in got), max(r["total_allocated_bytes"] for r in got)) == (
        28_010, 14_005, 6_629_508_096)


@needs_traces
def test_real_a100_names_its_threads() -> None:
    metadata = orjson.loads(rows(parsed_real("a100_2rank_allreduce_nccl2.17.json.gz"), "runs")[0]["metadata_json"])
    assert (metadata["process_name"], metadata["thread_names"]) == (
        "python3.10", {"2919752": "pt_autograd_0", "2910249": "pt_main_thread"})


@needs_traces
def test_real_v100_is_on_the_epoch_from_integer_microseconds() -> None:
    run = parsed_real("v100_2rank_allreduce.json.gz").tables["runs"].to_pylist()[0]
    assert (run["rank"], run["world_size"], run["time_base"], run["epoch_offset_ns"], run["device_name"]) == (
        1, 2, "epoch", 0, "Tesla V100-SXM2-32GB")


def test_kineto_events_of_other_phases_decode_with_only_their_category() -> None:
    events = kineto_stream.decode_events(
        b'[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.5, "dur": 2, "args": {"grid": [8, 1, 1]}},'
        b' {"ph": "s", "cat": "ac2g", "id": 7, "pid": 1, "tid": 2, "ts": 1}]')
    assert [(e.ph, e.cat) for e in events] == [("X", "kernel"), ("s", "ac2g")]
    assert (events[0].name, events[0].dur, bytes(events[0].args.grid)) == ("k", 2.0, b"[8, 1, 1]")


def test_kineto_batch_with_an_event_without_phase_decodes_leniently() -> None:
    events = kineto_stream.decode_events(b'[{"ph": "X", "cat": "kernel", "name": "k"}, {"cat": "kernel", "name": "odd"}]')
    assert [(e.ph, e.name) for e in events] == [("X", "k"), (None, "odd")]


# --- one file read in parts (several processes on one big trace) ----------------------


def _read_in_parts(path: Path, offsets: list[int]) -> list[kineto.PartRead]:
    """The file read in parts cut at `offsets` (content offsets, ascending)."""
    bounds = [0, *offsets, None]
    return [kineto.read_part(path, start, end) for start, end in zip(bounds, bounds[1:])]


def _same_tables(got: ParsedTrace, want: ParsedTrace) -> bool:
    drop = lambda table: ["ingested_at"] if table == "runs" else []  # noqa: E731
    return got.tables.keys() == want.tables.keys() and all(
        got.tables[t].drop(drop(t)).equals(want.tables[t].drop(drop(t))) for t in want.tables)


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
@pytest.mark.parametrize("parts", [2, 3, 8])
def test_kineto_file_read_in_parts_gives_the_tables_of_the_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, parts: int) -> None:
    path = write_trace(tmp_path / name, synthetic_trace())
    monkeypatch.setattr(kineto_stream, "BATCH_BYTES", 200)  # a cut every few events
    size = len(write_trace(tmp_path / "plain.json", synthetic_trace()).read_bytes())
    reads = _read_in_parts(path, [size * i // parts for i in range(1, parts)])
    assert _same_tables(kineto.parse_parts(path, "r", reads[::-1]), kineto.parse(path, "r"))


@pytest.mark.parametrize("parts", [2, 5])
def test_kineto_instants_read_in_parts_give_the_tables_of_the_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: int) -> None:
    events = synthetic_events()
    for at, mark in zip(range(2, 2 * len(MARKS), 2), MARKS):  # among the other events
        events.insert(at, mark)
    path = write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=events))
    monkeypatch.setattr(kineto_stream, "BATCH_BYTES", 200)
    size = path.stat().st_size
    # Through pickle, as a worker's part comes back.
    reads = [pickle.loads(pickle.dumps(read)) for read in _read_in_parts(path, [size * i // parts for i in range(1, parts)])]
    got = kineto.parse_parts(path, "r", reads)
    assert got.rows("memory_events") == 3 and _same_tables(got, kineto.parse(path, "r"))


def _decoded(batch: kineto_stream.Batch) -> kineto_stream.Events:
    """A batch's events as msgspec decodes them (a scanned piece's too)."""
    return kineto_stream.decode_events(batch.text()) if isinstance(batch, kineto_native.ScannedPiece) else batch


def test_kineto_parts_cut_at_any_offset_in_the_events_meet_exactly(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", synthetic_trace())
    whole = [msgspec.json.encode(e) for batch in kineto_stream.TraceStream(path).batches() for e in _decoded(batch)]
    text = path.read_bytes()
    array_start, array_end = text.index(b'"traceEvents": [') + 16, text.index(b'], "traceName"') + 1
    for offset in range(array_start + 1, array_end + 40):  # (at its very start: refused, as in the header)
        first, second = (kineto_stream.TraceStream(path, start=start, end=end)
                         for start, end in ((0, offset), (offset, None)))
        events = [msgspec.json.encode(e) for stream in (first, second) for batch in stream.batches() for e in _decoded(batch)]
        assert (events, first.end_at) == (whole, second.first_event_at), offset


def test_kineto_parts_cut_in_the_header_are_refused(tmp_path: Path) -> None:
    # deviceProperties' `}, {"id": 1` looks like an event boundary.
    path = write_trace(tmp_path / "t.json", synthetic_trace())
    offset = path.read_bytes().index(b'{"id": 1')
    with pytest.raises(kineto_stream.NotStreamable):
        kineto.parse_parts(path, "r", _read_in_parts(path, [offset - 3]))


def test_kineto_parts_cut_beside_a_nested_object_are_exact_or_refused(tmp_path: Path) -> None:
    # `}, {"name": ...` inside an event's args looks like an event boundary.
    nested = {"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 100, "tid": 100, "ts": 1500.0, "dur": 2.0,
              "args": {"External id": 40, "tensors": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}}
    events = synthetic_events()
    path = write_trace(tmp_path / "t.json", synthetic_trace(traceEvents=[*events[:5], nested, *events[5:]]))
    want = kineto.parse(path, "r")
    text = path.read_bytes()
    nested_at = text.index(b'{"name": "b"}')
    outcomes = set()
    for offset in range(nested_at - 40, nested_at + 40):
        try:
            got = kineto.parse_parts(path, "r", _read_in_parts(path, [offset]))
        except kineto_stream.NotStreamable:
            outcomes.add("refused")
        else:
            assert _same_tables(got, want), offset
            outcomes.add("exact")
    assert outcomes == {"exact", "refused"}


def test_kineto_parts_that_do_not_meet_are_refused(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", synthetic_trace())
    size = path.stat().st_size
    first = kineto.read_part(path, 0, size // 3)
    later = kineto.read_part(path, size // 2, None)  # the events between are in neither
    with pytest.raises(kineto_stream.NotStreamable):
        kineto.parse_parts(path, "r", [first, later])


def test_kineto_parts_without_the_last_are_refused(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", synthetic_trace())
    with pytest.raises(kineto_stream.NotStreamable):
        kineto.parse_parts(path, "r", [kineto.read_part(path, 0, path.stat().st_size // 2)])


def test_kineto_part_past_the_last_event_is_empty(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", synthetic_trace())
    size = path.stat().st_size
    reads = _read_in_parts(path, [size - 5])  # inside the trailer
    assert (reads[1].events.events, reads[1].first_event_at, reads[0].end_at) == (0, None, None)
    assert _same_tables(kineto.parse_parts(path, "r", reads), kineto.parse(path, "r"))


def test_kineto_kernel_categories_and_dims_outlast_a_memo_that_fills(tmp_path: Path, monkeypatch) -> None:
    # The memos live as long as the process (the ranks of a job share their
    # kernels); one that grows past its bound starts again, empty.
    from gpulens.collector.ingest import kineto_columns

    monkeypatch.setattr(kineto_columns, "_MEMO_ENTRIES", 2)
    monkeypatch.setattr(kineto_columns, "_CATEGORIES", {})
    monkeypatch.setattr(kineto_columns, "_DIMS", {})
    for round_ in range(3):
        events = [gpu("kernel", name, 1000.0 + i, 1.0, correlation=900 + i, grid=[i + round_, 1, 1])
                  for i, name in enumerate(["sm90_xmma_gemm_bf16", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", f"k{round_}"])]
        trace = kineto.parse(write_trace(tmp_path / f"t{round_}.json", synthetic_trace(traceEvents=events)), "demo")
        assert [(r["category"], r["grid"]) for r in rows(trace, "kernels")] == [
            ("compute", f"[{round_}, 1, 1]"), ("communication", f"[{round_ + 1}, 1, 1]"), ("compute", f"[{round_ + 2}, 1, 1]")]
        # Only this file's: what the file before left was dropped first
        # (b"", an absent value, is in it or not as the path that read it).
        assert (set(kineto_columns._CATEGORIES), set(kineto_columns._DIMS) - {b""}) == (
            {"sm90_xmma_gemm_bf16", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", f"k{round_}"},
            {f"[{i + round_}, 1, 1]".encode() for i in range(3)})


# --- nanoseconds past a double's step -----------------------------------------------------


def _epoch_text(events: list[dict]) -> str:
    """A trace without baseTimeNanoseconds whose times are Unix-epoch
    microseconds written with three decimals, as a profiler writes them:
    each time given as the text "=<digits>" becomes that number."""
    text = json.dumps(synthetic_trace(baseTimeNanoseconds=None, traceEvents=events))
    return re.sub(r'"=(-?[0-9.]+)"', r"\1", text)


# At 1.7e15 µs a double's step is 0.25 µs: none of these survive a double.
EPOCH_EVENTS = [
    event("user_annotation", "ProfilerStep#1", "=1712195495502000.001", "=1000.003"),
    event("user_annotation", "ProfilerStep#2", "=1712195495503000.005", "=999.999"),
    event("cuda_runtime", "cudaLaunchKernel", "=1712195495502010.125", "=5.251", correlation=1),
    gpu("kernel", "first_kernel", "=1712195495502094.565", "=12.345", correlation=1),
    gpu("kernel", "second_kernel", "=1712195495502200.999", "=0.001", correlation=2),
]


def test_kineto_epoch_times_with_three_decimals_are_exact(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text(_epoch_text(EPOCH_EVENTS))
    kernels = rows(kineto.parse(tmp_path / "t.json", "r"), "kernels")
    assert [(k["start_ns"], k["dur_ns"], k["end_ns"]) for k in kernels] == [
        (1712195495502094565, 12345, 1712195495502106910), (1712195495502200999, 1, 1712195495502201000)]


def test_kineto_span_launch_delay_and_step_boundary_are_integer_arithmetic(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text(_epoch_text(EPOCH_EVENTS))
    derived = derive_trace_tables(kineto.parse(tmp_path / "t.json", "r").tables)
    summary = derived["rank_summary"].to_pylist()[0]
    first = derived["kernels"].to_pylist()[0]
    steps = [(a["step"], a["start_ns"], a["end_ns"]) for a in derived["annotations"].to_pylist() if a["step"]]
    assert summary["span_end_ns"] - summary["span_start_ns"] == 1712195495502201000 - 1712195495502094565
    # start - (call start + call duration): 94.565 - (10.125 + 5.251) µs.
    assert first["launch_delay_ns"] == 1712195495502094565 - (1712195495502010125 + 5251)
    assert steps == [(1, 1712195495502000001, 1712195495503000004), (2, 1712195495503000005, 1712195495504000004)]


def test_kineto_activity_of_the_first_step_without_a_launch_call_counts_as_unlaunched(tmp_path: Path) -> None:
    # second_kernel's correlation id (2) is on no runtime call: launched before the profiler started.
    (tmp_path / "t.json").write_text(_epoch_text(EPOCH_EVENTS))
    summary = derive_trace_tables(kineto.parse(tmp_path / "t.json", "r").tables)["rank_summary"].to_pylist()[0]
    assert (summary["scoped_kernel_count"], summary["busy_ns"], summary["idle_ns"]) == (2, 12_345 + 1, 106_435 - 12_346)
    assert (summary["unlaunched_count"], summary["unlaunched_busy_ns"]) == (1, 1)
