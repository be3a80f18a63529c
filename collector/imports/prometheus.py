"""A live Prometheus or VictoriaMetrics → telemetry rows, for dcgm-exporter's
metric names (`imports.metric_names.DCGM_METRICS`).

Asks `/api/v1/query_range` for each metric over [since, until) in chunks
of CHUNK_POINTS steps: Prometheus refuses a query of more than 11,000
points per series, and a chunk's answer is all that is held at once. A
range query answers at every step with the latest sample at or before it,
so each metric is asked twice, `NAME` and `timestamp(NAME)`: the second
gives the time of the sample behind each answer, and the answers of one
sample collapse into one row at its own (scrape) time. With `step_s` at
most the scrape interval every sample is seen once; with a longer step,
some are skipped (an even subsample). The series of one scrape share its
time, so a node's GPUs share a tick, as the collector's do.

`host` selects the series of that `Hostname` label; without it, every
host's series are imported, each under its own `Hostname`.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from gpulens.collector.errors import ImportSourceError, one_line
from gpulens.collector.imports.metric_names import DCGM_LABELS, DCGM_METRICS, PREFERENCE, gpu_uuid
from gpulens.collector.imports.rows import WideRows, counted, fill_devices

# Points per series a query asks for, under Prometheus's limit of 11,000.
CHUNK_POINTS = 10_000
REQUEST_TIMEOUT_S = 60.0
# The largest GPU index a label may give (the gpu_index column is int32).
_MAX_GPU_INDEX = (1 << 31) - 1
# Seconds since 1970 that a timestamp[us] holds.
_MAX_TIME_S = ((1 << 63) - 1) / 1e6


class PrometheusReader:
    def __init__(self, url: str, host: str | None, since: dt.datetime, until: dt.datetime, step_s: float) -> None:
        self.url = url.rstrip("/")
        self.source = url
        self.host = host
        self.since_s = since.timestamp()
        self.until_s = until.timestamp()
        self.step_s = step_s
        self.devices: dict[tuple[str, int], dict[str, Any]] = {}
        self._dropped: dict[str, int] = {}

    @property
    def warnings(self) -> list[str]:
        """The odd values dropped, counted (a range query answers one sample
        at several steps: those are not duplicates)."""
        line = counted("odd value{s} dropped", self._dropped)
        return [line] if line else []

    def chunks(self) -> Iterator[tuple[float, float]]:
        """[start, end] of each query, both evaluated, on one grid of `step_s`
        from `since`. The grid runs one step past `until`: a sample in the
        last step before `until` is answered only at a point after it (the
        rows after `until` are dropped later)."""
        start = self.since_s
        last = self.until_s + self.step_s
        span = (CHUNK_POINTS - 1) * self.step_s
        while start <= last:
            end = min(start + span, last)
            yield start, end
            start = end + self.step_s

    def tables(self) -> Iterator[pa.Table]:
        selector = "{Hostname=%s}" % json.dumps(self.host) if self.host else ""
        # The latest sample time of each GPU in the chunks before: the sample
        # latest at a chunk's last point is answered again at the next
        # chunk's first point.
        done_until: dict[tuple[str, int], int] = {}
        for start, end in self.chunks():
            rows = WideRows(dropped=self._dropped)
            latest: dict[tuple[str, int], int] = {}
            for name, metric in DCGM_METRICS.items():
                values = self._query(f"{name}{selector}", start, end)
                times = self._query(f"timestamp({name}{selector})", start, end)
                times_by_labels = {_labels_key(series["metric"]): series["values"] for series in times}
                for series in values:
                    labels = series["metric"]
                    sample_times = times_by_labels.get(_labels_key(labels))
                    if sample_times is None:
                        continue
                    host, gpu, uuid = self._keys(labels, name)
                    sample_at = {self._number(t, name): self._number(v, name) for t, v in sample_times}
                    for t, value in series["values"]:
                        sample_s = sample_at.get(self._number(t, name))
                        if sample_s is None or not abs(sample_s) <= _MAX_TIME_S:
                            continue  # no sample, or a time no timestamp holds: outside any window
                        ts_us = round(sample_s * 1e6)
                        if ts_us < self.since_s * 1e6:
                            continue  # a sample older than the window, seen by its first step
                        if ts_us <= done_until.get((host, gpu), -1):
                            continue
                        latest[(host, gpu)] = max(ts_us, latest.get((host, gpu), ts_us))
                        rows.set(host, gpu, ts_us, metric.column, self._number(value, name) * metric.scale, PREFERENCE[name], uuid)
                        self._note_device(labels, host, gpu, uuid, ts_us)
            done_until.update(latest)
            if len(rows):
                table = rows.table()
                fill_devices(table, self.devices)
                yield table

    def _number(self, text: Any, name: str) -> float:
        """A time or a value of an answer (Prometheus writes values as text)."""
        try:
            return float(text)
        except (TypeError, ValueError):
            raise ImportSourceError(self.source, f"{name}: {one_line(text)[:40]!r} in the answer is not a number") from None

    def _keys(self, labels: dict[str, str], name: str) -> tuple[str, int, str | None]:
        gpu = labels.get("gpu")
        if gpu is None or not gpu.isdigit() or int(gpu) > _MAX_GPU_INDEX:
            raise ImportSourceError(self.source, f"a {name} series has no gpu label that is a GPU index: "
                                                 f"{one_line(labels)[:200]}")
        host = self.host or labels.get("Hostname")
        if not host:
            raise ImportSourceError(self.source, f"a {name} series names no host (no Hostname label): give --host NAME")
        return host, int(gpu), gpu_uuid(labels.get("UUID"))

    def _note_device(self, labels: dict[str, str], host: str, gpu: int, uuid: str | None, ts_us: int) -> None:
        device = self.devices.get((host, gpu))
        if device is not None and device["ts"] >= ts_us:
            return
        device = {"ts": ts_us, "host": host, "gpu_index": gpu, "gpu_uuid": uuid, "vendor": "nvidia"}
        for label, column in DCGM_LABELS.items():
            if column in ("model", "pci_bus_id", "driver_version") and labels.get(label):
                device[column] = labels[label]
        self.devices[(host, gpu)] = device

    def _query(self, query: str, start: float, end: float) -> list[dict[str, Any]]:
        parameters = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                             "step": f"{self.step_s:g}"})
        url = f"{self.url}/api/v1/query_range?{parameters}"
        try:
            with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as error:
            answer = _error_body(error)
            if answer is None:
                raise ImportSourceError(self.source, f"{query}: HTTP {error.code} {error.reason}") from error
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            raise ImportSourceError(self.source, f"cannot query it ({one_line(reason)})") from error
        except RecursionError:
            raise ImportSourceError(self.source, f"{query}: the answer is JSON nested too deep") from None
        if not isinstance(answer, dict):
            raise ImportSourceError(self.source, f"{query}: the answer is not a Prometheus API object")
        if answer.get("status") != "success":
            raise ImportSourceError(self.source, f"{query}: {one_line(answer.get('error', answer))}")
        data = answer.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
            raise ImportSourceError(self.source, f"{query}: not a range answer ({one_line(kind)[:80]})")
        result = data.get("result", [])
        if not isinstance(result, list) or not all(_is_series(series) for series in result):
            raise ImportSourceError(self.source, f"{query}: a range answer whose result is not a list of series")
        return result


def _error_body(error: urllib.error.HTTPError) -> dict[str, Any] | None:
    """Prometheus's JSON error (a bad query answers 400 with one), if any."""
    try:
        body = json.loads(error.read())
    except (ValueError, OSError):
        return None
    return body if isinstance(body, dict) and "error" in body else None


def _is_series(series: Any) -> bool:
    """A matrix series: its labels (text) and its [time, "value"] pairs."""
    return (isinstance(series, dict) and isinstance(series.get("metric"), dict)
            and all(isinstance(v, str) for v in series["metric"].values())
            and isinstance(series.get("values"), list)
            and all(isinstance(p, list) and len(p) == 2 for p in series["values"]))


def _labels_key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))
