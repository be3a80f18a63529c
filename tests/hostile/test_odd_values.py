"""One odd value costs that value or its event, not the file, with a warning
that counts what was dropped; the compiled scanner and msgspec agree."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpulens.collector.ingest import kineto, kineto_native, nsys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_ingest_kineto import event, gpu, synthetic_trace  # noqa: E402
from test_ingest_nsys import GLOBAL_PID, build_export  # noqa: E402

INT64_MAX = (1 << 63) - 1


@pytest.fixture(autouse=True, params=["native", "msgspec"])
def reader(request, monkeypatch) -> str:
    if request.param == "native" and not kineto_native.available():
        pytest.skip("the compiled scanner is not built here")
    if request.param == "msgspec":
        monkeypatch.setattr(kineto_native, "_SCANNER", None)
    return request.param


def _parse(tmp_path: Path, text: str):
    path = tmp_path / "trace.json"
    path.write_text(text)
    return kineto.parse(path, "r")


def test_odd_value_rank_beyond_int64_falls_back_and_is_counted(tmp_path):
    trace = synthetic_trace()
    trace["distributedInfo"] = {"rank": 2**70, "world_size": 8, "backend": "nccl"}
    parsed = _parse(tmp_path, json.dumps(trace))
    assert (parsed.tables["runs"]["rank"].to_pylist(), parsed.warnings) == (
        [0], ["1 odd value dropped, the rest kept (distributedInfo.rank 1)"])


def test_odd_value_step_beyond_int64_keeps_the_step_without_its_number(tmp_path):
    trace = synthetic_trace()
    trace["traceEvents"].append(event("user_annotation", f"ProfilerStep#{2**70}", 1000.0, 10.0))
    parsed = _parse(tmp_path, json.dumps(trace))
    steps = [row["step"] for row in parsed.tables["annotations"].to_pylist() if row["kind"] == "profiler_step"]
    assert (sorted(steps, key=lambda s: (s is None, s)), parsed.warnings) == (
        [7, None], ["1 odd value dropped, the rest kept (annotations.step 1)"])


def test_odd_value_collective_sizes_beyond_int64_are_null(tmp_path):
    trace = synthetic_trace()
    trace["traceEvents"].append(gpu("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 5000.0, 10.0, correlation=9,
                                    **{"In msg nelems": 2**70, "Group size": 2**70, "Collective name": "allreduce",
                                       "dtype": "Float"}))
    parsed = _parse(tmp_path, json.dumps(trace))
    assert (parsed.tables["kernels"].num_rows, parsed.warnings) == (
        7, ["3 odd values dropped, the rest kept (collectives.bytes 1, collectives.group_size 1, collectives.in_nelems 1)"])


def test_odd_value_profiler_steps_without_ts_keep_the_file(tmp_path):
    trace = synthetic_trace()
    for item in trace["traceEvents"]:
        if str(item.get("name", "")).startswith("ProfilerStep"):
            item.pop("ts")
    parsed = _parse(tmp_path, json.dumps(trace))
    assert parsed.tables["kernels"].num_rows == 6


def test_odd_value_nested_100k_deep_costs_that_value(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    text = json.dumps(synthetic_trace()).replace('"args": {', '"args": {"deep": ' + deep + ", ", 1)
    parsed = _parse(tmp_path, text)
    assert (parsed.tables["kernels"].num_rows, parsed.warnings) == (
        6, ["1 odd value dropped, the rest kept (values nested too deep 1)"])


def test_odd_value_lone_surrogate_in_a_name_becomes_a_replacement_character(tmp_path):
    parsed = _parse(tmp_path, json.dumps(synthetic_trace()).replace("aten::mm", "aten::mm\\ud800"))
    names = parsed.tables["cpu_ops"]["name"].to_pylist()
    assert ("aten::mm\ufffd" in names, parsed.warnings) == (True, ["1 odd value dropped, the rest kept (lone UTF-16 surrogates 1)"])


def test_odd_value_nsys_start_at_int64_max_keeps_the_file(tmp_path, reader):
    if reader == "native":
        pytest.skip("nsys has one reader")
    path = build_export(tmp_path / "big.sqlite", extra_rows={"CUPTI_ACTIVITY_KIND_KERNEL": [
        (INT64_MAX, INT64_MAX, 0, 1, 7, 13, GLOBAL_PID, 1, 2, None, 16, 512, 1, 1, 128, 1, 1, 0, 0, 101)]})
    kernels = nsys.parse(path, "r").tables["kernels"].to_pylist()
    assert [row["start_ns"] for row in kernels if row["correlation_id"] == 13] == [None]


def test_odd_value_nsys_start_at_int64_max_is_counted(tmp_path, reader):
    if reader == "native":
        pytest.skip("nsys has one reader")
    path = build_export(tmp_path / "big.sqlite", extra_rows={"CUPTI_ACTIVITY_KIND_KERNEL": [
        (INT64_MAX, INT64_MAX, 0, 1, 7, 13, GLOBAL_PID, 1, 2, None, 16, 512, 1, 1, 128, 1, 1, 0, 0, 101)]})
    assert nsys.parse(path, "r").warnings == ["2 odd values dropped, the rest kept (kernels.end_ns 1, kernels.start_ns 1)"]


def test_duplicate_events_are_kept_with_a_warning_counting_them(tmp_path):
    trace = synthetic_trace()
    trace["traceEvents"] += [item for item in trace["traceEvents"] if item.get("cat") == "kernel"][:2]
    parsed = _parse(tmp_path, json.dumps(trace))
    assert (parsed.tables["kernels"].num_rows, parsed.warnings) == (
        8, ["2 duplicate events kept, each the same as an earlier one in every field (kernels 2): "
            "was the trace written twice?"])
