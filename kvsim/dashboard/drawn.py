"""Charts drawn from kept Vega-Lite specs.

Streamlit reruns the whole script on every interaction, and ``st.altair_chart`` turns its chart into a
Vega-Lite spec every time: Altair validates it against its JSON schema and hashes its data (it prints
each data frame to do so), 30-150 ms a chart. Here the spec is kept (``st.cache_data``) by the chart
builder and its arguments (data frames by their content), so a rerun whose data did not change sends the
kept spec through ``st.vega_lite_chart``: the element ``st.altair_chart`` itself sends after converting
(streamlit/elements/vega_charts.py, ``_altair_chart`` calls ``_convert_altair_to_vega_lite_spec`` then
``_vega_lite_chart``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import altair as alt
import streamlit as st

try:  # Streamlit's own conversion (Arrow datasets, theme "none"); 1.65-1.67 have it
    from streamlit.elements.vega_charts import _convert_altair_to_vega_lite_spec as _to_spec
except ImportError:  # pragma: no cover - a later Streamlit: charts are drawn uncached
    _to_spec = None

Builder = Callable[..., alt.TopLevelMixin]


@st.cache_data(max_entries=256, show_spinner=False)
def _spec(module: str, name: str, *args: Any) -> dict[str, Any]:
    """The Vega-Lite spec of ``module.name(*args)`` (kept by the names and the arguments' content)."""
    builder = getattr(importlib.import_module(module), name)
    return _to_spec(builder(*args))  # type: ignore[misc]


def draw(builder: Builder, *args: Any, where: Any = None, **chart_args: Any) -> None:
    """Draw ``builder(*args)`` in ``where`` (default: the page) as ``st.altair_chart`` would, from the
    kept spec when its arguments did not change. ``builder`` is a module-level function; ``chart_args``
    go to ``st.vega_lite_chart`` (``width``, ``height``)."""
    where = st if where is None else where
    if _to_spec is None:
        where.altair_chart(builder(*args), **chart_args)
        return
    where.vega_lite_chart(_spec(builder.__module__, builder.__qualname__, *args), **chart_args)


def forget() -> None:
    """Drop every kept spec (benchmarks time cold renders)."""
    _spec.clear()
