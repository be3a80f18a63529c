"""The dataset contract as explicit, versioned Arrow schemas.

Every table gpulens writes is declared here, once. Writers build their
Arrow tables from these schemas (a column a backend did not fill is NULL),
and readers in `analysis/` can rely on the names and types. Units are in the
column names; times are UTC timestamps (µs) or int64 epoch nanoseconds.

Changing the meaning or name of a column needs a bump of `SCHEMA_VERSION`
and a reader for the old version; adding a column does not.

Versions: 3 added the job columns of `processes` (collector.jobs); files
of version 2 have none, and `analysis.dataset` reads them as NULL.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 3

TS_TYPE = pa.timestamp("us", tz="UTC")


def _schema(fields: list[tuple[str, pa.DataType]], table: str) -> pa.Schema:
    return pa.schema(
        [pa.field(name, dtype) for name, dtype in fields],
        metadata={"gpulens.table": table, "gpulens.schema_version": str(SCHEMA_VERSION)},
    )


# --- telemetry: one row per GPU per sample ---------------------------------

TELEMETRY_KEY_FIELDS: list[tuple[str, pa.DataType]] = [
    ("ts", TS_TYPE),
    ("host", pa.string()),
    ("gpu_index", pa.int32()),
    ("gpu_uuid", pa.string()),
    ("vendor", pa.string()),
]

# Metrics, in the order they appear in the files. Every one is nullable:
# NULL means "this device does not report it", never zero.
TELEMETRY_METRIC_FIELDS: list[tuple[str, pa.DataType]] = [
    # Driver-averaged board power (1 s window on Ampere and newer).
    ("power_w", pa.float64()),
    # Instantaneous board power, where the driver exposes the field.
    ("power_instant_w", pa.float64()),
    # Highest power in the driver's sample buffer since the previous tick.
    ("power_max_w", pa.float64()),
    ("power_limit_w", pa.float64()),
    # Cumulative energy since the driver loaded.
    ("energy_j", pa.float64()),
    ("gpu_util_pct", pa.float32()),
    ("mem_util_pct", pa.float32()),
    ("sm_active_pct", pa.float32()),
    ("sm_clock_mhz", pa.int32()),
    ("mem_clock_mhz", pa.int32()),
    ("temp_c", pa.float32()),
    ("mem_temp_c", pa.float32()),
    ("mem_used_bytes", pa.int64()),
    ("mem_total_bytes", pa.int64()),
    # Clock-event (throttle) reasons active at the sample, decoded to names
    # (collector.throttle); the raw bit mask is kept beside them.
    ("throttle_reasons", pa.list_(pa.string())),
    ("throttle_reasons_mask", pa.int64()),
    # Cumulative time spent held back by the power or thermal limit.
    ("power_violation_ns", pa.int64()),
    ("thermal_violation_ns", pa.int64()),
    ("pcie_tx_bytes_per_s", pa.float64()),
    ("pcie_rx_bytes_per_s", pa.float64()),
    # Both directions together, where the device does not split them (AMD's
    # firmware metrics); NULL where TX and RX are known separately.
    ("pcie_bytes_per_s", pa.float64()),
    ("pcie_replay_count", pa.int64()),
    # NVLink (NVIDIA) or XGMI (AMD), summed over the GPU's links.
    ("link_tx_bytes_per_s", pa.float64()),
    ("link_rx_bytes_per_s", pa.float64()),
    ("ecc_corrected_count", pa.int64()),
    ("ecc_uncorrected_count", pa.int64()),
]

TELEMETRY_METRICS: tuple[str, ...] = tuple(name for name, _ in TELEMETRY_METRIC_FIELDS)
TELEMETRY_SCHEMA = _schema(TELEMETRY_KEY_FIELDS + TELEMETRY_METRIC_FIELDS, "telemetry")
TELEMETRY_COLUMNS: tuple[str, ...] = tuple(TELEMETRY_SCHEMA.names)

# The text that takes a few values each (a node's name, its GPUs' UUIDs,
# the vendor, the throttle reasons' names). An importer hands it
# dictionary-encoded, as TELEMETRY_ENCODED_SCHEMA, and it reaches the
# Parquet writer so: the writer then writes the codes it is given rather
# than hashing each row's strings again (collector.imports.store). Read
# back, the files have TELEMETRY_SCHEMA.
TELEMETRY_DICTIONARY_COLUMNS: tuple[str, ...] = ("host", "gpu_uuid", "vendor", "throttle_reasons")
_TEXT_CODES = pa.dictionary(pa.int32(), pa.string())
TELEMETRY_ENCODED_SCHEMA = pa.schema(
    [f if f.name not in TELEMETRY_DICTIONARY_COLUMNS else
     pa.field(f.name, pa.list_(_TEXT_CODES) if pa.types.is_list(f.type) else _TEXT_CODES)
     for f in TELEMETRY_SCHEMA],
    metadata=TELEMETRY_SCHEMA.metadata,
)

# --- devices: the inventory at start-up and on change -------------------------

DEVICES_SCHEMA = _schema(
    [
        ("ts", TS_TYPE),
        ("host", pa.string()),
        ("gpu_index", pa.int32()),
        ("gpu_uuid", pa.string()),
        ("vendor", pa.string()),
        ("model", pa.string()),
        ("pci_bus_id", pa.string()),
        ("serial", pa.string()),
        ("driver_version", pa.string()),
        ("backend_library_version", pa.string()),
        ("mem_total_bytes", pa.int64()),
        ("power_limit_min_w", pa.float64()),
        ("power_limit_default_w", pa.float64()),
        ("power_limit_max_w", pa.float64()),
        ("power_limit_w", pa.float64()),
        ("pcie_gen", pa.int32()),
        ("pcie_width", pa.int32()),
        ("link_kind", pa.string()),
        ("link_count", pa.int32()),
        # Nominal peaks from collector.hardware, per direction.
        ("link_peak_bytes_per_s", pa.float64()),
        ("pcie_peak_bytes_per_s", pa.float64()),
    ],
    "devices",
)

# --- events: discrete happenings ---------------------------------------------

EVENTS_SCHEMA = _schema(
    [
        ("ts", TS_TYPE),
        ("host", pa.string()),
        ("gpu_index", pa.int32()),
        ("gpu_uuid", pa.string()),
        # collector_start, collector_stop, gpu_lost, gpu_recovered, xid,
        # ticks_skipped, sample_failed, throttle_start, throttle_stop,
        # gpu_reset, gpu_reset_done, vm_fault (AMD), boot_clock (value: the
        # epoch ns at which this boot began; detail: boot_id=<kernel boot id>
        # hostname=<the machine's own name>), write_failed, write_recovered
        # (value: rows dropped over the memory bound meanwhile),
        # dataset_recreated
        ("kind", pa.string()),
        ("detail", pa.string()),
        # A count or code that goes with the kind (ticks skipped, XID code).
        ("value", pa.int64()),
    ],
    "events",
)

# --- processes: compute processes per GPU, on the slow cadence ----------------

PROCESSES_SCHEMA = _schema(
    [
        ("ts", TS_TYPE),
        ("host", pa.string()),
        ("gpu_index", pa.int32()),
        ("gpu_uuid", pa.string()),
        ("pid", pa.int64()),
        ("process_name", pa.string()),
        ("used_mem_bytes", pa.int64()),
        # The job the process belongs to (collector.jobs), read once per
        # process; NULL where /proc does not say (or with the sim backend,
        # where the simulated job says).
        ("slurm_job_id", pa.string()),
        # A number, or batch | extern | interactive
        ("slurm_step_id", pa.string()),
        ("slurm_procid", pa.int32()),
        ("slurm_job_user", pa.string()),
        ("k8s_pod_uid", pa.string()),
        ("k8s_container_id", pa.string()),
        ("k8s_namespace", pa.string()),
        ("k8s_pod_name", pa.string()),
        # NSpid of /proc/PID/status: the pid in each PID namespace, the
        # host's first and the innermost (a container's, as its traces
        # record it) last.
        ("nspid", pa.list_(pa.int64())),
    ],
    "processes",
)

# --- traces: normalised kernel-trace tables, per run ---------------------------

_RUN_RANK: list[tuple[str, pa.DataType]] = [("run", pa.string()), ("rank", pa.int32())]
_INTERVAL: list[tuple[str, pa.DataType]] = [
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("dur_ns", pa.int64()),
]

KERNELS_SCHEMA = _schema(
    _RUN_RANK
    + [
        ("device", pa.int32()),
        ("stream", pa.int64()),
        ("name", pa.string()),
        # compute | communication | memory (collector.ingest.categories)
        ("category", pa.string()),
        # kernel | memcpy | memset
        ("kind", pa.string()),
    ]
    + _INTERVAL
    + [
        ("correlation_id", pa.int64()),
        ("external_id", pa.int64()),
        ("grid", pa.string()),
        ("block", pa.string()),
        ("bytes", pa.int64()),
        # Derived when the file is written (collector.derive), from the same
        # file's api_calls and profiler steps: the launching runtime call,
        # the step, whether per-rank aggregates count the kernel, and what
        # the idle gap it ends on its rank and on its stream.
        ("launch_call_name", pa.string()),
        ("launch_call_start_ns", pa.int64()),
        ("launch_call_ns", pa.int64()),
        ("launch_delay_ns", pa.int64()),
        ("launch_queue_ns", pa.int64()),
        ("step", pa.int64()),
        ("scoped", pa.bool_()),
        ("rank_gap_ns", pa.int64()),
        ("rank_gap_host_wait", pa.bool_()),
        ("stream_gap_ns", pa.int64()),
        ("stream_gap_host_wait", pa.bool_()),
    ],
    "kernels",
)

API_CALLS_SCHEMA = _schema(
    _RUN_RANK
    + [("pid", pa.int64()), ("tid", pa.int64()), ("name", pa.string())]
    + _INTERVAL
    + [("correlation_id", pa.int64()), ("external_id", pa.int64())],
    "api_calls",
)

CPU_OPS_SCHEMA = _schema(
    _RUN_RANK
    + [("pid", pa.int64()), ("tid", pa.int64()), ("name", pa.string())]
    + _INTERVAL
    + [("external_id", pa.int64())],
    "cpu_ops",
)

ANNOTATIONS_SCHEMA = _schema(
    _RUN_RANK
    + [
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("name", pa.string()),
        # profiler_step | user | gpu_user | nvtx | instant (a mark: start_ns = end_ns)
        ("kind", pa.string()),
        # N of "ProfilerStep#N"; NULL for other annotations.
        ("step", pa.int64()),
    ]
    + _INTERVAL
    # Derived (collector.derive), profiler-step rows only: the time some
    # kernel of the rank ran within the step.
    + [("gpu_busy_ns", pa.int64())],
    "annotations",
)

# Derived (collector.derive): each GPU's time of a rank tiled by phase:
# compute (any compute kernel runs), else communication, else memory, else
# idle; the main device's tiles span the rank's kernels there and its
# profiler steps. Tiles are cut at multiples of 2^bucket_bits ns (`bucket`
# = start >> bucket_bits; 24 bits, more where a device's span is hours: see
# collector.derive.PHASE_MAX_BUCKETS) and carry each phase's time before
# them on that device.
GPU_PHASES_SCHEMA = _schema(
    _RUN_RANK
    + [("device", pa.int32()), ("phase", pa.string())]
    + _INTERVAL
    + [
        ("bucket", pa.int64()),
        ("bucket_bits", pa.int8()),
        ("compute_before_ns", pa.int64()),
        ("communication_before_ns", pa.int64()),
        ("memory_before_ns", pa.int64()),
    ],
    "gpu_phases",
)

# Derived (collector.derive): one row per rank of a source file. Over the
# kernels of its complete profiler steps (kernels.scoped), all streams:
# their span, the lengths of the unions of all of them (busy) and of each
# category's, and the idle gaps between; those whose correlation id is on no
# runtime call of the trace (unlaunched_count) and the busy time only they
# cover (unlaunched_busy_ns); and the device most kernels ran on.
RANK_SUMMARY_SCHEMA = _schema(
    _RUN_RANK
    + [
        ("kernel_count", pa.int64()),
        ("first_kernel_start_ns", pa.int64()),
        ("last_kernel_end_ns", pa.int64()),
        ("scoped_kernel_count", pa.int64()),
        ("span_start_ns", pa.int64()),
        ("span_end_ns", pa.int64()),
        ("busy_ns", pa.int64()),
        ("compute_union_ns", pa.int64()),
        ("comm_union_ns", pa.int64()),
        ("memory_union_ns", pa.int64()),
        ("compute_comm_union_ns", pa.int64()),
        ("idle_gap_count", pa.int64()),
        ("idle_ns", pa.int64()),
        ("idle_host_wait_ns", pa.int64()),
        ("unlaunched_count", pa.int64()),
        ("unlaunched_busy_ns", pa.int64()),
        ("first_launch_call_start_ns", pa.int64()),
        ("main_device", pa.int32()),
        ("main_device_start_ns", pa.int64()),
        ("main_device_end_ns", pa.int64()),
    ],
    "rank_summary",
)

# Derived (collector.derive): per kernel name of a rank. Over its scoped
# kernels (kernels.scoped, dur_ns >= 0): how many, their total, extremes and
# quantiles (quantile_cont); over its launched kernels (with a launch call,
# scoped too): how many, their GPU time and their launch calls' time.
KERNEL_NAMES_SCHEMA = _schema(
    _RUN_RANK
    + [
        ("name", pa.string()),
        ("category", pa.string()),
        ("kind", pa.string()),
        ("kernel_count", pa.int64()),
        ("total_ns", pa.int64()),
        ("min_ns", pa.int64()),
        ("max_ns", pa.int64()),
        ("p50_ns", pa.float64()),
        ("p95_ns", pa.float64()),
        ("launched_count", pa.int64()),
        ("launched_gpu_ns", pa.int64()),
        ("launch_call_total_ns", pa.int64()),
    ],
    "kernel_names",
)

# Derived (collector.derive): per profiler step of a rank (step NULL: the
# kernels launched outside every step), over the kernels whose launch call
# starts in it: the parts of step_launch_summary no threshold changes.
STEP_LAUNCHES_SCHEMA = _schema(
    _RUN_RANK
    + [
        ("step", pa.int64()),
        ("kernel_count", pa.int64()),
        ("tklqt_ns", pa.int64()),
        ("launch_call_total_ns", pa.int64()),
        ("launch_delay_total_ns", pa.int64()),
        ("launch_delay_p50_ns", pa.float64()),
        ("launch_delay_p95_ns", pa.float64()),
    ],
    "step_launches",
)

COLLECTIVES_SCHEMA = _schema(
    _RUN_RANK
    + [
        ("process_group", pa.string()),
        ("process_group_desc", pa.string()),
        ("seq", pa.int64()),
        # Normalised lower-case op: all_reduce, all_gather, reduce_scatter,
        # all_to_all, broadcast, reduce, send, recv, barrier, ...
        ("op", pa.string()),
        ("bytes", pa.int64()),
        ("group_size", pa.int32()),
        ("dtype", pa.string()),
        ("in_nelems", pa.int64()),
        ("out_nelems", pa.int64()),
        # Per-peer sizes of an uneven collective as PyTorch records them
        # (all_to_all_single: dim-0 rows per peer; all_to_all: elements per
        # peer); NULL where the split is even or not recorded. PyTorch writes
        # the first 30 only: split_sizes_truncated is then true.
        ("in_split_sizes", pa.list_(pa.int64())),
        ("out_split_sizes", pa.list_(pa.int64())),
        ("split_sizes_truncated", pa.bool_()),
        ("group_ranks", pa.list_(pa.int32())),
        # The collective's GPU kernel interval where known, else the CPU op.
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("cpu_start_ns", pa.int64()),
        ("cpu_end_ns", pa.int64()),
        ("kernel_name", pa.string()),
        ("correlation_id", pa.int64()),
        ("external_id", pa.int64()),
    ],
    "collectives",
)

# One row per allocator event of a rank: PyTorch's `[memory]` instants
# (`profile_memory=True`), and `[OutOfMemory]` where an allocation failed.
MEMORY_EVENTS_SCHEMA = _schema(
    _RUN_RANK
    + [
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        # [memory] | [OutOfMemory]
        ("name", pa.string()),
        ("ts_ns", pa.int64()),
        # cpu | cuda (ROCm builds' GPUs too) | xpu | ... (PyTorch's device types)
        ("device_type", pa.string()),
        # NULL for the CPU (which the trace calls device -1)
        ("device", pa.int32()),
        ("addr", pa.int64()),
        # The block allocated (positive) or freed (negative).
        ("bytes", pa.int64()),
        # The allocator's totals on the device just after the event.
        ("total_allocated_bytes", pa.int64()),
        ("total_reserved_bytes", pa.int64()),
    ],
    "memory_events",
)

NCCL_TOPOLOGY_SCHEMA = _schema(
    _RUN_RANK
    + [
        ("host", pa.string()),
        ("comm_id", pa.string()),
        ("nranks", pa.int32()),
        # channel | ring | tree | nvls | transport
        ("kind", pa.string()),
        ("channel", pa.int32()),
        ("peer_rank", pa.int32()),
        # P2P/IPC, P2P/CUMEM, SHM, NET/IB/0/GDRDMA, NET/Socket, NVLS, ...
        ("transport", pa.string()),
        ("detail", pa.string()),
    ],
    "nccl_topology",
)

RUNS_SCHEMA = _schema(
    _RUN_RANK
    + [
        ("world_size", pa.int32()),
        ("host", pa.string()),
        ("pid", pa.int64()),
        ("device_name", pa.string()),
        ("source_path", pa.string()),
        ("source_format", pa.string()),
        # Add to trace times to place them on the Unix epoch; NULL where the
        # source does not say (times are then trace-relative).
        ("epoch_offset_ns", pa.int64()),
        # epoch | trace
        ("time_base", pa.string()),
        ("backend", pa.string()),
        ("nccl_version", pa.string()),
        ("ingested_at", TS_TYPE),
        # Free-form JSON the source carried (device properties, groups).
        ("metadata_json", pa.string()),
    ],
    "runs",
)

TRACE_SCHEMAS: dict[str, pa.Schema] = {
    "kernels": KERNELS_SCHEMA,
    "api_calls": API_CALLS_SCHEMA,
    "cpu_ops": CPU_OPS_SCHEMA,
    "annotations": ANNOTATIONS_SCHEMA,
    "collectives": COLLECTIVES_SCHEMA,
    "nccl_topology": NCCL_TOPOLOGY_SCHEMA,
    "memory_events": MEMORY_EVENTS_SCHEMA,
    "runs": RUNS_SCHEMA,
    "gpu_phases": GPU_PHASES_SCHEMA,
    "rank_summary": RANK_SUMMARY_SCHEMA,
    "step_launches": STEP_LAUNCHES_SCHEMA,
    "kernel_names": KERNEL_NAMES_SCHEMA,
}

NODE_SCHEMAS: dict[str, pa.Schema] = {
    "telemetry": TELEMETRY_SCHEMA,
    "devices": DEVICES_SCHEMA,
    "events": EVENTS_SCHEMA,
    "processes": PROCESSES_SCHEMA,
}

ALL_SCHEMAS: dict[str, pa.Schema] = {**NODE_SCHEMAS, **TRACE_SCHEMAS}
