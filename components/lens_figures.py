"""The tuned lens beside the logit lens: KL from the final layer's distribution per lens step, on the user's text and
(dotted) on the held-out text the lens was checked on."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

RED, BLUE = "#d6604d", "#4393c3"


def kl_figure(steps: Sequence[str], kl_logit: np.ndarray, kl_tuned: np.ndarray, heldout_logit: Sequence[float] = (),
              heldout_tuned: Sequence[float] = ()) -> go.Figure:
    """Per-step KL(final || lens) in nats, log scale (the last step is 0: the lens is the model's output there)."""
    x = list(steps)
    shown = slice(0, len(x) - 1)  # the last step's KL is 0 by construction: off a log axis
    fig = go.Figure([
        go.Scatter(x=x[shown], y=np.asarray(kl_logit)[shown], name="logit lens (this text)", mode="lines+markers",
                   line=dict(color=BLUE)),
        go.Scatter(x=x[shown], y=np.asarray(kl_tuned)[shown], name="tuned lens (this text)", mode="lines+markers",
                   line=dict(color=RED))])
    if len(heldout_logit) == len(x) and len(heldout_tuned) == len(x):
        fig.add_trace(go.Scatter(x=x[shown], y=list(heldout_logit)[shown], name="logit lens (held-out corpus)",
                                 mode="lines", line=dict(color=BLUE, dash="dot")))
        fig.add_trace(go.Scatter(x=x[shown], y=list(heldout_tuned)[shown], name="tuned lens (held-out corpus)",
                                 mode="lines", line=dict(color=RED, dash="dot")))
    fig.update_layout(title="KL from the final distribution, per layer (lower: closer to the model's prediction)",
                      template="plotly_white", height=360, yaxis=dict(title="KL (nats)", type="log"),
                      xaxis=dict(title="read after", tickangle=-45), margin=dict(l=60, r=20, t=60, b=80),
                      legend=dict(orientation="h", y=1.1, x=0))
    return fig
