"""The dashboard's page: input errors first, then the tabs, with only the open one computed."""

from __future__ import annotations

from typing import Any

import streamlit as st

from kvsim.dashboard import analysis, views
from kvsim.dashboard.config import Inputs

VIEWS: tuple[str, ...] = ("Timeline", "Sweeps", "Layers", "Calibration", "Recommend")


def render(inputs: Inputs) -> None:
    """Show input errors, or the tabs with only the open one computed."""
    for line in inputs.warnings:
        st.warning(line)
    if inputs.errors:
        for line in inputs.errors:
            st.error(line)
        return
    tabs = st.tabs(VIEWS, key="view", bind="query-params")
    renderers: list[Any] = [
        views.render_timeline, analysis.render_sweeps, views.render_layers, analysis.render_calibration,
        analysis.render_recommend,
    ]
    for tab, fn in zip(tabs, renderers):
        if tab.open:
            with tab:
                fn(inputs)
