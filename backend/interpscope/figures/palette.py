"""Colours shared by figures of more than one view, with no plotly import (a document module may read them)."""
from __future__ import annotations

# one colour per SAE architecture, in every SAE figure (the Pareto frontier, the synthetic ground truth)
ARCHITECTURE_COLOURS = {"relu": "#636efa", "gated": "#ef553b", "topk": "#00cc96", "jumprelu": "#ab63fa",
                        "batchtopk": "#ffa15a", "matryoshka": "#19d3f3", "transcoder": "#ff6692"}
