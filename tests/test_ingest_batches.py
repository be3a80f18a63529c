"""A command of many small trace files writes them in batches: one file per
table for each group of sources (`store.write_sources`), split back into
per-source files when one of them is ingested again (`merge._explode`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulens.collector.ingest import batch, ingest_paths, merge, plan, store
from gpulens.collector.ingest.merge import BATCH_SOURCES, MERGED_DIR, MERGED_PREFIX
from gpulens.collector.ingest.results import FileResult
from gpulens.collector.ingest.sources import Source, _expand
from tests.test_ingest import kineto_json, rows_in, write
from tests.test_merge import job, kernels_per_rank, run_path, table_files, table_rows

RANKS = 16  # GROUP_MIN_SOURCES; with --jobs 1, four groups of four
ALL_KERNELS = {rank: rank + 1 for rank in range(RANKS)}


def batched(tmp_path: Path, ranks: int = RANKS) -> tuple[Path, Path]:
    folder = job(tmp_path, ranks)
    out = tmp_path / "out"
    ingest_paths([folder], out, run="r", jobs=1)
    return folder, out


def merged_files(out: Path, table: str = "kernels") -> list[str]:
    return [name for name in table_files(out, table) if name.startswith(MERGED_PREFIX)]


def batch_of(out: Path, rank_file: str) -> Path:
    """The folder of the batch that holds a source file of the job."""
    source = store.source_id(out.parent / "job" / rank_file)
    [aside] = [aside for aside in (run_path(out) / MERGED_DIR).iterdir()
               if source in json.loads((aside / BATCH_SOURCES).read_text())["sources"]]
    return aside


def all_tables(out: Path) -> dict[str, list[tuple]]:
    """Every table's rows, but for the time each was ingested."""
    tables = ("kernels", "cpu_ops", "runs", "rank_summary", "kernel_names", "gpu_phases")
    return {table: [tuple(item for item in row if item[0] != "ingested_at") for row in table_rows(out, table)]
            for table in tables}


def without_rank(tables: dict[str, list[tuple]], rank: int) -> dict[str, list[tuple]]:
    return {table: [row for row in rows if dict(row)["rank"] != rank] for table, rows in tables.items()}


def test_a_command_of_many_small_sources_writes_a_file_per_table_per_group_with_every_row(tmp_path, monkeypatch):
    folder, out = batched(tmp_path)
    assert len(merged_files(out)) == 4 and len(table_files(out, "kernels")) == 4
    monkeypatch.setattr(plan, "GROUP_MIN_SOURCES", 1 << 30)
    alone = tmp_path / "alone"
    ingest_paths([folder], alone, run="r", jobs=1)
    assert len(table_files(alone, "kernels")) == RANKS
    assert all_tables(out) == all_tables(alone)


def test_a_batch_lists_its_sources_in_the_order_of_their_rows(tmp_path):
    _, out = batched(tmp_path)
    aside = batch_of(out, "rank0.pt.trace.json")
    listed = json.loads((aside / BATCH_SOURCES).read_text())
    # Groups are of consecutive files by name: rank0, rank1, rank10, rank11.
    assert listed["sources"] == [store.source_id(tmp_path / "job" / f"rank{rank}.pt.trace.json")
                                 for rank in (0, 1, 10, 11)]
    assert listed["rows"]["kernels"] == [1, 2, 11, 12]
    assert listed["rows"]["runs"] == [1, 1, 1, 1]


def test_a_command_of_fewer_sources_than_the_threshold_writes_a_file_per_source(tmp_path):
    _, out = batched(tmp_path, ranks=RANKS - 1)
    assert merged_files(out) == [] and len(table_files(out, "kernels")) == RANKS - 1
    assert not (run_path(out) / MERGED_DIR).exists()


def test_ingesting_one_source_of_a_batch_again_replaces_its_rows_and_writes_the_others_back_alone(tmp_path):
    folder, out = batched(tmp_path)
    write(folder / "rank10.pt.trace.json", kineto_json(rank=10, kernels=40))
    ingest_paths([folder / "rank10.pt.trace.json"], out, run="r", jobs=1)
    assert kernels_per_rank(out) == {**ALL_KERNELS, 10: 40}
    # rank0, rank1, rank10 and rank11's batch is split; the other three stay.
    assert len(merged_files(out)) == 3 and len(table_files(out, "kernels")) == 3 + 4
    assert len(list((run_path(out) / MERGED_DIR).iterdir())) == 3


def test_ingesting_the_whole_run_again_replaces_each_batch_whole(tmp_path):
    folder, out = batched(tmp_path)
    before = all_tables(out)
    ingest_paths([folder], out, run="r", jobs=1)
    assert len(merged_files(out)) == 4 and len(table_files(out, "kernels")) == 4
    assert len(list((run_path(out) / MERGED_DIR).iterdir())) == 4
    assert all_tables(out) == before


def test_ingesting_the_same_files_again_replaces_each_batch_without_splitting_it_first(tmp_path, monkeypatch):
    folder, out = batched(tmp_path)
    monkeypatch.setattr(merge, "_explode", never_split)
    report = ingest_paths([folder], out, run="r", jobs=1)
    assert report.ok and kernels_per_rank(out) == ALL_KERNELS
    assert len(merged_files(out)) == 4


def never_split(run_path, aside):
    raise AssertionError(f"{aside.name} was split back into its sources")


def test_ingesting_the_whole_run_again_in_other_groups_gives_the_same_rows(tmp_path):
    folder, out = batched(tmp_path)
    before = all_tables(out)
    ingest_paths([folder], out, run="r", jobs=2)  # two cores: groups of two
    assert len(merged_files(out)) == 8 and len(table_files(out, "kernels")) == 8
    assert all_tables(out) == before


def test_ingesting_a_batched_source_under_another_run_takes_its_rows_out_of_the_batch(tmp_path):
    folder, out = batched(tmp_path)
    ingest_paths([folder / "rank0.pt.trace.json"], out, run="other", jobs=1)
    runs = sorted((dict(row)["run"], dict(row)["rank"]) for row in table_rows(out, "runs"))
    assert runs == [("other", 0)] + [("r", rank) for rank in range(1, RANKS)]


def test_moving_the_whole_run_to_another_run_name_drops_its_batches_without_splitting_them(tmp_path, monkeypatch):
    folder, out = batched(tmp_path)
    monkeypatch.setattr(merge, "_explode", never_split)
    ingest_paths([folder], out, run="other", jobs=1)
    assert {dict(row)["run"] for row in table_rows(out, "runs")} == {"other"}
    assert not (run_path(out) / MERGED_DIR).exists()


def test_a_source_that_cannot_be_read_leaves_the_rest_of_its_group_written(tmp_path):
    folder = job(tmp_path)
    write(folder / "rank1.pt.trace.json", '{"traceEvents": [')
    report = ingest_paths([folder], tmp_path / "out", run="r", jobs=1)
    [failure] = report.failures
    assert failure.path == str(folder / "rank1.pt.trace.json")
    assert len(report.results) == RANKS - 1
    assert kernels_per_rank(tmp_path / "out") == {rank: n for rank, n in ALL_KERNELS.items() if rank != 1}


def test_a_source_whose_tables_cannot_be_derived_fails_alone_and_its_group_is_written_one_by_one(
        tmp_path, monkeypatch):
    real_derive = store.derive_trace_tables

    def fails_on_rank_10(tables):
        if tables["runs"].column("rank").to_pylist() == [10]:
            raise ValueError("a derive bug")
        return real_derive(tables)

    monkeypatch.setattr(store, "derive_trace_tables", fails_on_rank_10)
    folder = job(tmp_path)
    report = ingest_paths([folder], tmp_path / "out", run="r", jobs=1)
    assert [failure.message for failure in report.failures] == [
        f"{folder / 'rank10.pt.trace.json'}: unexpected error: ValueError: a derive bug"]
    assert kernels_per_rank(tmp_path / "out") == {rank: n for rank, n in ALL_KERNELS.items() if rank != 10}
    assert len(merged_files(tmp_path / "out")) == 3  # rank10's group: each of the other three alone


def test_a_source_bigger_than_a_group_takes_is_ingested_on_its_own(tmp_path, monkeypatch):
    folder = job(tmp_path)
    write(folder / "rank16.pt.trace.json", kineto_json(rank=16, kernels=200))
    monkeypatch.setattr(plan, "GROUP_SOURCE_MAX_BYTES", len(kineto_json(rank=16, kernels=100)))
    tasks, _ = _expand([folder], tmp_path / "out", "r")
    planned = plan.group_small_sources(tasks, jobs=1)
    assert [[Path(member.path).name for member in task.members] for task in planned] == [
        ["rank16.pt.trace.json"],
        ["rank0.pt.trace.json", "rank1.pt.trace.json", "rank10.pt.trace.json", "rank11.pt.trace.json"],
        ["rank12.pt.trace.json", "rank13.pt.trace.json", "rank14.pt.trace.json", "rank15.pt.trace.json"],
        ["rank2.pt.trace.json", "rank3.pt.trace.json", "rank4.pt.trace.json", "rank5.pt.trace.json"],
        ["rank6.pt.trace.json", "rank7.pt.trace.json", "rank8.pt.trace.json", "rank9.pt.trace.json"]]


class Crash(BaseException):
    """The process stopping in the middle (no `except Exception` catches it)."""


def test_a_batch_split_back_only_in_part_is_finished_by_the_next_write_to_its_run(tmp_path, monkeypatch):
    folder, out = batched(tmp_path)
    before = all_tables(out)
    aside = batch_of(out, "rank0.pt.trace.json")
    real_write_back, tables_done = merge._write_back, []

    def stops_after_two_tables(*args):
        if len(tables_done) == 2:
            raise Crash
        real_write_back(*args)
        tables_done.append(args[0])

    monkeypatch.setattr(merge, "_write_back", stops_after_two_tables)
    with pytest.raises(Crash):
        with merge.run_lock(run_path(out)):
            merge.unmerge_sources(run_path(out), {store.source_id(folder / "rank0.pt.trace.json")})
    monkeypatch.undo()
    assert (aside / "exploding").exists()
    late = write(tmp_path / "late" / "rank16.pt.trace.json", kineto_json(rank=16, kernels=1))
    ingest_paths([late], out, run="r", jobs=1)
    assert without_rank(all_tables(out), 16) == before
    assert not aside.exists() and len(merged_files(out)) == 3


def ingest_cut_short_then_another_file(monkeypatch: pytest.MonkeyPatch, folder: Path, out: Path) -> None:
    """Ingest `folder` into run r, stopping as its second merged file is put
    in place; then ingest another file into the run, which finds that."""
    real_replace, placed = merge.os.replace, []

    def stops_at_the_second_merged_file(source, destination):
        placing = ".staging" in str(source) and Path(destination).name.startswith(MERGED_PREFIX)
        if placing and placed:
            raise Crash
        if placing:
            placed.append(destination)
        real_replace(source, destination)

    with monkeypatch.context() as patch:
        patch.setattr(merge.os, "replace", stops_at_the_second_merged_file)
        with pytest.raises(Crash):
            ingest_paths([folder], out, run="r", jobs=1)
    late = write(folder.parent / "late" / "rank16.pt.trace.json", kineto_json(rank=16, kernels=1))
    ingest_paths([late], out, run="r", jobs=1)


def test_a_batch_cut_short_while_placed_is_undone_and_the_earlier_ingest_kept(tmp_path, monkeypatch):
    folder = job(tmp_path)
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(plan, "GROUP_MIN_SOURCES", 1 << 30)
        ingest_paths([folder], out, run="r", jobs=1)  # a file per source
    before = all_tables(out)
    write(folder / "rank0.pt.trace.json", kineto_json(rank=0, kernels=30))
    ingest_cut_short_then_another_file(monkeypatch, folder, out)
    assert without_rank(all_tables(out), 16) == before
    assert not any(name.startswith(MERGED_PREFIX) for name in table_files(out, "kernels"))


def test_a_batch_cut_short_while_replacing_an_earlier_one_is_undone_and_the_earlier_kept(tmp_path, monkeypatch):
    folder, out = batched(tmp_path)
    before = all_tables(out)
    write(folder / "rank0.pt.trace.json", kineto_json(rank=0, kernels=30))
    ingest_cut_short_then_another_file(monkeypatch, folder, out)
    assert without_rank(all_tables(out), 16) == before
    assert len(merged_files(out)) == 4
    # The earlier batch is whole again, its sources listed: ingesting one of them replaces its rows.
    ingest_paths([folder / "rank0.pt.trace.json"], out, run="r", jobs=1)
    assert kernels_per_rank(out) == {**ALL_KERNELS, 0: 30, 16: 1}


def test_a_group_of_several_formats_holds_the_rows_each_gives_written_alone(tmp_path, monkeypatch):
    from gpulens.collector.schema import TRACE_SCHEMAS
    from tests import test_ingest_nccl_log as nccl
    from tests import test_ingest_nsys as nsys
    from tests import test_ingest_rocprof as rocprof

    folder = tmp_path / "mixed"
    # Named so that each group of four (consecutive by path) mixes formats.
    for n in range(4):
        write(folder / f"g{n}a.pt.trace.json", kineto_json(rank=n, kernels=n + 2))
        write(folder / f"g{n}b.log", nccl.TWO_NODES_LOG if n % 2 else nccl.NVLS_LOG)
        nsys.build_export(folder / f"g{n}c.sqlite")
        rocprof._process(folder / f"g{n}d", "kernel_trace", "hip_api_trace", "agent_info", pid=4240 + n)
    grouped = ingest_paths([folder], tmp_path / "grouped", run="r", jobs=1)
    assert grouped.ok and len(grouped.results) == 16
    assert len(merged_files(tmp_path / "grouped", "runs")) == 4
    monkeypatch.setattr(plan, "GROUP_MIN_SOURCES", 1 << 30)
    ingest_paths([folder], tmp_path / "alone", run="r", jobs=1)
    for table in TRACE_SCHEMAS:
        assert as_read(tmp_path / "grouped", table) == as_read(tmp_path / "alone", table), table


def as_read(out: Path, table: str) -> list[str]:
    """The table's rows as a reader sees them (a column a file lacks is
    NULL), but for the time each was ingested; sorted."""
    return sorted(repr(sorted((column, value) for column, value in row.items()
                              if value is not None and column != "ingested_at"))
                  for row in rows_in(out, table))


def test_a_merge_of_a_batched_run_leaves_one_file_per_table_with_every_row(tmp_path):
    folder, out = batched(tmp_path)
    before = all_tables(out)
    assert merge.merge_run(out, run_path(out)) == (4 * 6, 6)  # four batches of six tables
    assert len(table_files(out, "kernels")) == 1
    assert all_tables(out) == before


def test_a_run_of_one_batch_is_left_as_it_is(tmp_path):
    folder, out = job(tmp_path), tmp_path / "out"
    sources = tuple(Source(str(path), "r", True) for path in sorted(folder.iterdir()))
    assert all(isinstance(outcome, FileResult)
               for outcome in batch.ingest_group(Source(sources[0].path, "r", True, group=sources), str(out)))
    assert len(merged_files(out)) == 1
    assert merge.merge_run(out, run_path(out)) == (6, 6)


def test_ingesting_one_source_of_a_merged_batched_run_replaces_its_rows_once(tmp_path):
    folder, out = batched(tmp_path)
    merge.merge_run(out, run_path(out))
    write(folder / "rank10.pt.trace.json", kineto_json(rank=10, kernels=40))
    ingest_paths([folder / "rank10.pt.trace.json"], out, run="r", jobs=1)
    assert kernels_per_rank(out) == {**ALL_KERNELS, 10: 40}
    # The merge is undone, its batches given back, and rank10's split: three batches and four files.
    assert len(merged_files(out)) == 3 and len(table_files(out, "kernels")) == 3 + 4


def test_ingesting_a_merged_batched_run_again_gives_the_same_rows(tmp_path):
    folder, out = batched(tmp_path)
    before = all_tables(out)
    merge.merge_run(out, run_path(out))
    ingest_paths([folder], out, run="r", jobs=1)
    assert all_tables(out) == before
    assert len(merged_files(out)) == 4 and len(table_files(out, "kernels")) == 4
