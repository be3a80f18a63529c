"""The compiled nvidia-smi scanner (`collector/imports/_nvsmi_scan.c`) gives
exactly the tables and errors of the pure path (pyarrow's CSV reader and
Arrow compute), on every log of tests/data/import/ and on synthesised ones;
the pure path alone is tested in tests/test_import.py."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from gpulens.collector.errors import ImportSourceError
from gpulens.collector.imports import nvsmi_native
from gpulens.collector.imports.nvidia_smi import NvidiaSmiReader

DATA = Path(__file__).parent / "data" / "import"
NOHEADER_COLUMNS = ["timestamp", "index", "power.draw", "utilization.gpu", "temperature.gpu"]

needs_scanner = pytest.mark.skipif(not nvsmi_native.available(), reason="the compiled scanner is not built")


def _read(path: Path, native: bool, block_bytes: int | None = None, **options):
    """The log's telemetry table and devices rows, or its error's text."""
    saved = nvsmi_native._SCANNER
    if not native:
        nvsmi_native._SCANNER = None
    try:
        reader = NvidiaSmiReader(path, **options)
        if block_bytes:
            reader.block_bytes = block_bytes
        tables = list(reader.tables())
        return pa.concat_tables(tables) if tables else None, reader.devices
    except ImportSourceError as error:
        return str(error)
    finally:
        nvsmi_native._SCANNER = saved


def _scanned_blocks(path: Path, block_bytes: int | None = None, **options) -> int:
    """How many of the log's blocks the scanner read (not the pure path)."""
    reader = NvidiaSmiReader(path, **options)
    if block_bytes:
        reader.block_bytes = block_bytes
    fields, entries = reader._scan_plan
    return sum(nvsmi_native.scan(block, len(reader.plan.names), entries) is not None
               for block in reader._raw_blocks())


def _synthesise(path: Path, rows: int, seed: int, crlf: bool = False) -> None:
    """A log of 4 GPUs with units, NULL markers of every kind, and values
    of every form nvidia-smi writes."""
    rng = random.Random(seed)
    nulls = ["[N/A]", "[Not Supported]", "N/A", "", "[Unknown Error]"]
    lines = ["timestamp, index, uuid, name, power.draw [W], power.draw.instant [W], enforced.power.limit [W], "
             "utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], temperature.gpu, "
             "temperature.memory, clocks.current.sm [MHz], clocks_event_reasons.active, "
             "clocks_event_reasons_counters.sw_power_cap [us], ecc.errors.corrected.volatile.total, "
             "power.default_limit [W], pcie.link.gen.max"]
    for row in range(rows):
        poll, gpu = divmod(row, 4)
        ms = rng.randrange(1000) if gpu == 0 else 0
        stamp = f"2024/05/{1 + poll // 86400:02d} {poll // 3600 % 24:02d}:{poll // 60 % 60:02d}:{poll % 60:02d}.{ms:03d}"

        def value(text: str) -> str:
            return rng.choice(nulls) if rng.random() < 0.05 else text

        lines.append(", ".join([
            stamp, str(gpu), f"GPU-{seed:08x}-0000-4000-8000-{gpu:012x}", "NVIDIA H100 80GB HBM3",
            value(f"{rng.uniform(60, 700):.2f} W"), value(f"{rng.uniform(60, 700):.3f} W"), "700.00 W",
            value(f"{rng.randrange(101)} %"), value(f"{rng.uniform(0, 100):.1f} %"),
            value(f"{rng.randrange(81559)} MiB"), "81559 MiB", value(str(rng.randrange(30, 90))),
            value(f"{rng.uniform(30, 90):.2f}"), value(f"{rng.choice([1410, 1755, 1980])} MHz"),
            value(f"0x{rng.choice([0, 1, 4, 0x40, 0x1FF]):016X}"), value(f"{rng.randrange(10**9)} us"),
            value(str(rng.randrange(3))), "700.00 W", value(str(rng.choice([4, 5]))),
        ]))
        if rng.random() < 0.01:
            lines.append("")
    newline = "\r\n" if crlf else "\n"
    path.write_text(newline.join(lines) + newline)


@needs_scanner
@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("nvidia-smi-*.csv")))
def test_nvsmi_native_gives_the_pure_tables_on_each_test_log(name):
    options = {"columns": NOHEADER_COLUMNS} if "noheader" in name else {}
    options["host"] = "h"
    assert _scanned_blocks(DATA / name, **options) == 1
    assert _read(DATA / name, True, **options) == _read(DATA / name, False, **options)


@needs_scanner
def test_nvsmi_native_gives_the_pure_tables_on_a_synthesised_log(tmp_path):
    log = tmp_path / "log.csv"
    _synthesise(log, 6000, seed=44)
    native = _read(log, True, block_bytes=64 << 10, host="n")
    assert _scanned_blocks(log, block_bytes=64 << 10, host="n") > 10
    assert native == _read(log, False, block_bytes=64 << 10, host="n")
    assert native[0].num_rows == 6000


@needs_scanner
def test_nvsmi_native_gives_the_pure_tables_with_crlf_and_a_timezone(tmp_path):
    log = tmp_path / "log.csv"
    _synthesise(log, 2000, seed=45, crlf=True)
    options = {"block_bytes": 32 << 10, "host": "n", "timezone": "Europe/Paris"}
    assert _read(log, True, **options) == _read(log, False, **options)


@needs_scanner
def test_nvsmi_native_repeated_header_block_takes_the_pure_path(tmp_path):
    log = tmp_path / "appended.csv"
    header, *rows = (DATA / "nvidia-smi-2gpu.csv").read_text().splitlines(keepends=True)
    log.write_text(header + "".join(rows[:2]) + header + "".join(rows[2:]))
    assert _scanned_blocks(log, host=None) == 0
    assert _read(log, True, host=None) == _read(log, False, host=None)


@needs_scanner
@pytest.mark.parametrize(("line", "error"), [
    ("2024/05/01 12:00:03.100, 0, hot W", "log.csv:5: 'hot W' is not a number (power_w)"),
    # A unit before the number: refused whether or not the block has a NULL marker.
    ("2024/05/01 12:00:03.100, 0, W 4 W", "log.csv:5: 'W 4 W' is not a number (power_w)"),
    ("2024/05/01 12:00:03.100, 0, [N/A]\n2024/05/01 12:00:04.100, 0, W 4 W",
     "log.csv:6: 'W 4 W' is not a number (power_w)"),
    ("2024/05/01 12:00:03.100, 0", "log.csv:5: 2 fields where the log has 3"),
    ("2024/13/01 12:00:03.100, 0, 1 W", "log.csv:5: '2024/13/01 12:00:03.100' is not a timestamp"),
    ('2024/05/01 12:00:03.100, 0, "1 W"', None),
])
def test_nvsmi_native_bad_line_gives_the_pure_error(tmp_path, line, error):
    log = tmp_path / "log.csv"
    log.write_text("timestamp, index, power.draw [W]\n2024/05/01 12:00:00.100, 0, 1 W\n"
                   "2024/05/01 12:00:01.100, 0, 2 W\n2024/05/01 12:00:02.100, 0, 3 W\n" + line + "\n")
    native = _read(log, True, host="h")
    assert native == _read(log, False, host="h")
    if error is not None:
        assert native.endswith(error)


@needs_scanner
def test_nvsmi_scan_reads_units_and_null_markers():
    block = b"2024/05/01 12:00:00.5, 250.50 W, [N/A], 7 %, 1024 MiB\n2024/05/01 12:00:01, N/A, 3 W, , 0 MiB\n"
    plan = [(0, nvsmi_native.TIMESTAMP, 1.0), (1, nvsmi_native.FLOAT64, 1.0), (2, nvsmi_native.FLOAT64, 1.0),
            (3, nvsmi_native.FLOAT32, 1.0), (4, nvsmi_native.INT64, float(1 << 20))]
    rows, outputs = nvsmi_native.scan(block, 5, plan)
    ts, power, instant, util, used = nvsmi_native.arrays(rows, plan, outputs)
    assert ts.cast(pa.int64()).to_pylist() == [1714564800_500000, 1714564801_000000]
    assert (power.to_pylist(), instant.to_pylist()) == ([250.5, None], [None, 3.0])
    assert (util.to_pylist(), used.to_pylist()) == ([7.0, None], [1024 << 20, 0])


@needs_scanner
def test_nvsmi_scan_reads_each_rows_date_across_midnight():
    block = (b"2024/02/28 23:59:59.900, 1\n2024/02/29 00:00:00.100, 2\n2024/02/29 00:00:01, 3\n"
             b"2024/03/01 00:00:00, 4\n")
    plan = [(0, nvsmi_native.TIMESTAMP, 1.0), (1, nvsmi_native.INT32, 1.0)]
    rows, outputs = nvsmi_native.scan(block, 2, plan)
    assert nvsmi_native.arrays(rows, plan, outputs)[0].cast(pa.int64()).to_pylist() == [
        1709164799_900000, 1709164800_100000, 1709164801_000000, 1709251200_000000]


@needs_scanner
@pytest.mark.parametrize("second_date", [b"2023/02/29", b"2024/13/01", b"2024/1/01", b"2024-01-01"])
def test_nvsmi_scan_refuses_a_bad_date_after_a_good_one(second_date):
    block = b"2024/01/01 00:00:00, 1\n" + second_date + b" 00:00:00, 2\n"
    assert nvsmi_native.scan(block, 2, [(0, nvsmi_native.TIMESTAMP, 1.0), (1, nvsmi_native.INT32, 1.0)]) is None


@needs_scanner
def test_nvsmi_scan_scales_whole_and_decimal_numbers_as_arrow_does():
    # MiB -> bytes: whole numbers in integers, a decimal through a double
    # rounded half to even, as the pure path's cast, multiply and round.
    values = [b"0 MiB", b"81559 MiB", b"-3 MiB", b"8589934592 MiB", b"8589934593 MiB", b"1.5 MiB", b"0.0000005 MiB"]
    block = b"".join(b"2024/05/01 12:00:00, " + value + b"\n" for value in values)
    plan = [(0, nvsmi_native.TIMESTAMP, 1.0), (1, nvsmi_native.INT64, float(1 << 20))]
    rows, outputs = nvsmi_native.scan(block, 2, plan)
    assert nvsmi_native.arrays(rows, plan, outputs)[1].to_pylist() == [
        0, 81559 << 20, -3 << 20, 8589934592 << 20, 8589934593 << 20, 1572864, 1]  # 0.524288 B rounds to 1


@needs_scanner
def test_nvsmi_scan_reads_whole_float32_numbers_exactly():
    block = b"2024/05/01 12:00:00, 78 %\n2024/05/01 12:00:01, 16777216 %\n2024/05/01 12:00:02, -0 %\n"
    plan = [(0, nvsmi_native.TIMESTAMP, 1.0), (1, nvsmi_native.FLOAT32, 1.0)]
    rows, outputs = nvsmi_native.scan(block, 2, plan)
    assert nvsmi_native.arrays(rows, plan, outputs)[1].to_pylist() == [78.0, 16777216.0, -0.0]


@needs_scanner
def test_nvsmi_scan_trims_a_unit_that_changes_within_a_column():
    # Each column's last unit is tried first: a row with another unit, or
    # none, or a unit letter before the number's end, is trimmed as well.
    values = [b"1 W", b"2 W", b"3", b"4 MiB", b"5 W ", b"6W", b"7 W", b"8 %", b"9"]
    block = b"".join(b"2024/05/01 12:00:00, " + value + b"\n" for value in values)
    plan = [(0, nvsmi_native.TIMESTAMP, 1.0), (1, nvsmi_native.INT64, 1.0)]
    rows, outputs = nvsmi_native.scan(block, 2, plan)
    assert nvsmi_native.arrays(rows, plan, outputs)[1].to_pylist() == list(range(1, 10))


@needs_scanner
@pytest.mark.parametrize("value", [b"1e3 W", b"007", b"0x10", b"1.", b".5", b"+1", b"12345678901234567", b"W 4 W",
                                   b"4 W W4"])
def test_nvsmi_scan_refuses_numbers_in_other_forms(value):
    plan = [(0, nvsmi_native.TIMESTAMP, 1.0), (1, nvsmi_native.INT64, 1.0)]
    assert nvsmi_native.scan(b"2024/05/01 12:00:00, " + value + b"\n", 2, plan) is None


@needs_scanner
def test_nvsmi_native_lines_longer_than_a_block_give_the_same_tables():
    log = DATA / "nvidia-smi-l40s-load.csv"  # a line of about 3 KiB
    assert _read(log, True, block_bytes=256, host="h") == _read(log, False, host="h")


@needs_scanner
def test_nvsmi_native_block_it_refuses_takes_the_pure_path_and_the_rest_do_not(tmp_path):
    log = tmp_path / "log.csv"
    _synthesise(log, 4000, seed=46)
    lines = log.read_text().splitlines(keepends=True)
    lines[2000] = lines[2000].replace(" 700.00 W", ' "700.00 W"', 1)  # a quote: the pure path reads it
    log.write_text("".join(lines))
    reader = NvidiaSmiReader(log, "n")
    reader.block_bytes = 64 << 10
    total = sum(1 for _ in reader._raw_blocks())
    assert _scanned_blocks(log, block_bytes=64 << 10, host="n") == total - 1
    assert _read(log, True, block_bytes=64 << 10, host="n") == _read(log, False, block_bytes=64 << 10, host="n")


@needs_scanner
def test_nvsmi_native_gpulens_pure_python_turns_the_scanner_off():
    import os
    import subprocess
    import sys

    code = "from gpulens.collector.imports import nvsmi_native; print(nvsmi_native.available())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "GPULENS_PURE_PYTHON": "1"})
    assert done.stdout.strip() == "False"
