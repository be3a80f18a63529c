"""rocprofv3 databases (rocpd SQLite) → kernels, api_calls, annotations and runs.

The databases are built here the way rocprofv3 writes them: each table
named `rocpd_<name><uuid>` with a `rocpd_<name>` view over it, columns as
rocprofiler-sdk's `rocpd_tables.sql` declares them (the ones gpulens reads,
and the NOT NULL ones), in either of its two layouts: times and process
columns on each row, or in `rocpd_track` and `rocpd_timestamp`.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from gpulens.collector.derive import derive_trace_tables
from gpulens.collector.errors import TraceError
from gpulens.collector.ingest import rocpd
from gpulens.collector.ingest.batch import ingest_paths
from gpulens.collector.ingest.formats import detect_format
from gpulens.collector.schema import TRACE_SCHEMAS
from conftest import update_sqlite

UUID = "_00015a3c9f2e4b7d"
GUID = "8f14e45f-ceea-467a-9a43-2c1f6b0d3e71"
PID, MAIN_TID, HSA_TID = 4242, 4242, 4250
GEMM = "Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_GRVW8_K1"
RCCL = "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"
MI250 = "AMD Instinct MI250X/MI250"

STRINGS = {
    1: "hipLaunchKernel", 2: "hipMemcpyAsync", 3: "roctxRangePushA", 4: "HIP_RUNTIME_API_EXT",
    5: "MARKER_CORE_RANGE_API", 6: "MEMORY_COPY_HOST_TO_DEVICE", 7: "hsa_signal_wait_scacquire",
    8: "HSA_CORE_API", 9: "KERNEL_DISPATCH", 10: "MEMORY_COPY", 11: "ROCDECODE_API", 12: "rocDecCreateDecoder",
}
# (id, type, type_index, absolute_index, product_name, name)
AGENTS = [(1, "CPU", 0, 0, "AMD EPYC 7763 64-Core Processor", "AMD EPYC 7763"),
          (2, "GPU", 0, 1, MI250, "gfx90a"), (3, "GPU", 1, 2, MI250, "gfx90a")]
SYMBOLS = [(1, GEMM + "@kd", GEMM), (2, RCCL + "@kd", RCCL)]  # (id, kernel_name, display_name)
# (id, category string id, stack_id = the correlation id, extdata)
EVENTS = [
    (1, 4, 101, "{}"), (2, 9, 101, "{}"), (3, 4, 102, "{}"), (4, 9, 102, "{}"), (5, 4, 103, "{}"),
    (6, 10, 103, "{}"), (7, 5, 104, json.dumps({"message": "ProfilerStep#3"})), (8, 8, 105, "{}"), (9, 11, 106, "{}"),
]
# Rows with their times and process columns: (event, name_id, pid, tid, start, end)
REGIONS = [
    (1, 1, PID, MAIN_TID, 1000, 1200), (3, 1, PID, MAIN_TID, 1300, 1400), (5, 2, PID, MAIN_TID, 1500, 1600),
    (7, 3, PID, MAIN_TID, 900, 5000), (8, 7, PID, HSA_TID, 2000, 2100), (9, 12, PID, MAIN_TID, 2200, 2300),
]
# (event, kernel_id, agent, queue, stream, start, end, grid xyz (work-items), workgroup xyz)
DISPATCHES = [
    (2, 1, 2, 1, 1, 2000, 2600, (262144, 1, 1), (256, 1, 1)),
    (4, 2, 3, 2, 2, 2100, 4100, (163840, 1, 1), (640, 1, 1)),
]
# (event, name_id, src agent, dst agent, size, stream, start, end)
COPIES = [(6, 6, 1, 2, 4_194_304, 1, 1700, 1900)]


def _create(conn: sqlite3.Connection, name: str, columns: str, views: bool) -> str:
    table = f"rocpd_{name}{UUID}"
    conn.execute(f'create table "{table}" (id integer not null primary key autoincrement, guid text not null, {columns})')
    if views:
        conn.execute(f'create view "rocpd_{name}" as select * from "{table}"')
    return table


def _insert(conn: sqlite3.Connection, table: str, columns: list[str], rows: list[tuple]) -> None:
    marks = ", ".join("?" for _ in range(len(columns) + 1))
    names = ", ".join(f'"{column}"' for column in ["guid", *columns])
    conn.executemany(f'insert into "{table}" ({names}) values ({marks})', [(GUID, *row) for row in rows])


def write_rocpd(path: Path, *, tracks: bool = False, views: bool = True, pid: int = PID,
                second_process: bool = False, boot_ns: int = 0) -> Path:
    """A rocprofv3 database of one MI250 process (two when `second_process`:
    a copy of its rows as pid + 1, as `rocpd merge` writes them), in the
    layout with tracks and timestamps or with times on each row; every time
    `boot_ns` later than the tables above state (the machine's uptime)."""
    conn = sqlite3.connect(path)
    t = {}
    t["metadata"] = _create(conn, "metadata", "tag text not null, value text not null", views)
    _insert(conn, t["metadata"], ["tag", "value"], [("schema_version", "3"), ("uuid", UUID), ("guid", GUID)])
    t["string"] = _create(conn, "string", "string text not null", views)
    _insert(conn, t["string"], ["id", "string"], list(STRINGS.items()))
    t["node"] = _create(conn, "info_node", "hash bigint not null, machine_id text not null, hostname text", views)
    _insert(conn, t["node"], ["id", "hash", "machine_id", "hostname"], [(1, 77, "4f1c0d2e", "mi250-node-07")])
    processes = [pid, pid + 1] if second_process else [pid]
    t["process"] = _create(conn, "info_process", "nid integer not null, ppid integer, pid integer not null, command text", views)
    _insert(conn, t["process"], ["nid", "ppid", "pid", "command"], [(1, 1, p, "python train.py") for p in processes])
    t["agent"] = _create(conn, "info_agent", "nid integer not null, pid integer not null, type text, absolute_index integer, "
                         "logical_index integer, type_index integer, name text, product_name text", views)
    _insert(conn, t["agent"], ["id", "nid", "pid", "type", "type_index", "absolute_index", "logical_index", "product_name", "name"],
            [(id_, 1, pid, kind, index, absolute, absolute, product, name) for id_, kind, index, absolute, product, name in AGENTS])
    t["symbol"] = _create(conn, "info_kernel_symbol", "nid integer not null, pid integer not null, code_object_id integer not null, "
                          "kernel_name text, display_name text", views)
    _insert(conn, t["symbol"], ["id", "nid", "pid", "code_object_id", "kernel_name", "display_name"],
            [(id_, 1, pid, 1, name, display) for id_, name, display in SYMBOLS])
    t["event"] = _create(conn, "event", "category_id integer, stack_id integer, parent_stack_id integer, correlation_id integer, "
                         "extdata jsonb default '{}' not null", views)
    if tracks:
        t["track"] = _create(conn, "track", "nid integer not null, pid integer, tid integer, agent_id integer, queue_id integer, "
                             "stream_id integer, name_id integer", views)
        t["timestamp"] = _create(conn, "timestamp", "value bigint not null, phase integer, track_id integer", views)
        process_cols = "track_id integer not null, start_id integer not null, end_id integer not null"
    else:
        process_cols = ("nid integer not null, pid integer not null, tid integer, start bigint not null, \"end\" bigint not null")
    t["region"] = _create(conn, "region", f"{process_cols}, name_id integer not null, event_id integer", views)
    t["dispatch"] = _create(conn, "kernel_dispatch", f"{process_cols}, "
                            + ("" if tracks else "agent_id integer not null, queue_id integer not null, stream_id integer not null, ")
                            + "kernel_id integer not null, dispatch_id integer not null, "
                            "workgroup_size_x integer not null, workgroup_size_y integer not null, workgroup_size_z integer not null, "
                            "grid_size_x integer not null, grid_size_y integer not null, grid_size_z integer not null, event_id integer", views)
    t["copy"] = _create(conn, "memory_copy", f"{process_cols}, "
                        + ("" if tracks else "queue_id integer, stream_id integer, ")
                        + "name_id integer not null, dst_agent_id integer, src_agent_id integer, size integer not null, event_id integer",
                        views)

    ids = {"event": 0, "track": 0, "timestamp": 0}
    track_ids: dict[tuple, int] = {}

    def new_id(kind: str) -> int:
        ids[kind] += 1
        return ids[kind]

    def frame(p: int, tid: int | None, start: int, end: int, agent: int | None = None, queue: int | None = None,
              stream: int | None = None) -> tuple[list[str], list]:
        start, end = start + boot_ns, end + boot_ns
        if not tracks:
            own = ["nid", "pid", "tid", "start", "end"], [1, p, tid, start, end]
            if agent is not None or stream is not None:
                own[0].extend(["agent_id", "queue_id", "stream_id"] if agent is not None else ["queue_id", "stream_id"])
                own[1].extend([agent, queue, stream] if agent is not None else [queue, stream])
            return own
        key = (p, tid, agent, queue, stream)
        if key not in track_ids:
            track_ids[key] = new_id("track")
            _insert(conn, t["track"], ["id", "nid", "pid", "tid", "agent_id", "queue_id", "stream_id"], [(track_ids[key], 1, *key)])
        start_id, end_id = new_id("timestamp"), new_id("timestamp")
        _insert(conn, t["timestamp"], ["id", "value", "phase", "track_id"],
                [(start_id, start, 1, track_ids[key]), (end_id, end, 2, track_ids[key])])
        return ["track_id", "start_id", "end_id"], [track_ids[key], start_id, end_id]

    for p in processes:
        event_ids = {}
        for event, category, stack, extdata in EVENTS:
            event_ids[event] = new_id("event")
            _insert(conn, t["event"], ["id", "category_id", "stack_id", "correlation_id", "extdata"],
                    [(event_ids[event], category, stack, 0, extdata)])
        for event, name_id, _, tid, start, end in REGIONS:
            columns, values = frame(p, tid, start, end)
            _insert(conn, t["region"], [*columns, "name_id", "event_id"], [(*values, name_id, event_ids[event])])
        for dispatch, (event, kernel, agent, queue, stream, start, end, grid, group) in enumerate(DISPATCHES, 1):
            columns, values = frame(p, MAIN_TID, start, end, agent, queue, stream)
            axes = [f"{kind}_size_{axis}" for kind in ("grid", "workgroup") for axis in "xyz"]
            _insert(conn, t["dispatch"], [*columns, "kernel_id", "dispatch_id", *axes, "event_id"],
                    [(*values, kernel, dispatch, *grid, *group, event_ids[event])])
        for event, name_id, src, dst, size, stream, start, end in COPIES:
            columns, values = frame(p, MAIN_TID, start, end, None, 1, stream)
            _insert(conn, t["copy"], [*columns, "name_id", "src_agent_id", "dst_agent_id", "size", "event_id"],
                    [(*values, name_id, src, dst, size, event_ids[event])])
    conn.commit()
    conn.close()
    return path


def _rows(table) -> list[dict]:
    return table.to_pylist()


def _parsed(tmp_path: Path, name: str = "4242_results.db", **layout):
    return rocpd.parse(write_rocpd(tmp_path / name, **layout), "job")


# --- format detection ----------------------------------------------------------------


def test_a_rocprofv3_database_is_detected_as_rocpd(tmp_path: Path) -> None:
    assert detect_format(write_rocpd(tmp_path / "4242_results.db")) == "rocpd"


def test_a_database_without_its_views_is_detected_by_its_tables(tmp_path: Path) -> None:
    assert rocpd.sniff(b"SQLite format 3\x00", write_rocpd(tmp_path / "4242_results.db", views=False))


def test_an_nsys_export_is_not_taken_for_rocpd(tmp_path: Path) -> None:
    path = tmp_path / "report.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("create table StringIds (id integer primary key, value text)")
    conn.close()
    assert not rocpd.sniff(path.read_bytes()[:65536], path)


# --- rows ----------------------------------------------------------------------------


@pytest.mark.parametrize("tracks", [False, True], ids=["times on rows", "tracks and timestamps"])
def test_dispatches_and_copies_become_kernel_rows(tmp_path: Path, tracks: bool) -> None:
    kernels = _rows(_parsed(tmp_path, tracks=tracks).tables["kernels"])
    assert [(k["name"], k["kind"], k["category"], k["device"], k["stream"], k["start_ns"], k["dur_ns"], k["correlation_id"])
            for k in kernels] == [
        ("Memcpy HtoD (Host -> Device)", "memcpy", "memory", 0, 1, 1700, 200, 103),
        (GEMM, "kernel", "compute", 0, 1, 2000, 600, 101),
        (RCCL, "kernel", "communication", 1, 2, 2100, 2000, 102),
    ]


def test_the_rccl_kernel_is_a_collective(tmp_path: Path) -> None:
    collectives = _rows(_parsed(tmp_path).tables["collectives"])
    assert [(c["op"], c["bytes"], c["start_ns"], c["end_ns"], c["kernel_name"], c["correlation_id"]) for c in collectives] == [
        (None, None, 2100, 4100, RCCL, 102)]


def test_a_database_without_its_views_is_read_through_its_suffixed_tables(tmp_path: Path) -> None:
    with_views = rocpd.parse(write_rocpd(tmp_path / "4242_results.db"), "job")
    without = rocpd.parse(write_rocpd(tmp_path / "4243_results.db", views=False), "job")
    assert _rows(without.tables["kernels"]) == _rows(with_views.tables["kernels"])
    assert _rows(without.tables["api_calls"]) == _rows(with_views.tables["api_calls"])


def test_grid_is_counted_in_workgroups_and_block_is_the_workgroup(tmp_path: Path) -> None:
    kernels = [k for k in _rows(_parsed(tmp_path).tables["kernels"]) if k["kind"] == "kernel"]
    assert [(k["grid"], k["block"]) for k in kernels] == [("[1024, 1, 1]", "[256, 1, 1]"), ("[256, 1, 1]", "[640, 1, 1]")]


def test_a_copy_keeps_its_size(tmp_path: Path) -> None:
    copies = [k for k in _rows(_parsed(tmp_path).tables["kernels"]) if k["kind"] == "memcpy"]
    assert [k["bytes"] for k in copies] == [4_194_304]


@pytest.mark.parametrize("tracks", [False, True], ids=["times on rows", "tracks and timestamps"])
def test_hip_and_hsa_regions_become_api_calls(tmp_path: Path, tracks: bool) -> None:
    calls = _rows(_parsed(tmp_path, tracks=tracks).tables["api_calls"])
    assert [(c["name"], c["pid"], c["tid"], c["start_ns"], c["dur_ns"], c["correlation_id"]) for c in calls] == [
        ("hipLaunchKernel", PID, MAIN_TID, 1000, 200, 101),
        ("hipLaunchKernel", PID, MAIN_TID, 1300, 100, 102),
        ("hipMemcpyAsync", PID, MAIN_TID, 1500, 100, 103),
        ("hsa_signal_wait_scacquire", PID, HSA_TID, 2000, 100, 105),
    ]


def test_roctx_ranges_become_annotations_named_by_their_message(tmp_path: Path) -> None:
    annotations = _rows(_parsed(tmp_path).tables["annotations"])
    assert [(a["name"], a["kind"], a["step"], a["start_ns"], a["end_ns"]) for a in annotations] == [
        ("ProfilerStep#3", "profiler_step", 3, 900, 5000),
    ]


def test_kernels_link_to_the_hip_calls_that_launched_them(tmp_path: Path) -> None:
    derived = derive_trace_tables(_parsed(tmp_path).tables)
    kernels = _rows(derived["kernels"])
    assert [(k["name"], k["launch_call_name"], k["launch_delay_ns"]) for k in kernels] == [
        ("Memcpy HtoD (Host -> Device)", "hipMemcpyAsync", 100),
        (GEMM, "hipLaunchKernel", 800),
        (RCCL, "hipLaunchKernel", 700),
    ]


def test_runs_row_describes_the_process(tmp_path: Path) -> None:
    (run,) = _rows(_parsed(tmp_path).tables["runs"])
    assert (run["run"], run["rank"], run["host"], run["pid"], run["device_name"], run["source_format"],
            run["time_base"], run["epoch_offset_ns"], run["backend"]) == (
        "job", 0, "mi250-node-07", PID, MI250, "rocpd", "trace", None, "rocm")
    metadata = json.loads(run["metadata_json"])
    assert metadata["skipped_regions"] == {"ROCDECODE_API": 1}
    assert metadata["command"] == "python train.py"
    assert metadata["gpus"] == {"0": MI250, "1": MI250}


def test_rank_comes_from_the_file_name(tmp_path: Path) -> None:
    (run,) = _rows(_parsed(tmp_path, name="rank3_results.db").tables["runs"])
    assert run["rank"] == 3
    assert json.loads(run["metadata_json"])["rank_source"] == "file name"


def test_rank_comes_from_a_folder_named_for_it(tmp_path: Path) -> None:
    (tmp_path / "rank5").mkdir()
    (run,) = _rows(_parsed(tmp_path, name="rank5/4242_results.db").tables["runs"])
    assert run["rank"] == 5


def test_a_merged_database_gives_each_process_a_rank_in_pid_order(tmp_path: Path) -> None:
    parsed = _parsed(tmp_path, second_process=True)
    kernels = _rows(parsed.tables["kernels"])
    assert sorted({(k["rank"], k["name"]) for k in kernels if k["kind"] == "kernel"}) == [
        (0, GEMM), (0, RCCL), (1, GEMM), (1, RCCL)]
    assert [(r["rank"], r["pid"]) for r in _rows(parsed.tables["runs"])] == [(0, PID), (1, PID + 1)]


def test_tables_follow_the_contract_schemas(tmp_path: Path) -> None:
    for name, table in _parsed(tmp_path).tables.items():
        assert table.schema.names == TRACE_SCHEMAS[name].names, name


def test_events_counts_the_rows_read(tmp_path: Path) -> None:
    assert _parsed(tmp_path).events == 3 + 4 + 1


# --- bad input -------------------------------------------------------------------------


def test_gzipped_database_is_read(tmp_path: Path) -> None:
    plain = write_rocpd(tmp_path / "4242_results.db")
    packed = tmp_path / "4242_results.db.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert rocpd.parse(packed, "job").tables["kernels"].num_rows == 3


def test_database_without_gpu_work_raises(tmp_path: Path) -> None:
    path = write_rocpd(tmp_path / "4242_results.db")
    conn = sqlite3.connect(path)
    conn.execute(f'delete from "rocpd_kernel_dispatch{UUID}"')
    conn.execute(f'delete from "rocpd_memory_copy{UUID}"')
    conn.commit()
    conn.close()
    with pytest.raises(TraceError, match="no GPU events"):
        rocpd.parse(path, "job")


def test_database_of_an_unknown_layout_names_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "4242_results.db"
    conn = sqlite3.connect(path)
    conn.execute("create table rocpd_kernel_dispatch (id integer, begin_ns integer)")
    conn.close()
    with pytest.raises(TraceError, match=r"4242_results\.db: not a readable rocprofv3 database \(unexpected schema: "
                                         r"rocpd_kernel_dispatch has neither start/end nor start_id/end_id columns\)"):
        rocpd.parse(path, "job")


def test_gpulens_ingest_finds_rocpd_databases_in_a_folder(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    write_rocpd(tmp_path / "traces" / "rank0_results.db")
    write_rocpd(tmp_path / "traces" / "rank1_results.db", pid=PID + 8)
    report = ingest_paths([tmp_path / "traces"], tmp_path / "data", run="mi250", jobs=1)
    assert [(Path(r.path).name, r.format, r.ranks, r.rows["kernels"], r.rows["api_calls"]) for r in report.results] == [
        ("rank0_results.db", "rocpd", (0,), 3, 4), ("rank1_results.db", "rocpd", (1,), 3, 4)]


def test_text_in_a_numeric_column_names_the_table_and_column(tmp_path: Path) -> None:
    # SQLite stores any value in any column, whatever its declared type.
    path = write_rocpd(tmp_path / "4242_results.db")
    update_sqlite(path, f"update \"rocpd_kernel_dispatch{UUID}\" set stream_id = 'hip-stream-1' where kernel_id = 2")
    with pytest.raises(TraceError) as error:
        rocpd.parse(path, "job")
    assert (error.value.path, error.value.problem) == (
        str(path), "rocpd_kernel_dispatch.stream_id holds text where a number belongs")


def test_text_in_a_track_column_names_the_track_table(tmp_path: Path) -> None:
    path = write_rocpd(tmp_path / "4242_results.db", tracks=True)
    update_sqlite(path, f"update \"rocpd_track{UUID}\" set pid = 'python' where id = 1")
    with pytest.raises(TraceError) as error:
        rocpd.parse(path, "job")
    assert (error.value.path, error.value.problem) == (str(path), "rocpd_track.pid holds text where a number belongs")


def test_text_agent_index_names_the_agent_table(tmp_path: Path) -> None:
    path = write_rocpd(tmp_path / "4242_results.db")
    update_sqlite(path, f"update \"rocpd_info_agent{UUID}\" set type_index = 'gpu0' where id = 2")
    with pytest.raises(TraceError) as error:
        rocpd.parse(path, "job")
    assert (error.value.path, error.value.problem) == (
        str(path), "rocpd_info_agent.type_index holds text where a number belongs")


# --- extdata stored as SQLite's binary JSON (jsonb) --------------------------------
# Blobs as SQLite 3.54 writes them (`select jsonb(?)`), with the JSON text given.
JSONB_BLOBS = [
    ('{"message":"ProfilerStep#3"}', "cc18776d657373616765c70e50726f66696c6572537465702333"),
    ('{"message":"a \\"quoted\\" name \\u00e9"}',
     "cc22776d657373616765c81861205c2271756f7465645c22206e616d65205c7530306539"),
    # a 2-byte size, an int, a JSON5 hex int, a float, true, null and nested arrays
    ('{"message":"' + "x" * 300 + '","n":12,"h":31,"f":1.5,"t":true,"z":null,"a":[1,[2]]}',
     "dc0157776d657373616765d7012c" + "78" * 300 + "176e23313217684430783146176635312e35177401177a0017615b13312b1332"),
    ("{}", "0c"),
]


@pytest.mark.parametrize(("text", "blob"), JSONB_BLOBS, ids=["short", "escapes", "long and every type", "empty"])
def test_sqlite_jsonb_blobs_decode_to_their_json(text: str, blob: str) -> None:
    from gpulens.collector.ingest.sqlite_db import jsonb_loads

    assert jsonb_loads(bytes.fromhex(blob)) == json.loads(text)


@pytest.mark.parametrize("blob", ["cc18776d657373616765c70e5072", "2c1761", "0d", "0c00"],
                         ids=["truncated", "key without value", "reserved type", "bytes after"])
def test_malformed_jsonb_is_refused(blob: str) -> None:
    from gpulens.collector.ingest.sqlite_db import NotJsonb, jsonb_loads

    with pytest.raises(NotJsonb):
        jsonb_loads(bytes.fromhex(blob))


def test_a_roctx_message_stored_as_jsonb_names_its_range(tmp_path: Path) -> None:
    path = write_rocpd(tmp_path / "4242_results.db")
    step_blob = bytes.fromhex(JSONB_BLOBS[0][1])
    conn = sqlite3.connect(path)
    conn.execute(f'update "rocpd_event{UUID}" set extdata = ? where extdata like \'%ProfilerStep%\'', (step_blob,))
    conn.commit()
    conn.close()
    annotations = rocpd.parse(path, "job").tables["annotations"].to_pylist()
    assert [(a["name"], a["kind"], a["step"]) for a in annotations] == [("ProfilerStep#3", "profiler_step", 3)]


def test_an_unreadable_extdata_blob_leaves_the_range_its_name(tmp_path: Path) -> None:
    path = write_rocpd(tmp_path / "4242_results.db")
    conn = sqlite3.connect(path)
    conn.execute(f'update "rocpd_event{UUID}" set extdata = x\'0d\' where extdata like \'%ProfilerStep%\'')
    conn.commit()
    conn.close()
    annotations = rocpd.parse(path, "job").tables["annotations"].to_pylist()
    assert [(a["name"], a["kind"]) for a in annotations] == [("roctxRangePushA", "nvtx")]
