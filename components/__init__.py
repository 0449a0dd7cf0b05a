"""Reusable Streamlit + Plotly views. They take plain data (numpy arrays, result dataclasses) and never run models."""
