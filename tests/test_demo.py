"""`gpulens demo`: a reproducible dataset with a straggler and a capped GPU planted where asked."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gpulens.analysis.dataset import open_dataset
from gpulens.analysis.registry import run_analysis
from gpulens.collector.demo import DEMO_RUN, DEMO_START_NS, demo, make_demo
from gpulens.collector.errors import UsageError
from gpulens.collector.sim_trace import MIN_KERNELS_PER_STEP

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_traces"
# A small variant: one minute of telemetry, 4 steps of the smallest model.
SMALL = {"minutes": 1, "steps": 4, "kernels_per_step": MIN_KERNELS_PER_STEP}


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _contents(root: Path) -> dict[str, bytes | pa.Table]:
    """What each file holds: a Parquet file's table (schema and rows; its
    bytes also name the pyarrow version that wrote it), any other's bytes."""
    return {name: pq.read_table(root / name) if name.endswith(".parquet") else data
            for name, data in _files(root).items()}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("planted") / "demo", seed=3, straggler_rank=2, capped_gpu=6, **SMALL)


def test_demo_same_seed_gives_identical_bytes_in_another_folder(tmp_path: Path, planted: Path) -> None:
    again = make_demo(tmp_path / "elsewhere" / "demo", seed=3, straggler_rank=2, capped_gpu=6, **SMALL)
    first, second = _files(planted), _files(again)
    assert list(first) == list(second)
    assert any(name.startswith("telemetry/") for name in first)
    assert any("/kernels/" in name for name in first)
    assert first == second


def test_demo_files_get_the_mode_of_any_new_file_so_others_can_read_them(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        root = make_demo(tmp_path / "demo", seed=0, **SMALL)
    finally:
        os.umask(previous)
    files = sorted(root.rglob("*.parquet"))
    assert any("/runs/" in path.as_posix() for path in files)
    assert [(path.relative_to(root).as_posix(), oct(path.stat().st_mode & 0o777)) for path in files
            if path.stat().st_mode & 0o777 != 0o644] == []


def test_demo_different_seed_gives_different_telemetry(tmp_path: Path, planted: Path) -> None:
    other = make_demo(tmp_path / "demo", seed=4, straggler_rank=2, capped_gpu=6, profile="inference", minutes=1)
    telemetry = lambda root: next(p for p in _files(root) if p.startswith("telemetry/"))  # noqa: E731
    assert _files(other)[telemetry(other)] != _files(planted)[telemetry(planted)]


def test_demo_plants_the_straggler_and_the_capped_gpu_where_asked(planted: Path) -> None:
    con = open_dataset(planted)
    stragglers = run_analysis(con, "stragglers")
    assert stragglers.filter(pl.col("straggler_order") == 1)["rank"].item() == 2
    headroom = run_analysis(con, "power_headroom").sort("power_throttled_share", descending=True)
    assert headroom["gpu_index"][0] == 6
    assert headroom["power_throttled_share"][0] > 0.2
    assert headroom["power_throttled_share"][1] == 0


def test_demo_traces_join_the_telemetry_of_the_same_host(planted: Path) -> None:
    con = open_dataset(planted)
    matched = run_analysis(con, "power_trace_gpus")
    assert matched.height == 8
    assert matched["host"].unique().to_list() == ["sim-node-00"]
    assert matched["telemetry_covers"].all()
    assert sorted(matched["gpu_index"].to_list()) == list(range(8))
    energy = run_analysis(con, "step_energy").filter(~pl.col("is_last"))
    assert energy["energy_j"].null_count() == 0


def test_demo_pins_the_runs_table_to_the_dataset(planted: Path) -> None:
    runs = pl.from_arrow(open_dataset(planted).sql("select * from runs order by rank").to_arrow_table())
    assert runs["run"].unique().to_list() == [DEMO_RUN]
    assert all(path.startswith("raw/kineto/rank-") for path in runs["source_path"])
    assert all((planted / path).is_file() for path in runs["source_path"])
    end_us = (DEMO_START_NS + 59 * 1_000_000_000) // 1000
    assert {int(ts.timestamp() * 1_000_000) for ts in runs["ingested_at"]} == {end_us}
    assert not (planted / ".staging").exists()


def test_demo_events_record_throttling_of_the_capped_gpu_only(planted: Path) -> None:
    events = pl.from_arrow(open_dataset(planted).sql("select kind, gpu_index from events").to_arrow_table())
    kinds = events["kind"].to_list()
    assert kinds.count("collector_start") == 1 and kinds.count("collector_stop") == 1
    throttled = events.filter(pl.col("kind") == "throttle_start")["gpu_index"].unique().to_list()
    assert throttled == [6]


def test_demo_without_capped_gpu_caps_none(tmp_path: Path) -> None:
    out = make_demo(tmp_path / "demo", capped_gpu=None, profile="inference", minutes=1)
    headroom = run_analysis(open_dataset(out), "power_headroom")
    assert headroom["power_throttled_share"].max() == 0
    assert not (out / "traces").exists()


def test_demo_refuses_to_overwrite_a_dataset_without_force(tmp_path: Path) -> None:
    out = make_demo(tmp_path / "demo", profile="inference", minutes=0.1)
    with pytest.raises(UsageError, match="--force"):
        make_demo(out, profile="inference", minutes=0.1)
    make_demo(out, profile="inference", minutes=0.1, force=True)


def test_demo_stopped_halfway_leaves_no_half_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.collector import demo

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "_write_traces", interrupted)
    with pytest.raises(KeyboardInterrupt):
        make_demo(tmp_path / "demo", minutes=0.1)
    assert [path.name for path in tmp_path.iterdir()] == ["demo"] and not any((tmp_path / "demo").iterdir())


def test_demo_forced_and_stopped_halfway_keeps_the_old_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.collector import demo

    out = make_demo(tmp_path / "demo", profile="inference", minutes=0.1)
    before = sorted(path.relative_to(out) for path in out.rglob("*"))
    monkeypatch.setattr(demo, "_write_node", lambda *args, **kwargs: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        make_demo(out, profile="inference", minutes=0.1, force=True)
    assert sorted(path.relative_to(out) for path in out.rglob("*")) == before


@pytest.mark.parametrize(
    "args, message",
    [
        (["--capped-gpu", "8"], "not one of the 8"),
        (["--straggler-rank", "9"], "not one of the 8"),
        (["--minutes", "0"], "must be positive"),
        (["--straggler-rank", "abc"], "--straggler-rank 'abc' is not a number or 'none'"),
        (["--capped-gpu", "x"], "--capped-gpu 'x' is not a number or 'none'"),
    ],
)
def test_demo_command_rejects_bad_values(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(demo, ["--out", str(tmp_path / "d"), *args])
    assert result.exit_code != 0
    assert isinstance(result.exception, UsageError)
    assert message in str(result.exception)


def test_demo_inference_sample_matches_its_regeneration_command(tmp_path: Path) -> None:
    """sample_traces/demo-inference is what its README command writes: the same
    files, the same tables (byte for byte with the pyarrow that wrote them)."""
    sample = SAMPLES / "demo-inference"
    if not sample.is_dir():
        pytest.skip("sample_traces/demo-inference is not present")
    result = CliRunner().invoke(demo, ["--profile", "inference", "--minutes", "10", "--out", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    assert _contents(tmp_path / "d") == _contents(sample)


def test_demo_training_sample_matches_its_regeneration_command(tmp_path: Path) -> None:
    """sample_traces/demo-training is what `gpulens demo` writes by default: the
    same files, the same tables."""
    sample = SAMPLES / "demo-training"
    if not sample.is_dir():
        pytest.skip("sample_traces/demo-training is not present")
    result = CliRunner().invoke(demo, ["--out", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    regenerated = _contents(tmp_path / "d")
    committed = _contents(sample)
    assert sorted(regenerated) == sorted(committed)
    differing = [name for name in committed if committed[name] != regenerated[name]]
    assert differing == []
