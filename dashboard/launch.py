"""The dashboard server's entry point: Streamlit's own command line, after
the process is made ready for its first visitor.

`gpulens dashboard` runs `python -m gpulens.dashboard.launch run
dashboard/app.py ...`, which is `streamlit run` with two things done first:

- the modules the pages use are imported now (Streamlit imports them at
  the first visit otherwise: about a second, pandas included, which
  pyarrow loads on its first conversion);
- what every page shows first starts computing in a background thread
  (`app_pages.common.warm_up`: the overview's results first, then each page's
  in menu order), into the same cache the pages read. A visitor who
  arrives before a result is ready waits for that computation instead of
  starting another, and the warm-up pauses while a page asks for anything.

The server itself starts at once: the warm-up runs beside it, and
`GPULENS_WARM_UP=0` turns it off (as it does the pages' own warm-up).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path


def prepare() -> threading.Thread | None:
    """Import what the pages need and start warming every page's first view;
    the warm-up thread, or None where there is nothing to warm."""
    import pyarrow as pa
    import plotly.graph_objects  # noqa: F401

    from gpulens.analysis import communication, findings, launch, power, time_breakdown, timeline  # noqa: F401
    from gpulens.dashboard import charts, data  # noqa: F401
    from gpulens.dashboard.app_pages import common

    pa.array([0])  # pyarrow imports pandas on its first conversion

    path = os.environ.get(data.DATASET_ENV)
    if not path:
        return None
    # The same warm-up the first visit would start, begun now: a visitor who
    # opens the link a few seconds later finds every page's first view ready.
    return common.warm_up(data.current(Path(path)))


def main() -> None:
    prepare()
    from streamlit.web import cli

    sys.exit(cli.main())


if __name__ == "__main__":
    main()
