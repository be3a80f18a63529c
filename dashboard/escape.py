"""One escaping rule per output, for names that come from traces and
datasets (runs, hosts, process groups, ops, kernels): whatever they hold
shows as text, never as markup, a link, an image or a script.

- `markdown_text`: Markdown (`report --format md`, Streamlit's
  `st.markdown`): HTML's `<`, `>`, `&` as entities and Markdown's
  punctuation backslash-escaped, so `![t](http://…/track.png)` is no image
  and `<script>` no tag; one line.
- `markdown_code`: the same name inside a code span, fenced by more
  backticks than it holds.
- `plotly_text`: a label Plotly renders (its titles, legends, ticks and
  hover text read a subset of HTML: `<a href>`, `<b>`, `<br>`): HTML-escaped.
  `escape_figure` applies it to every name-bearing field of a figure;
  hover templates and hover text, which hold gpulens's own `<br>`, escape
  their names where they are written.
- HTML pages escape with `html.escape` (dashboard/report/html.py).
- The terminal: `gpulens.collector.wording.visible_controls`.
"""

from __future__ import annotations

import html
import re
from typing import Any

_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]()!#|~<>&])")
_MARKDOWN_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def markdown_text(value: Any) -> str:
    """`value` as Markdown that renders as its own text, on one line."""
    text = " ".join(str(value).split())
    return _MARKDOWN_PUNCTUATION.sub(lambda m: _MARKDOWN_ENTITIES.get(m.group(1), "\\" + m.group(1)), text)


def markdown_code(value: Any) -> str:
    """`value` as a Markdown code span (nothing in it renders), on one line."""
    text = " ".join(str(value).split())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def plotly_text(value: Any) -> str:
    """`value` as a Plotly label that shows as its own text."""
    return html.escape(str(value), quote=False)


# Trace fields whose strings come from the data (names, categories).
_TRACE_FIELDS = ("name", "x", "y", "labels", "parents", "ids", "customdata", "legendgroup")


def escape_figure(figure: Any) -> Any:
    """`figure` with every data-borne label escaped (`plotly_text`): trace
    names, string categories and custom data, titles, tick text and
    annotations. Call it once, on the finished figure."""
    for trace in figure.data:
        for field in _TRACE_FIELDS:
            value = getattr(trace, field, None) if field in trace else None
            if value is not None:
                escaped = _escaped(value)
                if escaped is not value:
                    trace[field] = escaped
    layout = figure.layout
    if layout.title.text:
        layout.title.text = plotly_text(layout.title.text)
    if layout.legend.title.text:
        layout.legend.title.text = plotly_text(layout.legend.title.text)
    for name in list(layout):
        if name.startswith(("xaxis", "yaxis")):
            axis = layout[name]
            if axis.title.text:
                axis.title.text = plotly_text(axis.title.text)
            if axis.ticktext is not None:
                axis.ticktext = [plotly_text(text) for text in axis.ticktext]
    for annotation in layout.annotations:
        if annotation.text:
            annotation.text = plotly_text(annotation.text)
    return figure


def _escaped(value: Any) -> Any:
    """Strings escaped, in a value or in (nested) sequences of values; other
    values as they are (the same object where nothing changed)."""
    if isinstance(value, str):
        return plotly_text(value)
    if isinstance(value, (list, tuple)):
        items = [_escaped(item) for item in value]
        return value if all(a is b for a, b in zip(items, value)) else type(value)(items)
    if getattr(value, "dtype", None) is not None and value.dtype.kind in "OU":  # a numpy array of text
        return [_escaped(item) for item in value.tolist()]
    return value
