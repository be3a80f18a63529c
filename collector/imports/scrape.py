"""Prometheus text-format scrapes of dcgm-exporter or nvidia_gpu_exporter
(`curl -s node:9400/metrics > node.prom`) → telemetry rows.

Parsed with `prometheus_client.parser` (its public text parser); the
names and labels are mapped by `imports.metric_names`. A sample's own
timestamp (`name{...} value 1714564800123`) is its time; a scrape without
timestamps (the exporters write none) is one sample at the file's
modification time, the moment `curl` finished writing it. Series of other
metrics (the exporters' process metrics, say) are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from gpulens.collector.errors import ImportSourceError, one_line
from gpulens.collector.imports.metric_names import (
    ALL_METRICS,
    DCGM_LABELS,
    DCGM_METRICS,
    NVIDIA_GPU_EXPORTER_DEVICE_METRICS,
    NVIDIA_GPU_EXPORTER_INDEX,
    NVIDIA_GPU_EXPORTER_INFO,
    NVIDIA_GPU_EXPORTER_INFO_LABELS,
    PREFERENCE,
    gpu_uuid,
)
from gpulens.collector.imports.rows import WideRows, counted, fill_devices

# The largest GPU index a label may give (the gpu_index column is int32).
_MAX_GPU_INDEX = (1 << 31) - 1
# Sample times a timestamp[us] holds: int64 microseconds.
_MAX_TIME_US = (1 << 63) - 1


class ScrapeReader:
    def __init__(self, path: Path, host: str | None) -> None:
        self.path = Path(path)
        self.source = str(path)
        self.host = host
        self.devices: dict[tuple[str, int], dict[str, Any]] = {}
        self._dropped: dict[str, int] = {}
        self._duplicates: dict[str, int] = {}
        self._text = ""

    @property
    def warnings(self) -> list[str]:
        """What was skipped, counted: odd values, samples given twice."""
        lines = [counted("odd value{s} dropped", self._dropped),
                 counted("duplicate sample{s} dropped", self._duplicates, "the first of each series and time kept")]
        return [line for line in lines if line]

    def tables(self) -> Iterator[pa.Table]:
        text = self._text = read_text(self.path, self.source)
        try:
            modified_us = os.stat(self.path).st_mtime_ns // 1000
        except OSError as error:
            raise ImportSourceError(self.source, f"cannot read it ({one_line(error)})") from error
        samples = self._samples(text)
        index_by_uuid: dict[str, int] = {}
        info_by_uuid: dict[str, dict[str, str]] = {}
        device_values: dict[str, dict[str, float]] = {}
        for name, labels, value, _ in samples:
            if name == NVIDIA_GPU_EXPORTER_INDEX and labels.get("uuid"):
                if not (value.is_integer() and 0 <= value <= _MAX_GPU_INDEX):
                    raise ImportSourceError(self.source, f"{name} of GPU {labels['uuid']} is {value:g}, not a GPU index")
                index_by_uuid[gpu_uuid(labels["uuid"])] = int(value)
            elif name == NVIDIA_GPU_EXPORTER_INFO and labels.get("uuid"):
                info_by_uuid[gpu_uuid(labels["uuid"])] = labels
            elif name in NVIDIA_GPU_EXPORTER_DEVICE_METRICS and labels.get("uuid"):
                metric = NVIDIA_GPU_EXPORTER_DEVICE_METRICS[name]
                device_values.setdefault(gpu_uuid(labels["uuid"]), {})[metric.column] = value * metric.scale
        for uuid, info in info_by_uuid.items():
            if uuid not in index_by_uuid and info.get("index", "").isdigit():
                index_by_uuid[uuid] = int(info["index"])
        rows = WideRows(dropped=self._dropped, duplicates=self._duplicates)
        for name, labels, value, timestamp_us in samples:
            metric = ALL_METRICS.get(name)
            if metric is None:
                continue
            ts_us = timestamp_us if timestamp_us is not None else modified_us
            if name in DCGM_METRICS:
                host, gpu, uuid = self._dcgm_keys(labels, name)
                self._note_dcgm_device(labels, host, gpu, uuid, ts_us)
            else:
                uuid = gpu_uuid(labels.get("uuid"))
                if uuid not in index_by_uuid:
                    raise ImportSourceError(self.source, f"{name}: GPU {labels.get('uuid')} has no "
                                                         f"{NVIDIA_GPU_EXPORTER_INDEX} series to give its index")
                gpu = index_by_uuid[uuid]
                host = self._host(labels.get("hostname"), name)
                self._note_exporter_device(info_by_uuid.get(uuid, {}), device_values.get(uuid, {}), host, gpu,
                                           uuid, ts_us)
            rows.set(host, gpu, ts_us, metric.column, value * metric.scale, PREFERENCE[name], uuid)
        if len(rows):
            table = rows.table()
            fill_devices(table, self.devices)
            yield table

    def _samples(self, text: str) -> list[tuple[str, dict[str, str], float, int | None]]:
        try:
            families = list(text_string_to_metric_families(text))
        except (ValueError, TypeError, IndexError) as error:
            line, problem = self._bad_line(text, error)
            raise ImportSourceError(self.source, f"not a Prometheus text-format line ({problem})", line) from error
        samples = []
        for family in families:
            for sample in family.samples:
                name = sample.name
                if family.type == "counter" and name == family.name + "_total":
                    name = family.name  # the parser names a counter's sample NAME_total; the exporter did not
                timestamp = sample.timestamp
                if timestamp is not None:
                    # the parser gives seconds (a float, or a Timestamp of sec and nsec)
                    seconds = float(timestamp) if not hasattr(timestamp, "sec") else timestamp.sec + timestamp.nsec / 1e9
                    timestamp = round(seconds * 1e6) if abs(seconds) < _MAX_TIME_US / 1e6 else None
                    if timestamp is None:
                        raise ImportSourceError(self.source, f"{name}: sample time {sample.timestamp} is beyond any "
                                                             "time a timestamp holds (milliseconds since 1970)",
                                                _line_of(text, name, sample.labels))
                samples.append((name, dict(sample.labels), float(sample.value), timestamp))
        return samples

    def _bad_line(self, text: str, error: Exception) -> tuple[int | None, str]:
        """The first line the parser refuses on its own (the error path only)."""
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                list(text_string_to_metric_families(line + "\n"))
            except (ValueError, TypeError, IndexError) as line_error:
                return number, one_line(line_error) or line.strip()[:80]
        return None, one_line(error)

    def _host(self, label: str | None, name: str) -> str:
        host = self.host or label
        if not host:
            raise ImportSourceError(self.source, f"{name} names no host (no Hostname label): give --host NAME")
        return host

    def _dcgm_keys(self, labels: dict[str, str], name: str) -> tuple[str, int, str | None]:
        gpu = labels.get("gpu")
        if gpu is None or not gpu.isdigit():
            raise ImportSourceError(self.source, f"{name} has no gpu label")
        if int(gpu) > _MAX_GPU_INDEX:
            raise ImportSourceError(self.source, f"{name}: gpu label {gpu[:40]} is not a GPU index",
                                    _line_of(self._text, name, labels))
        return self._host(labels.get("Hostname"), name), int(gpu), gpu_uuid(labels.get("UUID"))

    def _note_dcgm_device(self, labels: dict[str, str], host: str, gpu: int, uuid: str | None, ts_us: int) -> None:
        if (host, gpu) in self.devices:
            return
        device: dict[str, Any] = {"ts": ts_us, "host": host, "gpu_index": gpu, "gpu_uuid": uuid, "vendor": "nvidia"}
        for label, column in DCGM_LABELS.items():
            if column in ("model", "pci_bus_id", "driver_version") and labels.get(label):
                device[column] = labels[label]
        self.devices[(host, gpu)] = device

    def _note_exporter_device(self, info: dict[str, str], values: dict[str, float], host: str, gpu: int,
                              uuid: str | None, ts_us: int) -> None:
        if (host, gpu) in self.devices:
            return
        device: dict[str, Any] = {"ts": ts_us, "host": host, "gpu_index": gpu, "gpu_uuid": uuid, "vendor": "nvidia"}
        for label, column in NVIDIA_GPU_EXPORTER_INFO_LABELS.items():
            if column != "gpu_index" and info.get(label) and not info[label].startswith("["):
                device[column] = info[label]
        for column, value in values.items():
            device[column] = int(value) if column in ("pcie_gen", "pcie_width") else value
        self.devices[(host, gpu)] = device


def read_text(path: Path, source: str) -> str:
    """A file as UTF-8 text; bytes that are not name the line they are on."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ImportSourceError(source, f"cannot read it ({one_line(error)})") from error
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ImportSourceError(source, f"byte 0x{data[error.start]:02x} is not UTF-8 text", line) from None


def _line_of(text: str, name: str, labels: dict[str, str]) -> int | None:
    """The first line of a sample of `name` with `labels`' values (the error
    path only)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith(name) and all(value in line for value in labels.values()):
            return number
    return None
