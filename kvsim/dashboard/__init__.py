"""The Streamlit dashboard (``streamlit run app.py``): inputs, views, and pure Altair builders."""
