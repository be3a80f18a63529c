"""The ingest orchestrator: formats, bad input, layout, idempotence, parallelism."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpulens.collector.errors import DatasetError, TraceError
from gpulens.collector.ingest import FORMAT_MODULES, UNKNOWN_FORMAT, detect_format, format_modules, ingest_paths, source_id
from gpulens.collector.ingest.results import FileResult, SharedRank, rank_ranges
from gpulens.collector.ingest.sources import common_stem
from gpulens.collector.ingest.store import STAGING_DIR

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "kineto"
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason="shared real traces not present")


def kineto_json(rank: int | None = 0, kernels: int = 2) -> str:
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.5, "dur": 3.0,
               "args": {"External id": 1}}]
    events += [{"ph": "X", "cat": "kernel", "name": f"gemm_{i}", "pid": 0, "tid": 7, "ts": 20.0 + i, "dur": 0.5,
                "args": {"device": 0, "stream": 7, "correlation": 100 + i, "External id": 1}} for i in range(kernels)]
    trace: dict = {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000}
    if rank is not None:
        trace["distributedInfo"] = {"rank": rank, "world_size": 4, "backend": "nccl"}
    return json.dumps(trace)


def write(path: Path, text: str, compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def dataset_files(out: Path) -> list[Path]:
    return sorted(p for p in (out / "traces").rglob("*.parquet"))


def rows_in(out: Path, table: str) -> list[dict]:
    return [row for path in sorted((out / "traces").glob(f"run=*/{table}/*.parquet")) for row in pq.read_table(path).to_pylist()]


# --- formats ------------------------------------------------------------------------------


def test_detect_format_kineto_gzip_by_content(tmp_path: Path) -> None:
    assert detect_format(write(tmp_path / "trace.bin", kineto_json(), compress=True)) == "kineto"


def test_detect_format_nsys_sqlite(tmp_path: Path) -> None:
    pytest.importorskip("gpulens.collector.ingest.nsys")
    path = tmp_path / "report.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("create table CUPTI_ACTIVITY_KIND_KERNEL (start integer, end integer)")
    connection.close()
    assert detect_format(path) == "nsys"


def test_detect_format_rocprof_csv(tmp_path: Path) -> None:
    pytest.importorskip("gpulens.collector.ingest.rocprof")
    header = "Kind,Agent_Id,Queue_Id,Kernel_Id,Kernel_Name,Correlation_Id,Start_Timestamp,End_Timestamp\n"
    assert detect_format(write(tmp_path / "kernel_trace.csv", header)) == "rocprof"


def test_detect_format_nccl_log(tmp_path: Path) -> None:
    pytest.importorskip("gpulens.collector.ingest.nccl_log")
    line = "node01:2201:2201 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    assert detect_format(write(tmp_path / "slurm-42.out", line)) == "nccl_log"


def test_detect_format_imports_only_the_formats_it_tries(tmp_path: Path) -> None:
    # A fresh interpreter, so modules other tests imported do not count.
    path = write(tmp_path / "trace.json", kineto_json())
    code = ("import sys; from gpulens.collector.ingest.formats import detect_format; "
            f"print(detect_format({str(path)!r}), sorted(m for m in sys.modules if m.startswith('gpulens.collector.ingest.')"
            " and m.rsplit('.', 1)[1] in ('nsys', 'rocprof', 'nccl_log')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["kineto", "[]"]


def test_each_format_module_is_named_after_its_format() -> None:
    # module_for() finds a parser by this name alone.
    assert [module.FORMAT for module in format_modules()] == list(FORMAT_MODULES)


def test_detect_format_unknown_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "notes.json", '{"hello": "world"}')
    with pytest.raises(TraceError) as error:
        detect_format(path)
    assert str(error.value) == f"{path}: {UNKNOWN_FORMAT}"


def test_detect_format_empty_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="empty file"):
        detect_format(write(tmp_path / "empty.json", ""))


# --- bad input: one line each, the rest still ingested, nothing half-written ---------------

BAD_INPUTS = {
    "truncated.json.gz": (lambda: gzip.compress(kineto_json(kernels=2000).encode())[:4000], "truncated or corrupt gzip"),
    "invalid.json": (lambda: (kineto_json()[:-40] + "}}}").encode(), "invalid JSON"),
    "empty.json": (lambda: b"", "empty file"),
    "unknown.json": (lambda: b'{"some": "other json"}', UNKNOWN_FORMAT),
    "cpu_only.json": (lambda: kineto_json(kernels=0).encode(), "no GPU events (kernels, memcpy or memset)"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_ingest_bad_input_fails_with_one_line_naming_the_file(tmp_path: Path, name: str) -> None:
    content, problem = BAD_INPUTS[name]
    bad = tmp_path / "in" / name
    bad.parent.mkdir()
    bad.write_bytes(content())
    report = ingest_paths([bad], tmp_path / "out", jobs=1)
    lines = [str(f) for f in report.failures]
    assert (len(lines), lines[0].startswith(f"{bad}: {problem}"), "\n" in lines[0]) == (1, True, False)


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_ingest_bad_input_leaves_other_files_ingested_and_nothing_half_written(tmp_path: Path, name: str) -> None:
    content, _ = BAD_INPUTS[name]
    good = write(tmp_path / "in" / "good_rank0.json", kineto_json(rank=0))
    bad = tmp_path / "in" / name
    bad.write_bytes(content())
    out = tmp_path / "out"
    report = ingest_paths([good, bad], out, run="r", jobs=1)
    produced = {p.stem for p in dataset_files(out)}
    assert (len(report.results), produced, list((out / STAGING_DIR).iterdir())) == (1, {source_id(good)}, [])


def test_ingest_failure_keeps_the_earlier_ingest_of_that_file(tmp_path: Path) -> None:
    trace = write(tmp_path / "in" / "t.json", kineto_json(kernels=3))
    out = tmp_path / "out"
    ingest_paths([trace], out, run="r", jobs=1)
    trace.write_text(kineto_json()[:-10])  # the file is now broken
    report = ingest_paths([trace], out, run="r", jobs=1)
    assert (len(report.failures), len(rows_in(out, "kernels"))) == (1, 3)


def test_ingest_missing_path_is_a_failure(tmp_path: Path) -> None:
    report = ingest_paths([tmp_path / "nope.json"], tmp_path / "out")
    assert [str(f) for f in report.failures] == [f"{tmp_path / 'nope.json'}: no such file or directory"]


# --- layout and idempotence ----------------------------------------------------------------


def test_ingest_layout_run_table_source_id(tmp_path: Path) -> None:
    trace = write(tmp_path / "in" / "t.json", kineto_json())
    out = tmp_path / "out"
    ingest_paths([trace], out, run="exp/1", jobs=1)
    assert [p.relative_to(out).as_posix() for p in dataset_files(out)] == [
        f"traces/run=exp_1/{table}/{source_id(trace)}.parquet" for table in ("cpu_ops", "gpu_phases", "kernel_names", "kernels", "rank_summary", "runs")]


def test_ingest_warns_where_the_run_name_had_to_change(tmp_path: Path) -> None:
    trace = write(tmp_path / "in" / "t.json", kineto_json())
    report = ingest_paths([trace], tmp_path / "out", run="exp/1", jobs=1)
    assert report.notices()[-1] == (logging.WARNING, "run name 'exp/1' is stored as 'exp_1' (a run name is one "
                                    "folder's name: no slashes, control characters, leading dots or surrounding spaces)")


def test_ingest_of_a_plain_run_name_warns_of_nothing(tmp_path: Path) -> None:
    trace = write(tmp_path / "in" / "t.json", kineto_json())
    assert ingest_paths([trace], tmp_path / "out", run="exp-1.a", jobs=1).run_renamed is None


def test_ingest_stores_run_and_rank_columns(tmp_path: Path) -> None:
    trace = write(tmp_path / "in" / "t.json", kineto_json(rank=2))
    ingest_paths([trace], tmp_path / "out", run="exp", jobs=1)
    assert {(r["run"], r["rank"]) for r in rows_in(tmp_path / "out", "kernels")} == {("exp", 2)}


def test_ingest_writes_zstd(tmp_path: Path) -> None:
    trace = write(tmp_path / "in" / "t.json", kineto_json())
    ingest_paths([trace], tmp_path / "out", run="r", jobs=1)
    metadata = pq.ParquetFile(dataset_files(tmp_path / "out")[0]).metadata
    assert metadata.row_group(0).column(0).compression == "ZSTD"


def test_ingest_same_file_twice_is_idempotent(tmp_path: Path) -> None:
    trace = write(tmp_path / "in" / "t.json", kineto_json(kernels=5))
    out = tmp_path / "out"
    ingest_paths([trace], out, run="r", jobs=1)
    ingest_paths([trace], out, run="r", jobs=1)
    assert (len(rows_in(out, "kernels")), len(rows_in(out, "runs")), len(dataset_files(out))) == (5, 1, 6)


def test_ingesting_a_file_again_leaves_nothing_staged(tmp_path: Path) -> None:
    # The files it replaces are moved aside into the staging folder first;
    # they go with it once the new ones are in place.
    trace = write(tmp_path / "in" / "t.json", kineto_json(kernels=5))
    out = tmp_path / "out"
    ingest_paths([trace], out, run="r", jobs=1)
    ingest_paths([trace], out, run="r", jobs=1)
    assert list((out / STAGING_DIR).iterdir()) == []


def test_ingest_changed_file_replaces_its_rows(tmp_path: Path) -> None:
    trace = write(tmp_path / "in" / "t.json", kineto_json(kernels=5))
    out = tmp_path / "out"
    ingest_paths([trace], out, run="r", jobs=1)
    trace.write_text(kineto_json(kernels=2))
    ingest_paths([trace], out, run="r", jobs=1)
    assert len(rows_in(out, "kernels")) == 2


def _kernel(name: str, **fields) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "args": {"device": 0, "stream": 7}, **fields}


def test_ingest_warns_of_kernels_that_end_before_they_start(tmp_path: Path) -> None:
    events = [_kernel("a", ts=100, dur=-50), _kernel("b", ts=120, dur=-1), _kernel("c", ts=200, dur=5)]
    trace = write(tmp_path / "t.json", json.dumps({"traceEvents": events}))
    result = ingest_paths([trace], tmp_path / "out", jobs=1).results[0]
    assert result.warnings == ("2 GPU activities end before they start (kernels, negative duration), kept as read: "
                               "the trace's clock or the profiler that wrote it is off",)
    assert sorted(row["dur_ns"] for row in rows_in(tmp_path / "out", "kernels")) == [-50_000, -1_000, 5_000]


def test_ingest_warns_of_kernels_without_a_start_time(tmp_path: Path) -> None:
    events = [_kernel("a", dur=5), _kernel("c", ts=200, dur=5)]
    trace = write(tmp_path / "t.json", json.dumps({"traceEvents": events}))
    result = ingest_paths([trace], tmp_path / "out", jobs=1).results[0]
    assert result.warnings == ("1 GPU activity has no start time (kernels: ts missing or not a number), kept but "
                               "left out of every timeline",)


def test_ingest_of_well_timed_events_warns_of_nothing(tmp_path: Path) -> None:
    trace = write(tmp_path / "t.json", kineto_json(kernels=3))
    assert ingest_paths([trace], tmp_path / "out", jobs=1).results[0].warnings == ()


def test_ingest_same_file_under_new_run_moves_it(tmp_path: Path) -> None:
    trace = write(tmp_path / "in" / "t.json", kineto_json())
    out = tmp_path / "out"
    ingest_paths([trace], out, run="old", jobs=1)
    ingest_paths([trace], out, run="new", jobs=1)
    assert {r["run"] for r in rows_in(out, "kernels")} == {"new"}


def test_ingest_same_file_under_new_run_says_it_moved(tmp_path: Path) -> None:
    trace = write(tmp_path / "in" / "t.json", kineto_json())
    out = tmp_path / "out"
    ingest_paths([trace], out, run="old", jobs=1)
    report = ingest_paths([trace], out, run="new", jobs=1)
    assert report.moved == [(str(trace), ("old",), "new")]
    assert (logging.WARNING, f"{trace}: moved from run old to run new (a trace file belongs to one run; "
                             "to keep it in both, ingest a copy of it)") in report.notices()


def test_ingest_same_file_into_its_own_run_moves_nothing(tmp_path: Path) -> None:
    trace = write(tmp_path / "in" / "t.json", kineto_json())
    out = tmp_path / "out"
    ingest_paths([trace], out, run="r", jobs=1)
    assert ingest_paths([trace], out, run="r", jobs=1).moved == []


# --- runs of many ranks ----------------------------------------------------------------------


def test_ingest_directory_is_one_run_with_its_ranks(tmp_path: Path) -> None:
    folder = tmp_path / "job42"
    for rank in range(3):
        write(folder / f"worker{rank}.pt.trace.json", kineto_json(rank=rank))
    write(folder / "README.md", "not a trace")
    report = ingest_paths([folder], tmp_path / "out", jobs=1)
    assert (report.runs, sorted(r.rank for r in report.results), report.failures) == (["job42"], [0, 1, 2], [])


def test_ingest_directory_skips_non_traces_and_hidden_files(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    write(folder / "rank0.json", kineto_json(rank=0))
    write(folder / "stats.csv", "a,b\n1,2\n")
    write(folder / ".partial.json", kineto_json(rank=1))
    report = ingest_paths([folder], tmp_path / "out", jobs=1)
    assert ([Path(r.path).name for r in report.results], [Path(s.path).name for s in report.skipped], report.failures) == (
        ["rank0.json"], ["stats.csv"], [])


def test_ingest_directory_skips_its_own_output(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    write(folder / "rank0.json", kineto_json(rank=0))
    ingest_paths([folder], folder / "gpulens-data", jobs=1)
    write(folder / "gpulens-data" / "stray.json", kineto_json(rank=9))
    report = ingest_paths([folder], folder / "gpulens-data", jobs=1)
    assert [Path(r.path).name for r in report.results] == ["rank0.json"]


def test_ingest_glob_run_named_by_common_stem(tmp_path: Path) -> None:
    for rank in range(2):
        write(tmp_path / f"llama_rank{rank}.json", kineto_json(rank=rank))
    report = ingest_paths([str(tmp_path / "llama_rank*.json")], tmp_path / "out", jobs=1)
    assert report.runs == ["llama"]


def test_ingest_glob_of_folders_takes_the_traces_in_them(tmp_path: Path) -> None:
    for node, rank in (("node1", 0), ("node2", 1)):
        write(tmp_path / "job a" / node / f"rank{rank}.json", kineto_json(rank=rank))
    report = ingest_paths([str(tmp_path / "job a" / "node*")], tmp_path / "out", jobs=1)
    assert (report.failures, sorted(r.rank for r in report.results)) == ([], [0, 1])


def test_ingest_recursive_glob_run_named_after_the_folder_holding_the_files(tmp_path: Path) -> None:
    for node, rank in (("node1", 0), ("node2", 1)):
        write(tmp_path / "job a" / node / f"rank{rank}.json", kineto_json(rank=rank))
    report = ingest_paths([str(tmp_path / "job a" / "**" / "rank*.json")], tmp_path / "out", jobs=1)
    assert report.runs == ["job a"]


def test_common_stem_is_empty_when_names_share_only_part_of_a_word() -> None:
    assert common_stem([Path("base.json"), Path("big_mini.json")]) == ""


def test_ingest_same_file_by_name_and_through_a_link_is_one_file(tmp_path: Path) -> None:
    trace = write(tmp_path / "t.json", kineto_json(kernels=3))
    (tmp_path / "link.json").symlink_to(trace)
    report = ingest_paths([trace, tmp_path / "link.json"], tmp_path / "out", jobs=1)
    assert (len(report.results), len(rows_in(tmp_path / "out", "kernels"))) == (1, 3)


def test_ingest_into_an_unwritable_dataset_fails_once_before_parsing(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    trace = write(tmp_path / "t.json", kineto_json())
    with pytest.raises(DatasetError, match=re.escape(f"{tmp_path / 'afile' / 'ds'}: cannot write the dataset there")):
        ingest_paths([trace], tmp_path / "afile" / "ds", jobs=1)


def test_ingest_that_cannot_move_every_table_into_place_keeps_the_earlier_ingest_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = write(tmp_path / "t.json", kineto_json(kernels=3))
    out = tmp_path / "out"
    ingest_paths([trace], out, run="r", jobs=1)
    before = {p: p.read_bytes() for p in dataset_files(out)}
    trace.write_text(kineto_json(kernels=5))
    real_replace, failed = os.replace, []

    def replace_failing_on_the_runs_table(src, dst):
        # The new runs file cannot be moved in (once: putting back the old one works).
        if Path(src).name == "runs.parquet" and not failed:
            failed.append(dst)
            raise PermissionError(13, "Permission denied", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_failing_on_the_runs_table)
    report = ingest_paths([trace], out, run="r", jobs=1)
    assert report.failures[0].problem.endswith("runs/" + dataset_files(out)[-1].name + ": cannot write: Permission denied")
    assert {p: p.read_bytes() for p in dataset_files(out)} == before


def test_ingest_files_of_one_call_form_one_run(tmp_path: Path) -> None:
    first = write(tmp_path / "a" / "job7_rank0.json", kineto_json(rank=0))
    second = write(tmp_path / "b" / "job7_rank1.json", kineto_json(rank=1))
    report = ingest_paths([first, second], tmp_path / "out", jobs=1)
    assert (report.runs, sorted(r.rank for r in report.results)) == (["job7"], [0, 1])


def test_ingest_reports_a_rank_that_two_files_claim(tmp_path: Path) -> None:
    # Two jobs' rank-0 traces in one call: analyses would merge them as one rank.
    first = write(tmp_path / "job1" / "rank0.json", kineto_json(rank=0))
    second = write(tmp_path / "job2" / "rank0.json", kineto_json(rank=0))
    third = write(tmp_path / "job2" / "rank1.json", kineto_json(rank=1))
    report = ingest_paths([first, second, third], tmp_path / "out", run="mixed", jobs=1)
    assert report.shared_ranks == [SharedRank("mixed", "kineto", 0, (str(first), str(second)))]


def test_ingest_reports_a_rank_an_earlier_ingest_of_the_run_claimed(tmp_path: Path) -> None:
    first = write(tmp_path / "job1" / "rank0.json", kineto_json(rank=0))
    second = write(tmp_path / "job2" / "rank0.json", kineto_json(rank=0))
    ingest_paths([first], tmp_path / "out", run="mixed", jobs=1)
    report = ingest_paths([second], tmp_path / "out", run="mixed", jobs=1)
    assert report.shared_ranks == [SharedRank("mixed", "kineto", 0, tuple(sorted((str(second), str(first.resolve())))))]


def test_ingest_of_the_same_file_again_reports_no_shared_rank(tmp_path: Path) -> None:
    trace = write(tmp_path / "rank0.json", kineto_json(rank=0))
    ingest_paths([trace], tmp_path / "out", run="r", jobs=1)
    assert ingest_paths([trace], tmp_path / "out", run="r", jobs=1).shared_ranks == []


def test_ingest_of_distinct_ranks_reports_no_shared_rank(tmp_path: Path) -> None:
    for rank in range(3):
        write(tmp_path / "job" / f"rank{rank}.json", kineto_json(rank=rank))
    assert ingest_paths([tmp_path / "job"], tmp_path / "out", jobs=1).shared_ranks == []


def test_ingest_command_warns_of_a_shared_rank_and_succeeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpulens.dashboard import cli

    # Traces without distributedInfo all default to rank 0.
    files = [write(tmp_path / name, kineto_json(rank=None)) for name in ("train.json", "eval.json")]
    code = cli.main(["ingest", *map(str, files), "--out", str(tmp_path / "out"), "--run", "r"])
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gpulens: warning:")]
    assert (code, warnings) == (0, [
        f"gpulens: warning: run r: rank 0 comes from 2 kineto files ({tmp_path / 'eval.json'}, {tmp_path / 'train.json'}); "
        "analyses merge them as one rank (ingest separate jobs with their own --run; where the traces do not say "
        "their rank, put it in each file's or folder's name: rank3/...)"])


@pytest.mark.parametrize(("ranks", "text"), [
    ([3], "3"),
    ([0, 1, 2, 3], "0-3"),
    ([0, 1, 2, 3, 5, 7, 8], "0-3, 5, 7-8"),
    ([2, 4, 6], "2, 4, 6"),
])
def test_rank_ranges_groups_consecutive_ranks(ranks: list[int], text: str) -> None:
    assert rank_ranges(ranks) == text


def test_ingest_command_ends_with_a_summary_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpulens.dashboard import cli

    for rank in range(3):
        write(tmp_path / "job" / f"rank{rank}.json", kineto_json(rank=rank, kernels=2))
    write(tmp_path / "job" / "notes.txt", "not a trace")
    out = tmp_path / "out"
    code = cli.main(["ingest", str(tmp_path / "job"), "--out", str(out)])
    last = capsys.readouterr().err.splitlines()[-1]
    # 3 events a file: one CPU op and two kernels.
    assert (code, re.sub(r"in [\d.]+ s \([\d,]+ events/s\)", "in T", last)) == (
        0, f"gpulens: ingested 3 files into run job (ranks 0-2): 9 events in T; 1 other file skipped (not traces); dataset {out}")


def _ingest_two_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    from gpulens.dashboard import cli

    for rank in range(2):
        write(tmp_path / "job" / f"rank{rank}.json", kineto_json(rank=rank, kernels=2))
    assert cli.main(["ingest", str(tmp_path / "job"), "--out", str(tmp_path / "out")]) == 0
    return capsys.readouterr().err.splitlines()


def test_ingest_says_when_a_large_kineto_ingest_lacked_the_compiled_scanner(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.collector.ingest import kineto_native

    monkeypatch.setattr(kineto_native, "_SCANNER", None)
    monkeypatch.setattr(kineto_native, "_NOT_BUILT", True)  # no compiler at install
    monkeypatch.setattr(kineto_native, "HINT_EVENTS", 6)  # these two files' events
    assert _ingest_two_ranks(tmp_path, capsys)[-1] == f"gpulens: note: {kineto_native.NOT_BUILT_HINT}"


def test_ingest_says_nothing_of_a_scanner_turned_off_on_purpose(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.collector.ingest import kineto_native

    monkeypatch.setattr(kineto_native, "_SCANNER", None)  # GPULENS_PURE_PYTHON=1
    monkeypatch.setattr(kineto_native, "_NOT_BUILT", False)
    monkeypatch.setattr(kineto_native, "HINT_EVENTS", 6)
    assert _ingest_two_ranks(tmp_path, capsys)[-1].startswith("gpulens: ingested 2 files")


def test_ingest_says_nothing_of_the_scanner_below_a_million_events(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.collector.ingest import kineto_native

    monkeypatch.setattr(kineto_native, "_SCANNER", None)
    monkeypatch.setattr(kineto_native, "_NOT_BUILT", True)
    assert _ingest_two_ranks(tmp_path, capsys)[-1].startswith("gpulens: ingested 2 files")


def test_ingest_command_quiet_prints_only_problems_and_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpulens.dashboard import cli

    for rank in range(2):
        write(tmp_path / "job" / f"rank{rank}.json", kineto_json(rank=rank, kernels=2))
    write(tmp_path / "job" / "rank2.json", '{"traceEvents": [{"ph": "X"')
    out = tmp_path / "out"
    code = cli.main(["ingest", str(tmp_path / "job"), "--out", str(out), "--quiet"])
    lines = [re.sub(r"in [\d.]+ s \([\d,]+ events/s\)", "in T", line) for line in capsys.readouterr().err.splitlines()]
    assert (code, lines) == (1, [
        f"gpulens: error: {tmp_path / 'job' / 'rank2.json'}: invalid JSON: Input data was truncated",
        f"gpulens: ingested 2 files into run job (ranks 0-1): 6 events in T; dataset {out}",
        "gpulens: error: 1 of 3 files could not be ingested",
    ])


def test_ingest_command_of_one_bad_file_prints_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpulens.dashboard import cli

    bad = write(tmp_path / "rank0.json", '{"traceEvents": [{"ph": "X"')
    code = cli.main(["ingest", str(bad), "--out", str(tmp_path / "out")])
    assert (code, capsys.readouterr().err.splitlines()) == (1, [
        f"gpulens: error: {bad}: invalid JSON: Input data was truncated"])


def test_ingest_of_nothing_readable_leaves_no_empty_dataset(tmp_path: Path) -> None:
    bad = write(tmp_path / "notes.json", '{"x": 1}')
    report = ingest_paths([bad], tmp_path / "out", jobs=1)
    assert (len(report.failures), (tmp_path / "out").exists()) == (1, False)


def test_ingest_of_nothing_readable_into_a_dataset_keeps_the_dataset(tmp_path: Path) -> None:
    out = tmp_path / "out"
    ingest_paths([write(tmp_path / "t.json", kineto_json())], out, jobs=1)
    ingest_paths([write(tmp_path / "notes.json", '{"x": 1}')], out, jobs=1)
    assert len(rows_in(out, "kernels")) == 2


def test_ingest_failure_message_is_file_then_problem(tmp_path: Path) -> None:
    report = ingest_paths([tmp_path / "gone.json"], tmp_path / "out")
    assert report.failures[0].message == f"{tmp_path / 'gone.json'}: no such file or directory"


ROCPROF_KERNELS = (
    '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name","Correlation_Id",'
    '"Start_Timestamp","End_Timestamp","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X",'
    '"Grid_Size_Y","Grid_Size_Z"\n'
    '"KERNEL_DISPATCH","GPU 0",1,0,{pid},1,57,"Cijk_Alik_Bljk_HHS_BH_MT128x128x32",3,1552000000300000,1552000000312000,'
    '256,1,1,131072,1,1\n'
)
ROCPROF_HIP = (
    '"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"\n'
    '"HIP_RUNTIME_API","hipLaunchKernel",{pid},{pid},3,1552000000290000,1552000000295000\n'
)


def test_ingest_rocprof_files_of_one_process_are_one_source_with_kernels_linked_to_their_launches(tmp_path: Path) -> None:
    for pid in (4242, 4243):
        write(tmp_path / "job" / f"rank{pid - 4242}" / f"{pid}_kernel_trace.csv", ROCPROF_KERNELS.format(pid=pid))
        write(tmp_path / "job" / f"rank{pid - 4242}" / f"{pid}_hip_api_trace.csv", ROCPROF_HIP.format(pid=pid))
    report = ingest_paths([tmp_path / "job"], tmp_path / "out", jobs=1)
    kernels = rows_in(tmp_path / "out", "kernels")
    assert [(r.path, r.rank) for r in report.results] == [
        (str((tmp_path / "job" / "rank0").resolve() / "4242_*"), 0), (str((tmp_path / "job" / "rank1").resolve() / "4243_*"), 1)]
    assert sorted((k["rank"], k["launch_call_name"], k["launch_delay_ns"]) for k in kernels) == [
        (0, "hipLaunchKernel", 5_000), (1, "hipLaunchKernel", 5_000)]


def test_ingest_of_a_log_with_a_process_of_unknown_rank_reports_the_known_ranks(tmp_path: Path) -> None:
    # The second process has no init line: its rank is unknown (NULL).
    log = write(tmp_path / "job.log", """\
node01:1001:1001 [0] NCCL INFO ncclCommInitRank comm 0x55d0a1b2c1d0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1a000 commId 0x7d1e2f3a4b5c6d7e - Init COMPLETE
node01:1001:1001 [0] NCCL INFO AllReduce: opCount 5 sendbuff 0x7f3a10000000 recvbuff 0x7f3a18000000 count 1000 datatype 7 op 0 root 0 comm 0x55d0a1b2c1d0 [nranks=2] stream 0x55d0a1b31000
node01:1002:1002 [1] NCCL INFO AllReduce: opCount 5 sendbuff 0x7f3a10000000 recvbuff 0x7f3a18000000 count 1000 datatype 7 op 0 root 0 comm 0x55d0a1b2c1ff [nranks=2] stream 0x55d0a1b31000
""")
    report = ingest_paths([log], tmp_path / "out", jobs=1)
    assert (report.failures, [r.ranks for r in report.results]) == ([], [(0,)])


def test_file_line_names_a_multi_rank_files_ranks_and_collectives() -> None:
    result = FileResult("job.log", "nccl_log", "job", (0, 1, 2, 3), {"collectives": 40}, 400, 0.1)
    assert result.line == "job.log: nccl_log, run job, ranks 0-3, 0 kernels, 40 collectives"


def test_file_line_counts_allocator_events_where_the_trace_has_them() -> None:
    result = FileResult("rank0.json", "kineto", "job", (0,), {"kernels": 9, "memory_events": 28010}, 400, 0.1)
    assert result.line == "rank0.json: kineto, run job, rank 0, 9 kernels, 28010 memory events"


def test_common_stem_strips_rank_suffix() -> None:
    assert common_stem([Path("sampled_128rank_rank0.json.gz"), Path("sampled_128rank_rank1.json.gz")]) == "sampled_128rank"


def set_parallel_min(monkeypatch: pytest.MonkeyPatch, content_bytes: int) -> None:
    """Set PARALLEL_MIN_CONTENT_BYTES, which the split plan and the pool both read."""
    from gpulens.collector.ingest import plan

    monkeypatch.setattr(plan, "PARALLEL_MIN_CONTENT_BYTES", content_bytes)


@pytest.fixture
def pool_for_small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parallel ingest even of the small files these tests write."""
    set_parallel_min(monkeypatch, 0)


class _CountingPool:
    """Records the worker count of each process pool ingest starts (`pool._run`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import concurrent.futures
        from concurrent.futures import ProcessPoolExecutor

        self.sizes: list[int] = []
        sizes = self.sizes

        class Pool(ProcessPoolExecutor):
            def __init__(self, max_workers: int, **kwargs) -> None:
                sizes.append(max_workers)
                super().__init__(max_workers=max_workers, **kwargs)

        # `pool` imports the pool class from here when it starts one.
        monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Pool)


def test_ingest_parses_small_inputs_in_this_process_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pools = _CountingPool(monkeypatch)
    for rank in range(4):
        write(tmp_path / "in" / f"rank{rank}.json", kineto_json(rank=rank, kernels=rank + 1))
    report = ingest_paths([tmp_path / "in"], tmp_path / "out", jobs=2)
    assert (pools.sizes, sorted(r.rank for r in report.results)) == ([], [0, 1, 2, 3])


def test_ingest_starts_workers_once_the_traces_reach_the_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pools = _CountingPool(monkeypatch)
    files = [write(tmp_path / "in" / f"rank{rank}.json", kineto_json(rank=rank)) for rank in range(2)]
    set_parallel_min(monkeypatch, sum(f.stat().st_size for f in files))
    ingest_paths([tmp_path / "in"], tmp_path / "out", jobs=2)
    assert pools.sizes == [1]


def test_ingest_counts_a_gzip_file_at_its_decompressed_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pools = _CountingPool(monkeypatch)
    text = kineto_json(rank=0)
    files = [write(tmp_path / "in" / "rank0.json", text), tmp_path / "in" / "rank1.json.gz"]
    files[1].write_bytes(gzip.compress(kineto_json(rank=1).encode()))
    set_parallel_min(monkeypatch, len(text.encode()) + len(kineto_json(rank=1).encode()))
    ingest_paths([tmp_path / "in"], tmp_path / "out", jobs=2)
    assert pools.sizes == [1]


@pytest.mark.usefixtures("pool_for_small_files")
def test_ingest_parallel_same_rows_as_serial(tmp_path: Path) -> None:
    for rank in range(4):
        write(tmp_path / "in" / f"rank{rank}.json", kineto_json(rank=rank, kernels=rank + 1))
    serial = ingest_paths([tmp_path / "in"], tmp_path / "serial", jobs=1)
    parallel = ingest_paths([tmp_path / "in"], tmp_path / "parallel", jobs=2)
    key = lambda rows: sorted((r["rank"], r["name"], r["start_ns"]) for r in rows)  # noqa: E731
    assert ([r.rows for r in serial.results], key(rows_in(tmp_path / "serial", "kernels"))) == (
        [r.rows for r in parallel.results], key(rows_in(tmp_path / "parallel", "kernels")))


@pytest.mark.usefixtures("pool_for_small_files")
def test_ingest_parallel_reports_every_file_once_with_this_process_working_beside_the_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pools = _CountingPool(monkeypatch)
    for rank in range(7):
        write(tmp_path / "in" / f"rank{rank}.json", kineto_json(rank=rank, kernels=rank + 1))
    write(tmp_path / "in" / "rank7.json", kineto_json(rank=7)[:-40])  # cut short: invalid JSON
    report = ingest_paths([tmp_path / "in"], tmp_path / "out", jobs=3)
    assert pools.sizes == [2]  # three files at a time: two workers and this process
    assert sorted(r.ranks[0] for r in report.results) == list(range(7))
    assert [Path(f.path).name for f in report.failures] == ["rank7.json"]
    assert sorted(r["rank"] for r in rows_in(tmp_path / "out", "runs")) == list(range(7))


@pytest.mark.usefixtures("pool_for_small_files")
def test_ingest_parallel_this_process_parses_the_largest_file_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from gpulens.collector.ingest import batch

    parent, real_ingest_file, mine = os.getpid(), batch.ingest_file, []

    def recording(path, *args, **kwargs):
        if os.getpid() == parent:
            mine.append(Path(path).name)
        return real_ingest_file(path, *args, **kwargs)

    monkeypatch.setattr(batch, "ingest_file", recording)
    for rank in range(4):
        write(tmp_path / "in" / f"rank{rank}.json", kineto_json(rank=rank, kernels=30 if rank == 2 else 2))
    ingest_paths([tmp_path / "in"], tmp_path / "out", jobs=2)
    assert mine[0] == "rank2.json"


@pytest.mark.usefixtures("pool_for_small_files")
def test_ingest_parallel_workers_exit_once_no_file_is_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing
    import os
    import time

    from gpulens.collector.ingest import batch

    parent, real_ingest_file, workers_alive = os.getpid(), batch.ingest_file, []

    def waits_for_the_workers(path, *args, **kwargs):
        # This process's file (the largest) outlasts the worker's: the
        # worker should be gone before it ends, not at the end of the run.
        if os.getpid() == parent:
            deadline = time.monotonic() + 20
            while multiprocessing.active_children() and time.monotonic() < deadline:
                time.sleep(0.01)
            workers_alive.append(len(multiprocessing.active_children()))
        return real_ingest_file(path, *args, **kwargs)

    monkeypatch.setattr(batch, "ingest_file", waits_for_the_workers)
    write(tmp_path / "in" / "rank0.json", kineto_json(rank=0, kernels=30))
    write(tmp_path / "in" / "rank1.json", kineto_json(rank=1))
    report = ingest_paths([tmp_path / "in"], tmp_path / "out", jobs=2)
    assert (workers_alive, sorted(r.rank for r in report.results)) == ([0], [0, 1])


@pytest.mark.usefixtures("pool_for_small_files")
def test_ingest_parallel_fails_only_the_file_a_worker_died_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import signal

    from gpulens.collector.ingest import batch

    parent, real_ingest_file = os.getpid(), batch.ingest_file

    def dies_on_rank3_in_a_worker(path, *args, **kwargs):
        if os.getpid() != parent and path.endswith("rank3.json"):
            os.kill(os.getpid(), signal.SIGKILL)  # as a crash in a parser would
        return real_ingest_file(path, *args, **kwargs)

    monkeypatch.setattr(batch, "ingest_file", dies_on_rank3_in_a_worker)
    # This process takes the largest file (rank0), the worker the next (rank3).
    for rank in range(6):
        write(tmp_path / "in" / f"rank{rank}.json", kineto_json(rank=rank, kernels={0: 60, 3: 40}.get(rank, 2)))
    report = ingest_paths([tmp_path / "in"], tmp_path / "out", jobs=2)
    # Only the file the worker died on fails: this process parses the rest.
    assert [(Path(f.path).name, "worker failed: BrokenProcessPool" in f.message) for f in report.failures] == [
        ("rank3.json", True)]
    assert sorted(Path(r.path).name for r in report.results) == [f"rank{rank}.json" for rank in (0, 1, 2, 4, 5)]


# --- one big Kineto file read by several processes --------------------------------------


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> list:
    """Split files of these tests' size, into parts of several batches;
    the plans `ingest_paths` made."""
    from gpulens.collector.ingest import batch, kineto_stream, plan

    set_parallel_min(monkeypatch, 0)
    monkeypatch.setattr(plan, "SPLIT_MIN_PART_BYTES", 64 << 10)
    monkeypatch.setattr(kineto_stream, "BATCH_BYTES", 16 << 10)
    monkeypatch.setattr(plan, "usable_cpus", lambda: 64)  # --jobs decides, whatever runs the tests
    plans: list = []
    real_split = batch._split_big_files

    def recording(tasks, jobs, file_sizes=None):
        plans.append(real_split(tasks, jobs, file_sizes))
        return plans[-1]

    monkeypatch.setattr(batch, "_split_big_files", recording)  # where ingest_paths looks it up
    return plans


def all_rows(out: Path) -> dict[str, list[dict]]:
    tables = sorted({p.parent.name for p in dataset_files(out)})
    return {t: [{k: v for k, v in r.items() if k != "ingested_at"} for r in rows_in(out, t)] for t in tables}


def test_ingest_reads_a_big_kineto_file_in_parts_with_the_rows_of_one_process(tmp_path: Path, small_parts: list) -> None:
    trace = write(tmp_path / "in" / "rank0.json.gz", kineto_json(rank=0, kernels=4000), compress=True)
    ingest_paths([trace], tmp_path / "one", jobs=1)
    report = ingest_paths([trace], tmp_path / "parts", jobs=4)
    assert [[t.part and (t.part.index, t.part.count) for t in plan] for plan in small_parts] == [
        [None], [(0, 4), (1, 4), (2, 4), (3, 4)]]
    assert (report.ok, report.results[0].rows["kernels"]) == (True, 4000)
    assert all_rows(tmp_path / "parts") == all_rows(tmp_path / "one")
    assert list((tmp_path / "parts" / STAGING_DIR).iterdir()) == []  # the parts' spilled events are gone


def test_ingest_reads_a_split_file_whole_where_a_part_cannot_be_read_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_parts: list) -> None:
    from gpulens.collector.ingest import kineto, kineto_stream

    real_read_part = kineto.read_part

    def refuses_later_parts(path, start, end):
        if start:
            raise kineto_stream.NotStreamable
        return real_read_part(path, start, end)

    monkeypatch.setattr(kineto, "read_part", refuses_later_parts)  # the workers, forked, inherit it
    trace = write(tmp_path / "in" / "rank0.json", kineto_json(rank=0, kernels=4000))
    report = ingest_paths([trace], tmp_path / "out", jobs=2)
    assert (len(small_parts[0]), report.ok, len(rows_in(tmp_path / "out", "kernels"))) == (4, True, 4000)


def test_ingest_split_file_that_is_invalid_fails_with_the_usual_message(tmp_path: Path, small_parts: list) -> None:
    text = kineto_json(rank=0, kernels=4000)
    middle = text.index("}}, {", len(text) // 2) + 2  # between two events, mid-file
    trace = write(tmp_path / "in" / "rank0.json", text[:middle] + "#" + text[middle:])
    report = ingest_paths([trace], tmp_path / "out", jobs=2)
    assert [f.message.startswith(f"{trace}: invalid JSON") for f in report.failures] == [True]
    assert dataset_files(tmp_path / "out") == []


def test_ingest_split_file_without_gpu_events_fails_as_a_whole_one_does(tmp_path: Path, small_parts: list) -> None:
    trace = json.loads(kineto_json(rank=0, kernels=0))
    trace["traceEvents"] *= 6000  # CPU ops only
    path = write(tmp_path / "in" / "rank0.json", json.dumps(trace))
    report = ingest_paths([path], tmp_path / "out", jobs=2)
    assert (len(small_parts[0]), [f.message for f in report.failures]) == (
        4, [f"{path}: no GPU events (kernels, memcpy or memset)"])


def test_progress_counts_files_whatever_their_parts(tmp_path: Path) -> None:
    from gpulens.collector.ingest import pool, sources
    from gpulens.collector.ingest.pool import Assembly, PartOutcome

    whole = sources.Source(str(tmp_path / "rank1.json"), "r", True)
    parts = [dataclasses.replace(whole, path=str(tmp_path / "rank0.json"), part=sources.FilePart(i, 6, i, i + 1))
             for i in range(6)]
    progress = pool._Progress(pool._files_of([*parts, whole]), enabled=True)
    for task in [*parts, Assembly([PartOutcome(part, None, 0.0) for part in parts]), whole]:
        progress.advance(task)
    shown = progress._bar.tasks[0]
    assert (shown.total, shown.completed) == (2, 2.0)  # seven sevenths in floats would fall short of one file


def test_split_plan_gives_a_big_file_two_parts_a_core_that_meet(tmp_path: Path, small_parts: list) -> None:
    from gpulens.collector.ingest import plan, sources
    from gpulens.collector.ingest.buffer import content_bytes

    trace = write(tmp_path / "rank0.json", kineto_json(rank=0, kernels=8000))
    tasks = plan._split_big_files(sources.sources_of([(trace, True)], "r"), jobs=2)
    bounds = [(t.part.start, t.part.end) for t in tasks]
    assert (len(tasks), bounds[0][0], bounds[-1][1]) == (4, 0, None)
    assert all(before[1] == after[0] for before, after in zip(bounds, bounds[1:]))
    assert bounds[-1][0] == content_bytes(trace) * 3 // 4


def test_split_plan_gives_a_gzip_file_one_part_a_core(tmp_path: Path, small_parts: list) -> None:
    # Each part of a gzip file decompresses all the content before its own.
    from gpulens.collector.ingest import plan, sources

    text = kineto_json(rank=0, kernels=8000)
    plain, packed = write(tmp_path / "rank0.json", text), write(tmp_path / "rank0.json.gz", text, compress=True)
    assert [len(plan._split_big_files(sources.sources_of([(trace, True)], "r"), jobs=2)) for trace in (plain, packed)] == [
        4, 2]


def test_split_plan_cuts_one_big_file_into_at_most_four_parts_on_many_cores(tmp_path: Path, small_parts: list) -> None:
    # Past a few parts this process's own work on the file is what the
    # ingest waits for, and each more part is one more process's memory.
    from gpulens.collector.ingest import plan, sources

    trace = write(tmp_path / "rank0.json", kineto_json(rank=0, kernels=8000))
    tasks = plan._split_big_files(sources.sources_of([(trace, True)], "r"), jobs=16)
    assert [t.part.count for t in tasks] == [4] * 4


def test_split_plan_gives_no_more_parts_than_the_cores_can_take(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_parts: list) -> None:
    from gpulens.collector.ingest import plan, sources

    monkeypatch.setattr(plan, "usable_cpus", lambda: 2)
    trace = write(tmp_path / "rank0.json", kineto_json(rank=0, kernels=8000))
    tasks = plan._split_big_files(sources.sources_of([(trace, True)], "r"), jobs=8)
    assert [t.part.count for t in tasks] == [4] * 4


def test_split_plan_leaves_like_sized_ranks_whole(tmp_path: Path, small_parts: list) -> None:
    from gpulens.collector.ingest import plan, sources

    files = [(write(tmp_path / f"rank{r}.json", kineto_json(rank=r, kernels=4000)), True) for r in range(8)]
    tasks = plan._split_big_files(sources.sources_of(files, "r"), jobs=2)
    assert [t.part for t in tasks] == [None] * 8


def test_split_plan_leaves_a_rank_of_about_a_cores_share_whole(tmp_path: Path, small_parts: list) -> None:
    # Its core reads it while the other reads the other rank: cut, both
    # files would wait on their joining.
    from gpulens.collector.ingest import plan, sources

    files = [(write(tmp_path / f"rank{r}.json", kineto_json(rank=r, kernels=4000 + 100 * r)), True) for r in range(2)]
    tasks = plan._split_big_files(sources.sources_of(files, "r"), jobs=2)
    assert [t.part for t in tasks] == [None] * 2


def test_split_plan_cuts_only_the_rank_bigger_than_its_share(tmp_path: Path, small_parts: list) -> None:
    from gpulens.collector.ingest import plan, sources

    files = [(write(tmp_path / f"rank{r}.json", kineto_json(rank=r, kernels=8000 if r == 0 else 500)), True)
             for r in range(3)]
    tasks = plan._split_big_files(sources.sources_of(files, "r"), jobs=2)
    assert [(Path(t.path).name, t.part.count if t.part else 1) for t in tasks] == [
        *[("rank0.json", 4)] * 4, ("rank1.json", 1), ("rank2.json", 1)]


def test_split_plan_leaves_other_formats_whole(tmp_path: Path, small_parts: list) -> None:
    from gpulens.collector.ingest import plan, sources

    line = "node1:100:200 [0] NCCL INFO AllReduce: opCount 1f sendbuff 0x1 recvbuff 0x2 count 262144 datatype 9 op 0 root 0 comm 0xabc [nranks=8] stream 0x5\n"
    log = write(tmp_path / "nccl.log", line * 4000)
    assert [t.part for t in plan._split_big_files(sources.sources_of([(log, True)], "r"), jobs=2)] == [None]


def _halves(path: str) -> list:
    """The two parts of a 200-byte file at `path`, as the plan cuts it."""
    from gpulens.collector.ingest.sources import FilePart, Source

    return [Source(path, "r", True, part=FilePart(i, 2, i * 100, (100, None)[i])) for i in range(2)]


def test_split_file_read_in_full_is_joined_next_by_whichever_process_is_free() -> None:
    from gpulens.collector.ingest import pool
    from gpulens.collector.ingest.pool import Assembly, PartOutcome
    from gpulens.collector.ingest.sources import Source

    other = Source("rank1.json", "r", True)
    halves = _halves("rank0.json")
    queue = pool._TaskQueue([other])
    split = pool._SplitFiles([*halves, other])
    split.add(PartOutcome(halves[1], None, 0.0), queue)
    assert queue.take(1) == [other]  # half a file: nothing to join yet
    queue.put_first(other)
    split.add(PartOutcome(halves[0], None, 0.0), queue)
    [joining] = queue.take(1)
    assert (isinstance(joining, Assembly), [part.task for part in joining.parts]) == (True, [halves[1], halves[0]])


def test_a_split_file_is_joined_from_the_parts_workers_spilled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_parts: list) -> None:
    from gpulens.collector.ingest import batch, pool, sources
    from gpulens.collector.ingest.pool import Assembly

    trace = write(tmp_path / "in" / "rank0.json", kineto_json(rank=0, kernels=4000))
    ingest_paths([trace], tmp_path / "one", run="r", jobs=1)
    halves = batch._split_big_files(sources.sources_of([(trace, True)], "r"), jobs=2)
    (tmp_path / "spill").mkdir()
    monkeypatch.setattr(pool, "_SPILL_DIR", str(tmp_path / "spill"))
    parts = [pool._read_part(half, str(tmp_path / "two")) for half in halves]
    for part in parts:  # as each worker does with the part it read
        pool._spill(part)
    joining = Assembly(parts)
    assert joining.held_here is False  # so any worker may take it
    [result] = batch.ingest_task(joining, str(tmp_path / "two"))
    assert (result.rows["kernels"], list((tmp_path / "spill").iterdir())) == (4000, [])
    assert all_rows(tmp_path / "two") == all_rows(tmp_path / "one")


def test_pool_queue_keeps_the_joining_of_a_file_read_partly_here_from_workers() -> None:
    # Joined in this process, the part it read needs no moving.
    from gpulens.collector.ingest import pool
    from gpulens.collector.ingest.pool import Assembly, PartOutcome
    from gpulens.collector.ingest.sources import Source

    halves = _halves("rank0.json")
    other = Source("rank1.json", "r", True)
    joining = Assembly([PartOutcome(halves[0], object(), 0.0), PartOutcome(halves[1], None, 0.0, spilled="part-1")])
    queue = pool._TaskQueue([other])
    queue.put_first(joining)
    assert (queue.take(1, for_worker=True), queue.take(1)) == ([other], [joining])


def test_a_worker_that_dies_joining_a_split_file_fails_that_file() -> None:
    # A part's loss is not yet its file's (it is read whole instead); the
    # joining's is, as a whole file's would be.
    from gpulens.collector.ingest import pool
    from gpulens.collector.ingest.pool import Assembly, PartOutcome
    from gpulens.collector.ingest.results import FileFailure

    halves = _halves("rank0.json")
    joining = Assembly([PartOutcome(half, None, 0.0, spilled=f"part-{i}") for i, half in enumerate(halves)])
    assert pool._failed(joining, "worker failed: BrokenProcessPool") == [
        FileFailure("rank0.json", "worker failed: BrokenProcessPool")]
    assert pool._failed(halves[1], "worker failed: BrokenProcessPool") == [PartOutcome(halves[1], None, 0.0)]


def test_pool_queue_hands_a_process_waiting_to_join_a_split_file_only_parts() -> None:
    # A whole file taken while the split file's last part is read elsewhere
    # would keep its joining waiting.
    from gpulens.collector.ingest import pool
    from gpulens.collector.ingest.sources import Source

    big, small = Source("rank1.json", "r", True), Source("rank2.json", "r", True)
    halves = _halves("rank0.json")
    queue = pool._TaskQueue([big, halves[1], small])
    assert queue.take(1, parts_only=True) == [halves[1]]
    assert queue.take(1, parts_only=True) == []
    assert queue.take(2) == [big, small]


def test_pool_queue_hands_a_process_waiting_to_join_one_file_the_joining_of_another() -> None:
    # Holding parts of two split files, this process joins the one read in
    # full at once, not after the other's last part (and no worker may).
    from gpulens.collector.ingest import pool
    from gpulens.collector.ingest.pool import Assembly, PartOutcome
    from gpulens.collector.ingest.sources import Source

    halves = _halves("rank0.json")
    whole = Source("rank2.json", "r", True)
    ready_here = Assembly([PartOutcome(half, object() if i == 0 else None, 0.0, spilled=(None, "part-1")[i])
                           for i, half in enumerate(_halves("rank1.json"))])
    ready_elsewhere = Assembly([PartOutcome(half, None, 0.0, spilled=f"part-{i}")
                                for i, half in enumerate(_halves("rank3.json"))])
    queue = pool._TaskQueue([halves[1], whole])
    queue.put_first(ready_elsewhere)
    queue.put_first(ready_here)
    assert queue.take(3, parts_only=True) == [ready_here, halves[1]]
    assert queue.take(2) == [ready_elsewhere, whole]


def test_ingest_joins_several_split_files_with_the_rows_of_one_process(tmp_path: Path, small_parts: list) -> None:
    traces = [write(tmp_path / "in" / f"rank{r}.json", kineto_json(rank=r, kernels=4000)) for r in range(2)]
    ingest_paths(traces, tmp_path / "one", jobs=1)
    report = ingest_paths(traces, tmp_path / "parts", jobs=4)
    assert [len(plan) for plan in small_parts] == [2, 8]  # jobs=1: whole; jobs=4: four parts each
    assert (report.ok, sorted(r.rows["kernels"] for r in report.results)) == (True, [4000, 4000])
    assert all_rows(tmp_path / "parts") == all_rows(tmp_path / "one")


def test_ingest_report_counts_events_and_rows(tmp_path: Path) -> None:
    trace = write(tmp_path / "t.json", kineto_json(kernels=4))
    report = ingest_paths([trace], tmp_path / "out", run="r", jobs=1)
    # 1 cpu op + 4 kernels + 1 run, and derived: the GPU's 7 phase tiles
    # (4 kernels of 0.5 µs, 0.5 µs of idle between), their 4 names and the
    # rank's summary
    assert (report.events, report.rows("kernels"), report.rows("gpu_phases"), report.rows()) == (5, 4, 7, 18)


@needs_traces
def test_ingest_real_folder_one_run_several_ranks(tmp_path: Path) -> None:
    files = [TRACES / "sampled_128rank_rank0.json.gz", TRACES / "sampled_128rank_rank1.json.gz"]
    report = ingest_paths(files, tmp_path / "out", jobs=2)
    assert (report.runs, sorted(r.rank for r in report.results)) == (["sampled_128rank"], [0, 1])


def test_gpulens_ingest_loads_neither_the_report_nor_the_dashboard(tmp_path: Path) -> None:
    # The report and dashboard modules cost 0.7 s of imports, which
    # `gpulens ingest` does not need.
    import subprocess
    import sys

    trace = write(tmp_path / "t.json", kineto_json())
    program = ("import sys; from gpulens.dashboard.cli import main; code = main(sys.argv[1:]); "
               "print(sorted({m.split('.')[0] for m in sys.modules} & {'polars', 'streamlit', 'plotly'}), "
               "'gpulens.dashboard.report' in sys.modules, code)")
    result = subprocess.run([sys.executable, "-c", program, "ingest", str(trace), "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert result.stdout.strip() == "[] False 0"


def test_gpulens_ingest_writes_parquet_without_arrows_mimalloc(tmp_path: Path) -> None:
    # Arrow's C++ default pool (the Parquet writer's) is fixed when pyarrow
    # loads; mimalloc there costs 8-30 MB of RSS a process for a few writes.
    import os
    import subprocess
    import sys

    trace = write(tmp_path / "t.json", kineto_json())
    program = ("import sys; from gpulens.dashboard.cli import main; code = main(sys.argv[1:]); import pyarrow; "
               "print(code, pyarrow.mimalloc_memory_pool().max_memory())")
    env = {name: value for name, value in os.environ.items() if name != "ARROW_DEFAULT_MEMORY_POOL"}
    result = subprocess.run([sys.executable, "-c", program, "ingest", str(trace), "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120, env=env,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.stdout.strip() == "0 0"
    assert list((tmp_path / "out").rglob("*.parquet"))


def test_gpulens_ingest_ends_at_once_with_its_exit_status_and_every_line(tmp_path: Path) -> None:
    # As the process's entry point: its status, what it printed and what it
    # wrote must all be there when it ends.
    import subprocess
    import sys

    good, bad = write(tmp_path / "good.json", kineto_json()), write(tmp_path / "bad.json", "{")
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "ingest", str(good), str(bad), "--out", str(out)],
                            capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    lines = result.stderr.splitlines()
    assert (result.returncode, lines[0].split(":")[0], lines[-1]) == (
        1, str(good), "gpulens: error: 1 of 2 files could not be ingested")
    assert len(rows_in(out, "kernels")) == 2
    assert not list((out / ".staging").iterdir())


def test_the_gpulens_command_ends_with_its_objects_frozen_but_main_leaves_a_caller_collecting() -> None:
    # The command's process ends next: its objects frozen, the interpreter's
    # exit skips its full collections over them. `main`, called in a
    # process that goes on (a notebook, a test), must not freeze it.
    import subprocess
    import sys

    program = ("import gc, sys; from gpulens.dashboard.cli import entry, main; "
               "code = main(['--version']); frozen = gc.get_freeze_count(); code2 = entry(['--version']); "
               "print(code, frozen, code2, gc.get_freeze_count() > 1000)")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.stdout.splitlines()[-1] == "0 0 0 True"


def test_gpulens_ingest_under_a_profiler_ends_as_python_does(tmp_path: Path) -> None:
    # A profiler (or coverage) writes what it gathered at exit: the quick
    # exit would lose it.
    import subprocess
    import sys

    trace, stats = write(tmp_path / "t.json", kineto_json()), tmp_path / "ingest.prof"
    result = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(stats), "-m", "gpulens.dashboard.cli", "ingest",
                             str(trace), "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert (result.returncode, stats.is_file()) == (0, True)


# --- --host: the host of traces that name none ---------------------------------------


def _run_hosts(out: Path) -> list[str | None]:
    return [row["host"] for row in pq.read_table(next(out.glob("traces/run=*/runs/*.parquet"))).to_pylist()]


def test_host_option_names_the_host_of_a_trace_that_names_none(tmp_path: Path) -> None:
    trace = write(tmp_path / "train.json", kineto_json())
    report = ingest_paths([trace], tmp_path / "out", run="r", host="gpu-017")
    assert (report.failures, _run_hosts(tmp_path / "out")) == ([], ["gpu-017"])


def test_host_option_leaves_the_host_a_trace_names(tmp_path: Path) -> None:
    trace = write(tmp_path / "train.json", json.dumps({**json.loads(kineto_json()), "hostname": "node-a"}))
    ingest_paths([trace], tmp_path / "out", run="r", host="gpu-017")
    assert _run_hosts(tmp_path / "out") == ["node-a"]


def test_ingest_command_takes_a_host(tmp_path: Path) -> None:
    from gpulens.dashboard import cli

    trace = write(tmp_path / "train.json", kineto_json())
    assert cli.main(["ingest", str(trace), "--out", str(tmp_path / "out"), "--host", "gpu-017"]) == 0
    assert _run_hosts(tmp_path / "out") == ["gpu-017"]
