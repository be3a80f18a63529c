"""The compiled Kineto scanner reads what msgspec's path reads, exactly.

`kineto_native.scan` turns a piece of the event array into columns, and
refuses (None) whatever it does not read the way msgspec's decoders do;
that piece then takes msgspec's path. These tests pin both halves: the
values it reads (names unescaped, times as the decimal's exact nanoseconds)
and what it refuses, and then whole traces, real and randomised, read by
both paths into identical tables.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import struct
from pathlib import Path

import pytest

from gpulens.collector.errors import TraceError
from gpulens.collector.ingest import kineto, kineto_native, kineto_stream
from gpulens.collector.ingest.base import ParsedTrace

SHARED_KINETO = Path(__file__).resolve().parents[2] / "shared" / "traces" / "kineto"

built = pytest.mark.skipif(not kineto_native.available(), reason="the compiled scanner is not built here")


def test_ci_builds_the_compiled_scanner() -> None:
    # CI installs a compiler and Python's headers (.ci/run): the fast path
    # must be the one its tests run, not silently left out.
    if not os.environ.get("CI"):
        pytest.skip("only CI must have it built")
    assert kineto_native.available()


def scanned(*events: dict | str) -> kineto_native.ScannedPiece | None:
    """One piece of the given events (dicts as JSON, strings as written)."""
    texts = [e if isinstance(e, str) else json.dumps(e) for e in events]
    return kineto_native.scan(("[" + ", ".join(texts) + "]").encode())


def ints(piece: kineto_native.ScannedPiece, column: str) -> list[int]:
    data = piece.columns[column]
    return list(struct.unpack(f"<{len(data) // 8}q", data))


def names(piece: kineto_native.ScannedPiece) -> list[str]:
    offsets = struct.unpack(f"<{piece.events + 1}i", piece.columns["name_offsets"])
    data = piece.columns["name_data"]
    return [data[a:b].decode() for a, b in zip(offsets, offsets[1:])]


def kernel(**fields) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
            "args": {"device": 0, "stream": 7, "correlation": 1}, **fields}


# --- what it reads -------------------------------------------------------------------


@built
def test_scan_unescapes_names_as_json_does() -> None:
    name = 'at::native::"quoted"\\path\n\té ✓ 😀 \x00'
    piece = scanned(kernel(name=name), kernel(name="plain"))
    assert names(piece) == [name, "plain"]


@built
@pytest.mark.parametrize(("text", "ns"), [
    ("4458676388068.751", 4458676388068751),  # Kineto's three decimals on a large base
    ("1712195495502094.565", 1712195495502094565),  # epoch microseconds, three decimals: past a double's step
    ("1669783687352244", 1669783687352244000),  # integer epoch microseconds
    ("0.1", 100), ("-0.0", 0), ("-1.5", -1500), ("1E+2", 100_000), ("0.000001234", 0),
    ("2.5e-3", 2), ("0.0035", 4),  # a tie past the nanosecond: half to even, on the decimal
    ("0.00250000000000000000001", 3),  # past 19 digits, a nonzero one: above the tie
    ("9007199254740993", 9007199254740993000),  # 2**53 + 1 µs: no double holds it
    ("9223372036854775.807", 2**63 - 1),  # the last int64 nanosecond
    ("1e-400", 0),
])
def test_scan_reads_times_as_exact_nanoseconds(text: str, ns: int) -> None:
    piece = scanned(json.dumps(kernel()).replace('"ts": 1.0', f'"ts": {text}'))
    assert ints(piece, "ts") == [ns]


@built
@pytest.mark.parametrize("text", ["9223372036854775.808", "123456789012345678901234.5", "1e30"])
def test_scan_refuses_a_time_beyond_int64_nanoseconds(text: str) -> None:
    # msgspec's path reads the piece, and makes the time NULL.
    assert scanned(json.dumps(kernel()).replace('"ts": 1.0', f'"ts": {text}')) is None


@built
def test_scan_reads_int64_ids_at_their_limits() -> None:
    piece = scanned(kernel(args={"correlation": 2**63 - 1, "External id": -(2**63)}))
    assert (ints(piece, "correlation"), ints(piece, "external_id")) == ([2**63 - 1], [-(2**63)])
    assert piece.columns["odd"] == b"\x00\x00"


@built
def test_scan_marks_ids_it_cannot_read_as_integers_for_the_caller() -> None:
    # An id written as text, or past int64: the table that reads it decides.
    piece = scanned(kernel(args={"correlation": "17", "device": 2**63, "stream": 1.5}))
    odd = struct.unpack("<H", piece.columns["odd"])[0]
    assert odd == kineto_native.CORRELATION | kineto_native.DEVICE | kineto_native.STREAM


@built
def test_scan_codes_categories_and_counts_unknown_ones() -> None:
    piece = scanned(kernel(), {"ph": "X", "cat": "Trace", "name": "x"}, {"ph": "s", "cat": "ac2g", "id": 1},
                    {"ph": "M", "name": "process_name"}, {"ph": "X", "cat": "Trace"})
    codes = list(struct.unpack("<5b", piece.columns["cat"]))
    assert codes == [0, kineto_native.CAT_OTHER, kineto_native.CATS.index("ac2g"), kineto_native.CAT_MISSING,
                     kineto_native.CAT_OTHER]
    assert piece.other_cats == {"Trace": 2}
    assert piece.columns["phase"] == b"XXsMX"


@built
def test_scan_gives_a_phase_only_where_ph_is_one_character() -> None:
    piece = scanned({"ph": "i", "name": "a"}, {"ph": "XX", "cat": "kernel"}, {"name": "no ph"}, {"ph": None})
    assert piece.columns["phase"] == b"i\x00\x00\x00"


@built
def test_scan_reads_the_allocator_args_of_instants() -> None:
    memory = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 9, "tid": 10, "ts": 5.5,
              "args": {"Bytes": -512, "Total Allocated": 2**33, "Device Id": -1, "Device Type": 0, "Addr": "0x1"}}
    piece = scanned(kernel(), memory, {"ph": "I", "name": "mark", "ts": 6.0})
    columns = ("instant_row", "instant_alloc", "instant_total_allocated", "instant_device_id", "instant_device_type")
    assert [ints(piece, column) for column in columns] == [[1, 2], [-512, 0], [2**33, 0], [-1, 0], [0, 0]]
    # Addr written as text: odd, left to msgspec; the mark has no args at all.
    assert (piece.columns["instant_present"], piece.columns["instant_odd"]) == (b"\x33\x00", b"\x08\x00")
    assert (ints(piece, "pid")[1], ints(piece, "tid")[1], ints(piece, "ts")[1:], names(piece)) == (
        9, 10, [5500, 6000], ["k", "[memory]", "mark"])


@built
def test_scan_counts_no_instant_or_metadata_event_among_other_categories() -> None:
    piece = scanned({"ph": "i", "cat": "user_marks", "name": "a"}, {"ph": "M", "cat": "meta", "name": "thread_name"},
                    {"ph": "X", "cat": "user_marks", "name": "b"})
    assert piece.other_cats == {"user_marks": 1}


@built
def test_scan_stops_at_the_array_end_and_says_where() -> None:
    text = b'[{"ph": "X", "cat": "kernel"}], "traceName": "t"}'
    piece = kineto_native.scan(text)
    assert (piece.events, piece.end, text[piece.end:]) == (1, 30, b', "traceName": "t"}')


@built
def test_scan_keeps_each_events_span_for_a_full_decode() -> None:
    text = b'[ {"ph": "X", "cat": "cpu_op"} ,\n{"ph": "i"}]'
    piece = kineto_native.scan(text)
    spans = zip(ints(piece, "span_start"), ints(piece, "span_end"))
    assert [text[a:b] for a, b in spans] == [b'{"ph": "X", "cat": "cpu_op"}', b'{"ph": "i"}']


# --- what it leaves to msgspec -------------------------------------------------------


@built
@pytest.mark.parametrize("text", [
    '{"ph": "X", "cat": "kernel", "ts": 1.0',  # a cut inside an event
    '{"ph": "X", "cat": "kernel", "ts": "12.5"}',  # a time as text: msgspec's lenient decoder reads it
    '{"ph": "X", "cat": "kernel", "ts": NaN}',
    '{"ph": "X", "cat": "kernel", "ts": 1e999}',
    '{"ph": "X", "cat": "kernel", "name": "a\tb"}',  # a raw control character
    '{"ph": "X", "cat": "kernel", "name": "bad \\ud800"}',  # a lone surrogate
    '{"ph": "X", "cat": "kernel", "name": 5}',
    '{"ph": "X", "c\\u0061t": "kernel"}',  # an escaped key
    '{"ph": "X", "cat": "kernel", "cat": "cpu_op"}',  # a key twice
    '{"ph": "X", "cat": "kernel", "args": {"device": 0, "device": 1}}',
    '{"ph": "X", "cat": "kernel", "args": [1]}',
    '{"ph": 1, "cat": "kernel"}',
    '{"ph": "X", "cat": 3}',
    '7',
])
def test_scan_refuses_what_it_does_not_read_as_msgspec_does(text: str) -> None:
    assert kineto_native.scan(f"[{text}]".encode()) is None


@built
def test_scan_refuses_a_name_that_is_not_utf8() -> None:
    assert kineto_native.scan(b'[{"ph": "X", "cat": "kernel", "name": "caf\xe9"}]') is None


@built
def test_scan_reads_what_it_skips_loosely() -> None:
    # Fields no table reads may be anything: a flow's odd time, Python
    # frames' names, a skipped category's args.
    piece = scanned({"ph": "s", "cat": "ac2g", "ts": "text", "args": 5},
                    {"ph": "X", "cat": "python_function", "name": 12, "pid": "main"})
    assert piece is not None and piece.events == 2


def _load(version: int = kineto_native.VERSION):
    """The scanner as kineto_native loads it: (module or None, not built)."""
    from gpulens.collector.compiled import load_compiled

    return load_compiled("gpulens.collector.ingest._kineto_scan", version, "Kineto scanner")


def test_pure_python_env_turns_the_scanner_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULENS_PURE_PYTHON", "1")
    assert _load() == (None, False)


# --- whole traces, both paths --------------------------------------------------------


def read_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ParsedTrace | str, ParsedTrace | str]:
    def parse() -> ParsedTrace | str:
        try:
            return kineto.parse(path, "run")
        except TraceError as error:
            return str(error)

    native = parse()
    with monkeypatch.context() as patch:
        patch.setattr(kineto_native, "_SCANNER", None)
        pure = parse()
    return native, pure


def assert_same(native: ParsedTrace | str, pure: ParsedTrace | str) -> None:
    if isinstance(pure, str):
        assert native == pure
        return
    assert not isinstance(native, str), native
    assert native.events == pure.events
    assert native.tables.keys() == pure.tables.keys()
    for table, want in pure.tables.items():
        got = native.tables[table]
        if table == "runs":
            got, want = got.drop(["ingested_at"]), want.drop(["ingested_at"])
        assert got.equals(want), table


@built
@pytest.mark.skipif(not SHARED_KINETO.is_dir(), reason="../shared/traces is not here")
@pytest.mark.parametrize("name", sorted(p.name for p in SHARED_KINETO.glob("*.json*")) if SHARED_KINETO.is_dir() else [])
def test_every_shared_trace_reads_the_same_by_both_paths(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_stream, "BATCH_BYTES", 64 << 10)  # many pieces, the last one partial
    assert_same(*read_both(SHARED_KINETO / name, monkeypatch))


@built
def test_a_simulated_training_run_reads_the_same_by_both_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.collector.sim_trace import write_training_traces

    paths = write_training_traces(tmp_path, ranks=2, steps=3, kernels_per_step=80, seed=5)
    monkeypatch.setattr(kineto_stream, "BATCH_BYTES", 16 << 10)
    for path in paths:
        assert_same(*read_both(path, monkeypatch))


# Random events: each field takes a usual value most of the time, and now
# and then an odd one (absent, null, text, out of range, escaped) that one
# path or the other has to handle the msgspec way.
_CATS = [*kineto_native.CATS, "Trace", "cuda_sync"]
_NAMES = ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "sm90_xmma_gemm_bf16", "Memcpy HtoD (Pinned -> Device)",
          "ProfilerStep#3", "nccl:all_reduce", "record_param_comms", "aten::mm", 'quote " and \\ slash',
          "[memory]", "[OutOfMemory]", "thread_name", "process_name", "process_labels",
          "caf\u00e9 \u2713 \U0001F600", "", None, 17]


class _Odd(random.Random):
    """A seeded generator that also says how often a value is odd."""

    def __init__(self, seed: int, rate: float) -> None:
        super().__init__(seed)
        self.rate = rate


def _maybe(rng: _Odd, usual, *odd):
    return rng.choice(odd) if odd and rng.random() < rng.rate else usual


def _random_event(rng: _Odd) -> str:
    cat = _maybe(rng, rng.choice(_CATS), None, "ab\\u00e7")
    event = {"ph": _maybe(rng, "X" if rng.random() < 0.7 else rng.choice("sfiIM"), None, "B", "ii")}
    if rng.random() < 0.97:
        event["cat"] = cat
    event["name"] = _maybe(rng, rng.choice(_NAMES[:-3]), *_NAMES[-3:])
    event["pid"] = _maybe(rng, rng.choice([0, 1, 4242]), None, "main", 2**40, -3)
    event["tid"] = _maybe(rng, rng.choice([7, 13, 4242]), None, "stream 7", 2**63)
    event["ts"] = _maybe(rng, round(rng.uniform(1e3, 5e12), 3), None, 1669783687352244, "12.5")
    event["dur"] = _maybe(rng, round(rng.uniform(0, 1e4), 3), None, 3)
    if rng.random() < 0.9:
        args = {
            "External id": _maybe(rng, rng.randrange(1, 10**6), None, "12", 2**63, 1.5),
            "correlation": _maybe(rng, rng.randrange(1, 10**6), None, "x"),
            "device": _maybe(rng, rng.randrange(8), None, 2**33),
            "stream": _maybe(rng, rng.choice([7, 13]), None, "0x0"),
            "grid": _maybe(rng, [rng.randrange(1, 500), 1, 1], None, "[1,1,1]", 5, [2, 1]),
            "block": _maybe(rng, [rng.choice([128, 256]), 1, 1], None),
            "bytes": _maybe(rng, rng.randrange(1 << 30), None),
            "Collective name": _maybe(rng, None, "allreduce"),
            "In msg nelems": _maybe(rng, 1024, "1024"),
            "Group size": 8,
            "dtype": "Float",
            "unread": _maybe(rng, {"nested": [1, {"deep": "x"}]}, "text", None),
            # Allocator events' and metadata events' args.
            "Bytes": _maybe(rng, rng.randrange(-1 << 20, 1 << 20), None, "512", 2**64),
            "Total Allocated": _maybe(rng, rng.randrange(1 << 34), None, 1.5),
            "Total Reserved": rng.randrange(1 << 35),
            "Addr": _maybe(rng, rng.randrange(1 << 47), None),
            "Device Id": _maybe(rng, rng.choice([-1, 0, 1]), None, "0", 2**40),
            "Device Type": _maybe(rng, rng.choice([0, 1]), None, 99, "cuda"),
            "name": _maybe(rng, rng.choice(["thread 12 (pt_main_thread)", "python3.10", "stream 7 "]), None, 5),
            "labels": _maybe(rng, rng.choice(["CPU", "GPU 0"]), None),
        }
        event["args"] = {k: v for k, v in args.items() if rng.random() < 0.8}
    elif rng.random() < 0.5:
        event["args"] = None
    text = json.dumps(event, ensure_ascii=rng.random() < 0.5)
    return text.replace('"ab\\\\u00e7"', '"ab\\u00e7"')  # a cat with an escape in the file


@built
@pytest.mark.parametrize("seed", range(12))
def test_random_traces_read_the_same_by_both_paths(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Half the traces have few odd values, so that most of their pieces
    # take the scanner's path; the others send most pieces to msgspec's.
    rng = _Odd(seed, 0.08 if seed < 6 else 0.005)
    events = [_random_event(rng) for _ in range(400)]
    # At least one plain kernel, so that most traces have GPU events.
    events.insert(rng.randrange(len(events)), json.dumps(kernel(name="sm90_gemm")))
    text = '{"schemaVersion": 1, "traceEvents": [' + ", ".join(events) + '], "baseTimeNanoseconds": 1700000000000000000}'
    path = tmp_path / ("t.json.gz" if seed % 2 else "t.json")
    path.write_bytes(gzip.compress(text.encode()) if seed % 2 else text.encode())
    monkeypatch.setattr(kineto_stream, "BATCH_BYTES", rng.choice([600, 2000, 6000]))
    assert_same(*read_both(path, monkeypatch))


@built
def test_a_scanner_built_from_older_sources_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(RuntimeWarning, match="compiled Kineto scanner is out of date"):
        assert _load(kineto_native.VERSION + 1) == (None, False)


@built
def test_scan_reads_or_refuses_mangled_text_and_never_fails() -> None:
    # Bytes flipped, inserted, cut: a piece of C must answer every text
    # (columns or None), never raise or crash. (The same, 20,000 times
    # over, ran clean under AddressSanitizer and UBSan when it was written.)
    rng = _Odd(99, 0.02)
    pieces = [("[" + ", ".join(_random_event(rng) for _ in range(20)) + "]").encode() for _ in range(4)]
    alphabet = b'{}[]",:\\ 0123456789.eE+-tfnulrasX\x00\x7f\xc3\xa9\xff\xed\xa0\x80'
    read = 0
    for _ in range(2000):
        text = bytearray(rng.choice(pieces))
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(text))
            choice = rng.random()
            if choice < 0.5:
                text[at] = rng.choice(alphabet)
            elif choice < 0.8:
                text[at:at] = bytes([rng.choice(alphabet)])
            else:
                del text[at:at + rng.randint(1, 12)]
        piece = kineto_native.scan(bytes(text))
        if piece is not None:
            read += 1
            assert len(piece.columns["cat"]) == piece.events
    assert 0 < read < 2000  # both answers were given


def test_a_scanner_that_cannot_be_imported_is_noted_as_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import gpulens.collector.ingest

    # As where no compiler built it: the import fails.
    monkeypatch.setitem(sys.modules, "gpulens.collector.ingest._kineto_scan", None)
    monkeypatch.delattr(gpulens.collector.ingest, "_kineto_scan", raising=False)
    assert _load() == (None, True)
