"""gpulens.collector.ingest.merge: a run's per-source trace files merged into one
file per table (`gpulens compact`), and undone when a source is ingested again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.collector.errors import DatasetError
from gpulens.collector.ingest import ingest_paths
from gpulens.collector.ingest.merge import MERGED_DIR, MERGED_PREFIX, merge_run
from tests.test_ingest import kineto_json, rows_in, write

RANKS = 16  # MERGE_MIN_SOURCES


@pytest.fixture(autouse=True)
def one_file_per_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingest writes each source on its own here, as the trace watcher and
    commands of a few files do: the runs `gpulens compact` merges. (A
    command of many small files writes them in batches: test_ingest_batches.)"""
    from gpulens.collector.ingest import plan

    monkeypatch.setattr(plan, "GROUP_MIN_SOURCES", 1 << 30)


def job(tmp_path: Path, ranks: int = RANKS) -> Path:
    """A folder of per-rank traces; rank r has r + 1 kernels."""
    folder = tmp_path / "job"
    for rank in range(ranks):
        write(folder / f"rank{rank}.pt.trace.json", kineto_json(rank=rank, kernels=rank + 1))
    return folder


def ingested(tmp_path: Path, ranks: int = RANKS) -> tuple[Path, Path]:
    folder = job(tmp_path, ranks)
    out = tmp_path / "out"
    ingest_paths([folder], out, run="r", jobs=1)
    return folder, out


def run_path(out: Path) -> Path:
    return out / "traces" / "run=r"


def table_rows(out: Path, table: str) -> list[tuple]:
    """The table's rows as readers see them (the files its glob matches), sorted."""
    return sorted(tuple(sorted(row.items(), key=lambda item: item[0])) for row in rows_in(out, table))


def table_files(out: Path, table: str) -> list[str]:
    return sorted(path.name for path in (run_path(out) / table).glob("*.parquet"))


def kernels_per_rank(out: Path) -> dict[int, int]:
    counts: dict[int, int] = {}
    for row in table_rows(out, "kernels"):
        rank = dict(row)["rank"]
        counts[rank] = counts.get(rank, 0) + 1
    return counts


def test_a_merge_leaves_one_file_per_table_with_every_row(tmp_path):
    _, out = ingested(tmp_path)
    before = {table: table_rows(out, table) for table in ("kernels", "cpu_ops", "runs", "rank_summary")}
    assert merge_run(out, run_path(out)) == (RANKS * 6, 6)  # kernels, cpu_ops, runs and three derived tables
    for table, rows in before.items():
        [name] = table_files(out, table)
        assert name.startswith(MERGED_PREFIX)
        assert table_rows(out, table) == rows


def test_a_run_of_fewer_sources_than_the_threshold_is_left_as_written(tmp_path):
    _, out = ingested(tmp_path, ranks=RANKS - 1)
    assert merge_run(out, run_path(out)) == ((RANKS - 1) * 6, (RANKS - 1) * 6)
    assert not (run_path(out) / MERGED_DIR).exists()


def test_ingesting_a_source_of_a_merged_run_again_replaces_its_rows_once(tmp_path):
    folder, out = ingested(tmp_path)
    merge_run(out, run_path(out))
    write(folder / "rank3.pt.trace.json", kineto_json(rank=3, kernels=40))
    ingest_paths([folder / "rank3.pt.trace.json"], out, run="r", jobs=1)
    assert kernels_per_rank(out) == {rank: 40 if rank == 3 else rank + 1 for rank in range(RANKS)}
    assert not any(name.startswith(MERGED_PREFIX) for name in table_files(out, "kernels"))
    assert not (run_path(out) / MERGED_DIR).exists()


def test_ingesting_a_whole_merged_run_again_in_parallel_gives_the_same_rows(tmp_path):
    folder, out = ingested(tmp_path)
    before = table_rows(out, "kernels")
    merge_run(out, run_path(out))
    ingest_paths([folder], out, run="r", jobs=2)
    assert len(table_files(out, "kernels")) == RANKS
    assert [dict(row)["rank"] for row in table_rows(out, "kernels")] == [dict(row)["rank"] for row in before]


def test_a_source_ingested_into_a_merged_run_stays_beside_the_merged_file(tmp_path):
    folder, out = ingested(tmp_path)
    merge_run(out, run_path(out))
    extra = write(tmp_path / "late" / "rank16.pt.trace.json", kineto_json(rank=16, kernels=2))
    ingest_paths([extra], out, run="r", jobs=1)
    assert len(table_files(out, "kernels")) == 2
    assert kernels_per_rank(out)[16] == 2 and sum(kernels_per_rank(out).values()) == sum(range(1, RANKS + 1)) + 2


def test_ingesting_a_merged_source_under_another_run_takes_its_rows_out_of_the_merged_run(tmp_path):
    folder, out = ingested(tmp_path)
    merge_run(out, run_path(out))
    ingest_paths([folder / "rank0.pt.trace.json"], out, run="other", jobs=1)
    runs = sorted((dict(row)["run"], dict(row)["rank"]) for row in table_rows(out, "runs"))
    assert runs == [("other", 0)] + [("r", rank) for rank in range(1, RANKS)]


def test_a_source_taken_out_of_a_merged_run_is_reported_as_moved(tmp_path):
    folder, out = ingested(tmp_path)
    merge_run(out, run_path(out))
    report = ingest_paths([folder / "rank0.pt.trace.json"], out, run="other", jobs=1)
    assert report.moved == [(str(folder / "rank0.pt.trace.json"), ("r",), "other")]


def test_a_merge_cut_short_is_undone_by_the_next_ingest_of_its_run(tmp_path):
    _, out = ingested(tmp_path)
    before = table_rows(out, "kernels")
    merge_run(out, run_path(out))
    [aside] = (run_path(out) / MERGED_DIR).iterdir()
    (aside / "complete").unlink()  # as if the merge had stopped before its last step
    extra = write(tmp_path / "late" / "rank16.pt.trace.json", kineto_json(rank=16, kernels=1))
    ingest_paths([extra], out, run="r", jobs=1)
    assert len(table_files(out, "kernels")) == RANKS + 1
    assert table_rows(out, "kernels") == sorted(before + [row for row in table_rows(out, "kernels")
                                                          if dict(row)["rank"] == 16])


def test_a_merge_that_cannot_read_a_file_names_the_folder_and_leaves_the_run_as_it_was(tmp_path):
    _, out = ingested(tmp_path)
    files_before = sorted(path.relative_to(out) for path in (out / "traces").rglob("*.parquet"))
    broken = run_path(out) / "kernels" / table_files(out, "kernels")[5]
    broken.write_bytes(b"PAR1 not parquet")
    with pytest.raises(DatasetError, match=r"run=r/kernels: cannot merge its files"):
        merge_run(out, run_path(out))
    assert sorted(path.relative_to(out) for path in (out / "traces").rglob("*.parquet")) == files_before
    assert not (run_path(out) / MERGED_DIR).exists()


def test_gpulens_compact_merges_each_trace_run_and_says_so(tmp_path):
    _, out = ingested(tmp_path)
    result = subprocess.run([sys.executable, "-m", "gpulens.dashboard.cli", "compact", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"run=r: {RANKS * 6} trace files merged into 6" in result.stdout
    assert table_files(out, "kernels")[0].startswith(MERGED_PREFIX)


def test_ingest_of_a_run_of_many_sources_suggests_gpulens_compact(tmp_path, monkeypatch, capsys):
    from gpulens.collector import cli as collector_cli
    from gpulens.dashboard import cli

    monkeypatch.setattr(collector_cli, "SUGGEST_MERGE_AT_SOURCES", RANKS)
    out = tmp_path / "out"
    assert cli.main(["ingest", str(job(tmp_path)), "--out", str(out), "--quiet", "--jobs", "1"]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"gpulens: run job is {RANKS} trace files a table: `gpulens compact {out}` merges them into one each, "
        "which analyses read faster")


def test_ingest_of_a_run_of_fewer_sources_suggests_nothing(tmp_path, monkeypatch, capsys):
    from gpulens.collector import cli as collector_cli
    from gpulens.dashboard import cli

    monkeypatch.setattr(collector_cli, "SUGGEST_MERGE_AT_SOURCES", RANKS + 1)
    assert cli.main(["ingest", str(job(tmp_path)), "--out", str(tmp_path / "out"), "--quiet", "--jobs", "1"]) == 0
    assert "gpulens compact" not in capsys.readouterr().err


def test_a_merge_stopped_between_two_moves_leaves_the_run_as_it_was(tmp_path, monkeypatch):
    # SIGTERM's Terminated or Ctrl-C between the moves that put a merge in
    # place: the run is put back at once, not left for the next command.
    from gpulens.collector.ingest import merge

    _, out = ingested(tmp_path)
    before = {path.relative_to(out): path.read_bytes() for path in (out / "traces").rglob("*.parquet")}
    replace = merge.os.replace
    moves = []

    def interrupted_at_the_third_move(source, destination):
        moves.append(destination)
        if len(moves) == 3:
            raise KeyboardInterrupt
        replace(source, destination)

    monkeypatch.setattr(merge.os, "replace", interrupted_at_the_third_move)
    with pytest.raises(KeyboardInterrupt):
        merge_run(out, run_path(out))
    monkeypatch.undo()
    assert {path.relative_to(out): path.read_bytes() for path in (out / "traces").rglob("*.parquet")} == before
    assert not (run_path(out) / MERGED_DIR).exists()
    assert list((out / ".staging").iterdir()) == []
