"""`gpulens export perfetto`: the demo run as one trace-event timeline,
read back by gpulens' own Kineto ingest and checked against the dataset."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from gpulens.analysis.dataset import open_dataset
from gpulens.analysis.findings import Finding
from gpulens.analysis.perfetto import export_perfetto
from gpulens.collector.errors import DatasetError, UsageError
from gpulens.collector.ingest import kineto
from gpulens.dashboard.cli import cli
from gpulens.dashboard.export import parse_ranks, parse_steps

DEMO = Path(__file__).resolve().parents[1] / "sample_traces" / "demo-training"
RUN = "demo-training"

# The trace-event format (the JSON object form), as chrome://tracing and
# Perfetto read it: the phases this export writes, each with its keys.
_NUMBER = {"type": "number"}
_ID = {"type": "integer"}
TRACE_EVENT_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"$ref": "#/$defs/event"}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
    "$defs": {
        "event": {
            "type": "object",
            "required": ["ph", "pid"],
            "properties": {"ph": {"enum": ["X", "C", "i", "s", "f", "M"]}, "pid": _ID, "tid": _ID},
            "allOf": [
                {"if": {"properties": {"ph": {"const": "X"}}},
                 "then": {"required": ["name", "cat", "ts", "dur", "tid"],
                          "properties": {"name": {"type": "string"}, "ts": _NUMBER, "dur": {"type": "number", "minimum": 0}}}},
                {"if": {"properties": {"ph": {"const": "C"}}},
                 "then": {"required": ["name", "ts", "args"],
                          "properties": {"args": {"type": "object", "minProperties": 1, "additionalProperties": _NUMBER}}}},
                {"if": {"properties": {"ph": {"const": "i"}}},
                 "then": {"required": ["name", "ts", "s"], "properties": {"s": {"enum": ["g", "p", "t"]}}}},
                {"if": {"properties": {"ph": {"enum": ["s", "f"]}}},
                 "then": {"required": ["id", "ts", "tid", "cat", "name"], "properties": {"id": _ID}}},
                {"if": {"properties": {"ph": {"const": "f"}}}, "then": {"required": ["bp"], "properties": {"bp": {"const": "e"}}}},
                {"if": {"properties": {"ph": {"const": "M"}}},
                 "then": {"required": ["name", "args"],
                          "properties": {"name": {"enum": ["process_name", "process_labels", "process_sort_index",
                                                           "thread_name", "thread_sort_index"]}}}},
            ],
        }
    },
}


def _load(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _ns(trace: dict, ts_us: float) -> int:
    return trace["baseTimeNanoseconds"] + round(ts_us * 1000)


@pytest.fixture(scope="module")
def con():
    connection = open_dataset(DEMO, analyses_on_demand=True)
    yield connection
    connection.close()


@pytest.fixture(scope="module")
def rank0(con, tmp_path_factory) -> Path:
    """Rank 0, its whole trace."""
    path = tmp_path_factory.mktemp("perfetto") / "rank0.json.gz"
    export_perfetto(con, RUN, path, ranks=[0])
    return path


def _window(con, rank: int) -> tuple[int, int]:
    return con.sql(f"""
        select min(start_ns), max(end_ns) from (
            select start_ns, end_ns from kernels where run = '{RUN}' and rank = {rank}
            union all select start_ns, end_ns from api_calls where run = '{RUN}' and rank = {rank}
            union all select start_ns, end_ns from cpu_ops where run = '{RUN}' and rank = {rank}
            union all select start_ns, end_ns from annotations where run = '{RUN}' and rank = {rank})
    """).fetchall()[0]


def test_export_kernels_read_back_by_kineto_ingest_are_the_runs(con, rank0) -> None:
    back = kineto.parse(rank0, "back").tables["kernels"]
    exported = sorted(zip(*(back.column(c).to_pylist() for c in ("start_ns", "dur_ns", "stream", "device", "name"))))
    source = sorted(con.sql(f"select start_ns, dur_ns, stream, device, name from kernels "
                            f"where run = '{RUN}' and rank = 0").fetchall())
    assert len(source) == 2000
    assert exported == source


def test_export_counters_equal_the_telemetry_rows_of_the_window(con, rank0) -> None:
    trace = _load(rank0)
    exported = [(_ns(trace, e["ts"]), e["args"]["power_w"]) for e in trace["traceEvents"]
                if e["ph"] == "C" and "power_w" in e["args"]]
    start_ns, end_ns = _window(con, 0)
    rows = con.sql("select epoch_ns(ts), power_w from telemetry where host = 'sim-node-00' and gpu_index = 0 "
                   "order by ts").fetchall()
    before = max(ts for ts, _ in rows if ts <= start_ns)
    after = min(ts for ts, _ in rows if ts >= end_ns)
    expected = [(ts, power) for ts, power in rows if before <= ts <= after]
    assert len(expected) == 2  # a 0.15 s trace between two 1 s samples
    assert exported == expected


def test_export_throttled_counter_is_one_on_the_capped_gpu(con, tmp_path) -> None:
    path = tmp_path / "rank3.json.gz"
    export_perfetto(con, RUN, path, ranks=[3])
    trace = _load(path)
    throttled = [(_ns(trace, e["ts"]), e["args"]["throttled"]) for e in trace["traceEvents"]
                 if e["ph"] == "C" and "throttled" in e["args"]]
    rows = con.sql("select epoch_ns(ts), len(throttle_reasons) > 0 from telemetry "
                   "where gpu_index = 3 and epoch_ns(ts) in (" + ",".join(str(ts) for ts, _ in throttled) + ") order by ts").fetchall()
    assert throttled == [(ts, int(flag)) for ts, flag in rows]
    assert [name for name in {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"} if "throttle" in name] \
        in (["GPU 3 throttled", "GPU 3 throttle reasons"], ["GPU 3 throttle reasons", "GPU 3 throttled"])


def test_export_flows_pair_each_launch_call_with_its_kernel(con, rank0) -> None:
    events = _load(rank0)["traceEvents"]
    calls = {(e["tid"], e["ts"]): e for e in events if e["ph"] == "X" and e["cat"] == "cuda_runtime"}
    gpu = {(e["tid"], e["ts"]): e for e in events if e["ph"] == "X" and e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == finishes.keys()
    pairs = [(calls[(starts[i]["tid"], starts[i]["ts"])], gpu[(finishes[i]["tid"], finishes[i]["ts"])]) for i in starts]
    assert all(call["args"]["correlation"] == activity["args"]["correlation"] for call, activity in pairs)
    launched = con.sql(f"select count(*) from kernels where run = '{RUN}' and rank = 0 "
                       f"and launch_call_start_ns is not null").fetchall()[0][0]
    assert len(pairs) == launched == 2000


def test_export_is_valid_trace_event_json(con, tmp_path) -> None:
    # One step of the straggler, with a finding: every phase the export
    # writes, in a tenth of the events (the validator takes 1 ms an event).
    path = tmp_path / "step.json.gz"
    finding = Finding(id="straggler_rank", severity="critical", title="t", detail="d", subject={"run": RUN, "rank": 5})
    export_perfetto(con, RUN, path, ranks=[5], steps=(4, 4), findings=[finding])
    trace = _load(path)
    assert {e["ph"] for e in trace["traceEvents"]} == {"X", "C", "i", "s", "f", "M"}
    jsonschema.validate(trace, TRACE_EVENT_SCHEMA)


def test_export_process_is_named_with_host_and_gpu(rank0) -> None:
    names = [e["args"]["name"] for e in _load(rank0)["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"]
    assert names == ["rank 0 · sim-node-00 GPU 0"]


def test_export_metadata_says_how_the_gpu_was_matched(rank0) -> None:
    # The demo's processes table holds each rank's pid on its GPU.
    assert _load(rank0)["otherData"]["gpu_matching"] == [
        {"rank": 0, "host": "sim-node-00", "gpu_index": 0, "matched_by": "pid", "unmatched_reason": None}]


def test_export_collectives_carry_op_size_group_and_seq(con, rank0) -> None:
    exported = [(e["name"], e["args"]["bytes"], e["args"]["process_group"], e["args"]["seq"])
                for e in _load(rank0)["traceEvents"] if e["ph"] == "X" and e["cat"] == "collective"]
    source = con.sql(f"select op, bytes, process_group, seq from collectives where run = '{RUN}' and rank = 0 "
                     "order by start_ns").fetchall()
    assert len(source) == 100
    assert exported == source


def test_export_steps_limit_the_window_to_those_steps(con, tmp_path) -> None:
    path = tmp_path / "steps.json.gz"
    export_perfetto(con, RUN, path, ranks=[1], steps=(4, 5))
    events = _load(path)["traceEvents"]
    assert [e["name"] for e in events if e["ph"] == "X" and e["cat"] == "user_annotation"] == ["ProfilerStep#4", "ProfilerStep#5"]
    kernels = sum(1 for e in events if e["ph"] == "X" and e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"))
    expected = con.sql(f"""
        with w as (select min(start_ns) s, max(end_ns) e from annotations
                   where run = '{RUN}' and rank = 1 and kind = 'profiler_step' and step between 4 and 5)
        select count(*) from kernels, w where run = '{RUN}' and rank = 1 and start_ns < w.e and end_ns > w.s
    """).fetchall()[0][0]
    assert kernels == expected == 400


def test_export_cut_at_max_events_says_where(con, tmp_path) -> None:
    path = tmp_path / "cut.json.gz"
    summary = export_perfetto(con, RUN, path, ranks=[0], max_events=1000)
    trace = _load(path)
    assert (len(trace["traceEvents"]), summary.cut) == (1000, True)
    assert trace["otherData"]["cut_at_ns"] == summary.cut_at_ns
    last = max(_ns(trace, e["ts"]) for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] not in ("user_annotation", "collective"))
    assert last <= summary.cut_at_ns


def test_export_uncut_says_nothing_was_left_out(rank0) -> None:
    assert (_load(rank0)["otherData"]["cut"], _load(rank0)["otherData"]["cut_at_ns"]) == (False, None)


def test_export_places_a_straggler_finding_at_its_latest_late_arrival(con, tmp_path) -> None:
    path = tmp_path / "finding.json.gz"
    finding = Finding(id="straggler_rank", severity="critical", title="Rank 5 arrived last", detail="d",
                      subject={"run": RUN, "rank": 5})
    export_perfetto(con, RUN, path, ranks=[5], findings=[finding])
    trace = _load(path)
    [instant] = [e for e in trace["traceEvents"] if e["ph"] == "i" and e["cat"] == "finding"]
    latest = con.sql(f"select arg_max(start_ns, lateness_ns) from collective_skew "
                     f"where run = '{RUN}' and rank = 5 and is_last").fetchall()[0][0]
    assert (_ns(trace, instant["ts"]), instant["args"]["title"]) == (latest, "Rank 5 arrived last")


def test_export_leaves_out_findings_about_other_ranks(con, tmp_path) -> None:
    path = tmp_path / "other.json.gz"
    finding = Finding(id="straggler_rank", severity="critical", title="t", detail="d", subject={"run": RUN, "rank": 5})
    export_perfetto(con, RUN, path, ranks=[0], findings=[finding])
    assert [e for e in _load(path)["traceEvents"] if e["ph"] == "i"] == []


def test_export_unknown_run_names_the_runs(con, tmp_path) -> None:
    with pytest.raises(DatasetError, match="no run 'nope' in the dataset \\(runs: demo-training\\)"):
        export_perfetto(con, "nope", tmp_path / "x.json.gz")
    assert not (tmp_path / "x.json.gz").exists()


def test_export_steps_no_rank_has_are_a_usage_error(con, tmp_path) -> None:
    with pytest.raises(UsageError, match="no rank has profiler steps 50-60"):
        export_perfetto(con, RUN, tmp_path / "x.json.gz", steps=(50, 60))


def test_parse_ranks_reads_lists_and_ranges() -> None:
    assert parse_ranks("0,2-4,3") == [0, 2, 3, 4]


def test_parse_steps_reads_one_step_as_a_range() -> None:
    assert parse_steps("12") == (12, 12)


def test_parse_steps_refuses_a_backward_range() -> None:
    with pytest.raises(UsageError, match="ends before it starts"):
        parse_steps("14-10")


def test_export_command_writes_the_file_and_says_so(tmp_path) -> None:
    path = tmp_path / "cli.json.gz"
    result = CliRunner().invoke(cli, ["export", "perfetto", str(DEMO), "--run", RUN, "--ranks", "2-3", "--steps", "5",
                                      "--no-findings", "-o", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.endswith(f"ranks 2-3 of run {RUN}\n")
    assert {e["args"]["name"] for e in _load(path)["traceEvents"] if e.get("name") == "process_name"} == {
        "rank 2 · sim-node-00 GPU 2", "rank 3 · sim-node-00 GPU 3"}


def test_export_command_warns_when_it_cuts(tmp_path) -> None:
    result = CliRunner().invoke(cli, ["export", "perfetto", str(DEMO), "--run", RUN, "--ranks", "0", "--no-findings",
                                      "--max-events", "300", "-o", str(tmp_path / "cut.json.gz")])
    assert result.exit_code == 0, result.output
    assert "cut at --max-events 300: the events from 2026-01-01T00:01:30." in result.stderr


def test_export_cut_leaves_the_connection_free_for_the_next_query(con, tmp_path) -> None:
    # The dashboard exports on its long-lived connection: a result left half-read would hold it.
    export_perfetto(con, RUN, tmp_path / "cut.json.gz", ranks=[0], max_events=100)
    assert con.execute("select count(*) from kernels").fetchall() == [(16000,)]


def test_export_puts_each_process_groups_collectives_on_a_track_of_its_own(rank0) -> None:
    events = _load(rank0)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    tids = {e["tid"] for e in events if e["ph"] == "X" and e["cat"] == "collective"}
    assert [names[tid] for tid in tids] == ["collectives · group 0 (default_pg)"]


def test_export_of_a_rank_not_joined_to_telemetry_has_no_counters_and_says_why(tmp_path) -> None:
    import shutil

    from conftest import write_trace_table

    dataset = tmp_path / "data"
    shutil.copytree(DEMO, dataset)
    # A run on its trace's own clock (no epoch): its times are not telemetry's.
    write_trace_table(dataset, "own-clock", "runs", {"run": ["own-clock"], "rank": [0], "host": ["sim-node-00"],
                                                     "time_base": ["trace"]})
    write_trace_table(dataset, "own-clock", "kernels", {
        "run": ["own-clock"], "rank": [0], "device": [0], "stream": [7], "name": ["gemm"], "category": ["compute"],
        "kind": ["kernel"], "start_ns": [1000], "end_ns": [2000], "dur_ns": [1000]})
    connection = open_dataset(dataset, analyses_on_demand=True)
    export_perfetto(connection, "own-clock", tmp_path / "own.json.gz")
    trace = _load(tmp_path / "own.json.gz")
    assert [e for e in trace["traceEvents"] if e["ph"] == "C"] == []
    assert trace["otherData"]["gpu_matching"][0]["unmatched_reason"].startswith("trace times are not on the epoch")
