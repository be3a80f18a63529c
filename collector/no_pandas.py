"""Keep pyarrow from importing pandas in processes that never use it.

pyarrow imports pandas, when it is installed (streamlit brings it), the
first time it converts Python values: a `pa.array(list)`, a `fill_null("")`.
That is 0.3 s of CPU and ~50 MB in a process that never makes a DataFrame
(an ingest worker, `gpulens query`, the collector daemon, `gpulens
report`). Where pandas is not imported yet, an import hook makes it look
not installed, and pyarrow, plotly and polars go on without it.

Only for processes gpulens owns: it changes the process for everyone in it.
"""

from __future__ import annotations

import sys


def refuse_pandas() -> None:
    """Make `import pandas` fail from now on, unless it is already imported."""
    if "pandas" not in sys.modules and not any(isinstance(hook, _NoPandas) for hook in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


class _NoPandas:
    """An import hook that refuses `pandas`."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            # As for a package not installed: libraries that look before they
            # import (polars: `importlib.util.find_spec`) expect this one.
            raise ModuleNotFoundError("pandas is not loaded in this gpulens process", name=name)
        return None
