"""NCCL/RCCL debug logs → collectives, nccl_topology and runs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpulens.collector.errors import TraceError
from gpulens.collector.ingest import nccl_log
from gpulens.collector.ingest.formats import HEAD_BYTES, detect_format
from gpulens.collector.schema import TRACE_SCHEMAS

# Two ranks on two nodes, one communicator, NCCL 2.21 over InfiniBand, as
# NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,COLL prints it (lines of the two
# processes interleaved, as a shared job log has them). Only rank 0 prints
# the version. The last three lines are damaged and must be skipped.
TWO_NODES_LOG = """\
node01:2201:2201 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
node01:2201:2201 [0] NCCL INFO cudaDriverVersion 12040
node01:2201:2201 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node02:3302:3302 [0] NCCL INFO cudaDriverVersion 12040
node01:2201:2201 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>
node02:3302:3302 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.2<0>
node01:2201:2240 [0] NCCL INFO ncclCommInitRank comm 0x55d4c8a0e2b0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7c3d9e21a4b5f608 - Init START
node02:3302:3340 [0] NCCL INFO ncclCommInitRank comm 0x5581e7f0c1d0 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7c3d9e21a4b5f608 - Init START
node01:2201:2240 [0] NCCL INFO comm 0x55d4c8a0e2b0 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
node02:3302:3340 [0] NCCL INFO comm 0x5581e7f0c1d0 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
node01:2201:2240 [0] NCCL INFO Channel 00/02 :    0   1
node01:2201:2240 [0] NCCL INFO Channel 01/02 :    0   1
node01:2201:2240 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1
node02:3302:3340 [0] NCCL INFO Trees [0] -1/-1/-1->1->0 [1] 0/-1/-1->1->-1
node01:2201:2240 [0] NCCL INFO P2P Chunksize set to 131072
node02:3302:3340 [0] NCCL INFO Channel 00/0 : 0[18000] -> 1[18000] [receive] via NET/IB/0/GDRDMA
node01:2201:2240 [0] NCCL INFO Channel 00/0 : 0[18000] -> 1[18000] [send] via NET/IB/0/GDRDMA
node02:3302:3340 [0] NCCL INFO Channel 01/0 : 1[18000] -> 0[18000] [send] via NET/IB/1/GDRDMA
node01:2201:2240 [0] NCCL INFO Channel 01/0 : 1[18000] -> 0[18000] [receive] via NET/IB/1/GDRDMA
node01:2201:2240 [0] NCCL INFO Connected all rings
node02:3302:3340 [0] NCCL INFO Connected all rings
node01:2201:2240 [0] NCCL INFO ncclCommInitRank comm 0x55d4c8a0e2b0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7c3d9e21a4b5f608 - Init COMPLETE
node02:3302:3340 [0] NCCL INFO ncclCommInitRank comm 0x5581e7f0c1d0 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7c3d9e21a4b5f608 - Init COMPLETE
node01:2201:2201 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f3a5c000000 recvbuff 0x7f3a5c000000 count 262144 datatype 9 op 0 root 0 comm 0x55d4c8a0e2b0 [nranks=2] stream 0x55d4c9a1f0e0
node02:3302:3302 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f12a8000000 recvbuff 0x7f12a8000000 count 262144 datatype 9 op 0 root 0 comm 0x5581e7f0c1d0 [nranks=2] stream 0x5581e8a2b0c0
node01:2201:2201 [0] NCCL INFO AllGather: opCount 1 sendbuff 0x7f3a5c200000 recvbuff 0x7f3a5c400000 count 1024 datatype 7 op 0 root 0 comm 0x55d4c8a0e2b0 [nranks=2] stream 0x55d4c9a1f0e0
node01:2201:2201 [0] NCCL INFO ReduceScatter: opCount 2 sendbuff 0x7f3a5c400000 recvbuff 0x7f3a5c600000 count 2048 datatype 6 op 0 root 0 comm 0x55d4c8a0e2b0 [nranks=2] stream 0x55d4c9a1f0e0
node01:2201:2201 [0] NCCL INFO Broadcast: opCount 3 sendbuff 0x7f3a5c800000 recvbuff 0x7f3a5c800000 count 4096 datatype 0 op 0 root 0 comm 0x55d4c8a0e2b0 [nranks=2] stream 0x55d4c9a1f0e0
node01:2201:2201 [0] NCCL INFO Send: opCount 4 sendbuff 0x7f3a5ca00000 recvbuff (nil) count 512 datatype 4 op 0 root 1 comm 0x55d4c8a0e2b0 [nranks=2] stream 0x55d4c9a1f0e0
node02:3302:3302 [0] NCCL INFO Recv: opCount 4 sendbuff (nil) recvbuff 0x7f12a8a00000 count 512 datatype 4 op 0 root 0 comm 0x5581e7f0c1d0 [nranks=2] stream 0x5581e8a2b0c0
node01:2201:2201 [0] NCCL INFO AllReduce: opCount 1f sendbuff 0x7f3a5c000000 recvbuff 0x7f3a5c000000 count 8 datatype 7 op 0 root 0 comm 0x55d4c8a0e2b0 [nranks=2] stream 0x55d4c9a1f0e0
node01:2201:2201 [0] NCCL INFO AllReduce: opCount zz sendbuff 0x7f3a5c000000 recvbuff 0x7f3a5c000000 count 8 datatype 7 op 0 root 0 comm 0x55d4c8a0e2b0 [nranks=2] stream 0x55d4c9a1f0e0
node01:2201:2201 [0] NCCL INFO AllReduce: opCount 20 sendbuff 0x7f3a5c000000 recvbuf
node01:2201:2240 [0] NCCL INFO Channel 00/0 : 0[18000] ->
"""

# One process driving two GPUs (ncclCommInitAll), an older NCCL that names
# the communicator only at Init COMPLETE, after the channel lines, and
# gives no commId.
ONE_PROCESS_LOG = """\
gpu-box:500:500 [0] NCCL INFO NCCL version 2.10.3+cuda11.4
gpu-box:500:531 [0] NCCL INFO Channel 00/02 :    0   1
gpu-box:500:532 [1] NCCL INFO Trees [0] -1/-1/-1->1->0 [1] 0/-1/-1->1->-1
gpu-box:500:531 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1
gpu-box:500:531 [0] NCCL INFO Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC/read
gpu-box:500:532 [1] NCCL INFO Channel 00 : 1[1c000] -> 0[1b000] via SHM/direct/direct
gpu-box:500:531 [0] NCCL INFO Connected all rings
gpu-box:500:531 [0] NCCL INFO comm 0x5600aa10 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE
gpu-box:500:532 [1] NCCL INFO comm 0x5600bb20 rank 1 nranks 2 cudaDev 1 busId 1c000 - Init COMPLETE
gpu-box:500:500 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f0000000000 recvbuff 0x7f0000000000 count 1000 datatype 7 op 0 root 0 comm 0x5600aa10 [nranks=2] stream 0x5600cc30
gpu-box:500:500 [1] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f1000000000 recvbuff 0x7f1000000000 count 1000 datatype 7 op 0 root 0 comm 0x5600bb20 [nranks=2] stream 0x5600dd40
"""

# An H100 node: NVLS and CUMEM P2P, on a communicator of 8 (only rank 0's lines).
NVLS_LOG = """\
h100:700:730 [0] NCCL INFO ncclCommInitRank comm 0x55aa0100 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1f2e3d4c5b6a7988 - Init START
h100:700:730 [0] NCCL INFO NVLS multicast support is available on dev 0
h100:700:730 [0] NCCL INFO NVLS comm 0x55aa0100 headRank 0 nHeads 8 buffSize 4194304 memSize 2097152 nvlsPerRankSize 201326592 nvlsTotalSize 1610612736
h100:700:730 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h100:700:730 [0] NCCL INFO ncclCommInitRank comm 0x55aa0100 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1f2e3d4c5b6a7988 - Init COMPLETE
"""

# NCCL 2.22-2.27: four ranks on one node split the world communicator
# into {0, 2} (color 0) and {1, 3} (color 1), as torch.distributed.new_group
# does with split_from. Split lines carry no commId and START has `key K-`.
SPLIT_LOG = """\
gpu-node-017:1001:1001 [0] NCCL INFO ncclCommInitRank comm 0x55d0a1b2c0d0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7d1e2f3a4b5c6d7e - Init START
gpu-node-017:1002:1002 [1] NCCL INFO ncclCommInitRank comm 0x55d0a1b2c1d0 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x7d1e2f3a4b5c6d7e - Init START
gpu-node-017:1003:1003 [2] NCCL INFO ncclCommInitRank comm 0x55d0a1b2c2d0 rank 2 nranks 4 cudaDev 2 nvmlDev 2 busId 3a000 commId 0x7d1e2f3a4b5c6d7e - Init START
gpu-node-017:1004:1004 [3] NCCL INFO ncclCommInitRank comm 0x55d0a1b2c3d0 rank 3 nranks 4 cudaDev 3 nvmlDev 3 busId 5d000 commId 0x7d1e2f3a4b5c6d7e - Init START
gpu-node-017:1001:1001 [0] NCCL INFO ncclCommInitRank comm 0x55d0a1b2c0d0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7d1e2f3a4b5c6d7e - Init COMPLETE
gpu-node-017:1003:1003 [2] NCCL INFO ncclCommInitRank comm 0x55d0a1b2c2d0 rank 2 nranks 4 cudaDev 2 nvmlDev 2 busId 3a000 commId 0x7d1e2f3a4b5c6d7e - Init COMPLETE
gpu-node-017:1002:1002 [1] NCCL INFO ncclCommInitRank comm 0x55d0a1b2c1d0 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x7d1e2f3a4b5c6d7e - Init COMPLETE
gpu-node-017:1004:1004 [3] NCCL INFO ncclCommInitRank comm 0x55d0a1b2c3d0 rank 3 nranks 4 cudaDev 3 nvmlDev 3 busId 5d000 commId 0x7d1e2f3a4b5c6d7e - Init COMPLETE
gpu-node-017:1001:1001 [0] NCCL INFO ncclCommSplit comm 0x55d0a1b2e0f0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 parent 0x55d0a1b2c0d0 splitCount 1 color 0 key 0- Init START
gpu-node-017:1002:1002 [1] NCCL INFO ncclCommSplit comm 0x55d0a1b2e1f0 rank 0 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 parent 0x55d0a1b2c1d0 splitCount 1 color 1 key 1- Init START
gpu-node-017:1003:1003 [2] NCCL INFO ncclCommSplit comm 0x55d0a1b2e2f0 rank 1 nranks 2 cudaDev 2 nvmlDev 2 busId 3a000 parent 0x55d0a1b2c2d0 splitCount 1 color 0 key 2- Init START
gpu-node-017:1004:1004 [3] NCCL INFO ncclCommSplit comm 0x55d0a1b2e3f0 rank 1 nranks 2 cudaDev 3 nvmlDev 3 busId 5d000 parent 0x55d0a1b2c3d0 splitCount 1 color 1 key 3- Init START
gpu-node-017:1003:1003 [2] NCCL INFO ncclCommSplit comm 0x55d0a1b2e2f0 rank 1 nranks 2 cudaDev 2 nvmlDev 2 busId 3a000 parent 0x55d0a1b2c2d0 splitCount 1 color 0 key 2 - Init COMPLETE
gpu-node-017:1001:1001 [0] NCCL INFO ncclCommSplit comm 0x55d0a1b2e0f0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 parent 0x55d0a1b2c0d0 splitCount 1 color 0 key 0 - Init COMPLETE
gpu-node-017:1004:1004 [3] NCCL INFO ncclCommSplit comm 0x55d0a1b2e3f0 rank 1 nranks 2 cudaDev 3 nvmlDev 3 busId 5d000 parent 0x55d0a1b2c3d0 splitCount 1 color 1 key 3 - Init COMPLETE
gpu-node-017:1002:1002 [1] NCCL INFO ncclCommSplit comm 0x55d0a1b2e1f0 rank 0 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 parent 0x55d0a1b2c1d0 splitCount 1 color 1 key 1 - Init COMPLETE
gpu-node-017:1001:1001 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f3b00000000 recvbuff 0x7f3b00000000 count 2048 datatype 7 op 0 root 0 comm 0x55d0a1b2e0f0 [nranks=2] stream 0x55d0a1b30000
gpu-node-017:1002:1002 [1] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f3b10000000 recvbuff 0x7f3b10000000 count 2048 datatype 7 op 0 root 0 comm 0x55d0a1b2e1f0 [nranks=2] stream 0x55d0a1b31000
gpu-node-017:1003:1003 [2] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f3b20000000 recvbuff 0x7f3b20000000 count 2048 datatype 7 op 0 root 0 comm 0x55d0a1b2e2f0 [nranks=2] stream 0x55d0a1b32000
gpu-node-017:1004:1004 [3] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f3b30000000 recvbuff 0x7f3b30000000 count 2048 datatype 7 op 0 root 0 comm 0x55d0a1b2e3f0 [nranks=2] stream 0x55d0a1b33000
"""
WORLD = "0x7d1e2f3a4b5c6d7e"

# RCCL 2.27 with NCCL_DEBUG_SUBSYS=COLL: the banner, then COLL lines that
# end `task T globalrank G`; no init lines.
RCCL_COLL_ONLY_LOG = """\
mi300-07:5501:5501 [0] NCCL INFO RCCL version : 2.27.7-HEAD:0d2c4fd
HIP version  : 7.2.26015-fc0010cf6a
ROCm version : 7.2.0.0-43-fc0010cf6a
Hostname     : mi300-07
mi300-07:5502:5502 [1] NCCL INFO RCCL version : 2.27.7-HEAD:0d2c4fd
mi300-07:5501:5501 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f0000000000 recvbuff 0x7f0000000000 count 262144 datatype 9 op 0 root 0 comm 0x5555aaaa0000 [nranks=2] stream 0x5555bbbb0000 task 0 globalrank 0
mi300-07:5502:5502 [1] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f1000000000 recvbuff 0x7f1000000000 count 262144 datatype 9 op 0 root 0 comm 0x5555aaab0000 [nranks=2] stream 0x5555bbbc0000 task 0 globalrank 1
mi300-07:5501:5501 [0] NCCL INFO AllGather: opCount 1 sendbuff 0x7f0000000000 recvbuff 0x7f0000100000 count 1024 datatype 7 op 0 root 0 comm 0x5555aaaa0000 [nranks=2] stream 0x5555bbbb0000 task 0 globalrank 0
mi300-07:5502:5502 [1] NCCL INFO AllGather: opCount 1 sendbuff 0x7f1000000000 recvbuff 0x7f1000100000 count 1024 datatype 7 op 0 root 0 comm 0x5555aaab0000 [nranks=2] stream 0x5555bbbc0000 task 0 globalrank 1
"""

COLLECTIVE_COLUMNS = ["run", "rank", "process_group", "seq", "op", "bytes", "group_size", "dtype", "in_nelems", "out_nelems", "start_ns"]
TOPOLOGY_COLUMNS = ["rank", "host", "comm_id", "nranks", "kind", "channel", "peer_rank", "transport", "detail"]
COMM = "0x7c3d9e21a4b5f608"


def _write(tmp_path: Path, text: str, name: str = "nccl.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _rows(table, columns: list[str]) -> list[dict]:
    return [{column: row[column] for column in columns} for row in table.to_pylist()]


def test_sniff_accepts_nccl_info_log() -> None:
    assert nccl_log.sniff(TWO_NODES_LOG.encode(), Path("job.log")) is True


def test_sniff_rejects_log_without_nccl_lines() -> None:
    head = b"epoch 1 loss 0.52\n[rank0]: Traceback (most recent call last):\n"
    assert nccl_log.sniff(head, Path("train.log")) is False


def test_sniff_rejects_kineto_json() -> None:
    head = b'{"schemaVersion": 1, "traceEvents": [{"name": "ncclDevKernel_AllReduce"}]}'
    assert nccl_log.sniff(head, Path("trace.json")) is False


def test_parse_without_nccl_lines_raises(tmp_path: Path) -> None:
    path = _write(tmp_path, "epoch 1 loss 0.52\nepoch 2 loss 0.48\n")
    with pytest.raises(TraceError, match="no NCCL INFO lines"):
        nccl_log.parse(path, "r1")


def test_collectives_have_exact_rows(tmp_path: Path) -> None:
    parsed = nccl_log.parse(_write(tmp_path, TWO_NODES_LOG), "r1")
    expected = [
        {"run": "r1", "rank": 0, "process_group": COMM, "seq": 0, "op": "all_reduce", "bytes": 524288, "group_size": 2, "dtype": "bfloat16", "in_nelems": 262144, "out_nelems": 262144, "start_ns": None},
        {"run": "r1", "rank": 1, "process_group": COMM, "seq": 0, "op": "all_reduce", "bytes": 524288, "group_size": 2, "dtype": "bfloat16", "in_nelems": 262144, "out_nelems": 262144, "start_ns": None},
        {"run": "r1", "rank": 0, "process_group": COMM, "seq": 1, "op": "all_gather", "bytes": 8192, "group_size": 2, "dtype": "float32", "in_nelems": 1024, "out_nelems": 2048, "start_ns": None},
        {"run": "r1", "rank": 0, "process_group": COMM, "seq": 2, "op": "reduce_scatter", "bytes": 8192, "group_size": 2, "dtype": "float16", "in_nelems": 4096, "out_nelems": 2048, "start_ns": None},
        {"run": "r1", "rank": 0, "process_group": COMM, "seq": 3, "op": "broadcast", "bytes": 4096, "group_size": 2, "dtype": "int8", "in_nelems": 4096, "out_nelems": 4096, "start_ns": None},
        {"run": "r1", "rank": 0, "process_group": COMM, "seq": 4, "op": "send", "bytes": 4096, "group_size": 2, "dtype": "int64", "in_nelems": 512, "out_nelems": 512, "start_ns": None},
        {"run": "r1", "rank": 1, "process_group": COMM, "seq": 4, "op": "recv", "bytes": 4096, "group_size": 2, "dtype": "int64", "in_nelems": 512, "out_nelems": 512, "start_ns": None},
        {"run": "r1", "rank": 0, "process_group": COMM, "seq": 31, "op": "all_reduce", "bytes": 32, "group_size": 2, "dtype": "float32", "in_nelems": 8, "out_nelems": 8, "start_ns": None},
    ]
    assert _rows(parsed.tables["collectives"], COLLECTIVE_COLUMNS) == expected


def test_topology_has_rings_trees_and_ib_transports(tmp_path: Path) -> None:
    parsed = nccl_log.parse(_write(tmp_path, TWO_NODES_LOG), "r1")
    ib0, ib1 = "NET/IB/0/GDRDMA", "NET/IB/1/GDRDMA"
    expected = [
        {"rank": 0, "host": "node01", "comm_id": COMM, "nranks": 2, "kind": "ring", "channel": 0, "peer_rank": None, "transport": None, "detail": "0 1"},
        {"rank": 0, "host": "node01", "comm_id": COMM, "nranks": 2, "kind": "ring", "channel": 1, "peer_rank": None, "transport": None, "detail": "0 1"},
        {"rank": 0, "host": "node01", "comm_id": COMM, "nranks": 2, "kind": "tree", "channel": 0, "peer_rank": None, "transport": None, "detail": "1/-1/-1->0->-1"},
        {"rank": 0, "host": "node01", "comm_id": COMM, "nranks": 2, "kind": "tree", "channel": 1, "peer_rank": 1, "transport": None, "detail": "-1/-1/-1->0->1"},
        {"rank": 1, "host": "node02", "comm_id": COMM, "nranks": 2, "kind": "tree", "channel": 0, "peer_rank": 0, "transport": None, "detail": "-1/-1/-1->1->0"},
        {"rank": 1, "host": "node02", "comm_id": COMM, "nranks": 2, "kind": "tree", "channel": 1, "peer_rank": None, "transport": None, "detail": "0/-1/-1->1->-1"},
        {"rank": 1, "host": "node02", "comm_id": COMM, "nranks": 2, "kind": "transport", "channel": 0, "peer_rank": 0, "transport": ib0, "detail": f"Channel 00/0 : 0[18000] -> 1[18000] [receive] via {ib0}"},
        {"rank": 0, "host": "node01", "comm_id": COMM, "nranks": 2, "kind": "transport", "channel": 0, "peer_rank": 1, "transport": ib0, "detail": f"Channel 00/0 : 0[18000] -> 1[18000] [send] via {ib0}"},
        {"rank": 1, "host": "node02", "comm_id": COMM, "nranks": 2, "kind": "transport", "channel": 1, "peer_rank": 0, "transport": ib1, "detail": f"Channel 01/0 : 1[18000] -> 0[18000] [send] via {ib1}"},
        {"rank": 0, "host": "node01", "comm_id": COMM, "nranks": 2, "kind": "transport", "channel": 1, "peer_rank": 1, "transport": ib1, "detail": f"Channel 01/0 : 1[18000] -> 0[18000] [receive] via {ib1}"},
    ]
    assert _rows(parsed.tables["nccl_topology"], TOPOLOGY_COLUMNS) == expected


def test_runs_have_one_row_per_rank(tmp_path: Path) -> None:
    path = _write(tmp_path, TWO_NODES_LOG)
    parsed = nccl_log.parse(path, "r1")
    columns = ["run", "rank", "world_size", "host", "pid", "source_path", "source_format", "time_base", "backend", "nccl_version"]
    assert _rows(parsed.tables["runs"], columns) == [
        {"run": "r1", "rank": 0, "world_size": 2, "host": "node01", "pid": 2201, "source_path": str(path.resolve()), "source_format": "nccl_log", "time_base": None, "backend": "nccl", "nccl_version": "2.21.5"},
        {"run": "r1", "rank": 1, "world_size": 2, "host": "node02", "pid": 3302, "source_path": str(path.resolve()), "source_format": "nccl_log", "time_base": None, "backend": "nccl", "nccl_version": "2.21.5"},
    ]


def test_tables_follow_the_contract_schemas(tmp_path: Path) -> None:
    parsed = nccl_log.parse(_write(tmp_path, TWO_NODES_LOG), "r1")
    assert sorted(parsed.tables) == ["collectives", "nccl_topology", "runs"]
    for name, table in parsed.tables.items():
        assert table.schema.equals(TRACE_SCHEMAS[name], check_metadata=True)


def test_one_process_with_two_gpus_gives_two_ranks(tmp_path: Path) -> None:
    parsed = nccl_log.parse(_write(tmp_path, ONE_PROCESS_LOG), "r1")
    runs = _rows(parsed.tables["runs"], ["rank", "world_size", "host", "pid", "nccl_version", "metadata_json"])
    assert runs == [
        {"rank": 0, "world_size": 2, "host": "gpu-box", "pid": 500, "nccl_version": "2.10.3", "metadata_json": '{"comms": [{"bus_id": "1b000", "comm_id": "0x5600aa10", "comm_ptr": "0x5600aa10", "nranks": 2, "rank": 0}], "cuda_dev": 0, "nccl_version_full": "2.10.3+cuda11.4", "time_note": "the log lines carry no times"}'},
        {"rank": 1, "world_size": 2, "host": "gpu-box", "pid": 500, "nccl_version": "2.10.3", "metadata_json": '{"comms": [{"bus_id": "1c000", "comm_id": "0x5600bb20", "comm_ptr": "0x5600bb20", "nranks": 2, "rank": 1}], "cuda_dev": 1, "nccl_version_full": "2.10.3+cuda11.4", "time_note": "the log lines carry no times"}'},
    ]
    assert _rows(parsed.tables["collectives"], ["rank", "process_group", "bytes"]) == [
        {"rank": 0, "process_group": "0x5600aa10", "bytes": 4000},
        {"rank": 1, "process_group": "0x5600bb20", "bytes": 4000},
    ]


def test_channel_lines_before_init_complete_join_that_communicator(tmp_path: Path) -> None:
    parsed = nccl_log.parse(_write(tmp_path, ONE_PROCESS_LOG), "r1")
    assert _rows(parsed.tables["nccl_topology"], ["rank", "comm_id", "kind", "channel", "peer_rank", "transport"]) == [
        {"rank": 0, "comm_id": "0x5600aa10", "kind": "ring", "channel": 0, "peer_rank": None, "transport": None},
        {"rank": 1, "comm_id": "0x5600bb20", "kind": "tree", "channel": 0, "peer_rank": 0, "transport": None},
        {"rank": 1, "comm_id": "0x5600bb20", "kind": "tree", "channel": 1, "peer_rank": None, "transport": None},
        {"rank": 0, "comm_id": "0x5600aa10", "kind": "tree", "channel": 0, "peer_rank": None, "transport": None},
        {"rank": 0, "comm_id": "0x5600aa10", "kind": "tree", "channel": 1, "peer_rank": 1, "transport": None},
        {"rank": 0, "comm_id": "0x5600aa10", "kind": "transport", "channel": 0, "peer_rank": 1, "transport": "P2P/IPC"},
        {"rank": 1, "comm_id": "0x5600bb20", "kind": "transport", "channel": 0, "peer_rank": 0, "transport": "SHM"},
    ]


def test_nvls_and_cumem_lines_become_topology_rows(tmp_path: Path) -> None:
    parsed = nccl_log.parse(_write(tmp_path, NVLS_LOG), "r1")
    comm = "0x1f2e3d4c5b6a7988"
    assert _rows(parsed.tables["nccl_topology"], TOPOLOGY_COLUMNS) == [
        {"rank": 0, "host": "h100", "comm_id": comm, "nranks": 8, "kind": "nvls", "channel": None, "peer_rank": None, "transport": "NVLS", "detail": "NVLS multicast support is available on dev 0"},
        {"rank": 0, "host": "h100", "comm_id": comm, "nranks": 8, "kind": "nvls", "channel": None, "peer_rank": None, "transport": "NVLS", "detail": "NVLS comm 0x55aa0100 headRank 0 nHeads 8 buffSize 4194304 memSize 2097152 nvlsPerRankSize 201326592 nvlsTotalSize 1610612736"},
        {"rank": 0, "host": "h100", "comm_id": comm, "nranks": 8, "kind": "transport", "channel": 0, "peer_rank": 1, "transport": "P2P/CUMEM", "detail": "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"},
    ]


def test_rank_comes_from_largest_communicator(tmp_path: Path) -> None:
    # Global rank 5 of 8 is rank 1 of a tensor-parallel pair; the pair's
    # collective still carries rank 5.
    log = """\
node03:900:900 [1] NCCL INFO comm 0x5500a0 rank 5 nranks 8 cudaDev 1 nvmlDev 1 busId 2a000 commId 0xaaaa000000000001 - Init COMPLETE
node03:900:900 [1] NCCL INFO comm 0x5500b0 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 commId 0xbbbb000000000002 - Init COMPLETE
node03:900:900 [1] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f00 recvbuff 0x7f00 count 16 datatype 7 op 0 root 0 comm 0x5500b0 [nranks=2] stream 0x5500c0
"""
    parsed = nccl_log.parse(_write(tmp_path, log), "r1")
    assert _rows(parsed.tables["collectives"], ["rank", "process_group", "group_size"]) == [
        {"rank": 5, "process_group": "0xbbbb000000000002", "group_size": 2},
    ]
    assert _rows(parsed.tables["runs"], ["rank", "world_size"]) == [{"rank": 5, "world_size": 8}]


def test_leading_datetime_gives_collective_times(tmp_path: Path) -> None:
    log = """\
[2024-05-01 12:00:00.250000] node01:2201:2201 [0] NCCL INFO comm 0x55d4c8a0e2b0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7c3d9e21a4b5f608 - Init COMPLETE
[2024-05-01 12:00:01.5] node01:2201:2201 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f00 recvbuff 0x7f00 count 4 datatype 7 op 0 root 0 comm 0x55d4c8a0e2b0 [nranks=2] stream 0x55d4c9a1f0e0
"""
    parsed = nccl_log.parse(_write(tmp_path, log), "r1")
    assert _rows(parsed.tables["collectives"], ["start_ns", "cpu_start_ns", "end_ns"]) == [
        {"start_ns": 1714564801500000000, "cpu_start_ns": 1714564801500000000, "end_ns": None},
    ]
    assert _rows(parsed.tables["runs"], ["time_base", "epoch_offset_ns"]) == [{"time_base": "epoch", "epoch_offset_ns": 0}]


def test_rccl_epoch_microseconds_and_globalrank_are_read(tmp_path: Path) -> None:
    log = (
        "rocm-box:24888:25056 [1] 1558545003174220 NCCL INFO AllReduce: opCount 1 sendbuff 0x7f80b54bad00 "
        "recvbuff 0x7f81cce12200 count 1001 datatype 7 op 0 root 0 comm 0x7f80467b9770 [nranks=2] "
        "stream 0x7f804680c090 task 0 globalrank 1\n"
    )
    parsed = nccl_log.parse(_write(tmp_path, log), "r1")
    assert _rows(parsed.tables["collectives"], ["rank", "process_group", "seq", "bytes", "start_ns"]) == [
        {"rank": 1, "process_group": "0x7f80467b9770", "seq": 1, "bytes": 4004, "start_ns": 1558545003174220000},
    ]


def test_rccl_version_sets_backend(tmp_path: Path) -> None:
    log = "mi300:42:42 [0] NCCL INFO RCCL version 2.20.5+hip6.2 HEAD:1d1ea67\n" + NVLS_LOG.replace("h100:700", "mi300:42")
    parsed = nccl_log.parse(_write(tmp_path, log), "r1")
    assert _rows(parsed.tables["runs"], ["backend", "nccl_version"]) == [{"backend": "rccl", "nccl_version": "2.20.5"}]


def test_gzipped_log_is_read(tmp_path: Path) -> None:
    path = tmp_path / "nccl.log.gz"
    path.write_bytes(gzip.compress(TWO_NODES_LOG.encode()))
    parsed = nccl_log.parse(path, "r1")
    assert (parsed.rows("collectives"), parsed.rows("nccl_topology"), parsed.rows("runs")) == (8, 10, 2)


def test_info_lines_without_comm_or_collective_raise(tmp_path: Path) -> None:
    path = _write(tmp_path, "node01:2201:2201 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n")
    with pytest.raises(TraceError, match="no NCCL communicator"):
        nccl_log.parse(path, "r1")


def test_runs_rows_record_ingestion_and_lines_are_counted(tmp_path: Path) -> None:
    parsed = nccl_log.parse(_write(tmp_path, TWO_NODES_LOG), "r1")
    assert parsed.tables["runs"].column("ingested_at").null_count == 0
    assert parsed.events == len(TWO_NODES_LOG.splitlines())


def test_torchrun_line_prefixes_are_ignored(tmp_path: Path) -> None:
    log = "".join(f"[default{line.split(' [')[1][0]}]:{line}\n" for line in NVLS_LOG.splitlines())
    parsed = nccl_log.parse(_write(tmp_path, log), "r1")
    assert _rows(parsed.tables["runs"], ["rank", "world_size", "host", "pid"]) == [{"rank": 0, "world_size": 8, "host": "h100", "pid": 700}]
    assert parsed.rows("nccl_topology") == 3


# --- unreadable COLL lines ------------------------------------------------------------


def test_unreadable_coll_line_is_skipped_and_counted_in_runs_metadata(tmp_path: Path) -> None:
    # Line 3 lost `op 0 root 0` (two processes wrote into one line's place).
    log = """\
gpu-node-017:1002:1002 [1] NCCL INFO ncclCommInitRank comm 0x55d0a1b2c1d0 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x7d1e2f3a4b5c6d7e - Init COMPLETE
gpu-node-017:1002:1002 [1] NCCL INFO AllReduce: opCount 5 sendbuff 0x7f3a10000000 recvbuff 0x7f3a18000000 count 1000 datatype 5 op 0 root 0 comm 0x55d0a1b2c1d0 [nranks=4] stream 0x55d0a1b31000
gpu-node-017:1002:1002 [1] NCCL INFO AllReduce: opCount 6 sendbuff 0x7f3a10000000 recvbuff 0x7f3a18000000 count 1000 datatype 6 comm 0x55d0a1b2c1d0 [nranks=4] stream 0x55d0a1b31000
gpu-node-017:1002:1002 [1] NCCL INFO AllReduce: opCount 7 sendbuff 0x7f3a10000000 recvbuff 0x7f3a18000000 count 1000 datatype 7 op 0 root 0 comm 0x55d0a1b2c1d0 [nranks=4] stream 0x55d0a1b31000
"""
    parsed = nccl_log.parse(_write(tmp_path, log, "rank1.log"), "r1")
    assert parsed.tables["collectives"].column("seq").to_pylist() == [5, 7]
    metadata = json.loads(parsed.tables["runs"].column("metadata_json")[0].as_py())
    assert (metadata["unread_coll_lines"], metadata["first_unread_coll_line"]) == (1, 3)


def test_damaged_coll_lines_are_a_warning_for_the_user(tmp_path: Path) -> None:
    parsed = nccl_log.parse(_write(tmp_path, TWO_NODES_LOG), "r1")
    assert parsed.warnings == ["2 COLL lines could not be read (the first at line 32); their collectives are missing"]


def test_ingest_command_prints_a_files_warnings_after_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpulens.dashboard import cli

    path = _write(tmp_path, TWO_NODES_LOG)
    assert cli.main(["ingest", str(path), "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[1] == (f"gpulens: warning: {path}: 2 COLL lines could not be read (the first at line 32); "
                        "their collectives are missing")


def test_damaged_coll_lines_of_a_shared_log_are_counted_on_every_runs_row(tmp_path: Path) -> None:
    parsed = nccl_log.parse(_write(tmp_path, TWO_NODES_LOG), "r1")
    counts = [(m["unread_coll_lines"], m["first_unread_coll_line"]) for m in map(json.loads, parsed.tables["runs"].column("metadata_json").to_pylist())]
    assert counts == [(2, 32), (2, 32)]  # `opCount zz` and the cut-off line after it


def test_log_whose_coll_lines_are_all_unreadable_says_so(tmp_path: Path) -> None:
    log = "node01:2201:2201 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f3a5c000000 recvbuff 0x7f3a5c000000 count 8 datatype 7 comm 0x55d4c8a0e2b0 [nranks=2]\n"
    with pytest.raises(TraceError, match=r"1 COLL line could not be read \(line 1\)"):
        nccl_log.parse(_write(tmp_path, log), "r1")


# --- detection past the head ------------------------------------------------------------


def _trainer_output(min_bytes: int) -> str:
    line = "[2024-06-10 08:00:00] INFO trainer.py:212: loading shard {} of model weights ... ok\n"
    return "".join(line.format(i) for i in range(min_bytes // len(line) + 1))


def test_detect_format_finds_nccl_lines_after_a_megabyte_of_other_output(tmp_path: Path) -> None:
    path = _write(tmp_path, _trainer_output(1 << 20) + NVLS_LOG, "slurm-42.out")
    assert detect_format(path) == "nccl_log"


def test_detect_format_finds_late_nccl_lines_in_a_gzipped_log(tmp_path: Path) -> None:
    path = tmp_path / "job.log.gz"
    path.write_bytes(gzip.compress((_trainer_output(1 << 20) + NVLS_LOG).encode()))
    assert detect_format(path) == "nccl_log"


def test_sniff_does_not_read_past_a_binary_head(tmp_path: Path) -> None:
    head = bytes(range(256)) * (HEAD_BYTES // 256)
    path = tmp_path / "blob.bin"
    path.write_bytes(head + (_trainer_output(1 << 20) + NVLS_LOG).encode())
    assert nccl_log.sniff(head, path) is False


def test_sniff_gives_up_after_its_scan_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_log, "SNIFF_MAX_BYTES", 1 << 20)
    path = _write(tmp_path, _trainer_output(2 << 20) + NVLS_LOG, "slurm-42.out")
    assert nccl_log.sniff(path.read_bytes()[:HEAD_BYTES], path) is False


# --- versions ------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "expected"), [
    ("NCCL version 2.21.5+cuda12.4", ("nccl", "2.21.5", "2.21.5+cuda12.4")),
    ("RCCL version 2.18.3+hip6.0 develop:7e1cbb4", ("rccl", "2.18.3", "2.18.3+hip6.0 develop:7e1cbb4")),
    ("RCCL version : 2.27.7-HEAD:0d2c4fd", ("rccl", "2.27.7", "2.27.7-HEAD:0d2c4fd")),
])
def test_version_line_gives_bare_version_backend_and_full_string(tmp_path: Path, line: str, expected: tuple[str, str, str]) -> None:
    log = f"h100:700:700 [0] NCCL INFO {line}\n" + NVLS_LOG
    parsed = nccl_log.parse(_write(tmp_path, log), "r1")
    row = parsed.tables["runs"].to_pylist()[0]
    assert (row["backend"], row["nccl_version"], json.loads(row["metadata_json"])["nccl_version_full"]) == expected


# --- ranks without init lines ----------------------------------------------------------------


def test_rccl_coll_only_log_gives_runs_rows_with_the_globalranks(tmp_path: Path) -> None:
    parsed = nccl_log.parse(_write(tmp_path, RCCL_COLL_ONLY_LOG), "r1")
    assert _rows(parsed.tables["runs"], ["rank", "world_size", "host", "pid", "backend"]) == [
        {"rank": 0, "world_size": 2, "host": "mi300-07", "pid": 5501, "backend": "rccl"},
        {"rank": 1, "world_size": 2, "host": "mi300-07", "pid": 5502, "backend": "rccl"},
    ]
    assert parsed.tables["collectives"].column("rank").to_pylist() == [0, 1, 0, 1]


def test_globalrank_on_the_largest_group_is_the_rank_of_every_row(tmp_path: Path) -> None:
    # RCCL's globalrank is the rank within the collective's communicator:
    # 1 in a tensor-parallel pair, 5 in the world of 8.
    log = """\
mi300-07:5506:5506 [5] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f0000000000 recvbuff 0x7f0000000000 count 4096 datatype 9 op 0 root 0 comm 0x5555aaa20000 [nranks=2] stream 0x5555bbbb0000 task 0 globalrank 1
mi300-07:5506:5506 [5] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f0000100000 recvbuff 0x7f0000100000 count 4096 datatype 9 op 0 root 0 comm 0x5555aaa80000 [nranks=8] stream 0x5555bbbb0000 task 0 globalrank 5
"""
    parsed = nccl_log.parse(_write(tmp_path, log), "r1")
    assert parsed.tables["collectives"].column("rank").to_pylist() == [5, 5]
    assert _rows(parsed.tables["runs"], ["rank", "world_size"]) == [{"rank": 5, "world_size": 8}]


# --- split communicators ----------------------------------------------------------------------


def test_split_communicators_line_up_across_ranks(tmp_path: Path) -> None:
    parsed = nccl_log.parse(_write(tmp_path, SPLIT_LOG), "r1")
    assert _rows(parsed.tables["collectives"], ["rank", "process_group", "group_size"]) == [
        {"rank": 0, "process_group": f"{WORLD}/split1/color0", "group_size": 2},
        {"rank": 1, "process_group": f"{WORLD}/split1/color1", "group_size": 2},
        {"rank": 2, "process_group": f"{WORLD}/split1/color0", "group_size": 2},
        {"rank": 3, "process_group": f"{WORLD}/split1/color1", "group_size": 2},
    ]


def test_second_split_of_a_parent_is_another_group(tmp_path: Path) -> None:
    log = """\
gpu-node-017:1001:1001 [0] NCCL INFO ncclCommInitRank comm 0x55d0a1b2c0d0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7d1e2f3a4b5c6d7e - Init COMPLETE
gpu-node-017:1001:1001 [0] NCCL INFO ncclCommSplit comm 0x55d0a1b2e0f0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 parent 0x55d0a1b2c0d0 splitCount 1 color 0 key 0 - Init COMPLETE
gpu-node-017:1001:1001 [0] NCCL INFO ncclCommSplit comm 0x55d0a1b2f0a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 parent 0x55d0a1b2c0d0 splitCount 2 color 0 key 0 - Init COMPLETE
gpu-node-017:1001:1001 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f3b00000000 recvbuff 0x7f3b00000000 count 2048 datatype 7 op 0 root 0 comm 0x55d0a1b2e0f0 [nranks=2] stream 0x55d0a1b30000
gpu-node-017:1001:1001 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f3c00000000 recvbuff 0x7f3c00000000 count 2048 datatype 7 op 0 root 0 comm 0x55d0a1b2f0a0 [nranks=2] stream 0x55d0a1b30000
"""
    parsed = nccl_log.parse(_write(tmp_path, log), "r1")
    assert parsed.tables["collectives"].column("process_group").to_pylist() == [f"{WORLD}/split1/color0", f"{WORLD}/split2/color0"]


def test_split_line_with_commid_uses_it(tmp_path: Path) -> None:
    # NCCL 2.18-2.21 print a commId on split lines, the same on every member.
    log = """\
dgx1:9100:9100 [0] NCCL INFO ncclCommInitRank comm 0xaa00 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5e5e00001111aaaa - Init COMPLETE
dgx1:9100:9100 [0] NCCL INFO ncclCommSplit comm 0xcc00 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 parent 0xaa00 color 0 key 0 commId 0x9d3c5b2e4f6a7081 - Init START
dgx1:9100:9100 [0] NCCL INFO ncclCommSplit comm 0xcc00 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 parent 0xaa00 color 0 key 0 commId 0x9d3c5b2e4f6a7081 - Init COMPLETE
dgx1:9100:9100 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f00 recvbuff 0x7f00 count 1024 datatype 7 op 0 root 0 comm 0xcc00 [nranks=4] stream 0x1
"""
    parsed = nccl_log.parse(_write(tmp_path, log), "r1")
    assert _rows(parsed.tables["collectives"], ["rank", "process_group"]) == [{"rank": 0, "process_group": "0x9d3c5b2e4f6a7081"}]


def test_split_communicator_topology_rows_carry_the_shared_id(tmp_path: Path) -> None:
    lines = SPLIT_LOG.splitlines()
    # Rank 0's ring on its split communicator, between Init START and COMPLETE.
    ring = "gpu-node-017:1001:1001 [0] NCCL INFO Channel 00/02 :    0   1"
    log = "\n".join([*lines[:9], ring, *lines[9:]]) + "\n"
    parsed = nccl_log.parse(_write(tmp_path, log), "r1")
    assert _rows(parsed.tables["nccl_topology"], ["rank", "comm_id", "nranks", "kind", "detail"]) == [
        {"rank": 0, "comm_id": f"{WORLD}/split1/color0", "nranks": 2, "kind": "ring", "detail": "0 1"},
    ]
