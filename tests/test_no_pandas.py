"""gpulens.collector.no_pandas: pandas looks not installed to the processes that refuse it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import modules_loaded_by

REPO_ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_a_refused_pandas_is_not_found_as_an_uninstalled_one_is() -> None:
    # polars looks with importlib.util.find_spec and catches only ModuleNotFoundError.
    assert _run("from collector.no_pandas import refuse_pandas; refuse_pandas(); import importlib.util\n"
                "try:\n    importlib.util.find_spec('pandas')\nexcept ModuleNotFoundError as error:\n"
                "    print(type(error).__name__, error.name)") == "ModuleNotFoundError pandas"


def test_polars_works_beside_a_refused_pandas() -> None:
    assert _run("from collector.no_pandas import refuse_pandas; refuse_pandas(); import sys, polars as pl\n"
                "print(pl.DataFrame({'power_w': [300.0, 400.0]})['power_w'].mean(), 'pandas' in sys.modules)") == "350.0 False"


def test_the_report_command_does_not_load_pandas(tmp_path: Path) -> None:
    # pyarrow and plotly would import it, 0.19 s and 34 MB of every report.
    out = tmp_path / "report.md"
    assert modules_loaded_by(["report", "sample_traces/demo-training", "-o", str(out)], ("pandas",)) == []
    assert out.read_text().startswith("# gpulens report")
