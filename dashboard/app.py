"""The gpulens dashboard: `streamlit run dashboard/app.py`.

The dataset is named by the `GPULENS_DATASET` environment variable
(`gpulens dashboard DATASET` sets it); without it the built-in sample is
shown. One file per page under `dashboard/app_pages/`, wired here with
`st.navigation`; pages call `analysis` only (through `dashboard.data`).
The folder is not named `pages/`: Streamlit would take that for an
old-style multipage folder and run a page's file without app.py on a
first visit to its address.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from gpulens.dashboard import data
from gpulens.dashboard.escape import markdown_code
from gpulens.dashboard.app_pages.common import PAGES, dataset, warm_up

# The favicon from a file, sent inline: a `:material/...:` page icon is
# fetched from Google's font CDN, which an offline machine cannot reach.
FAVICON = Path(__file__).resolve().parent / "favicon.svg"
st.set_page_config(page_title="gpulens", page_icon=FAVICON, layout="wide")

pages = [
    st.Page(script, title=title, icon=icon, url_path=key, default=key == "overview")
    for key, (script, title, icon) in PAGES.items()
]
current = st.navigation(pages)

with st.sidebar:
    ds = dataset()
    st.caption(f"Dataset: {markdown_code(ds.path)}")
    if st.button("Reload data", icon=":material/refresh:", help="Drop cached results and read the dataset again"):
        data.reload(ds)  # and warm every page's first view again, just below

# What the other pages show first is computed in the background meanwhile
# (once per dataset), so moving between pages is quick on big datasets;
# it waits while a page runs and while the browser draws it.
warm_up(ds)
with data.busy():
    current.run()
