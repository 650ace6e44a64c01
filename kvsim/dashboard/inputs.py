"""The sidebar: each section is a function returning plain values; ``sidebar()`` builds :class:`Inputs`.

Plain widgets bind to the URL (``bind="query-params"``; the key is the parameter name);
the layer table travels as the ``layers`` parameter (see :mod:`kvsim.dashboard.state`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from kvsim.dashboard import layers as layer_table
from kvsim.dashboard.config import DEFAULT_POLICIES, DEFAULT_WORKLOAD, Inputs, make_inputs
from kvsim.dashboard.devices import DEVICE_NAMES, GIB, LIMIT_BASES, device_limit_bytes
from kvsim.dashboard.params import PARAMS, parse_cap
from kvsim.dashboard.state import LAYERS_PARAM, decode_layers, encode_layers, sync_param
from kvsim.scenario.parse import BACKENDS, CONSUMERS, MAX_TOKENS
from kvsim.scenario.presets import PRESET_NAMES, load_preset

Q = "query-params"
DEFAULT_ROWS = layer_table.default_rows()
NO_LIMIT, CUSTOM_LIMIT = "none", "custom"


def _init_layer_state() -> None:
    """First run of a session: the layer table comes from the URL, else the default."""
    if "layers_rows" in st.session_state:
        return
    st.session_state.layers_version = 0
    st.session_state.layers_rows = DEFAULT_ROWS
    text = st.query_params.get(LAYERS_PARAM)
    if text:
        try:
            st.session_state.layers_rows = decode_layers(text)
        except ValueError as err:
            st.session_state.layers_url_error = str(err)


def _set_rows(rows: list[dict[str, Any]]) -> None:
    st.session_state.layers_rows = rows
    st.session_state.layers_version += 1  # a fresh editor, without the old edits


def _apply_pattern() -> None:
    _set_rows(layer_table.apply_pattern(st.session_state.layers_current, st.session_state.pattern))


def _copy_preset() -> None:
    _set_rows(layer_table.rows_from_model(load_preset(st.session_state.preset)))
    st.session_state.source = "custom"


def model_section() -> tuple[dict[str, Any] | None, list[dict[str, Any]], str | None]:
    """The model object, its layers (contract form) and an error, if any."""
    st.sidebar.subheader("Model")
    _init_layer_state()
    sources = ("preset", "custom") if PRESET_NAMES else ("custom",)
    source = st.sidebar.radio("model source", sources, key="source", horizontal=True, bind=Q)
    if source == "preset":
        name = st.sidebar.selectbox("preset", PRESET_NAMES, key="preset", bind=Q)
        model = load_preset(name)
        first = model.notes.split(". ")[0].rstrip(".")
        st.sidebar.caption(f"{model.n_layers} KV layers. {first}." if first else f"{model.n_layers} KV layers.")
        with st.sidebar.expander("preset notes and source"):
            st.caption(f"{model.notes}\n\nSource: {model.source}")
        st.sidebar.button("edit as custom table", on_click=_copy_preset)
        return {"preset": name}, layer_table.contract_layers(model), None
    if "layers_url_error" in st.session_state:
        st.sidebar.warning(f"URL {st.session_state.pop('layers_url_error')}; using the default table")
    col1, col2 = st.sidebar.columns([3, 1], vertical_alignment="bottom")
    col1.selectbox("quick pattern", layer_table.PATTERNS, key="pattern")
    col2.button("apply", on_click=_apply_pattern)
    edited = st.sidebar.data_editor(
        pd.DataFrame(st.session_state.layers_rows, columns=list(layer_table.COLUMNS)),
        key=f"layers_editor_{st.session_state.layers_version}",
        num_rows="dynamic",
        hide_index=True,
        column_config={
            "kv_heads": st.column_config.NumberColumn("heads", min_value=1, step=1, width=62),
            "head_dim": st.column_config.NumberColumn("dims", min_value=1, step=1, width=62),
            "dtype": st.column_config.SelectboxColumn("dtype", options=["float16", "bfloat16", "float32"], width=84),
            "ratio": st.column_config.NumberColumn("ratio", min_value=1, step=1, width=62),
            "window_rows": st.column_config.NumberColumn("window", min_value=1, step=1, width=62),
        },
    )
    rows = edited.to_dict("records")
    st.session_state.layers_current = rows
    try:
        layers = layer_table.table_to_layers(rows)
    except ValueError as err:
        return None, [], str(err)
    sync_param(st.query_params, LAYERS_PARAM, encode_layers(rows), encode_layers(DEFAULT_ROWS))
    return {"layers": layers}, layers, None


def workload_section() -> tuple[dict[str, int], str, str]:
    """The workload object, the backend profile and the consumer."""
    st.sidebar.subheader("Workload")
    col1, col2 = st.sidebar.columns(2)
    workload = {
        "prompt_tokens": col1.number_input("prompt tokens", 1, MAX_TOKENS, DEFAULT_WORKLOAD["prompt_tokens"], key="prompt", bind=Q),
        "prefill_chunk": col2.number_input("prefill chunk", 1, MAX_TOKENS, DEFAULT_WORKLOAD["prefill_chunk"], key="chunk", bind=Q),
        "decode_tokens": col1.number_input("decode tokens", 0, MAX_TOKENS, DEFAULT_WORKLOAD["decode_tokens"], key="decode", bind=Q),
        "batch": col2.number_input("batch", 1, 4096, DEFAULT_WORKLOAD["batch"], key="batch", bind=Q),
    }
    backend = st.sidebar.selectbox("backend profile", BACKENDS, key="backend", bind=Q)
    consumer = st.sidebar.selectbox("consumer", CONSUMERS, key="consumer", bind=Q)
    return {k: int(v) for k, v in workload.items()}, backend, consumer


def _policy_params(name: str) -> tuple[dict[str, Any], str | None]:
    policy: dict[str, Any] = {"name": name}
    for param in PARAMS[name]:
        key, label = f"{name}.{param.field}", param.field.replace("_", " ")
        if param.kind == "int":
            policy[param.field] = int(st.number_input(label, 0, 1 << 28, param.default, key=key, bind=Q))
        elif param.kind == "float":
            policy[param.field] = float(st.number_input(label, 1.0, 16.0, param.default, 0.25, key=key, bind=Q))
        elif param.kind == "choice":
            policy[param.field] = st.selectbox(label, param.choices, param.choices.index(param.default), key=key, bind=Q)
        else:
            text = st.text_input(f"{label} (rows, 'context' or blank)", param.default, key=key, bind=Q)
            try:
                cap = parse_cap(text, f"{name} {param.field}")
            except ValueError as err:
                return policy, str(err)
            if cap is not None:
                policy[param.field] = cap
    return policy, None


def policies_section() -> tuple[list[dict[str, Any]], list[str]]:
    """The compared policies (contract objects) and input errors."""
    st.sidebar.subheader("Policies")
    names = st.sidebar.multiselect("compare", list(PARAMS), list(DEFAULT_POLICIES), key="policies", bind=Q)
    policies, errors = [], []
    for name in names:
        if not PARAMS[name]:
            policies.append({"name": name})
            continue
        with st.sidebar.expander(f"{name} parameters", expanded=False):
            policy, error = _policy_params(name)
        policies.append(policy)
        if error:
            errors.append(error)
    return policies, errors


def limit_section() -> tuple[int | None, int]:
    """The memory limit (bytes or ``None``) and the weights' size in bytes."""
    st.sidebar.subheader("Memory limit")
    device = st.sidebar.selectbox("device", (NO_LIMIT, *DEVICE_NAMES, CUSTOM_LIMIT), key="device", bind=Q)
    limit: int | None = None
    if device == CUSTOM_LIMIT:
        limit = int(st.sidebar.number_input("limit (GiB)", 0.1, 1e5, 64.0, key="limit_gib", bind=Q) * GIB)
    elif device != NO_LIMIT:
        basis = st.sidebar.radio("limit basis", LIMIT_BASES, key="limit_basis", horizontal=True, bind=Q)
        limit = device_limit_bytes(device, basis)
        st.sidebar.caption(f"{limit / GIB:,.1f} GiB ({basis}); see docs/dashboard.md for the sources")
    weights = st.sidebar.number_input("model weights (GiB)", 0.0, 1e5, 0.0, key="weights_gib", bind=Q)
    return limit, int(weights * GIB)


def sidebar() -> Inputs:
    """Draw the sidebar and return the user's choices."""
    model, layers, model_error = model_section()
    workload, backend, consumer = workload_section()
    policies, errors = policies_section()
    limit, weights = limit_section()
    if model_error:
        errors.insert(0, model_error)
    base = {"backend": backend, "model": model, "workload": workload, "consumer": consumer}
    return make_inputs(base, policies, layers, limit, weights, tuple(errors))
