"""NCCL/RCCL debug logs → collectives, nccl_topology and runs."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from collector.errors import TraceError
from collector.ingest import nccl_log
from collector.schema import TRACE_SCHEMAS

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
        {"run": "r1", "rank": 0, "world_size": 2, "host": "node01", "pid": 2201, "source_path": str(path.resolve()), "source_format": "nccl_log", "time_base": None, "backend": "nccl", "nccl_version": "2.21.5+cuda12.4"},
        {"run": "r1", "rank": 1, "world_size": 2, "host": "node02", "pid": 3302, "source_path": str(path.resolve()), "source_format": "nccl_log", "time_base": None, "backend": "nccl", "nccl_version": "2.21.5+cuda12.4"},
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
        {"rank": 0, "world_size": 2, "host": "gpu-box", "pid": 500, "nccl_version": "2.10.3+cuda11.4", "metadata_json": '{"comms": [{"bus_id": "1b000", "comm_id": "0x5600aa10", "comm_ptr": "0x5600aa10", "nranks": 2, "rank": 0}], "cuda_dev": 0}'},
        {"rank": 1, "world_size": 2, "host": "gpu-box", "pid": 500, "nccl_version": "2.10.3+cuda11.4", "metadata_json": '{"comms": [{"bus_id": "1c000", "comm_id": "0x5600bb20", "comm_ptr": "0x5600bb20", "nranks": 2, "rank": 1}], "cuda_dev": 1}'},
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
    assert _rows(parsed.tables["runs"], ["backend", "nccl_version"]) == [{"backend": "rccl", "nccl_version": "2.20.5+hip6.2"}]


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
