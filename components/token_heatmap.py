"""The token heatmap widget: the library's coloured-token HTML (interpscope.figures.tokens) shown in the page."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from interpscope.figures.tokens import heatmap_html


def token_heatmap(tokens: Sequence[str], relevance: Sequence[float], excluded: Sequence[int] = (),
                  reasons: Mapping[int, str] | None = None) -> None:
    """Show the heatmap in the page."""
    import streamlit as st

    st.markdown(heatmap_html(tokens, relevance, excluded, reasons), unsafe_allow_html=True)
