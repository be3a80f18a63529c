"""What gpulens reads from a Kineto (PyTorch profiler) trace, declared once.

This module is the declarative mapping for the Kineto format (like HTA's
`default_event_args`): the msgspec structs below name every raw key the
parser reads, under the attribute the parser uses, and `EVENT_TABLES`
routes each event category to a contract table. Keys not declared here are
skipped by the decoder without building Python objects for them, which is
where most of the speed and memory saving over a plain `json.loads` comes
from.

Field types are deliberately loose (`Any`) for values whose type differs
between PyTorch versions (ids written as numbers or strings, rank lists as
JSON lists or as text); the parser normalises them (`arrays.int_array`
tries the whole column as integers first, so the usual all-int column costs
no per-value work). `ts` and `dur` are typed floats, as profilers write
them; times written as text are read by the fallbacks below.
Launch dimensions are kept as raw JSON: a few distinct texts (`[8, 1, 1]`)
repeat over every kernel, so the parser turns each distinct text into its
column value once. `traceEvents` is kept raw too and decoded in batches.

Decoders read a batch of events in turn (`kineto_stream.decode_events`),
each only where the one before refused the batch:
- the fast one, `PHASED_EVENTS`, tags events by `ph`: complete events
  (`X`) get every field above; instants (`i`, `I`) and metadata events
  (`M`) their name, pid, tid, time and the args `kineto_marks` reads
  (`MarkArgs`); events of any other phase (flows `s`/`f`, about a third
  of a GPU trace) only their `cat`, which is all the parser needs of them
  (it counts them). Every phase of the Chrome trace format is listed; an
  event with no `ph`, or one not listed, fails the fast decoder;
- the lenient one, `KinetoEvent`, reads any event;
- the same two with msgspec's `strict=False`, which read a time written as
  numeric text (`"ts": "40.0"`, from some exporters and hand-edited traces)
  as that number;
- `LooseTimesEvent`, whose times may be any JSON value: a complete event
  whose `ts` or `dur` is some other text (or a list, object, bool) is
  skipped and counted, not the trace (`kineto_stream.TIMES_NOT_NUMBERS`).
All have `ph`, `cat`, and (complete events) the same fields.
"""

from __future__ import annotations

import re
from typing import Any, Union

import msgspec

# Event category (`cat`) → (contract table, kind), for complete events
# (`ph: "X"`); instants and metadata events, whatever their category, go to
# `kineto_marks`. Complete events of categories not listed are counted and
# skipped: `python_function` (Python stack frames of `with_stack=True`:
# frames, not operators, and often most of the file), `Trace` (the
# profiler span), `cuda_sync`; and so are flows (`ac2g` launch → kernel
# links duplicate the `correlation` arg; `fwdbwd`).
EVENT_TABLES: dict[str, tuple[str, str | None]] = {
    "kernel": ("kernels", "kernel"),
    "gpu_memcpy": ("kernels", "memcpy"),
    "gpu_memset": ("kernels", "memset"),
    "cuda_runtime": ("api_calls", None),
    "cuda_driver": ("api_calls", None),
    "cpu_op": ("cpu_ops", None),
    "user_annotation": ("annotations", "user"),
    "gpu_user_annotation": ("annotations", "gpu_user"),
}

# The contract tables Kineto events fill, and each routed category's kind.
TABLES: tuple[str, ...] = ("kernels", "api_calls", "cpu_ops", "annotations")
EVENT_KINDS: dict[str, str | None] = {cat: kind for cat, (table, kind) in EVENT_TABLES.items()}
# The profiler's own range around each step (`schedule` steps: ProfilerStep#12).
PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)$")

# Unrouted categories a trace has many events of: flows (a third of a GPU
# trace's events) and Python frames (often most of a `with_stack` one).
# The parsers count them by code rather than one by one.
BULK_SKIPPED: tuple[str, ...] = ("ac2g", "fwdbwd", "python_function")

# The CPU op PyTorch records around every c10d collective, carrying its
# parameters in `args` (PyTorch ≥ 2.1; earlier versions record it bare).
PARAM_COMMS_OP = "record_param_comms"
# ProcessGroupNCCL's own range around a collective: `nccl:all_reduce`.
COLLECTIVE_ANNOTATION_PREFIX = "nccl:"


class KinetoArgs(msgspec.Struct, gc=False):
    """The `args` keys gpulens reads (raw key in `name=`)."""

    external_id: Any = msgspec.field(name="External id", default=None)
    correlation: Any = None
    device: Any = None
    stream: Any = None
    # Raw JSON (`[8, 1, 1]`), turned into text once per distinct value.
    grid: msgspec.Raw = msgspec.Raw()
    block: msgspec.Raw = msgspec.Raw()
    bytes: Any = None
    # Collective metadata of `record_param_comms` ops; newer Kineto copies
    # it onto the collective's kernel too.
    collective_name: Any = msgspec.field(name="Collective name", default=None)
    in_msg_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_msg_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    # Per-peer sizes of an uneven collective (all_to_all): text such as
    # "[4, 2, 2]", "[]" where the split is even.
    in_split_size: Any = msgspec.field(name="In split size", default=None)
    out_split_size: Any = msgspec.field(name="Out split size", default=None)
    group_size: Any = msgspec.field(name="Group size", default=None)
    dtype: Any = None
    process_group_name: Any = msgspec.field(name="Process Group Name", default=None)
    process_group_desc: Any = msgspec.field(name="Process Group Description", default=None)
    process_group_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)
    global_rank_start: Any = msgspec.field(name="Global rank start", default=None)
    global_rank_stride: Any = msgspec.field(name="Global rank stride", default=None)
    seq: Any = msgspec.field(name="Seq", default=None)
    # Shapes and types of an op's inputs (record_shapes=True). Kept raw and
    # decoded only for the few collective annotations that need them.
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw())
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw())


# The `args` keys of instants and metadata events (`MARK_PHASES`) gpulens
# reads: PyTorch's allocator events (`profile_memory=True`), and the names
# metadata events give processes and threads.
_MARK_ARGS = [
    ("alloc_bytes", Any, msgspec.field(name="Bytes", default=None)),  # signed: a free is negative
    ("total_allocated", Any, msgspec.field(name="Total Allocated", default=None)),
    ("total_reserved", Any, msgspec.field(name="Total Reserved", default=None)),
    ("addr", Any, msgspec.field(name="Addr", default=None)),
    ("device_id", Any, msgspec.field(name="Device Id", default=None)),
    ("device_type", Any, msgspec.field(name="Device Type", default=None)),
    ("name", Any, None),  # process_name, thread_name
    ("labels", Any, None),  # process_labels
]
MarkArgs = msgspec.defstruct("MarkArgs", _MARK_ARGS, gc=False)
# Any event's args, for the lenient decoders, which read every phase as one struct.
EventArgs = msgspec.defstruct("EventArgs", _MARK_ARGS, bases=(KinetoArgs,), gc=False)

# Phases read beside complete events: instants (`i`, and `I` of the legacy
# format) and metadata (`M`). See `kineto_marks`.
MARK_PHASES: tuple[str, ...] = ("i", "I", "M")


class KinetoEvent(msgspec.Struct, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    # Microseconds: relative to baseTimeNanoseconds where the trace has it,
    # else on the Unix epoch (Kineto before ~2023) or an arbitrary origin.
    ts: float | None = None
    dur: float | None = None
    args: EventArgs | None = None  # type: ignore[valid-type]


class LooseTimesEvent(KinetoEvent, gc=False):
    """The last fallback: times of any JSON type, checked in Python."""

    ts: Any = None
    dur: Any = None


class KinetoTrace(msgspec.Struct):
    # The event array's raw JSON (empty where absent), for `decode_events`.
    traceEvents: msgspec.Raw = msgspec.Raw()
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    traceName: Any = None
    hostname: Any = None
    hostName: Any = None


class PhasedEvent(msgspec.Struct, tag_field="ph", gc=False):
    """An event of the fast decoder: its class says its phase (`ph`)."""

    cat: str | None = None


class CompleteEvent(PhasedEvent, tag="X"):
    """A complete event (`ph: X`): the fields of `KinetoEvent`."""

    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: float | None = None
    dur: float | None = None
    args: KinetoArgs | None = None
    ph = "X"


class InstantEvent(PhasedEvent, tag="i"):
    """An instant (`ph: i`), or, as its subclasses, a legacy instant (`I`)
    or a metadata event (`M`): the fields `kineto_marks` reads."""

    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: float | None = None
    args: MarkArgs | None = None  # type: ignore[valid-type]
    ph = "i"


class LegacyInstantEvent(InstantEvent, tag="I"):
    ph = "I"


class MetadataEvent(InstantEvent, tag="M"):
    ph = "M"


# The other phases of the Chrome trace format (duration B/E, counter C,
# async b/n/e and legacy S/T/p/F, flow s/t/f, sample P, object N/O/D,
# memory V/v, mark R, clock sync c, context ( and )): only their `cat`.
_OTHER_PHASES = "BECbneSTpFstfPNODVvRc()"
OTHER_EVENTS: tuple[type[PhasedEvent], ...] = tuple(
    msgspec.defstruct(f"PhaseEvent{ord(phase)}", [], bases=(PhasedEvent,), tag=phase, namespace={"ph": phase})
    for phase in _OTHER_PHASES
)
PHASED_EVENTS = list[Union[(CompleteEvent, InstantEvent, LegacyInstantEvent, MetadataEvent, *OTHER_EVENTS)]]  # type: ignore[misc]

NO_ARGS = KinetoArgs()


def annotation_kind(kind: str | None, name: Any) -> tuple[str | None, int | None]:
    """An annotation's kind and profiler step: a user range named
    `ProfilerStep#N` is the profiler's step N; others keep their kind."""
    if kind == "user" and isinstance(name, str):
        match = PROFILER_STEP.match(name)
        if match:
            step = int(match.group(1))
            return "profiler_step", step if step < 1 << 63 else None  # beyond the column: that value lost
    return kind, None


def launch_dims_text(raw: bytes) -> str | None:
    """A kernel's `grid` or `block` arg as the column's text, from its raw
    JSON: a list as DuckDB casts it back (`[8, 1, 1]`, a list's repr),
    another value by str(), null or absent (b"") as None."""
    value = msgspec.json.decode(raw) if raw else None
    return None if value is None else repr(value) if isinstance(value, list) else str(value)
