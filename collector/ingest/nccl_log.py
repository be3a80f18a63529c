"""NCCL / RCCL debug logs (`NCCL_DEBUG=INFO`, `NCCL_DEBUG_SUBSYS=INIT,COLL,...`)
→ `collectives`, `nccl_topology` and `runs`.

Every NCCL line starts `host:pid:tid [cudaDev] NCCL INFO <message>`; a log
may interleave many processes and devices. A *participant* is one
(host, pid, cudaDev): one GPU's NCCL ranks. What is read:

- communicator init, `comm 0x.. rank R nranks N cudaDev D [nvmlDev D] busId
  B [commId 0x..] - Init START|COMPLETE` (and the `comm 0x.. rank R nRanks N
  nNodes ..` line of newer versions): which rank a participant holds in which
  communicator;
- COLL lines, `AllReduce: opCount 1f sendbuff .. count 262144 datatype 9 op
  0 root 0 comm 0x.. [nranks=8] ..` → one `collectives` row each;
- `Channel 00/0 : 0[0] -> 1[1] via P2P/IPC` (and `[send]`/`[receive]` NET
  lines) → `nccl_topology` kind `transport`; `Channel 00/24 : 0 1 2 ..` →
  kind `ring` (the ring order in `detail`); `Trees [0] 1/-1/-1->0->-1 ..` →
  kind `tree`, one row per channel; `NVLS ..` lines → kind `nvls`;
- `NCCL version 2.21.5+cuda12.4` (RCCL: `+hip6.x`) → `runs.nccl_version`.

Decisions:

- Ranks. `collectives.rank` and `runs.rank` are the participant's rank in
  the largest communicator it belongs to (the world communicator in a
  PyTorch job), so every row of one GPU carries one rank, whatever
  sub-communicator a collective ran on. `nccl_topology` keeps NCCL's own
  numbering: `rank`/`peer_rank` are ranks within `comm_id`, whose size is
  `nranks`. Channel lines do not name their communicator; they belong to the
  communicator being initialised on the same thread.
- `process_group` / `comm_id` is the communicator's `commId` hash where an
  init line gave it (the same on every rank, so ranks line up), else the
  process-local `comm 0x..` pointer.
- Bytes. `count` is per rank for AllGather (the send count) and
  ReduceScatter (the receive count), so for those two `bytes = count × dtype
  size × nranks`, the larger of input and output, as nccl-tests counts; for
  every other op `bytes = count × dtype size`. `seq` is `opCount`, which
  NCCL prints in hex.
- Times. NCCL lines carry no time unless `NCCL_DEBUG_TIMESTAMP_FORMAT` (or
  a wrapper) put a date-time before the prefix, or RCCL printed epoch
  microseconds after `[cudaDev]`. Those become `start_ns`/`cpu_start_ns` of
  the collective (the time it was enqueued, on the CPU); a date-time with no
  UTC offset is read as UTC. `end_ns` is always NULL. Without any time,
  `runs.time_base` is NULL: there is nothing to place.
- Malformed lines are skipped; a log with no `NCCL INFO` line at all is
  not an NCCL log.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from collector.errors import TraceError
from collector.ingest.base import NCCL_DTYPES, ParsedTrace, build_table, dtype_bytes, normalise_op, rank_from_filename
from collector.ingest.buffer import read_buffer

FORMAT = "nccl_log"

# --- the line grammar ------------------------------------------------------------

_INFO = " NCCL INFO "
# What precedes _INFO: `host:pid:tid [cudaDev]`, and RCCL's epoch timestamp.
_PREFIX = re.compile(r"(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\](?: (?P<stamp>\d{10,19}))?$")
_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?")
_VERSION = re.compile(r"^(?:NCCL|RCCL) version (?P<version>\S+)")
_COLL = re.compile(
    r"^(?P<op>\w+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ "
    r"count (?P<count>\d+) datatype (?P<dtype>\d+) op \d+ root -?\d+ "
    r"comm (?P<comm>0x[0-9a-fA-F]+|\(nil\)) \[nranks=(?P<nranks>\d+)\]"
    r"(?:.*? globalrank (?P<globalrank>\d+))?"
)
_INIT = re.compile(
    r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
    r"(?: nvmlDev \d+)? busId (?P<bus>[0-9a-fA-F]+)(?: commId (?P<commid>0x[0-9a-fA-F]+))?"
    r".*? - Init (?P<phase>START|COMPLETE)"
)
_COMM_INFO = re.compile(r"^comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes \d+")
_TRANSPORT = re.compile(
    r"^(?:Channel|Ring) (?P<channel>\d+)(?:/\d+)? : (?P<src>\d+)(?:\[[0-9a-fA-Fx]+\])? -> (?P<dst>\d+)(?:\[[0-9a-fA-Fx]+\])?"
    r"(?: \[(?P<direction>send|receive)\])? via (?P<via>.+)$"
)
_RING = re.compile(r"^(?:Channel|Ring) (?P<channel>\d+)(?:/\d+)? :(?P<order>(?:\s+\d+)+)$")
_TREES = re.compile(r"^Trees(?: \[\d+\] -?\d+/-?\d+/-?\d+->-?\d+->-?\d+)+$")
_TREE = re.compile(r"\[(?P<channel>\d+)\] (?P<down>-?\d+/-?\d+/-?\d+)->(?P<me>-?\d+)->(?P<up>-?\d+)")
_NVLS = re.compile(r"^NVLS (?:multicast support is|comm (?P<comm>0x[0-9a-fA-F]+) headRank)")

_PER_RANK_COUNT_OPS = ("all_gather", "reduce_scatter")
# A COLL line as kept while reading: who printed it (host, pid, cudaDev),
# RCCL's globalrank, then `collectives` columns.
_COLLECTIVE_FIELDS = (
    "participant", "globalrank", "process_group", "seq", "op", "bytes", "group_size",
    "dtype", "in_nelems", "out_nelems", "start_ns", "cpu_start_ns",
)
# ncclDataType_t → (name, bytes per element); op names normalised once each.
_DTYPES = {value: (name, dtype_bytes(name)) for value, name in NCCL_DTYPES.items()}
_op = functools.lru_cache(maxsize=256)(normalise_op)


@dataclass
class _Comm:
    """One rank of one communicator, as a process's init lines describe it."""

    host: str
    pid: int
    ptr: str
    rank: int
    nranks: int
    cuda_dev: int
    bus_id: str | None = None
    comm_hash: str | None = None

    @property
    def key(self) -> str:
        return self.comm_hash or self.ptr


@dataclass
class _Thread:
    """Which communicator a thread is initialising, for lines that do not say."""

    confirmed: _Comm | None = None  # from Init START / the nRanks line
    last_complete: _Comm | None = None
    provisional: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Log:
    comms: dict[tuple[str, int, str], _Comm] = field(default_factory=dict)
    threads: dict[tuple[str, int, int, int], _Thread] = field(default_factory=dict)
    topology: list[dict[str, Any]] = field(default_factory=list)
    # One tuple per COLL line, fields as _COLLECTIVE_FIELDS.
    collectives: list[tuple[Any, ...]] = field(default_factory=list)
    versions: dict[tuple[str, int], str] = field(default_factory=dict)
    first_version: str | None = None
    timed: bool = False


def sniff(head: bytes, path: Path) -> bool:
    text = head.decode("utf-8", errors="replace")
    return any(_split(line) for line in text.splitlines() if _INFO in line)


def parse(path: Path, run: str) -> ParsedTrace:
    lines = read_buffer(path).decode("utf-8", errors="replace").splitlines()
    log = _Log()
    seen_info = False
    for line in lines:
        if _INFO not in line:
            version = _VERSION.match(line.strip())  # NCCL_DEBUG=VERSION prints it bare
            if version and log.first_version is None:
                log.first_version = version.group("version")
            continue
        split = _split(line)
        if split:
            seen_info = True
            _read_line(log, *split)
    if not seen_info:
        raise TraceError(str(path), "no NCCL INFO lines")
    if not (log.comms or log.collectives or log.topology):
        raise TraceError(str(path), "no NCCL communicator, collective or topology lines (was NCCL_DEBUG_SUBSYS too narrow?)")
    parsed = _tables(log, path, run)
    parsed.events = len(lines)
    return parsed


# --- reading one line -------------------------------------------------------------


def _split(line: str) -> tuple[re.Match[str], str, str] | None:
    """(prefix match, text before the prefix, message) of one NCCL INFO line."""
    at = line.find(_INFO)
    prefix = _PREFIX.search(line, 0, at) if at > 0 else None
    if prefix is None:
        return None
    return prefix, line[: prefix.start()], line[at + len(_INFO) :].rstrip()


def _read_line(log: _Log, prefix: re.Match[str], before: str, msg: str) -> None:
    host, pid, tid, dev = prefix.group("host"), int(prefix.group("pid")), int(prefix.group("tid")), int(prefix.group("dev"))
    if ": opCount " in msg:
        coll = _COLL.match(msg)
        if coll:
            _add_collective(log, coll, host, pid, dev, _time_ns(prefix.group("stamp"), before, log))
        return
    thread = log.threads.setdefault((host, pid, tid, dev), _Thread())
    if msg.startswith("Channel ") or msg.startswith("Ring "):
        _read_channel(log, thread, msg, host)
    elif msg.startswith("Trees "):
        _read_trees(log, thread, msg, host)
    elif msg.startswith("NVLS "):
        nvls = _NVLS.match(msg)
        if nvls:
            comm = log.comms.get((host, pid, nvls.group("comm"))) if nvls.group("comm") else None
            _add_topology(log, thread, host, comm=comm, kind="nvls", transport="NVLS", detail=msg)
    elif " - Init " in msg:
        init = _INIT.search(msg)
        if init:
            comm = _register(log, host, pid, init.group("comm"), int(init.group("rank")), int(init.group("nranks")), int(init.group("dev")))
            comm.bus_id = init.group("bus")
            comm.comm_hash = init.group("commid") or comm.comm_hash
            _init_phase(thread, comm, complete=init.group("phase") == "COMPLETE")
    elif msg.startswith("comm "):
        info = _COMM_INFO.match(msg)
        if info:
            _init_phase(thread, _register(log, host, pid, info.group("comm"), int(info.group("rank")), int(info.group("nranks")), dev), complete=False)
    else:
        version = _VERSION.match(msg)
        if version:
            log.versions.setdefault((host, pid), version.group("version"))
            log.first_version = log.first_version or version.group("version")


def _register(log: _Log, host: str, pid: int, ptr: str, rank: int, nranks: int, cuda_dev: int) -> _Comm:
    comm = log.comms.get((host, pid, ptr))
    if comm is None:
        comm = log.comms[(host, pid, ptr)] = _Comm(host, pid, ptr, rank, nranks, cuda_dev)
    comm.cuda_dev = cuda_dev  # the init line's cudaDev wins over the prefix's
    return comm


def _init_phase(thread: _Thread, comm: _Comm, complete: bool) -> None:
    """Settle which communicator the thread's channel lines belong to.

    Newer NCCL names the communicator when its init starts; older NCCL only at
    `Init COMPLETE`, after the channel lines, which are then claimed.
    """
    if not complete:
        thread.confirmed = comm
        thread.provisional.clear()
        return
    if thread.confirmed is None:
        for row in thread.provisional:
            row["comm"] = comm
    thread.provisional.clear()
    thread.confirmed = None
    thread.last_complete = comm


def _add_topology(log: _Log, thread: _Thread, host: str, comm: _Comm | None = None, **row: Any) -> None:
    row.update(host=host, comm=comm or thread.confirmed or thread.last_complete)
    row.setdefault("rank", None)
    if comm is None and thread.confirmed is None:
        thread.provisional.append(row)
    log.topology.append(row)


def _read_channel(log: _Log, thread: _Thread, msg: str, host: str) -> None:
    transport = _TRANSPORT.match(msg)
    if transport:
        src, dst = int(transport.group("src")), int(transport.group("dst"))
        # The printing rank is the sender, except on a [receive] line.
        me, peer = (dst, src) if transport.group("direction") == "receive" else (src, dst)
        via = transport.group("via")
        _add_topology(log, thread, host, kind="transport", channel=int(transport.group("channel")), rank=me, peer_rank=peer, transport=_transport_name(via), detail=msg)
        return
    ring = _RING.match(msg)
    if ring:
        order = " ".join(ring.group("order").split())
        _add_topology(log, thread, host, kind="ring", channel=int(ring.group("channel")), detail=order)


def _read_trees(log: _Log, thread: _Thread, msg: str, host: str) -> None:
    if not _TREES.match(msg):
        return
    for tree in _TREE.finditer(msg):
        up = int(tree.group("up"))
        detail = f"{tree.group('down')}->{tree.group('me')}->{tree.group('up')}"
        _add_topology(log, thread, host, kind="tree", channel=int(tree.group("channel")), rank=int(tree.group("me")), peer_rank=up if up >= 0 else None, detail=detail)


def _transport_name(via: str) -> str:
    """`P2P/CUMEM/read` → `P2P/CUMEM`, `SHM/direct/direct` → `SHM`; NET paths kept whole (NIC and GDR matter)."""
    parts = via.split("/")
    if parts[0] == "P2P":
        return "/".join(parts[:2])
    if parts[0] == "SHM":
        return "SHM"
    return via


def _add_collective(log: _Log, coll: re.Match[str], host: str, pid: int, dev: int, time_ns: int | None) -> None:
    op_name, opcount, count, datatype, ptr, nranks, globalrank = coll.groups()
    op = _op(op_name)
    count, nranks = int(count), int(nranks)
    dtype, size = _DTYPES.get(int(datatype), (None, None))
    total = count * nranks if op in _PER_RANK_COUNT_OPS else count
    comm = log.comms.get((host, pid, ptr))
    log.collectives.append((
        (host, pid, comm.cuda_dev if comm else dev),
        int(globalrank) if globalrank else None,
        comm.key if comm else ptr,
        int(opcount, 16),
        op,
        total * size if size is not None else None,
        nranks,
        dtype,
        # AllGather's input is one rank's share; ReduceScatter's output is.
        count if op == "all_gather" else total,
        count if op == "reduce_scatter" else total,
        time_ns,
        time_ns,
    ))


def _time_ns(stamp: str | None, before: str, log: _Log) -> int | None:
    value = _stamp_ns(stamp) if stamp else (_datetime_ns(before) if before else None)
    log.timed = log.timed or value is not None
    return value


def _stamp_ns(stamp: str) -> int | None:
    """Epoch seconds, ms, µs or ns, told apart by the number of digits."""
    scale = {10: 10**9, 13: 10**6, 16: 10**3, 19: 1}.get(len(stamp))
    return int(stamp) * scale if scale else None


def _datetime_ns(text: str) -> int | None:
    match = _DATETIME.search(text)
    if not match:
        return None
    day, clock, fraction, zone = match.groups()
    when = datetime.fromisoformat(f"{day}T{clock}")
    if zone and zone != "Z":
        zone = zone if ":" in zone else f"{zone[:3]}:{zone[3:]}"
        when = datetime.fromisoformat(f"{day}T{clock}{zone}")
    else:
        when = when.replace(tzinfo=timezone.utc)
    nanos = int((fraction or "0").ljust(9, "0"))
    return int(when.timestamp()) * 10**9 + nanos


# --- building the tables ------------------------------------------------------------


def _tables(log: _Log, path: Path, run: str) -> ParsedTrace:
    participants = _participants(log)
    fallback_rank = rank_from_filename(path) if len(participants) == 1 else None
    world_rank = {key: (comm.rank if comm else fallback_rank) for key, comm in participants.items()}

    parsed = ParsedTrace(format=FORMAT)
    group_sizes: dict[tuple[str, int, int], int] = {}
    if log.collectives:
        columns = dict(zip(_COLLECTIVE_FIELDS, map(list, zip(*log.collectives))))
        who, globalranks = columns.pop("participant"), columns.pop("globalrank")
        ranks = [world_rank.get(key) for key in who]
        columns["rank"] = [rank if rank is not None else g for rank, g in zip(ranks, globalranks)]
        columns["run"] = [run] * len(who)
        parsed.tables["collectives"] = build_table("collectives", columns)
        for key, size in zip(who, columns["group_size"]):
            group_sizes[key] = max(size, group_sizes.get(key, 0))
    if log.topology:
        rows = []
        for row in log.topology:
            comm: _Comm | None = row["comm"]
            out = {key: value for key, value in row.items() if key != "comm"}
            out["comm_id"] = comm.key if comm else None
            out["nranks"] = comm.nranks if comm else None
            if out["rank"] is None and comm is not None:
                out["rank"] = comm.rank
            rows.append(out)
        parsed.tables["nccl_topology"] = _build("nccl_topology", rows, run)
    parsed.tables["runs"] = _runs(log, participants, world_rank, group_sizes, path, run)
    return parsed


def _participants(log: _Log) -> dict[tuple[str, int, int], _Comm | None]:
    """Each (host, pid, cudaDev) with its largest communicator (first seen wins a tie)."""
    largest: dict[tuple[str, int, int], _Comm | None] = {}
    for comm in log.comms.values():
        key = (comm.host, comm.pid, comm.cuda_dev)
        best = largest.get(key)
        if best is None or comm.nranks > best.nranks:
            largest[key] = comm
    for collective in log.collectives:
        largest.setdefault(collective[0], None)
    return largest


def _runs(
    log: _Log,
    participants: dict[tuple[str, int, int], _Comm | None],
    world_rank: dict[tuple[str, int, int], int | None],
    group_sizes: dict[tuple[str, int, int], int],
    path: Path,
    run: str,
) -> pa.Table:
    rows = []
    ingested_at = datetime.now(timezone.utc)
    for key, comm in participants.items():
        host, pid, dev = key
        version = log.versions.get((host, pid), log.first_version)
        comms = [c for c in log.comms.values() if (c.host, c.pid, c.cuda_dev) == key]
        metadata = {
            "cuda_dev": dev,
            "comms": [{"comm_id": c.key, "comm_ptr": c.ptr, "rank": c.rank, "nranks": c.nranks, "bus_id": c.bus_id} for c in comms],
        }
        rows.append({
            "rank": world_rank.get(key),
            "world_size": comm.nranks if comm else group_sizes.get(key),
            "host": host,
            "pid": pid,
            "source_path": str(path.resolve()),
            "source_format": FORMAT,
            "epoch_offset_ns": 0 if log.timed else None,
            "time_base": "epoch" if log.timed else None,
            "backend": ("rccl" if "hip" in version.lower() else "nccl") if version else None,
            "nccl_version": version,
            "metadata_json": json.dumps(metadata, sort_keys=True),
            "ingested_at": ingested_at,
        })
    rows.sort(key=lambda row: (row["rank"] is None, row["rank"] or 0, row["host"], row["pid"]))
    return _build("runs", rows, run)


def _build(name: str, rows: list[dict[str, Any]], run: str) -> pa.Table:
    keys = set().union(*rows)
    columns = {key: [row.get(key) for row in rows] for key in keys}
    columns["run"] = [run] * len(rows)
    return build_table(name, columns, num_rows=len(rows))
