"""`gpulens export`: a dataset's runs in other tools' formats.

    gpulens export perfetto DATASET --run R [--ranks 0,2-3] [--steps 10-14] -o trace.json.gz
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from pathlib import Path

import click

from gpulens.collector.errors import UsageError

_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_ranks(text: str | None) -> list[int] | None:
    """`0,2-3` → [0, 2, 3]; None stays None (every rank)."""
    if text is None:
        return None
    ranks: list[int] = []
    for part in text.split(","):
        first, last = _range(part, "--ranks")
        ranks.extend(r for r in range(first, last + 1) if r not in ranks)
    return ranks


def parse_steps(text: str | None) -> tuple[int, int] | None:
    """`10-14` → (10, 14); `12` → (12, 12); None stays None (every step)."""
    return None if text is None else _range(text, "--steps")


def _range(text: str, option: str) -> tuple[int, int]:
    match = _RANGE.match(text)
    if match is None:
        raise UsageError(f"{option} {text!r}: expected N or A-B (A <= B), such as 3 or 10-14")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    if last < first:
        raise UsageError(f"{option} {text!r}: the range ends before it starts")
    return first, last


@click.group()
def export() -> None:
    """Write a dataset's run in another tool's format."""


@export.command()
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--run", required=True, help="The run to export (runs.run; `gpulens query DATASET \"select distinct run from runs\"`).")
@click.option("--ranks", default=None, help="The ranks to export: 0,2-3. Default: every rank of the run.")
@click.option("--steps", default=None, help="Profiler steps A-B (or one step N): from the start of step A to the "
                                            "end of step B on each rank. Default: the whole trace.")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The file to write: FILE.json.gz (gzip) or FILE.json.")
@click.option("--max-events", type=click.IntRange(min=1), default=10_000_000, show_default=True,
              help="Write at most this many events; the time-ordered kernels, runtime calls and CPU ops are cut there.")
@click.option("--no-findings", is_flag=True, help="Leave out the findings (which run every analysis first).")
def perfetto(dataset, run, ranks, steps, output, max_events, no_findings):
    """One run as a Chrome trace-event file for ui.perfetto.dev or chrome://tracing.

    One process per rank, named with its host and GPU: profiler steps,
    CPU threads with operators and runtime calls, one track per GPU
    stream with kernels, memcpys and memsets (flows from each launch call
    to its kernel), collectives, the GPU's telemetry as counters on the
    same clock, and findings as instants.

        gpulens export perfetto gpulens-data --run demo-training --ranks 0-1 --steps 5-6 -o trace.json.gz
    """
    from gpulens.analysis.dataset import open_dataset
    from gpulens.analysis.all_findings import all_findings
    from gpulens.analysis.perfetto import export_perfetto

    rank_list, step_range = parse_ranks(ranks), parse_steps(steps)
    con = open_dataset(dataset, analyses_on_demand=True)
    with contextlib.closing(con):
        findings = None if no_findings else all_findings(con)
        summary = export_perfetto(con, run, output, ranks=rank_list, steps=step_range, max_events=max_events,
                                  findings=findings)
    click.echo(f"{summary.path}: {summary.events:,} events, rank{'s' if len(summary.ranks) > 1 else ''} "
               f"{_ranks_text(summary.ranks)} of run {run}")
    if summary.cut:
        where = f" from {_utc(summary.cut_at_ns)} on" if summary.cut_at_ns is not None else ""
        click.echo(f"gpulens: warning: {summary.path}: cut at --max-events {max_events:,}: the events{where} are "
                   "left out (narrow it with --ranks or --steps, or raise --max-events)", err=True)


def _ranks_text(ranks: list[int]) -> str:
    parts: list[str] = []
    for rank in ranks:
        if parts and parts[-1].split("-")[-1] == str(rank - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{rank}"
        else:
            parts.append(str(rank))
    return ",".join(parts)


def _utc(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
