"""The headline numbers of a dataset, and of each trace run in it.

One number per metric, so that two runs of the same job compare directly:
`gpulens report` prints them, `--compare` and `--fail-on` check them
against a baseline, and the dashboard's compare page sets two runs side
by side. Each is computed from the analysis views, where the data has what
it needs (None otherwise).

| metric | key (JSON) | better | what |
|---|---|---|---|
| step_time | step_time_ns | lower | mean profiler-step duration over ranks, complete steps only |
| busbw | busbw_bytes_per_s | higher | collective bus bandwidth, as timed (waiting for late ranks included), time-weighted over all calls |
| transfer_busbw | transfer_busbw_bytes_per_s | higher | the same for the transfers alone (each instance timed by its fastest rank) |
| idle_share | idle_share | lower | GPU idle time / span, over all ranks |
| exposed_comm_share | exposed_comm_share | lower | communication not hidden under compute / span |
| tklqt_per_step | tklqt_per_step_ns | lower | total kernel launch and queuing time per step: summed over the step's kernels, so many times the step time where kernels queue |
| energy_per_step | energy_per_step_j | lower | one GPU's energy per complete step, mean over ranks and steps |
| power_throttled_share | power_throttled_share | lower | share of time GPUs were held back by their power limit |
| data_loader_idle_share | data_loader_idle_share | lower | GPU idle while the loop fetched its batch (data_loading) / complete step time; 0 where no step fetched |
| sync_idle_share | sync_idle_share | lower | GPU idle after synchronising calls drained it (host_syncs) / complete step time; 0 where no step synchronised |

"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

from gpulens.analysis.registry import load_analyses, run_analysis
from gpulens.collector.errors import GpulensError, UsageError


@dataclass(frozen=True)
class Metric:
    name: str  # as --fail-on names it
    key: str  # the JSON key, with its unit
    label: str
    better: str  # lower | higher
    unit: str


METRICS: tuple[Metric, ...] = (
    Metric("step_time", "step_time_ns", "Step time", "lower", "ns"),
    Metric("busbw", "busbw_bytes_per_s", "Bus bandwidth", "higher", "bytes_per_s"),
    Metric("transfer_busbw", "transfer_busbw_bytes_per_s", "Transfer bus bandwidth", "higher", "bytes_per_s"),
    Metric("idle_share", "idle_share", "GPU idle share", "lower", "share"),
    Metric("exposed_comm_share", "exposed_comm_share", "Exposed communication share", "lower", "share"),
    # A sum over kernels, not a span of the step: 400 ms beside a 15 ms step
    # is 200 kernels that each waited 2 ms in the queue. Said beside it.
    Metric("tklqt_per_step", "tklqt_per_step_ns",
           "Launch and queuing time per step, summed over its kernels (each kernel's launch call and wait in the "
           "queue; kernels wait together, so it can be many times the step time)", "lower", "ns"),
    Metric("energy_per_step", "energy_per_step_j", "Energy per step (one GPU)", "lower", "j"),
    Metric("power_throttled_share", "power_throttled_share", "Power-throttled share", "lower", "share"),
    Metric("data_loader_idle_share", "data_loader_idle_share", "GPU idle waiting on the DataLoader", "lower", "share"),
    Metric("sync_idle_share", "sync_idle_share", "GPU idle after synchronising calls", "lower", "share"),
)
_BY_NAME = {m.name: m for m in METRICS} | {m.key: m for m in METRICS}


@dataclass
class MetricDelta:
    """One metric of two runs (or a report and its baseline): the change, and
    whether it went past `threshold_pct` the wrong way."""

    metric: Metric
    baseline: float | None
    current: float | None
    threshold_pct: float | None

    @property
    def comparable(self) -> bool:
        return self.baseline is not None and self.current is not None

    @property
    def delta(self) -> float | None:
        return self.current - self.baseline if self.comparable else None  # type: ignore[operator]

    @property
    def delta_pct(self) -> float | None:
        if not self.comparable or self.baseline == 0:
            return None
        return 100.0 * self.delta / abs(self.baseline)  # type: ignore[operator]

    @property
    def worse_pct(self) -> float | None:
        """How far the change went the wrong way, in % (negative: it improved)."""
        if not self.comparable:
            return None
        if self.baseline == 0:
            worse = self.current > 0 if self.metric.better == "lower" else self.current < 0  # type: ignore[operator]
            return float("inf") if worse else 0.0
        pct = self.delta_pct or 0.0
        return pct if self.metric.better == "lower" else -pct

    @property
    def regressed(self) -> bool:
        return self.threshold_pct is not None and self.comparable and (self.worse_pct or 0.0) > self.threshold_pct

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric.name,
            "key": self.metric.key,
            "better": self.metric.better,
            "baseline": self.baseline,
            "current": self.current,
            "delta": self.delta,
            "delta_pct": self.delta_pct,
            "threshold_pct": self.threshold_pct,
            "regressed": self.regressed,
        }


def metric(name: str) -> Metric:
    found = _BY_NAME.get(name.strip().lower().replace("-", "_"))
    if found is None:
        raise UsageError(f"unknown metric {name!r} in --fail-on; known: {', '.join(m.name for m in METRICS)}")
    return found


def compute_metrics(con: duckdb.DuckDBPyConnection, known: dict[str, pl.DataFrame] | None = None,
                    run: str | None = None) -> dict[str, float | None]:
    """Every metric of the dataset behind `con` (None where it has no data).

    `known`: analysis tables already computed (whole, not filtered), reused.
    `run`: the metrics of that trace run alone; those of telemetry without
    a run (power_throttled_share) are then None.
    """
    return _metrics(con, dict(known or {}), run)


def compute_run_metrics(con: duckdb.DuckDBPyConnection, runs: list[str] | tuple[str, ...],
                        known: dict[str, pl.DataFrame] | None = None) -> dict[str, dict[str, float | None]]:
    """Each trace run's own metrics, where the dataset holds two or more
    runs (the dataset's metrics blend them); {} otherwise."""
    if len(runs) < 2:
        return {}
    frames = dict(known or {})  # each analysis runs once for all runs
    return {run: _metrics(con, frames, run) for run in runs}


def _metrics(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame], run: str | None) -> dict[str, float | None]:
    """The metrics from the analysis tables, running those not in `frames`
    (and keeping them there)."""
    analyses = load_analyses()

    def table(name: str) -> pl.DataFrame | None:
        if name not in frames:
            try:
                frames[name] = run_analysis(con, name) if name in analyses else pl.DataFrame()
            except GpulensError:
                frames[name] = pl.DataFrame()
        frame = frames[name]
        if run is not None:
            frame = frame.filter(pl.col("run") == run) if "run" in frame.columns else pl.DataFrame()
        return None if frame.is_empty() else frame

    values: dict[str, float | None] = {}
    steps = table("step_windows")
    values["step_time_ns"] = _mean(steps.filter(~pl.col("is_last")), "step_ns") if steps is not None else None
    complete_ns = steps.filter(~pl.col("is_last"))["step_ns"].sum() if steps is not None else 0
    values["data_loader_idle_share"] = _share_of_steps(table("data_loading"), "load_gpu_idle_ns", complete_ns)
    values["sync_idle_share"] = _share_of_steps(table("host_syncs"), "sync_gpu_idle_ns", complete_ns)
    stats = table("collective_stats")
    values["busbw_bytes_per_s"] = _weighted(stats, "busbw_bytes_per_s", "total_ns")
    values["transfer_busbw_bytes_per_s"] = _weighted(stats, "transfer_busbw_bytes_per_s", "transfer_ns")
    breakdown = table("time_breakdown")
    values["idle_share"] = _ratio(breakdown, "idle_ns", "span_ns")
    overlap = table("comm_overlap")
    values["exposed_comm_share"] = _ratio(overlap, "exposed_ns", "span_ns")
    launches = table("step_launch_summary")
    values["tklqt_per_step_ns"] = _mean(launches.filter(~pl.col("is_last")), "tklqt_ns") if launches is not None else None
    energy = table("step_energy")
    values["energy_per_step_j"] = _mean(energy.filter(~pl.col("is_last")), "energy_j") if energy is not None else None
    headroom = table("power_headroom")
    values["power_throttled_share"] = _mean(headroom, "power_throttled_share") if headroom is not None else None
    return {m.key: values.get(m.key) for m in METRICS}


def _share_of_steps(per_step: pl.DataFrame | None, column: str, complete_ns: int) -> float | None:
    """`column` summed (where known) over the complete steps' time; 0 for
    steps with no such rows, None without complete steps."""
    if not complete_ns:
        return None
    if per_step is None:
        return 0.0
    return finite(per_step.filter(~pl.col("is_last"))[column].drop_nulls().sum() / complete_ns)


def finite(value: Any) -> float | None:
    """`value` as a float; None where it is missing, NaN or infinite."""
    if value is None:
        return None
    value = float(value)
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _mean(frame: pl.DataFrame, column: str) -> float | None:
    if frame.is_empty() or column not in frame.columns:
        return None
    return finite(frame[column].drop_nulls().mean()) if frame[column].drop_nulls().len() else None


def _weighted(frame: pl.DataFrame | None, column: str, weight: str) -> float | None:
    if frame is None or column not in frame.columns or weight not in frame.columns:
        return None
    known = frame.filter(pl.col(column).is_not_null() & pl.col(weight).is_not_null() & (pl.col(weight) > 0))
    if known.is_empty():
        return None
    return finite((known[column] * known[weight]).sum() / known[weight].sum())


def _ratio(frame: pl.DataFrame | None, numerator: str, denominator: str) -> float | None:
    if frame is None:
        return None
    total = frame[denominator].drop_nulls().sum()
    return finite(frame[numerator].drop_nulls().sum() / total) if total else None
