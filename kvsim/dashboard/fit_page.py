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
PART_COLORS = ("#4c78a8", "#f58518", "#e45756", "#b8b8b8")
CHART_PX, BAR_PX = 70, 40  # the limits' rules span the chart's height


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
def _chart(request: fc.FitRequest, a: fc.FitAnswer) -> alt.LayerChart:
    """The peak's parts and the buffer cache above it, stacked against the working set and MLX's memory limit,
    in GiB."""
    parts = pd.DataFrame([{"part": p, "GiB": round(n / GIB, 2), "size": fc.size(n), "order": i}
                          for i, (p, n) in enumerate(fc.breakdown(a))])
    d = request.device
    limits = pd.DataFrame([{"limit": "GPU working set", "GiB": round(d.working_set_bytes / GIB, 2),
                            "size": fc.size(d.working_set_bytes)},
                           {"limit": "MLX memory limit", "GiB": round(d.memory_limit_bytes / GIB, 2),
                            "size": fc.size(d.memory_limit_bytes)}])
    top = max(a.peak_bytes + a.cache_bytes, d.memory_limit_bytes) / GIB * 1.06
    x = alt.X("sum(GiB):Q", title="GiB", scale=alt.Scale(domain=[0, top], nice=False))
    bar = alt.Chart(parts).mark_bar(size=BAR_PX).encode(
        x=x, y=alt.Y("row:N", title=None, axis=None),
        color=alt.Color("part:N", sort=list(parts["part"]), title=None,
                        scale=alt.Scale(domain=list(parts["part"]), range=list(PART_COLORS)),
                        legend=alt.Legend(orient="bottom", labelLimit=0)),
        order="order:Q", tooltip=["part", "size"],
    ).transform_calculate(row="'peak'")
    rules = alt.Chart(limits).mark_rule(color="#222", strokeWidth=2).encode(
        x=alt.X("GiB:Q"), y=alt.value(0), y2=alt.value(CHART_PX), tooltip=["limit", "size"],
        strokeDash=alt.StrokeDash("label:N", title=None, scale=alt.Scale(range=[[6, 3], [2, 2]]),
                                  legend=alt.Legend(orient="bottom", labelLimit=0)),
    ).transform_calculate(label="datum.limit + ' ' + datum.size")
    return alt.layer(bar, rules).properties(height=CHART_PX).resolve_legend(strokeDash="independent")


def _verdict(request: fc.FitRequest, a: fc.FitAnswer) -> None:
    icon = ":material/check_circle:" if a.fits else ":material/cancel:"
    st.markdown(f"#### {icon} {fc.sentence(request, a)}")
    if resident := fc.resident_sentence(request, a):
        st.markdown(resident)
    for line in fc.notices(request, a):
        st.warning(line, icon=":material/info:")
    st.altair_chart(_chart(request, a), width="stretch", height=CHART_PX + 90)  # room for axis and legends
    *peak_parts, (cache_part, cache_n) = fc.breakdown(a)
    parts = ", ".join(f"{p} {fc.size(n)}" for p, n in peak_parts)
    spread = (f" Runs peak from {fc.size(a.low_bytes)} to {fc.size(a.high_bytes)}: the GPU frees asynchronously."
              if a.high_bytes else "")
    st.caption(f"Peak {fc.size(a.peak_bytes)} (mlx-lm's \"Peak memory\") in the {a.peak_phase} step at "
               f"{fc.tokens(a.peak_offset)} tokens: {parts}.{spread} KV at the end {fc.size(a.final_kv_bytes)}. "
               f"{request.backend} profile, {a.layers} layers. The {cache_part} segment, {fc.size(cache_n)}, is "
               "what MLX's freed buffers kept for reuse add above the peak at most (not in the peak; mlx-lm "
               "clears them after each prefill chunk and every 256 generated tokens).")


def _longest(request: fc.FitRequest, a: fc.FitAnswer, policy: str, runner: Any) -> tuple[str, bool]:
    """(what the search found so far, whether it is still probing): one prediction per probe, each a job
    kept by its inputs, so a page run picks the search up where the last one left it."""
    known: dict[int, int] = {}
    if policy == request.policy and request.workload.prompt_tokens % fc.STEP_TOKENS == 0:
        known[request.workload.prompt_tokens] = a.peak_bytes
    limit, per_token = request.device.working_set_bytes, a.kv_bytes / max(a.peak_offset, 1)
    while (n := fc.next_probe(request.workload.prompt_tokens, known, limit, per_token)) is not None:
        probe = fc.at_prompt(request, n, policy)
        done, failed, _ = runner.fetch({("fit-peak", probe): (fc.peak, (probe,))})
        if failed:
            return next(iter(failed.values())), False
        if not done:
            return f"searching ({len(known)} predicted)...", True
        known[n] = next(iter(done.values()))
    best = fc.longest(known, limit)
    if best >= fc.SEARCH_LIMIT_TOKENS:
        return f"{fc.tokens(best)} tokens or more", False
    return (f"{fc.tokens(best)} tokens" if best else "none"), False


def _fixes(request: fc.FitRequest, runner: Any) -> int:
    """The settings that make it fit, each one prediction."""
    config = fc.model_config(request)
    jobs = {("fit-fix", request, label): (fc.fix_peak, (request, label)) for label in fc.fix_labels(request, config)}
    done, failed, pending = runner.fetch(jobs)
    limit = request.device.working_set_bytes
    rows = sorted(((k[2], p) for k, p in done.items()), key=lambda t: t[1])
    fits = [{"flags": f, "peak": fc.size(p)} for f, p in rows if p <= limit]
    if fits:
        st.dataframe(pd.DataFrame(fits), hide_index=True, width="stretch",
                     column_config={"flags": st.column_config.TextColumn(width="large")})
    elif not pending and rows:
        st.markdown(f"None of the {len(rows)} settings tried fits; the lowest peak is {fc.size(rows[0][1])} "
                    f"with `{rows[0][0]}`. A smaller model or a larger device is needed.")
    for key, line in failed.items():
        st.caption(f"{key[2]}: {line}")
    if pending:
        st.caption(f"trying settings: {len(done) + len(failed)}/{len(jobs)} predicted...")
    return len(pending)


def _search(request: fc.FitRequest, a: fc.FitAnswer) -> None:
    """The longest prompt per policy and, when it does not fit, the settings that make it fit."""
    runner = session_runner()
    left, right = st.columns(2)
    pending = 0
    with right:
        if a.fits:
            st.markdown("**Settings**: it fits as asked.")
        else:
            st.markdown("**Settings that make it fit**")
            pending += _fixes(request, runner)
    with left:
        st.markdown(f"**Longest prompt that fits {fc.device_phrase(request.device)}** "
                    f"({fc.tokens(request.workload.max_tokens)} generated)")
        policies = dict.fromkeys((request.policy, *fc.SEARCH_POLICIES))
        found = {p: _longest(request, a, p, runner) for p in policies}
        st.dataframe(pd.DataFrame([{"policy": p, "longest prompt": v[0]} for p, v in found.items()]),
                     hide_index=True, width="stretch")
    pending += sum(v[1] for v in found.values())
    if pending:  # the page reruns as predictions finish (kvsim.dashboard.pages._refresh)
        st.progress(0.5, text=f"predicting: {pending} searches and settings still running")


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
    with st.spinner("predicting the generation"):
        done, failed, _ = session_runner().fetch({key: (fc.answer, (request,))})
    if key in failed:
        st.error(failed[key].split(": ", 1)[-1] if failed[key].startswith(("ModelConfigError", "KvsimError")) else failed[key])
        return
    if key not in done:
        st.progress(0.0, text="predicting the generation...")
        return
    _verdict(request, done[key])
    _search(request, done[key])
