"""The dashboard's page: input errors first, then the tabs, with only the open one computed; while
simulations are pending, a fragment polls for them and reruns the page as they finish."""

from __future__ import annotations

from typing import Any

import streamlit as st

from kvsim.dashboard import analysis, fit_page, views
from kvsim.dashboard.config import Inputs
from kvsim.dashboard.runner import Runner

FIT_VIEW = "Will it fit?"
VIEWS: tuple[str, ...] = (FIT_VIEW, "Timeline", "Sweeps", "Layers", "Calibration", "Recommend")
REFRESH_S = 1.0  # how often a page with pending simulations looks for finished ones


def render(inputs: Inputs) -> None:
    """Show input errors, or the tabs with only the open one computed."""
    for line in inputs.warnings:
        st.warning(line)
    for line in inputs.errors:
        st.error(line)
    tabs = st.tabs(VIEWS, key="view", bind="query-params")
    renderers: list[Any] = [
        fit_page.render_fit, views.render_timeline, analysis.render_sweeps, views.render_layers, analysis.render_calibration,
        analysis.render_recommend,
    ]
    runner = views.session_runner()
    runner.begin()
    for tab, fn in zip(tabs, renderers):
        if tab.open and (fn is fit_page.render_fit or not inputs.errors):  # sidebar errors: its tabs only
            with tab:
                fn(inputs)
    runner.end()  # work for inputs this run no longer shows is stopped
    if tabs[0].open:
        views.warm_fit_imports()  # the page is drawn; the fit jobs started after this fork warm
    if runner.pending:
        _refresh(runner)


@st.fragment(run_every=REFRESH_S)
def _refresh(runner: Runner) -> None:
    """While simulations are pending: collect finished ones and rerun the page when any did."""
    before = runner.pending
    runner.poll()
    if runner.pending < before or not runner.pending:
        st.rerun(scope="app")
