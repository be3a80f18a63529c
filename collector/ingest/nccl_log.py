"""NCCL / RCCL debug logs (`NCCL_DEBUG=INFO`, `NCCL_DEBUG_SUBSYS=INIT,COLL,...`)
→ `collectives`, `nccl_topology` and `runs`.

Every NCCL line starts `host:pid:tid [cudaDev] NCCL INFO <message>`; a log
may interleave many processes and devices. A *participant* is one
(host, pid, cudaDev): one GPU's NCCL ranks. What is read:

- communicator init, `comm 0x.. rank R nranks N cudaDev D [nvmlDev D] busId
  B [commId 0x..] - Init START|COMPLETE` (and the `comm 0x.. rank R nRanks N
  nNodes ..` line of newer versions): which rank a participant holds in which
  communicator; ncclCommSplit's lines add `parent 0x.. [splitCount S |
  childCount S] color C key K` before `[commId 0x..]` and `- Init` (releases
  after 2.21 print no commId, and `key K- Init START` without the space);
- COLL lines, `AllReduce: opCount 1f sendbuff .. count 262144 datatype 9 op
  0 root 0 comm 0x.. [nranks=8] ..` → one `collectives` row each;
- `Channel 00/0 : 0[0] -> 1[1] via P2P/IPC` (and `[send]`/`[receive]` NET
  lines) → `nccl_topology` kind `transport`; `Channel 00/24 : 0 1 2 ..` →
  kind `ring` (the ring order in `detail`); `Trees [0] 1/-1/-1->0->-1 ..` →
  kind `tree`, one row per channel; `NVLS ..` lines → kind `nvls`;
- `NCCL version 2.21.5+cuda12.4`, `RCCL version 2.18.3+hip6.0 develop:7e1cbb4`,
  `RCCL version : 2.27.7-HEAD:0d2c4fd` → `runs.nccl_version` `2.21.5` (the
  bare version, as PyTorch's distributedInfo gives it), the whole string in
  `metadata_json` `nccl_version_full`, `runs.backend` `nccl` or `rccl`.

Decisions:

- Ranks. `collectives.rank` and `runs.rank` are the participant's rank in
  the largest communicator it belongs to (the world communicator in a
  PyTorch job), so every row of one GPU carries one rank, whatever
  sub-communicator a collective ran on. Without init lines (an RCCL log of
  COLL lines only) it is RCCL's `globalrank` on the participant's largest
  group (RCCL prints the rank within the collective's communicator), else
  the rank the file name states, where the file holds one participant.
  `nccl_topology` keeps NCCL's own numbering: `rank`/`peer_rank` are ranks
  within `comm_id`, whose size is `nranks`. Channel lines do not name their
  communicator; they belong to the communicator being initialised on the
  same thread.
- `process_group` / `comm_id` is the communicator's `commId` hash where an
  init line gave it (the same on every rank, so ranks line up; 2.18-2.21
  print one on split lines too). A split communicator without one (later
  releases) gets `<parent's id>/split<S>/color<C>`: NCCL derives the
  child's hash from the same three, and S, the parent's split counter, is
  the same on every rank, so members line up and two splits of one parent
  do not merge. Else the process-local `comm 0x..` pointer.
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
- Malformed lines are skipped: a shared job log interleaves processes and
  can garble lines. A COLL line (`<Op>: opCount ..`) that cannot be read is
  also counted: the file's count and the first such line's number (from
  1) are in each of its `runs` rows' `metadata_json` (`unread_coll_lines`,
  `first_unread_coll_line`), as those collectives are missing.
- Detection. A log with no `NCCL INFO` line at all is not an NCCL log. Job
  logs often print NCCL's first line only after megabytes of other output
  (a model loading), so a text file whose 64 KiB head has none is searched
  on, up to SNIFF_MAX_BYTES; a binary head (a NUL byte, or almost no line
  breaks) is not.
"""

from __future__ import annotations

import functools
import json
import re
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpulens.collector.errors import TraceError
from gpulens.collector.ingest.base import NCCL_DTYPES, ParsedTrace, build_table, dtype_bytes, normalise_op, open_maybe_gzip, rank_from_filename
from gpulens.collector.ingest.buffer import read_buffer
from gpulens.collector.ingest.formats import HEAD_BYTES

FORMAT = "nccl_log"

# --- the line grammar ------------------------------------------------------------

_INFO = " NCCL INFO "
# What precedes _INFO: `host:pid:tid [cudaDev]`, and RCCL's epoch timestamp.
_PREFIX = re.compile(r"(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\](?: (?P<stamp>\d{10,19}))?$")
_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?")
# `NCCL version 2.21.5+cuda12.4`, `RCCL version 2.18.3+hip6.0 develop:7e1cbb4`,
# `RCCL version : 2.27.7-HEAD:0d2c4fd` (RCCL 2.2x's banner).
_VERSION = re.compile(r"^(?P<library>NCCL|RCCL) version(?: :)? (?P<full>(?P<version>\d+(?:\.\d+)+)\S*(?: .*)?)$")
# What a COLL line starts with; one that _COLL cannot read is counted.
_COLL_LIKE = re.compile(r"^\w+: opCount ")
_COLL = re.compile(
    r"^(?P<op>\w+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ "
    r"count (?P<count>\d+) datatype (?P<dtype>\d+) op \d+ root -?\d+ "
    r"comm (?P<comm>0x[0-9a-fA-F]+|\(nil\)) \[nranks=(?P<nranks>\d+)\]"
    r"(?:.*? globalrank (?P<globalrank>\d+))?"
)
_INIT = re.compile(
    r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
    r"(?: nvmlDev \d+)? busId (?P<bus>[0-9a-fA-F]+)"
    # ncclCommSplit (src/init.cc): 2.18-2.21 `parent %p color %d key %d commId
    # 0x%llx - Init ..` (2.21.5's in NVIDIA/nccl#1605); later `parent %p
    # splitCount %d color %d key %d- Init START` (no space) and `.. key %d -
    # Init COMPLETE`; the newest print childCount for splitCount.
    r"(?: parent (?P<parent>0x[0-9a-fA-F]+)(?: (?:splitCount|childCount) (?P<split>\d+))?"
    r" color (?P<color>-?\d+) key -?\d+)?"
    r"(?: commId (?P<commid>0x[0-9a-fA-F]+))?"
    r".*?- Init (?P<phase>START|COMPLETE)"
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
    # A split communicator's parent (where its init lines are in the log),
    # the parent's split counter and the colour, as its split line gives them.
    parent: _Comm | None = None
    split_count: int | None = None
    color: int | None = None

    @property
    def key(self) -> str:
        """The id every rank of the communicator shares, where the log gives one."""
        if self.comm_hash:
            return self.comm_hash
        if self.parent is not None and self.color is not None:
            # NCCL hashes (parent hash, split counter, colour) into the
            # child's id but does not print it; the three name it as well.
            split = f"/split{self.split_count}" if self.split_count is not None else ""
            return f"{self.parent.key}{split}/color{self.color}"
        return self.ptr


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
    # Version line matches: by (host, pid), and the first of the log.
    versions: dict[tuple[str, int], re.Match[str]] = field(default_factory=dict)
    first_version: re.Match[str] | None = None
    timed: bool = False
    unread_coll_lines: int = 0
    first_unread_coll_line: int | None = None


# How far into a text file sniff looks for a first NCCL line the 64 KiB head
# lacks. Job logs print NCCL's lines once training starts, after whatever
# loading printed (MBs); a job log of GBs without one within 64 MiB is
# taken as no NCCL log. Scanning is a bytes.find: 64 MiB is about 30 ms
# from the page cache, plus the gunzip for .gz.
SNIFF_MAX_BYTES = 64 << 20
# An NCCL line cut by a chunk boundary is found again in this much of the
# previous chunk, kept in front of the next (a `host:pid:tid [dev]` prefix
# is far shorter).
_SNIFF_OVERLAP_BYTES = 4096
_SNIFF_CHUNK_BYTES = 1 << 20
_INFO_BYTES = _INFO.encode()


def sniff(head: bytes, path: Path) -> bool:
    if _has_nccl_line(head):
        return True
    # Only a head cut short can hide later lines, and only a text log's.
    return len(head) >= HEAD_BYTES and _is_text_log(head) and _nccl_line_within(path, SNIFF_MAX_BYTES)


def _has_nccl_line(data: bytes) -> bool:
    """Whether `data` holds an `host:pid:tid [dev] NCCL INFO` line (a line cut at either end counts)."""
    at = data.find(_INFO_BYTES)
    while at != -1:
        start = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = len(data) if end == -1 else end
        if _split(data[start:end].decode("utf-8", errors="replace")):
            return True
        at = data.find(_INFO_BYTES, end)
    return False


def _is_text_log(head: bytes) -> bool:
    """A head with no NUL byte and at least a line break per 4 KiB: binary
    formats (SQLite, Parquet, gzip of those) have NULs, one-line JSON none."""
    return b"\0" not in head and head.count(b"\n") + head.count(b"\r") >= len(head) // 4096


def _nccl_line_within(path: Path, limit_bytes: int) -> bool:
    """Whether the file's first `limit_bytes` (decompressed) hold an NCCL line.

    Streams through gzip (buffer.iter_chunks would read a .gz whole first)."""
    scanned_bytes = 0
    tail = b""
    try:
        with open_maybe_gzip(path) as handle:
            while scanned_bytes < limit_bytes and (chunk := handle.read(_SNIFF_CHUNK_BYTES)):
                data = tail + chunk
                if _has_nccl_line(data):
                    return True
                scanned_bytes += len(chunk)
                tail = data[-_SNIFF_OVERLAP_BYTES:]
    except (EOFError, OSError, zlib.error) as error:  # as formats.read_head words it
        raise TraceError(str(path), f"truncated or corrupt gzip ({error})") from None
    return False


def parse(path: Path, run: str) -> ParsedTrace:
    lines = read_buffer(path).decode("utf-8", errors="replace").splitlines()
    log = _Log()
    seen_info = False
    for number, line in enumerate(lines, 1):
        if _INFO not in line:
            version = _VERSION.match(line.strip())  # NCCL_DEBUG=VERSION prints it bare
            if version and log.first_version is None:
                log.first_version = version
            continue
        split = _split(line)
        if split:
            seen_info = True
            _read_line(log, *split, number)
    if not seen_info:
        raise TraceError(str(path), "no NCCL INFO lines")
    if not (log.comms or log.collectives or log.topology):
        unread = f"; {_unread_text(log)}" if log.unread_coll_lines else ""
        raise TraceError(str(path), f"no NCCL communicator, collective or topology lines (was NCCL_DEBUG_SUBSYS too narrow?){unread}")
    parsed = _tables(log, path, run)
    parsed.events = len(lines)
    if log.unread_coll_lines:
        parsed.warnings.append(f"{_unread_text(log)}; their collectives are missing")
    return parsed


def _unread_text(log: _Log) -> str:
    if log.unread_coll_lines == 1:
        return f"1 COLL line could not be read (line {log.first_unread_coll_line})"
    return f"{log.unread_coll_lines:,} COLL lines could not be read (the first at line {log.first_unread_coll_line})"


# --- reading one line -------------------------------------------------------------


def _split(line: str) -> tuple[re.Match[str], str, str] | None:
    """(prefix match, text before the prefix, message) of one NCCL INFO line."""
    at = line.find(_INFO)
    prefix = _PREFIX.search(line, 0, at) if at > 0 else None
    if prefix is None:
        return None
    return prefix, line[: prefix.start()], line[at + len(_INFO) :].rstrip()


def _read_line(log: _Log, prefix: re.Match[str], before: str, msg: str, number: int) -> None:
    host, pid, tid, dev = prefix.group("host"), int(prefix.group("pid")), int(prefix.group("tid")), int(prefix.group("dev"))
    if ": opCount " in msg:
        coll = _COLL.match(msg)
        if coll:
            _add_collective(log, coll, host, pid, dev, _time_ns(prefix.group("stamp"), before, log))
        elif _COLL_LIKE.match(msg):
            # A garbled COLL line is a missing collective: count it, do not fail.
            log.unread_coll_lines += 1
            log.first_unread_coll_line = log.first_unread_coll_line or number
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
    elif "- Init " in msg:
        init = _INIT.search(msg)
        if init:
            comm = _register(log, host, pid, init.group("comm"), int(init.group("rank")), int(init.group("nranks")), int(init.group("dev")))
            comm.bus_id = init.group("bus")
            comm.comm_hash = init.group("commid") or comm.comm_hash
            if init.group("parent"):
                comm.parent = log.comms.get((host, pid, init.group("parent")))
                comm.split_count = int(init.group("split")) if init.group("split") else None
                comm.color = int(init.group("color"))
            _init_phase(thread, comm, complete=init.group("phase") == "COMPLETE")
    elif msg.startswith("comm "):
        info = _COMM_INFO.match(msg)
        if info:
            _init_phase(thread, _register(log, host, pid, info.group("comm"), int(info.group("rank")), int(info.group("nranks")), dev), complete=False)
    else:
        version = _VERSION.match(msg)
        if version:
            log.versions.setdefault((host, pid), version)
            log.first_version = log.first_version or version


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
    world_rank = _world_ranks(log, participants, path)

    parsed = ParsedTrace(format=FORMAT)
    group_sizes: dict[tuple[str, int, int], int] = {}
    if log.collectives:
        columns = dict(zip(_COLLECTIVE_FIELDS, map(list, zip(*log.collectives))))
        who = columns.pop("participant")
        del columns["globalrank"]  # read into world_rank
        columns["rank"] = [world_rank[key] for key in who]
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


def _world_ranks(log: _Log, participants: dict[tuple[str, int, int], _Comm | None], path: Path) -> dict[tuple[str, int, int], int | None]:
    """Each participant's rank: in its largest communicator; else, without
    init lines, RCCL's globalrank on its largest collective group (first
    seen on a tie); else the file name's, where the file has one participant."""
    by_globalrank: dict[tuple[str, int, int], tuple[int, int]] = {}
    group_size_at = _COLLECTIVE_FIELDS.index("group_size")
    for row in log.collectives:
        who, globalrank, group_size = row[0], row[1], row[group_size_at]
        if globalrank is not None and (who not in by_globalrank or group_size > by_globalrank[who][0]):
            by_globalrank[who] = (group_size, globalrank)
    file_rank = rank_from_filename(path) if len(participants) == 1 else None
    ranks = {}
    for key, comm in participants.items():
        if comm is not None:
            ranks[key] = comm.rank
        elif key in by_globalrank:
            ranks[key] = by_globalrank[key][1]
        else:
            ranks[key] = file_rank
    return ranks


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
        metadata: dict[str, Any] = {"cuda_dev": dev, "comms": [_comm_metadata(c) for c in comms], "time_note": (
            "the enqueue times printed before the NCCL lines" if log.timed else "the log lines carry no times")}
        if version:
            metadata["nccl_version_full"] = version.group("full")
        if log.unread_coll_lines:
            # The file's count: one garbled line may not say whose it was.
            metadata["unread_coll_lines"] = log.unread_coll_lines
            metadata["first_unread_coll_line"] = log.first_unread_coll_line
        rows.append({
            "rank": world_rank.get(key),
            "world_size": comm.nranks if comm else group_sizes.get(key),
            "host": host,
            "pid": pid,
            "source_path": str(path.resolve()),
            "source_format": FORMAT,
            "epoch_offset_ns": 0 if log.timed else None,
            "time_base": "epoch" if log.timed else None,
            "backend": _backend(version) if version else None,
            "nccl_version": version.group("version") if version else None,
            "metadata_json": json.dumps(metadata, sort_keys=True),
            "ingested_at": ingested_at,
        })
    rows.sort(key=lambda row: (row["rank"] is None, row["rank"] or 0, row["host"], row["pid"]))
    return _build("runs", rows, run)


def _comm_metadata(comm: _Comm) -> dict[str, Any]:
    out = {"comm_id": comm.key, "comm_ptr": comm.ptr, "rank": comm.rank, "nranks": comm.nranks, "bus_id": comm.bus_id}
    if comm.color is not None:
        out.update(parent_comm_id=comm.parent.key if comm.parent else None, split_count=comm.split_count, color=comm.color)
    return out


def _backend(version: re.Match[str]) -> str:
    """RCCL names itself; a `+hip` build suffix marks an RCCL build too."""
    return "rccl" if version.group("library") == "RCCL" or "+hip" in version.group("full") else "nccl"


def _build(name: str, rows: list[dict[str, Any]], run: str) -> pa.Table:
    keys = set().union(*rows)
    columns = {key: [row.get(key) for row in rows] for key in keys}
    columns["run"] = [run] * len(rows)
    return build_table(name, columns, num_rows=len(rows))
