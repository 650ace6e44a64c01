"""kvsim dashboard: ``streamlit run app.py``. Thin: widgets and views live in kvsim.dashboard."""

import streamlit as st

from kvsim.dashboard.inputs import sidebar
from kvsim.dashboard.pages import render

st.set_page_config(page_title="kvsim: KV-cache memory explorer", layout="wide", initial_sidebar_state=440)
st.subheader("kvsim: KV-cache memory explorer", anchor=False)
render(sidebar())
