"""Malformed telemetry for `gpulens import`: nvidia-smi CSV logs (with and
without a header), dcgm-exporter and nvidia_gpu_exporter scrapes, rocm-smi
and amd-smi JSON.

`import_corpus(folder)` writes each case and returns it as an `ImportCase`:
its file, the options it is imported with, and what must happen: refused
with one line naming the file (and the line where `line` is set), or
imported (exit 0) with exactly the `warning` given (None: no warning).
A refused file leaves the dataset as it was; every case starts from a
dataset that already holds one good import.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "import"

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
LINK = "[x](javascript:alert(3))"
MISDATED = "2 rows dated before 1970 or more than a day ahead of this machine's clock dropped, the rest kept"
# The scrape and JSON cases are dated by the file's modification time.
MTIME_S = 1_714_564_800  # 2024-05-01 12:00:00 UTC


@dataclass(frozen=True)
class ImportCase:
    name: str
    path: Path
    args: tuple[str, ...] = ()
    refused: bool = False
    line: int | None = None  # the line a refusal names
    warning: str | None = None  # the one warning of an accepted case, after "gpulens: warning: PATH: "
    rows: int | None = None  # telemetry rows an accepted case adds
    extra: dict = field(default_factory=dict)


def _csv(header: str, *rows: str) -> bytes:
    return ("\n".join([header, *rows]) + "\n").encode()


HEADER = ("timestamp, index, uuid, name, hostname, power.draw [W], utilization.gpu [%], memory.used [MiB], "
          "temperature.gpu, clocks.sm [MHz]")


def _row(second: int, gpu: int, power: str = "250.50 W", util: str = "40 %", mem: str = "1024 MiB",
         temp: str = "45", clock: str = "1980 MHz", name: str = "NVIDIA H100 80GB HBM3", host: str = "node7",
         date: str = "2024/05/01 12:00") -> str:
    return (f"{date}:{second:02d}.{100 + gpu}, {gpu}, GPU-0a1b2c3d-0000-4000-8000-00000000000{gpu}, {name}, {host}, "
            f"{power}, {util}, {mem}, {temp}, {clock}")


def _log(*rows: str) -> bytes:
    return _csv(HEADER, *rows)


def _good_rows(n: int = 4) -> list[str]:
    return [_row(second, gpu) for second in range(n // 2) for gpu in (0, 1)]


def _nvidia_smi_cases() -> dict[str, tuple[bytes, dict]]:
    good = _log(*_good_rows())
    rows = _good_rows(6)
    noheader = (DATA / "nvidia-smi-noheader.csv").read_bytes()
    noheader_args = ("--columns", "timestamp,index,power.draw,utilization.gpu,temperature.gpu", "--host", "n1")
    return {
        "truncated_mid_line": (good[: good.rindex(b", 40 %")], dict(refused=True, line=5)),
        "truncated_mid_number": (good[: good.rindex(b"0 MHz")], dict(rows=4)),
        "bad_value_in_the_middle": (_log(*rows[:2], _row(1, 0, power="abc W"), *rows[3:]),
                                    dict(refused=True, line=4)),
        "extra_field_in_the_middle": (_log(*rows[:3], rows[3] + ", 7", *rows[4:]), dict(refused=True, line=5)),
        "missing_field_in_the_middle": (_log(*rows[:3], rows[3].rsplit(",", 1)[0], *rows[4:]),
                                        dict(refused=True, line=5)),
        "number_with_a_comma": (_log(*rows[:2], _row(1, 0, mem="1,024 MiB"), *rows[3:]), dict(refused=True, line=4)),
        "not_available_markers": (_log(_row(0, 0, power="[N/A]", util="[Not Supported]"),
                                       _row(0, 1, power="N/A", util="[Unknown Error]"), *rows[2:]), dict(rows=6)),
        "err_marker": (_log(*rows[:2], _row(1, 0, power="ERR!", clock="ERR!"), *rows[3:]),
                       dict(rows=6, warning="2 unreadable values (ERR!) NULL, the rest kept (power_w 1, sm_clock_mhz 1)")),
        "units_missing": (_log(_row(0, 0, power="250.50", util="40", mem="1024", clock="1980"), *rows[1:]),
                          dict(rows=6)),
        "unit_odd": (_log(*rows[:2], _row(1, 0, power="0.25 kW"), *rows[3:]), dict(refused=True, line=4)),
        "negative": (_log(*rows[:2], _row(1, 0, power="-250.00 W", mem="-5 MiB"), *rows[3:]),
                     dict(rows=6, warning="2 odd values dropped, the rest kept (mem_used_bytes 1, power_w 1)")),
        "nan_and_inf": (_log(*rows[:2], _row(1, 0, power="nan W", util="inf %", temp="-inf"), *rows[3:]),
                        dict(rows=6, warning="3 odd values dropped, the rest kept (gpu_util_pct 1, power_w 1, temp_c 1)")),
        "huge_numbers": (_log(*rows[:2], _row(1, 0, power="1e400 W", mem="99999999999999999999999 MiB",
                                               clock="99999999999999999999 MHz"), *rows[3:]),
                         dict(rows=6, warning="3 odd values dropped, the rest kept "
                                              "(mem_used_bytes 1, power_w 1, sm_clock_mhz 1)")),
        "binary_garbage": (bytes(range(256)) * 16, dict(refused=True, line=1, args=("--format", "nvidia-smi"))),
        "binary_garbage_sniffed": (bytes(range(11, 256)) * 4, dict(refused=True)),
        "empty": (b"", dict(refused=True)),
        "header_only": (_csv(HEADER), dict(refused=True)),
        "gzip": (gzip.compress(good), dict(refused=True)),
        "invalid_utf8_host": (_log(*rows[:3], _row(1, 1, host="node@7"), *rows[4:]).replace(b"node@7", b"node\xff7"),
                              dict(refused=True, line=5)),
        "markup_in_names": (_log(*[_row(s, g, name=SCRIPT + LINK, host=IMG) for s in range(2) for g in (0, 1)]),
                            dict(rows=4)),
        "timestamps_out_of_order": (_log(*rows[4:], *rows[:4]), dict(rows=6)),
        "timestamps_far_future": (_log(*rows[:4], *[_row(5, g, date="2999/12/31 23:59") for g in (0, 1)]),
                                  dict(rows=4, warning=MISDATED)),
        "timestamps_before_1970": (_log(*[_row(5, g, date="1969/12/31 23:59") for g in (0, 1)], *rows[:4]),
                                   dict(rows=4, warning=MISDATED)),
        "timestamps_all_in_the_future": (_log(*[_row(s, g, date="2999/12/31 23:59") for s in range(2) for g in (0, 1)]),
                                         dict(refused=True)),
        "timestamp_not_a_time": (_log(*rows[:2], _row(1, 0, date="2024/13/45 99:99"), *rows[3:]),
                                 dict(refused=True, line=4)),
        "noheader_bad_line": (noheader.replace(b"125.50", b"12x.50"),
                              dict(refused=True, line=3, args=noheader_args)),
        "noheader_wrong_column_count": (noheader.replace(b"131.75, 21", b"131.75, 21, 9"),
                                        dict(refused=True, line=4, args=noheader_args)),
    }


def _scrape(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def _dcgm(metric: str, gpu: int, value: str, host: str = "node7", model: str = "NVIDIA H100 80GB HBM3",
          stamp: str = "") -> str:
    return (f'{metric}{{gpu="{gpu}",UUID="GPU-5fd4a2b1-1c2d-4e5f-8a9b-0c1d2e3f4a0{gpu}",modelName="{model}",'
            f'Hostname="{host}"}} {value}{" " + stamp if stamp else ""}')


def _dcgm_page(power: tuple[str, str] = ("612.5", "600.25"), util: tuple[str, str] = ("100", "90"),
               **labels: str) -> list[str]:
    return ["# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
            *[_dcgm("DCGM_FI_DEV_POWER_USAGE", g, power[g], **labels) for g in (0, 1)],
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
            *[_dcgm("DCGM_FI_DEV_GPU_UTIL", g, util[g], **labels) for g in (0, 1)],
            "# TYPE DCGM_FI_DEV_FB_USED gauge",
            *[_dcgm("DCGM_FI_DEV_FB_USED", g, "1024", **labels) for g in (0, 1)]]


def _scrape_cases() -> dict[str, tuple[bytes, dict]]:
    page = _dcgm_page()
    good = _scrape(*page)
    exporter = (DATA / "nvidia-gpu-exporter-h200-load.prom").read_bytes()
    ms = MTIME_S * 1000
    return {
        "truncated_mid_line": (good[: good.rindex(b'Hostname="node7"} 1024') + 12], dict(refused=True, line=9)),
        "bad_line_in_the_middle": (_scrape(*page[:4], page[4].replace("}", ""), *page[5:]),
                                   dict(refused=True, line=5)),
        "text_for_a_value": (_scrape(*page[:2], page[2].replace("600.25", "abc"), *page[3:]),
                             dict(refused=True, line=3)),
        "number_with_a_comma": (_scrape(*page[:2], page[2].replace("600.25", "1,600.25"), *page[3:]),
                                dict(refused=True, line=3)),
        "nan_and_inf": (_scrape(*_dcgm_page(power=("NaN", "+Inf"), util=("-Inf", "90"))),
                        dict(rows=2, warning="3 odd values dropped, the rest kept (gpu_util_pct 1, power_w 2)")),
        "negative": (_scrape(*_dcgm_page(power=("-5", "600"))),
                     dict(rows=2, warning="1 odd value dropped, the rest kept (power_w 1)")),
        "huge_numbers": (_scrape(*page[:6], *[_dcgm("DCGM_FI_DEV_FB_USED", g, "1e300") for g in (0, 1)]),
                         dict(rows=2, warning="2 odd values dropped, the rest kept (mem_used_bytes 2)")),
        "binary_garbage": (bytes(range(256)) * 16, dict(refused=True, line=2, args=("--format", "scrape"))),
        "empty": (b"", dict(refused=True)),
        "comments_only": (b"# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n",
                          dict(refused=True)),
        "invalid_utf8_label": (good.replace(b'modelName="NVIDIA H100 80GB HBM3",Hostname="node7"} 90',
                                            b'modelName="NVIDIA \xff H100",Hostname="node7"} 90'),
                               dict(refused=True, line=6)),
        "markup_in_labels": (_scrape(*_dcgm_page(host=IMG, model=SCRIPT + LINK)), dict(rows=2)),
        "duplicate_series": (_scrape(*page[:3], page[2].replace("600.25", "100"), *page[3:]),
                             dict(rows=2, warning="1 duplicate sample dropped, the first of each series and time "
                                                  "kept (power_w 1)")),
        "timestamps_out_of_order": (_scrape(*[_dcgm("DCGM_FI_DEV_POWER_USAGE", 0, str(100 + k), stamp=str(ms - k * 1000))
                                              for k in range(3)]), dict(rows=3)),
        "timestamps_far_future": (_scrape(*[_dcgm("DCGM_FI_DEV_POWER_USAGE", 0, "100", stamp=stamp)
                                            for stamp in (str(ms), "32503680000000", "32503680001000")]),
                                  dict(rows=1, warning=MISDATED)),
        "timestamps_before_1970": (_scrape(*[_dcgm("DCGM_FI_DEV_POWER_USAGE", 0, "100", stamp=stamp)
                                             for stamp in ("-86400000", "-1000", str(ms))]),
                                   dict(rows=1, warning=MISDATED)),
        "timestamp_beyond_int64": (_scrape(_dcgm("DCGM_FI_DEV_POWER_USAGE", 0, "100",
                                                 stamp="99999999999999999999999")),
                                   dict(refused=True, line=1)),
        "no_gpu_label": (_scrape('DCGM_FI_DEV_POWER_USAGE{Hostname="n"} 100'), dict(refused=True)),
        "gpu_label_huge": (_scrape('DCGM_FI_DEV_POWER_USAGE{gpu="99999999999999999999",Hostname="n"} 100'),
                           dict(refused=True, line=1)),
        "exporter_truncated": (exporter[: len(exporter) // 2].rsplit(b"\n", 1)[0] + b"\nnvidia_smi_power_draw_wat",
                               dict(refused=True, line=28, args=("--host", "h200-box"))),
        "exporter_nan_index": (exporter.replace(b"nvidia_smi_index{uuid=\"00000000-0000-0000-0000-000000000000\"} 0",
                                                b"nvidia_smi_index{uuid=\"00000000-0000-0000-0000-000000000000\"} NaN"),
                               dict(refused=True, args=("--host", "h200-box"))),
    }


def _rocm_smi(**card: object) -> dict:
    document = json.loads((DATA / "rocm-smi-mi100.json").read_text())
    document["card0"].update(card)
    return document


def _amd_smi(gpus: object) -> bytes:
    return json.dumps(gpus).encode()


def _amd_entry(gpu: object = 0, power: object = None) -> dict:
    return {"gpu": gpu, "power": {"socket_power": {"value": 250 if power is None else power, "unit": "W"}},
            "usage": {"gfx_activity": {"value": 90, "unit": "%"}},
            "mem_usage": {"used_vram": {"value": 1024, "unit": "MB"}}}


def _json_cases() -> dict[str, tuple[bytes, dict]]:
    rocm = json.dumps(_rocm_smi()).encode()
    host = ("--host", "mi100-box")
    amd = ("--host", "mi300-box", "--format", "amd-smi")
    deep = b"[" * 100_000 + b"]" * 100_000
    return {
        "rocm_truncated": (rocm[: len(rocm) // 2], dict(refused=True, line=1, args=host)),
        "rocm_bad_line_in_the_middle": (json.dumps(_rocm_smi(), indent=4).encode().replace(b'"0x1",', b'"0x1"', 1),
                                        dict(refused=True, line=5, args=host)),
        "rocm_binary_garbage": (b"{" + bytes(range(256)) * 8, dict(refused=True, line=2, args=host)),
        "rocm_empty": (b"", dict(refused=True, args=host)),
        "rocm_a_list": (b'[{"card0": {}}]', dict(refused=True, args=("--host", "h", "--format", "rocm-smi"))),
        "rocm_no_cards": (b'{"system": {"Driver version": "6.1"}, "card": 3}', dict(refused=True, args=host)),
        "rocm_card_a_list": (json.dumps({"card0": [1, 2]}).encode(), dict(refused=True, args=host)),
        "rocm_deep_nesting": (b'{"card0": {"deep": ' + deep + b"}}", dict(refused=True, args=host)),
        "rocm_invalid_utf8": (rocm.replace(b"113-D3431401-101", b"113-\xff-101"), dict(refused=True, line=1, args=host)),
        "rocm_odd_units": (json.dumps(_rocm_smi(**{"Average Graphics Package Power (W)": "N/A",
                                                   "GPU use (%)": "[Not Supported]",
                                                   "sclk clock speed:": "(300Mhz)"})).encode(),
                           dict(rows=2, args=host)),
        "rocm_number_with_a_comma": (json.dumps(_rocm_smi(**{"Average Graphics Package Power (W)": "1,036.0"})).encode(),
                                     dict(rows=2, args=host,
                                          warning="1 odd value dropped, the rest kept (power_w 1)")),
        "rocm_nan_negative_huge": (json.dumps(_rocm_smi(**{"Average Graphics Package Power (W)": "nan",
                                                           "GPU use (%)": "-3",
                                                           "VRAM Total Used Memory (B)": "1e400"})).encode(),
                                   dict(rows=2, args=host, warning="3 odd values dropped, the rest kept "
                                                                   "(gpu_util_pct 1, mem_used_bytes 1, power_w 1)")),
        "rocm_markup_in_names": (json.dumps(_rocm_smi(**{"Card series": SCRIPT + LINK})).encode(),
                                 dict(rows=2, args=("--host", IMG))),
        "amd_an_object": (b'{"gpu": 0}', dict(refused=True, args=amd)),
        "amd_entry_a_list": (_amd_smi([[0, 1]]), dict(refused=True, args=amd)),
        "amd_gpu_not_a_number": (_amd_smi([_amd_entry(gpu="0")]), dict(refused=True, args=amd)),
        "amd_gpu_negative": (_amd_smi([_amd_entry(gpu=-1)]), dict(refused=True, args=amd)),
        "amd_gpu_huge": (_amd_smi([_amd_entry(gpu=2**70)]), dict(refused=True, args=amd)),
        "amd_deep_nesting": (b'[{"gpu": 0, "power": ' + deep + b"}]", dict(refused=True, args=amd)),
        "amd_nan_inf_huge": (b'[{"gpu": 0, "power": {"socket_power": {"value": NaN, "unit": "W"}}, '
                             b'"usage": {"gfx_activity": {"value": Infinity, "unit": "%"}}, '
                             b'"mem_usage": {"used_vram": {"value": 1e300, "unit": "MB"}}, '
                             b'"clock": {"gfx_0": {"clk": {"value": 1900, "unit": "MHz"}}}}]',
                             dict(rows=1, args=amd, warning="3 odd values dropped, the rest kept "
                                                            "(gpu_util_pct 1, mem_used_bytes 1, power_w 1)")),
        "amd_unit_odd": (_amd_smi([{"gpu": 0, "power": {"socket_power": {"value": 250, "unit": "kW"}},
                                    "usage": {"gfx_activity": {"value": 90, "unit": "%"}}}]),
                         dict(rows=1, args=amd, warning="1 odd value dropped, the rest kept (power_w 1)")),
        "amd_duplicate_gpu": (_amd_smi([_amd_entry(0, 250), _amd_entry(0, 300)]),
                              dict(refused=True, args=amd)),
        "amd_empty_list": (b"[]", dict(refused=True, args=amd)),
    }


def import_corpus(folder: Path) -> list[ImportCase]:
    """Every case, written under `folder` (scrape and JSON files dated MTIME_S)."""
    folder.mkdir(parents=True, exist_ok=True)
    cases = []
    groups = (("nvidia_smi", ".csv", _nvidia_smi_cases()), ("scrape", ".prom", _scrape_cases()),
              ("json", ".json", _json_cases()))
    for prefix, suffix, variants in groups:
        for name, (data, expect) in variants.items():
            path = folder / f"{prefix}_{name}{suffix}"
            path.write_bytes(data)
            os.utime(path, (MTIME_S, MTIME_S))
            args = tuple(expect.pop("args", ()))
            cases.append(ImportCase(f"{prefix}_{name}", path, args, **expect))
    return cases
