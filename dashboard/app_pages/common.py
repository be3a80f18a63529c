"""What every page shares: the dataset, guarded analysis calls, chart output.

Pages get figures from `analysis` through `fetch` (cached on the dataset's
files, see `dashboard.data`), draw them with `dashboard.charts`, and stop
with one clear line, never a stack trace, when the dataset is missing or
holds nothing the page can show.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import plotly.graph_objects as go
import polars as pl
import streamlit as st

from gpulens.collector.errors import GpulensError, one_line
from gpulens.dashboard import data
from gpulens.dashboard.escape import markdown_code, markdown_text

# key -> (script relative to dashboard/, title, icon); the order of the menu.
PAGES: dict[str, tuple[str, str, str]] = {
    "overview": ("app_pages/overview.py", "Overview", ":material/dashboard:"),
    "telemetry": ("app_pages/telemetry.py", "Telemetry", ":material/monitoring:"),
    "power": ("app_pages/power.py", "Power headroom", ":material/bolt:"),
    "interconnect": ("app_pages/interconnect.py", "Interconnect", ":material/cable:"),
    "kernels": ("app_pages/kernels.py", "Kernels and launches", ":material/memory:"),
    "communication": ("app_pages/communication.py", "Communication", ":material/sync_alt:"),
    "compare": ("app_pages/compare.py", "Compare", ":material/compare_arrows:"),
    "live": ("app_pages/live.py", "Live", ":material/sensors:"),
}
# Finding.page values that name a page by another word.
PAGE_ALIASES = {
    "launch": "kernels", "launches": "kernels", "time_breakdown": "kernels", "breakdown": "kernels",
    "power_headroom": "power", "headroom": "power", "comm": "communication", "collectives": "communication",
}
WARM_UP_ENV = "GPULENS_WARM_UP"
PLOTLY_CONFIG = {"displaylogo": False, "scrollZoom": False}


def page_key(name: str | None) -> str:
    name = (name or "overview").lower()
    name = PAGE_ALIASES.get(name, name)
    return name if name in PAGES else "overview"


def dataset() -> data.Dataset:
    """The dataset this dashboard shows, as its files are now."""
    named = os.environ.get(data.DATASET_ENV, "").strip()
    path = Path(named).expanduser() if named else _default_dataset()
    return data.current(path)


@st.cache_resource(show_spinner="Building the built-in sample dataset (first start only)…")
def _default_dataset() -> Path:
    return data.default_dataset()


def require_dataset() -> data.Dataset:
    """The dataset, or a clear message and the end of the page."""
    ds = dataset()
    problem = data.problem(ds)
    if problem is not None:
        st.error(problem, icon=":material/folder_off:")
        st.stop()
    return ds


def fetch(ds: data.Dataset, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`func(con, ...)` from `analysis`, cached; a failure is one warning line and None."""
    try:
        return data.cached(ds, func, *args, **kwargs)
    except (GpulensError, duckdb.Error, ImportError, OSError) as error:
        st.warning(f"{func.__name__} could not be computed: {markdown_text(_one_line(error))}", icon=":material/warning:")
        return None


def frame(ds: data.Dataset, func: Callable[..., Any], *args: Any, **kwargs: Any) -> pl.DataFrame:
    """`fetch`, with an empty frame for a failure."""
    result = fetch(ds, func, *args, **kwargs)
    return result if isinstance(result, pl.DataFrame) else pl.DataFrame()


def _one_line(error: BaseException) -> str:
    return one_line(error) or type(error).__name__


def overview_results() -> tuple[Callable[..., Any], ...]:
    """What the overview asks for, in its order (pages/overview.py): warmed
    first, at server start (dashboard/launch.py) and at the first visit."""
    from gpulens.analysis import timeline
    from gpulens.analysis.dataset import dataset_summary
    from gpulens.analysis.all_findings import all_findings

    return dataset_summary, timeline.telemetry_coverage, timeline.trace_runs, all_findings


def warm_up(ds: data.Dataset) -> threading.Thread | None:
    """Compute what every page shows first, in the background, once per dataset
    (`GPULENS_WARM_UP=0` turns it off): at server start (dashboard/launch.py),
    and at the first visit where the server was started otherwise. The
    thread, or None where there is nothing (more) to warm."""
    if os.environ.get(WARM_UP_ENV, "1") == "0" or data.problem(ds) is not None:
        return None
    from gpulens.analysis import communication, launch, power, time_breakdown, timeline

    def plain(*funcs: Callable[..., Any]) -> list[data.WarmUpCall]:
        return [(func, (), {}) for func in funcs]

    def on_first_hosts(*funcs: Callable[..., Any]) -> list[data.WarmUpCall]:
        return [(func, (), lambda: {"hosts": default_host_scope(ds)}) for func in funcs]

    # In the order of the menu: what each page asks for with its defaults.
    return data.warm_up(ds, [
        *plain(*overview_results()),
        (timeline.telemetry_timeline, lambda: default_telemetry_window(ds), lambda: {"hosts": default_host_scope(ds)}),
        *on_first_hosts(power.power_headroom, timeline.power_histogram, power.node_power),
        *plain(power.power_trace_gpus, power.step_energy, power.phase_energy, power.interconnect_usage, launch.launch_rank_summary, launch.step_launch_summary, time_breakdown.time_breakdown,
               time_breakdown.memcpy_stats, launch.data_loading, launch.host_syncs,
               timeline.launch_histogram, launch.graph_launches, launch.short_kernels, time_breakdown.kernel_stats,
               launch.launch_outliers,
               launch.launch_flip),
        (timeline.step_kernel_runs, lambda: default_timeline_step(ds), {}),
        (timeline.step_queue_length, lambda: default_timeline_step(ds), {}),
        *plain(communication.collective_stats, time_breakdown.comm_overlap, communication.stragglers,
               timeline.skew_by_step, communication.collective_outliers),
    ])


def telemetry_range(coverage: pl.DataFrame) -> tuple[datetime, datetime, float]:
    """The telemetry page's whole range: (first sample, just past the last,
    median sampling interval in s), from `telemetry_coverage`."""
    first, last = naive(coverage["first_ts"].min()), naive(coverage["last_ts"].max())
    interval_s = float(coverage["interval_s"].median() or 1.0)
    return first, last + timedelta(seconds=max(interval_s, 1)), interval_s


def telemetry_bucket_s(start: datetime, end: datetime, interval_s: float) -> float:
    """The bucket width the telemetry page draws `start` to `end` in."""
    from gpulens.analysis import timeline

    return timeline.bucket_seconds(max((end - start).total_seconds(), interval_s), interval_s)


# Pages with a line per GPU draw this many GPUs at first; more hosts are a pick away.
DEFAULT_GPUS_MAX = 16


def default_hosts(coverage: pl.DataFrame, max_gpus: int = DEFAULT_GPUS_MAX) -> list[str]:
    """The hosts a page with a line per GPU shows at first: every host, or
    the first ones (by name) holding at most `max_gpus` GPUs, and at least
    one. Each GPU is a trace in every chart: 16 hosts of 8 GPUs made 15 MB
    of figures on the telemetry page and kept the browser busy 15 s."""
    if not coverage.height:
        return []
    chosen: list[str] = []
    gpus_so_far = 0
    for host, gpus in coverage.group_by("host").agg(pl.len()).sort("host").iter_rows():
        if chosen and gpus_so_far + gpus > max_gpus:
            break
        chosen.append(host)
        gpus_so_far += gpus
    return chosen


def hosts_of(coverage: pl.DataFrame) -> list[str]:
    """Every host of `telemetry_coverage`, by name."""
    return sorted(coverage["host"].unique().to_list()) if coverage.height else []


def host_scope(hosts: list[str], hosts_all: list[str]) -> tuple[str, ...] | None:
    """The analyses' `hosts` argument for the hosts a page shows: None where
    that is every host, so the page shares its results with the overview's
    findings and the warm-up; else the names, sorted (one cache key)."""
    from gpulens.analysis.power import hosts_param

    return None if set(hosts) >= set(hosts_all) else hosts_param(hosts)


def default_host_scope(ds: data.Dataset) -> tuple[str, ...] | None:
    """`host_scope` of the hosts the telemetry and power pages open on (`default_hosts`)."""
    from gpulens.analysis import timeline

    coverage = data.cached(ds, timeline.telemetry_coverage)
    return host_scope(default_hosts(coverage), hosts_of(coverage))


def caption_hosts_shown(hosts: list[str], hosts_all: list[str]) -> None:
    """Say so where a page shows fewer hosts than the dataset has."""
    if len(hosts) < len(hosts_all):
        st.caption(f"Showing {len(hosts)} of {len(hosts_all)} hosts: pick more under Hosts.")


def default_telemetry_window(ds: data.Dataset) -> tuple[float, datetime, datetime] | None:
    """`telemetry_timeline`'s arguments (bucket_s, start, end) for what the
    telemetry page draws first: the whole range (None: no telemetry)."""
    from gpulens.analysis import timeline

    coverage = data.cached(ds, timeline.telemetry_coverage)
    if not coverage.height:
        return None
    first, end, interval_s = telemetry_range(coverage)
    return telemetry_bucket_s(first, end, interval_s), first, end


# The kernels page's timeline first shows its first rank's second step:
# the first step of a profile often holds one-off warm-up work.
TIMELINE_STEP_INDEX = 1


def timeline_choices(steps: pl.DataFrame) -> tuple[list[int], list[int]]:
    """The ranks and steps the kernels page's timeline offers, from one run's
    `step_launch_summary`."""
    if not steps.height:
        return [], []
    ranks = sorted(steps["rank"].unique().to_list())
    step_numbers = sorted(s for s in steps["step"].unique().to_list() if s is not None)
    return ranks, step_numbers


def default_timeline_step(ds: data.Dataset) -> tuple[str, int, int] | None:
    """`step_kernel_runs`' and `step_queue_length`'s arguments for what the kernels page draws first: its
    first run, and the defaults of `timeline_choices` (None: no steps)."""
    from gpulens.analysis import launch, timeline

    runs = with_kernels(data.cached(ds, timeline.trace_runs))
    if not runs.height:
        return None
    run = runs["run"][0]
    steps = data.cached(ds, launch.step_launch_summary)
    ranks, step_numbers = timeline_choices(steps.filter(pl.col("run") == run) if "run" in steps.columns else steps)
    if not ranks or not step_numbers:
        return None
    return run, int(ranks[0]), int(step_numbers[min(TIMELINE_STEP_INDEX, len(step_numbers) - 1)])


def counts(ds: data.Dataset) -> dict[str, int]:
    from gpulens.analysis.dataset import dataset_summary

    result = fetch(ds, dataset_summary)
    return result if isinstance(result, dict) else {}


def require_tables(ds: data.Dataset, tables: tuple[str, ...], what: str, how: str) -> dict[str, int]:
    """Stop with an info line unless one of `tables` has rows."""
    rows = counts(ds)
    if not any(rows.get(table, 0) for table in tables):
        st.info(f"This dataset has no {what}. {how}", icon=":material/info:")
        st.stop()
    return rows


NO_TELEMETRY = "Sample GPUs into it with `gpulens collect --out DATASET`."
NO_TRACES = "Ingest kernel traces into it with `gpulens ingest TRACES --out DATASET`."


def chart(fig: go.Figure, key: str | None = None) -> None:
    """Draw `fig`, its names escaped (dashboard.escape): a kernel named
    `<a href=…>` shows as that text, not as a link."""
    from gpulens.dashboard.escape import escape_figure

    st.plotly_chart(escape_figure(fig), width="stretch", theme=None, config=PLOTLY_CONFIG, key=key)


def evidence_markdown(evidence: dict[str, Any]) -> str:
    """A finding's numbers as a two-column Markdown table, exact where short."""
    def cell(value: Any) -> str:
        if isinstance(value, bool) or value is None:
            text = json.dumps(value)
        elif isinstance(value, int):
            text = f"{value:,}"
        elif isinstance(value, float):
            text = f"{value:.6g}"
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
        return markdown_text(text)  # a kernel's name shows as text: no link, image or tag

    rows = "".join(f"| {cell(key)} | {cell(value)} |\n" for key, value in evidence.items())
    return "| evidence | value |\n|---|---|\n" + rows if rows else "_No numbers recorded._"


def naive(value: Any) -> Any:
    """A UTC datetime without its zone (Streamlit widgets want naive ones)."""
    return value.replace(tzinfo=None) if isinstance(value, datetime) and value.tzinfo else value


def fmt_share(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}" if abs(value) >= 0.1 else f"{value:.1%}"


def with_kernels(runs: pl.DataFrame) -> pl.DataFrame:
    """The runs of `trace_runs` that hold kernels (an NCCL log alone holds none)."""
    return runs.filter(pl.col("kernels").fill_null(0) > 0) if runs.height else runs


# How a missing value reads in a table: as in the report (report.format).
MISSING = "–"


def table(data: Any, **kwargs: Any) -> None:
    """`st.dataframe`, a missing value shown as MISSING (Streamlit writes "None")."""
    st.dataframe(data, placeholder=MISSING, **kwargs)


def run_picker(runs: pl.DataFrame, label: str = "Run", key: str = "run", index: int = 0) -> str | None:
    names = runs["run"].to_list() if runs.height else []
    if not names:
        return None
    return st.selectbox(label, names, index=min(index, len(names) - 1), key=key)


def caption_dataset(ds: data.Dataset) -> None:
    st.caption(f"Dataset: {markdown_code(ds.path)}")
