"""The relevance readout in the page: value, split bar and sentence (built by interpscope.figures.relevance.readout)."""
from __future__ import annotations

from interpscope.figures.relevance.readout import readout, readout_figure


def show_readout(result, key: str) -> None:
    """The readout in the page: value, split bar, sentence; the error small beside it."""
    import streamlit as st

    data = readout(result)
    st.markdown(f"**{data.value_label}:** {data.value:.4g}")
    if len(data.parts) > 1:
        st.plotly_chart(readout_figure(data), key=f"readout-{key}", config={"displayModeBar": False})
    st.caption(data.sentence)
