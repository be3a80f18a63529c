"""The collector loop: sample every GPU on a fixed grid, buffer, flush.

Timing. Ticks follow absolute deadlines on a wall-clock grid aligned to the
interval (a 1 s interval ticks on whole seconds), so there is no drift and
every GPU of a node, and every node with a synced clock, shares the same
`ts` values: node and rack sums are plain GROUP BYs. `ts` is the tick's
deadline; the reads happen within milliseconds after it. A tick that
overruns the next deadline makes the loop skip to the next deadline still
ahead; the skipped ticks are counted in an `events` row, never replayed.

Cadences. Every tick reads the fast metrics; every `slow_every_s` a tick is
also slow (processes, ECC, anything costly). The inventory is re-read at
each flush and written to `devices` when it changed.

Failures. A GPU that is lost becomes a `gpu_lost` event; the others keep
being sampled and the lost one is retried with exponential back-off (1 s
doubling to 60 s), with a `gpu_recovered` event when it answers again.
Any other error while sampling one GPU is a `sample_failed` event.

Stopping. SIGTERM and SIGINT wake the loop at once (a self-pipe), which
flushes what is buffered, records `collector_stop` and returns.

Faults of the dataset's disk. A flush that fails (full, read-only, gone)
keeps its rows in memory, up to `max_buffered_mb`, past which the oldest
samples are dropped and counted; it is logged once when the fault starts
and once when writing works again, and then everything kept is written,
with `write_failed` and `write_recovered` events. A dataset folder removed
under a running collector is made again, with the device inventory.
One collector per host and dataset: see `collector.lease`.

Observers. A `TickObserver` (the `/metrics` endpoint of
`collector.metrics_endpoint`) is handed the inventory, each tick's rows
once the tick is whole, and each event, on the loop's thread; it must not
block. Without one the loop does no extra work.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import select
import signal
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from gpulens.collector import boot_clock, hardware
from gpulens.collector.backend import Backend, DeviceInfo, GpuLost, ProcessSample
from gpulens.collector.errors import DatasetError, UsageError
from gpulens.collector.lease import CollectorLease, LeaseTakenOver
from gpulens.collector.jobs import UNKNOWN, JobReader
from gpulens.collector.throttle import LIMITING_REASONS
from gpulens.collector.wording import counted
from gpulens.collector.writer import DatasetWriter

log = logging.getLogger("gpulens.collector")

_RETRY_FIRST_S = 1.0
_RETRY_MAX_S = 60.0


# The shortest --interval: NVML and amdsmi refresh power and utilisation every
# 10-100 ms, so a shorter interval reads the same values again, and an
# 8-GPU tick itself takes a few ms (an interval of 1e-9 s gave billions of
# "skipped" ticks).
MIN_INTERVAL_S = 0.01


@dataclass
class CollectOptions:
    out: Path
    interval_s: float = 1.0
    flush_every_s: float = 60.0
    slow_every_s: float = 10.0
    duration_s: float | None = None
    host: str = field(default_factory=socket.gethostname)
    max_buffered_mb: float = 256.0
    # Where the collector reads each GPU process's job (collector.jobs);
    # None: nowhere, the job columns stay NULL. Processes whose backend
    # names their job (the sim's) are never looked up.
    proc_root: Path | None = Path("/proc")

    def validate(self) -> None:
        # Finite as well: the loop turns these into integer nanoseconds,
        # which inf overflows and NaN cannot be.
        for option, seconds in (("--interval", self.interval_s), ("--flush-every", self.flush_every_s),
                                ("--slow-every", self.slow_every_s)):
            if not (math.isfinite(seconds) and seconds > 0):
                raise UsageError(f"{option} must be a positive, finite number of seconds, got {seconds}")
        if self.interval_s < MIN_INTERVAL_S:
            raise UsageError(f"--interval must be at least {MIN_INTERVAL_S} s, got {self.interval_s}: the drivers "
                             "update their readings every 10-100 ms, and a node's GPUs take milliseconds to read")
        if self.slow_every_s < self.interval_s:
            raise UsageError(f"--slow-every ({self.slow_every_s} s) must not be shorter than --interval ({self.interval_s} s)")
        if not (math.isfinite(self.max_buffered_mb) and self.max_buffered_mb > 0):
            raise UsageError(f"--max-buffered-mb must be a positive number of MiB, got {self.max_buffered_mb}")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and self.duration_s >= 0):
            raise UsageError(f"--duration must be a finite number of seconds, 0 or more, got {self.duration_s}")


class TickObserver(Protocol):
    """Sees what the loop records, as it records it (on the loop's thread)."""

    def devices(self, devices: list[DeviceInfo], peaks: dict[int, dict[str, float | None]]) -> None:
        """The inventory, at start and whenever it changed; `peaks` by GPU index (`_nominal_peaks`)."""

    def tick(self, ts_ns: int, rows: list[tuple[DeviceInfo, dict[str, Any]]]) -> None:
        """Every GPU sampled at tick `ts_ns`, all at once: the rows as written (not to be changed)."""

    def event(self, kind: str, device: DeviceInfo | None, value: int | None) -> None:
        """An `events` row (see EVENTS_SCHEMA for the kinds)."""


@dataclass
class CollectSummary:
    ticks: int = 0
    samples: int = 0
    ticks_skipped: int = 0
    files_written: int = 0
    flush_errors: int = 0
    rows_dropped: int = 0
    # When the last flush succeeded (the collector's clock, epoch ns).
    last_flush_ns: int | None = None


@dataclass
class _GpuHealth:
    lost: bool = False
    retry_at_ns: int = 0
    retry_delay_s: float = _RETRY_FIRST_S
    limiting: frozenset[str] = frozenset()


class Collector:
    """Runs one backend into one dataset until stopped or `duration_s` ends."""

    def __init__(
        self,
        backend: Backend,
        options: CollectOptions,
        clock_ns: Callable[[], int] = time.time_ns,
        boot_clock_now: Callable[[], boot_clock.BootClock] = boot_clock.BootClock.now,
        observer: TickObserver | None = None,
    ) -> None:
        options.validate()
        self.backend = backend
        self.options = options
        # The lease first: the writer's start sweeps the host's staging files,
        # which must not be those of a collector still writing them.
        self.lease = CollectorLease(options.out, options.host, lease_s=3 * options.flush_every_s)
        self.lease.acquire()
        try:
            self.writer = DatasetWriter(options.out, options.host, int(options.max_buffered_mb * 1024 * 1024))
        except BaseException:
            self.lease.release()
            raise
        self._write_failing_since_ns: int | None = None
        self._dropped_before_fault = 0
        self._add_telemetry = self.writer.appender("telemetry")
        self.summary = CollectSummary()
        self._clock_ns = clock_ns
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        # poll(), not select(): a tenth less CPU per wake-up on a VM.
        self._waiter = select.poll()
        self._waiter.register(self._wake_r, select.POLLIN)
        self._devices: list[DeviceInfo] = []
        self._health: dict[int, _GpuHealth] = {}
        self._on_tick: list[Callable[[int], None]] = []
        self._boot_clock_now = boot_clock_now
        self._boot_origin_ns: int | None = None  # as last recorded
        self._observer = observer
        self._jobs = None if options.proc_root is None else JobReader(options.proc_root)

    # --- control --------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to flush and return (safe from a signal handler)."""
        self._stop.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.stop())

    @property
    def gpu_count(self) -> int:
        """The GPUs the backend found at start."""
        return len(self._devices)

    def on_tick(self, callback: Callable[[int], None]) -> None:
        """Call `callback(ts_ns)` after each tick (used by tests and the live view)."""
        self._on_tick.append(callback)

    # --- the loop ---------------------------------------------------------------

    def run(self) -> CollectSummary:
        interval_ns = int(round(self.options.interval_s * 1e9))
        slow_ns = int(round(self.options.slow_every_s * 1e9))
        flush_ns = int(round(self.options.flush_every_s * 1e9))
        start_ns = self._clock_ns()

        self._devices = self.backend.discover()
        self._health = {d.gpu_index: _GpuHealth() for d in self._devices}
        self._write_devices(start_ns)
        self._event(start_ns, "collector_start", None, f"backend={self.backend.name} gpus={len(self._devices)} interval_s={self.options.interval_s}")
        self._record_boot_clock(start_ns)
        self._flush_or_log()
        # What exists now (modules, the backend, the writer) lives as long as
        # the process: take it out of the cyclic collector's view, so that a
        # full collection scans only what the loop made since. In a 64-GPU
        # 10 Hz run each full collection otherwise cost ~40 ms.
        gc.freeze()

        # The first grid point after set-up (the first flush can be slow).
        setup_done_ns = self._clock_ns()
        # --duration counts sampling time: a slow first flush (a cold disk,
        # a busy node) does not eat into it.
        end_ns = None if self.options.duration_s is None else setup_done_ns + int(self.options.duration_s * 1e9)
        deadline_ns = -(-setup_done_ns // interval_ns) * interval_ns
        next_flush_ns = setup_done_ns + flush_ns
        last_slow_slot = None
        try:
            while not self._stop.is_set():
                if end_ns is not None and deadline_ns > end_ns:
                    break
                if not self._sleep_until(deadline_ns):
                    break
                slot = deadline_ns // slow_ns
                slow = slot != last_slow_slot
                last_slow_slot = slot
                self._tick(deadline_ns, slow)
                for callback in self._on_tick:
                    callback(deadline_ns)

                now_ns = self._clock_ns()
                if now_ns >= next_flush_ns:
                    self._refresh_devices(now_ns)
                    self._record_boot_clock(now_ns)
                    self._flush_or_log()
                    next_flush_ns = now_ns + flush_ns

                deadline_ns += interval_ns
                now_ns = self._clock_ns()
                if now_ns > deadline_ns:
                    behind = (now_ns - deadline_ns) // interval_ns + 1
                    deadline_ns += behind * interval_ns
                    self.summary.ticks_skipped += behind
                    self._event(now_ns, "ticks_skipped", None, f"tick overran by {counted(behind, 'interval')}", behind)
        finally:
            stop_ns = self._clock_ns()
            self._event(stop_ns, "collector_stop", None, f"ticks={self.summary.ticks} skipped={self.summary.ticks_skipped}")
            try:
                self.backend.close()
            finally:
                try:
                    self._make_root_again(stop_ns)
                    self.writer.flush()  # the final flush raises: the caller must know
                finally:
                    self.summary.files_written = len(self.writer.files_written)
                    self.lease.release()
                    os.close(self._wake_r)
                    os.close(self._wake_w)
                    gc.unfreeze()  # let the interpreter free everything at exit
        return self.summary

    def _sleep_until(self, deadline_ns: int) -> bool:
        """Wait for the deadline; False if asked to stop meanwhile."""
        while True:
            remaining_ns = deadline_ns - self._clock_ns()
            if self._stop.is_set():
                return False
            if remaining_ns <= 0:
                return True
            # poll's timeout is in whole ms: round up, never wake early.
            if self._waiter.poll(-(-remaining_ns // 1_000_000)):
                try:
                    os.read(self._wake_r, 64)
                except OSError:
                    pass

    def _tick(self, ts_ns: int, slow: bool) -> None:
        ts_us = ts_ns // 1000
        self.summary.ticks += 1
        add_telemetry = self._add_telemetry
        sampled = 0
        observed: list[tuple[DeviceInfo, dict[str, Any]]] | None = None if self._observer is None else []
        live_pids: set[int] | None = set() if slow and self._jobs is not None else None
        for device in self._devices:
            health = self._health[device.gpu_index]
            if health.lost and ts_ns < health.retry_at_ns:
                continue
            try:
                sample = self.backend.sample(device.gpu_index, ts_ns, slow)
            except GpuLost as lost:
                self._mark_lost(device, health, ts_ns, lost.detail)
                continue
            except Exception as error:  # one GPU's failure must not stop the others
                self._event(ts_ns, "sample_failed", device, f"{type(error).__name__}: {error}")
                continue
            if health.lost:
                health.lost = False
                health.retry_delay_s = _RETRY_FIRST_S
                self._event(ts_ns, "gpu_recovered", device, "GPU answers again")
            row = sample.values  # the sampler owns it from here: no copy
            row["ts"] = ts_us
            row["gpu_index"] = device.gpu_index
            row["gpu_uuid"] = device.gpu_uuid
            row["vendor"] = device.vendor
            add_telemetry(row)
            sampled += 1
            if observed is not None:
                observed.append((device, row))
            reasons = row.get("throttle_reasons")
            if reasons or health.limiting:  # else nothing held back, before or now
                self._track_throttle(device, health, ts_ns, reasons)
            if sample.processes is not None:
                for process in sample.processes:
                    self.writer.add("processes", self._process_row(ts_us, device, process, live_pids))
        if live_pids is not None:
            self._jobs.forget_others(live_pids)
        self.summary.samples += sampled
        if observed is not None:
            self._observer.tick(ts_ns, observed)
        for event in self.backend.poll_events():
            device = next((d for d in self._devices if d.gpu_index == event.gpu_index), None)
            self._event(ts_ns, event.kind, device, event.detail, event.value)

    def _process_row(self, ts_us: int, device: DeviceInfo, process: ProcessSample,
                     live_pids: set[int] | None) -> dict[str, Any]:
        job = process.job
        if job is None:
            if self._jobs is not None:
                job = self._jobs.identity(process.pid)
                if live_pids is not None:
                    live_pids.add(process.pid)
            else:
                job = UNKNOWN
        return {
            "ts": ts_us,
            "gpu_index": device.gpu_index,
            "gpu_uuid": device.gpu_uuid,
            "pid": process.pid,
            "process_name": process.process_name,
            "used_mem_bytes": process.used_mem_bytes,
            **job.columns(),
        }

    def _mark_lost(self, device: DeviceInfo, health: _GpuHealth, ts_ns: int, detail: str) -> None:
        if not health.lost:
            self._event(ts_ns, "gpu_lost", device, detail)
            health.lost = True
        else:
            health.retry_delay_s = min(_RETRY_MAX_S, health.retry_delay_s * 2)
        health.retry_at_ns = ts_ns + int(health.retry_delay_s * 1e9)

    def _track_throttle(self, device: DeviceInfo, health: _GpuHealth, ts_ns: int, reasons: list[str] | None) -> None:
        limiting = frozenset(reasons or ()) & LIMITING_REASONS
        if limiting == health.limiting:
            return
        if limiting and not health.limiting:
            self._event(ts_ns, "throttle_start", device, ",".join(sorted(limiting)))
        elif health.limiting and not limiting:
            self._event(ts_ns, "throttle_stop", device, ",".join(sorted(health.limiting)))
        health.limiting = limiting

    # --- inventory and events ------------------------------------------------------

    def _refresh_devices(self, now_ns: int) -> None:
        try:
            devices = self.backend.discover()
        except Exception as error:
            self._event(now_ns, "sample_failed", None, f"inventory: {type(error).__name__}: {error}")
            return
        if devices != self._devices:
            known = {d.gpu_index for d in self._devices}
            self._devices = devices
            for device in devices:
                if device.gpu_index not in known:
                    self._health[device.gpu_index] = _GpuHealth()
            self._write_devices(now_ns)

    def _write_devices(self, ts_ns: int) -> None:
        peaks = {}
        for device in self._devices:
            row = asdict(device)
            peaks[device.gpu_index] = _nominal_peaks(device)
            row.update(peaks[device.gpu_index])
            row["ts"] = ts_ns // 1000
            self.writer.add("devices", row)
        if self._observer is not None:
            self._observer.devices(list(self._devices), peaks)

    def _record_boot_clock(self, ts_ns: int) -> None:
        """The epoch time this boot began (an `events` row, kind `boot_clock`),
        by which traces stamped with the boot-time clock (rocprofv3) are
        placed on the epoch where they are ingested (collector.boot_clock):
        at start, and again once a clock step has moved it."""
        clock = self._boot_clock_now()
        if clock.origin_ns is None:  # no boot-time clock here (not Linux): nothing to place traces by
            return
        if self._boot_origin_ns is not None and abs(clock.origin_ns - self._boot_origin_ns) <= boot_clock.RECORD_DRIFT_NS:
            return
        self._boot_origin_ns = clock.origin_ns
        self._event(ts_ns, boot_clock.EVENT_KIND, None, boot_clock.record_detail(clock), clock.origin_ns)

    def _event(self, ts_ns: int, kind: str, device: DeviceInfo | None, detail: str, value: int | None = None) -> None:
        self.writer.add_event(
            ts_ns, kind, detail,
            gpu_index=None if device is None else device.gpu_index,
            gpu_uuid=None if device is None else device.gpu_uuid,
            value=value,
        )
        if self._observer is not None:
            self._observer.event(kind, device, value)

    def _flush_or_log(self) -> None:
        """Flush; on failure keep the rows for the next try (within the
        memory bound), saying so once when the fault starts and once when
        it clears."""
        now_ns = self._clock_ns()
        self._make_root_again(now_ns)
        try:
            self.writer.flush()
            self.summary.last_flush_ns = self._clock_ns()
            # Renewed with the flush: a disk that turns read-only between the
            # two is one fault, said once, not a lease error and then a flush error.
            self.lease.renew()
        except LeaseTakenOver as error:
            log.error("%s", error)
        except DatasetError as error:
            self.summary.flush_errors += 1
            dropped = self.writer.shed_oldest()
            if self._write_failing_since_ns is None:
                self._write_failing_since_ns = now_ns
                self._dropped_before_fault = self.summary.rows_dropped
                self._event(now_ns, "write_failed", None, str(error))
                log.error("%s (rows kept in memory, up to %g MiB, and written when the disk takes them again)",
                          error, self.options.max_buffered_mb)
            if dropped:
                self.summary.rows_dropped += dropped
            return
        if self._write_failing_since_ns is not None:
            failed_s = (now_ns - self._write_failing_since_ns) / 1e9
            dropped = self.summary.rows_dropped - self._dropped_before_fault
            detail = (f"writing again after {failed_s:.0f} s of failed flushes; "
                      + (f"{counted(dropped, 'oldest row')} dropped over the memory bound" if dropped
                         else "no row lost"))
            self._event(now_ns, "write_recovered", None, detail, dropped)
            log.warning("%s: %s", self.options.out, detail)
            self._write_failing_since_ns = None

    def _make_root_again(self, ts_ns: int) -> None:
        """A dataset folder removed under the collector: make it again,
        with the device inventory and the lease, and say so once."""
        if not self.writer.root_replaced():
            return
        try:
            self.writer.adopt_root()
            self.lease.acquire()
        except DatasetError as error:
            log.error("%s", error)
            return
        log.warning("%s: the dataset folder was removed; writing a new one from now on, with the device inventory",
                    self.options.out)
        self._write_devices(ts_ns)
        self._event(ts_ns, "dataset_recreated", None, "the dataset folder was removed under the collector")


def _nominal_peaks(device: DeviceInfo) -> dict[str, float | None]:
    """Per-direction nominal peaks for the devices table (collector.hardware)."""
    spec = hardware.lookup_gpu(device.model)
    link_peak = spec.link_peak_bytes_per_s if spec is not None and device.link_count else None
    gen = device.pcie_gen or (spec.pcie_gen if spec else None)
    width = device.pcie_width or (spec.pcie_width if spec else None)
    pcie_peak = hardware.pcie_peak_bytes_per_s(gen, width) if gen and width else None
    return {"link_peak_bytes_per_s": link_peak, "pcie_peak_bytes_per_s": pcie_peak}
