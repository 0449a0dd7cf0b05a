"""Small Plotly figures shared by the pages."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go


def top_tokens_bar(tokens: Sequence[str], probs: Sequence[float], title: str = "Next-token probabilities") -> go.Figure:
    """Horizontal bar chart of token probabilities, highest on top; tokens shown with visible spaces."""
    labels = [repr(t)[1:-1].replace(" ", "␣") or "∅" for t in tokens]
    fig = go.Figure(go.Bar(
        x=list(probs)[::-1], y=[f"{i + 1}. {label}" for i, label in enumerate(labels)][::-1], orientation="h",
        text=[f"{p:.1%}" for p in probs][::-1], textposition="outside", cliponaxis=False, marker_color="#d6604d",
        hovertemplate="%{y}<br>p = %{x:.4f}<extra></extra>"))
    top = max(probs) if len(probs) else 1.0
    fig.update_layout(title=title, xaxis_title="probability", yaxis_title="token", height=60 + 32 * len(labels),
                      margin=dict(l=10, r=60, t=50, b=40), template="plotly_white",
                      xaxis=dict(range=[0, min(1.0, top * 1.08)], tickformat=".0%" if top >= 0.05 else ".1%"))
    return fig


def token_chips(tokens: Sequence[str]) -> str:
    """HTML showing a text's tokenisation as alternating chips (whitespace made visible)."""
    import html

    chips = []
    for i, token in enumerate(tokens):
        shown = html.escape(token).replace(" ", "␣").replace("\n", "↵")
        shade = "#e8eef7" if i % 2 == 0 else "#f7ece8"
        chips.append(f'<span title="token {i}" style="background:{shade};border-radius:4px;padding:1px 3px;'
                     f'margin:1px;display:inline-block;font-family:monospace">{shown}</span>')
    return '<div style="line-height:2">' + "".join(chips) + "</div>"
