"""The "Will it fit?" tab: a model, a workload and a device in; the verdict sentence first, then the peak's
parts against the device's limits, the longest context per policy and the settings that make it fit.

Its widgets bind to the URL (``fit_*`` parameters, checked by ``kvsim.dashboard.fit_links``: a bad value
in a shared link is an inline error naming it). Predictions run in ``kvsim.dashboard.runner``'s workers,
kept by their inputs; the page shows what finished and fills in the rest.
"""

from __future__ import annotations

import json
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from kvsim.core.errors import KvsimError
from kvsim.dashboard import fit_compute as fc
from kvsim.dashboard.fit_links import DEFAULTS, MAX_TOKENS, SOURCES, check_links
from kvsim.dashboard.views import session_runner
from kvsim.generation.config import load_model_config, shipped_names
from kvsim.generation.devices import GIB
from kvsim.generation.schedule import Workload

Q = "query-params"
LINK_ERRORS = "fit_link_errors"  # session key: {param: one line} from the link the session opened with
PART_COLORS = ("#4c78a8", "#f58518", "#e45756")


# ---- inputs --------------------------------------------------------------------------------------
def _link_errors() -> dict[str, str]:
    """The opening link's bad ``fit_*`` values, kept until the widget they name is changed (Streamlit
    itself drops a value a bound widget cannot take, silently: ``bind`` in ``st.selectbox``'s docs)."""
    if LINK_ERRORS not in st.session_state:
        labels = [fc.device_label(d) for d in fc.device_choices().values()]
        st.session_state[LINK_ERRORS] = check_links(dict(st.query_params), labels, shipped_names())
    return st.session_state[LINK_ERRORS]


def _changed(key: str) -> None:
    st.session_state[LINK_ERRORS].pop(key, None)


@st.cache_data(ttl=3600, show_spinner="fetching config.json")
def _repo_config_text(repo_id: str) -> str:
    """A repo's ``config.json`` through ``kvsim.generation``'s loader (raises its one-line error)."""
    return json.dumps(load_model_config(repo_id).config)


def _model(col: Any) -> tuple[str, str | None] | str:
    """(model, config text or None), or a one-line error."""
    source = col.radio("model from", SOURCES, key="fit_source", horizontal=True, bind=Q, on_change=_changed,
                       args=("fit_source",))
    if source == "shipped":
        names = shipped_names()
        name = col.selectbox("config", names, names.index(DEFAULTS["fit_model"]), key="fit_model", bind=Q,
                             on_change=_changed, args=("fit_model",))
        return name, None
    if source == "config file":
        up = col.file_uploader("config.json", type=["json"], key="fit_upload")
        if up is None:
            return "upload a model's config.json (only the config is read, never weights)"
        return up.name, up.getvalue().decode("utf-8", errors="replace")
    repo = col.text_input("Hugging Face repo id", DEFAULTS["fit_repo"], key="fit_repo", bind=Q,
                          on_change=_changed, args=("fit_repo",)).strip()
    try:
        return repo, _repo_config_text(repo)
    except KvsimError as err:
        return str(err)


def _int(col: Any, label: str, key: str, lo: int, hi: int, step: int, help: str | None = None) -> int:
    return int(col.number_input(label, lo, hi, int(DEFAULTS[key]), step, key=key, bind=Q, help=help,
                                on_change=_changed, args=(key,)))


def _choice(col: Any, label: str, options: tuple[Any, ...], key: str, fmt: Any = str, help: str | None = None) -> Any:
    default = fc.device_label(fc.detect_device()) if key == "fit_device" else DEFAULTS[key]
    return col.selectbox(label, options, options.index(default), format_func=fmt, key=key, bind=Q,
                         help=help, on_change=_changed, args=(key,))


def inputs() -> fc.FitRequest | str:
    """Draw the inputs; the request, or a one-line reason there is none."""
    devices = fc.device_choices()
    top = st.columns([3, 2], vertical_alignment="bottom")
    model = _model(top[0])
    by_label = {fc.device_label(d): d for d in devices.values()}  # the URL holds the label (bind's rule)
    label = _choice(top[1], "device", tuple(by_label), "fit_device",
                    help="Macs by unified memory, common NVIDIA GPUs, and the machine this dashboard runs on")
    c = st.columns(7)
    prompt = _int(c[0], "prompt tokens", "fit_prompt", 2, MAX_TOKENS, 1024)
    max_tokens = _int(c[1], "max tokens", "fit_max", 1, MAX_TOKENS, 256, "tokens generated")
    prefill = _int(c[2], "prefill step", "fit_prefill", 1, MAX_TOKENS, 512, "mlx_lm.generate --prefill-step-size")
    kv_bits = _choice(c[3], "kv-bits", ("none", "2", "3", "4", "5", "6", "8"), "fit_kv_bits",
                      help="mlx_lm.generate --kv-bits (quantized from --quantized-kv-start 5000)")
    max_kv = int(c[4].number_input("max-kv-size", 0, MAX_TOKENS, int(DEFAULTS["fit_max_kv"]), 1024, key="fit_max_kv",
                                   bind=Q, help="mlx_lm.generate --max-kv-size (0: none)", on_change=_changed,
                                   args=("fit_max_kv",)))
    policy = _choice(c[5], "policy", tuple(fc.POLICIES), "fit_policy",
                     help="KV growth: mlx-lm's own caches, or a kvsim policy (policies.mlx)")
    backend = _choice(c[6], "backend", fc.BACKENDS, "fit_backend", help="the profile played; device's: the device's own")
    if isinstance(model, str):
        return model
    device = by_label[label]
    w = Workload(prompt, max_tokens, prefill, max_kv or None, None if kv_bits == "none" else int(kv_bits))
    return fc.FitRequest(model[0], model[1], w, policy, device.backend if backend == fc.BACKEND_FROM_DEVICE else backend,
                         device)


# ---- output --------------------------------------------------------------------------------------
def _fetch(jobs: dict[Any, Any], label: str) -> tuple[dict[Any, Any], dict[Any, str], list[Any]]:
    with st.spinner(label):
        return session_runner().fetch(jobs)


def _chart(request: fc.FitRequest, a: fc.FitAnswer) -> alt.LayerChart:
    """The peak's parts stacked against the working set and MLX's memory limit, in GiB."""
    parts = pd.DataFrame([{"part": p, "GiB": round(n / GIB, 2), "size": fc.size(n), "order": i}
                          for i, (p, n) in enumerate(fc.breakdown(a))])
    d = request.device
    limits = pd.DataFrame([{"limit": "GPU working set", "GiB": round(d.working_set_bytes / GIB, 2),
                            "size": fc.size(d.working_set_bytes)},
                           {"limit": "MLX memory limit", "GiB": round(d.memory_limit_bytes / GIB, 2),
                            "size": fc.size(d.memory_limit_bytes)}])
    top = max(a.peak_bytes, d.memory_limit_bytes) / GIB * 1.06
    x = alt.X("sum(GiB):Q", title="GiB", scale=alt.Scale(domain=[0, top], nice=False))
    bar = alt.Chart(parts).mark_bar(height=44).encode(
        x=x, y=alt.Y("peak:N", title=None, axis=None),
        color=alt.Color("part:N", sort=list(parts["part"]), title=None,
                        scale=alt.Scale(domain=list(parts["part"]), range=list(PART_COLORS)),
                        legend=alt.Legend(orient="bottom")),
        order="order:Q", tooltip=["part", "size"],
    ).transform_calculate(peak="'peak'")
    rules = alt.Chart(limits).mark_rule(strokeWidth=2, strokeDash=[5, 3]).encode(
        x=alt.X("GiB:Q"), color=alt.value("#333"), tooltip=["limit", "size"])
    text = alt.Chart(limits).mark_text(align="left", dx=4, dy=-34, fontSize=12).encode(
        x="GiB:Q", text=alt.Text("label:N")).transform_calculate(label="datum.limit + ' ' + datum.size")
    return (bar + rules + text).properties(height=110)


def _verdict(request: fc.FitRequest, a: fc.FitAnswer) -> None:
    icon = ":material/check_circle:" if a.fits else ":material/cancel:"
    st.markdown(f"#### {icon} {fc.sentence(request, a)}")
    for line in fc.notices(request, a):
        st.warning(line, icon=":material/info:")
    st.altair_chart(_chart(request, a), width="stretch")
    parts = ", ".join(f"{p} {fc.size(n)}" for p, n in fc.breakdown(a))
    st.caption(f"Peak {fc.size(a.peak_bytes)} (mlx-lm's \"Peak memory\") in the {a.peak_phase} step at "
               f"{fc.tokens(a.peak_offset)} tokens: {parts}. KV at the end {fc.size(a.final_kv_bytes)}. "
               f"{request.backend} profile, {a.layers} layers. MLX's buffer cache (freed buffers kept for reuse) "
               "is not in the peak; mlx-lm clears it after each prefill chunk.")


def _search(request: fc.FitRequest, a: fc.FitAnswer) -> None:
    """The longest prompt per policy, and (when it does not fit) the settings that make it fit."""
    jobs: dict[Any, Any] = {("fit-context", request, p): (fc.longest_context, (request, p)) for p in fc.SEARCH_POLICIES}
    if not a.fits:
        jobs[("fit-fixes", request)] = (fc.fixes, (request,))
    done, failed, pending = _fetch(jobs, "searching")
    left, right = st.columns(2)
    with left:
        st.markdown(f"**Longest prompt that fits {fc.device_phrase(request.device)}** ({fc.tokens(request.workload.max_tokens)} generated)")
        rows = []
        for p in fc.SEARCH_POLICIES:
            key = ("fit-context", request, p)
            value = (fc.tokens(done[key]) + " tokens" if done[key] else "none") if key in done else failed.get(key, "searching...")
            rows.append({"policy": p, "longest prompt": value})
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    with right:
        if a.fits:
            st.markdown("**Settings**: it fits as asked.")
        else:
            st.markdown("**Settings that make it fit**")
            key = ("fit-fixes", request)
            if key in done:
                fits = [(f, p) for f, p, ok in done[key] if ok]
                if fits:
                    st.dataframe(pd.DataFrame([{"flags": f, "peak": fc.size(p)} for f, p in fits]),
                                 hide_index=True, width="stretch")
                else:
                    best = min(done[key], key=lambda t: t[1])
                    st.markdown(f"None of the tried settings fits; the lowest peak is {fc.size(best[1])} "
                                f"with `{best[0]}`. A smaller model or a larger device is needed.")
            else:
                st.caption(failed.get(key, "trying settings..."))
    if pending:
        st.progress(1 - len(pending) / len(jobs), text=f"searching: {len(jobs) - len(pending)}/{len(jobs)} done")


def render_fit(_inputs: Any = None) -> None:
    """The tab."""
    st.caption("Will this model, at this context, fit? A whole mlx-lm generation predicted from the model's "
               "config.json (no weights). This tab takes its own inputs; the sidebar drives the other tabs.")
    bad = _link_errors()
    for line in bad.values():
        st.error(line)
    request = inputs()
    if isinstance(request, str):
        st.info(request)
        return
    key = ("fit-answer", request)
    done, failed, _ = _fetch({key: (fc.answer, (request,))}, "predicting the generation")
    if key in failed:
        st.error(failed[key].split(": ", 1)[-1] if failed[key].startswith(("ModelConfigError", "KvsimError")) else failed[key])
        return
    if key not in done:
        st.progress(0.0, text="predicting the generation...")
        return
    _verdict(request, done[key])
    _search(request, done[key])
