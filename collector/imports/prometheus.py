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
from gpulens.collector.imports.rows import WideRows, fill_devices

# Points per series a query asks for, under Prometheus's limit of 11,000.
CHUNK_POINTS = 10_000
REQUEST_TIMEOUT_S = 60.0


class PrometheusReader:
    def __init__(self, url: str, host: str | None, since: dt.datetime, until: dt.datetime, step_s: float) -> None:
        self.url = url.rstrip("/")
        self.source = url
        self.host = host
        self.since_s = since.timestamp()
        self.until_s = until.timestamp()
        self.step_s = step_s
        self.devices: dict[tuple[str, int], dict[str, Any]] = {}

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
            rows = WideRows()
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
                    sample_at = {float(t): float(v) for t, v in sample_times}
                    for t, value in series["values"]:
                        sample_s = sample_at.get(float(t))
                        if sample_s is None:
                            continue
                        ts_us = round(sample_s * 1e6)
                        if ts_us < self.since_s * 1e6:
                            continue  # a sample older than the window, seen by its first step
                        if ts_us <= done_until.get((host, gpu), -1):
                            continue
                        latest[(host, gpu)] = max(ts_us, latest.get((host, gpu), ts_us))
                        rows.set(host, gpu, ts_us, metric.column, float(value) * metric.scale, PREFERENCE[name], uuid)
                        self._note_device(labels, host, gpu, uuid, ts_us)
            done_until.update(latest)
            if len(rows):
                table = rows.table()
                fill_devices(table, self.devices)
                yield table

    def _keys(self, labels: dict[str, str], name: str) -> tuple[str, int, str | None]:
        gpu = labels.get("gpu")
        if gpu is None or not gpu.isdigit():
            raise ImportSourceError(self.source, f"a {name} series has no gpu label: {labels}")
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
        if answer.get("status") != "success":
            raise ImportSourceError(self.source, f"{query}: {one_line(answer.get('error', answer))}")
        data = answer.get("data", {})
        if data.get("resultType") != "matrix":
            raise ImportSourceError(self.source, f"{query}: not a range answer ({data.get('resultType')})")
        return data.get("result", [])


def _error_body(error: urllib.error.HTTPError) -> dict[str, Any] | None:
    """Prometheus's JSON error (a bad query answers 400 with one), if any."""
    try:
        body = json.loads(error.read())
    except (ValueError, OSError):
        return None
    return body if isinstance(body, dict) and "error" in body else None


def _labels_key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))
