"""The dashboard server's entry point: Streamlit's own command line, after
the process is made ready for its first visitor.

`gpulens dashboard` runs `python -m dashboard.launch run dashboard/app.py
...`, which is `streamlit run` with two things done first:

- the modules the pages use are imported now (Streamlit imports them at
  the first visit otherwise: about a second, pandas included, which
  pyarrow loads on its first conversion);
- the first page's results (the dataset summary, what it covers, and
  every finding) start computing in a background thread, into the same
  cache the pages read. A visitor who arrives before they are ready waits
  for that computation instead of starting another.

The server itself starts at once: the warm-up runs beside it, and
`GPULENS_WARM_UP=0` turns it off (as it does the pages' own warm-up).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path


def prepare() -> threading.Thread | None:
    """Import what the pages need and warm the first page's results; the
    warm-up thread, or None where there is nothing to warm."""
    import pyarrow as pa
    import plotly.graph_objects  # noqa: F401

    from analysis import communication, findings, launch, power, time_breakdown, timeline  # noqa: F401
    from dashboard import charts, data  # noqa: F401
    from dashboard.pages import common

    pa.array([0])  # pyarrow imports pandas on its first conversion

    path = os.environ.get(data.DATASET_ENV)
    if not path or os.environ.get(common.WARM_UP_ENV, "1") == "0":
        return None
    dataset = data.current(Path(path))
    if data.problem(dataset) is not None:
        return None

    def warm() -> None:
        for func in common.overview_results():
            try:
                data.cached(dataset, func)
            except Exception:  # noqa: BLE001 - the page shows the error when it asks
                continue

    thread = threading.Thread(target=warm, name="gpulens-start-up", daemon=True)
    thread.start()
    return thread


def main() -> None:
    prepare()
    from streamlit.web import cli

    sys.exit(cli.main())


if __name__ == "__main__":
    main()
