"""The attribution graph's figure, measured in the pixels it is drawn at (issue 45, item 11): a crowded last column
(19 features at the last position of a 30-layer model, beside the logit) is drawn with its nodes apart and clear of
the logit's star, and nothing is lost (a cell too crowded to draw whole folds its weakest nodes into one "+N more"
node whose click selects them); clicks find nodes and edges (their points carry ids)."""
from __future__ import annotations

import itertools
import math

import pytest

from interpscope.figures.draw import PLOT_PX
from interpscope.figures.graphs import graph_figure

N_LAYERS, N_TOKENS = 30, 7
APART_PX = 12.0  # two nodes closer than this (centre to centre) cannot be told apart or clicked apart
MORE = "more:"  # a "+N more" node's customdata: this, then the ids it stands for


def crowded_graph(n_last: int = 19) -> tuple[list[dict], list[dict]]:
    """Embeddings, a few features spread out, `n_last` features at the last position in the top two layers (as
    SmolLM2's "The capital of France is" graph has them), an error node there, the logit."""
    nodes = [{"id": f"E_{p}", "kind": "embedding", "layer": -1, "position": p, "influence": 0.1}
             for p in range(N_TOKENS)]
    nodes += [{"id": f"F{layer}_{k}_{p}", "kind": "feature", "layer": layer, "position": p, "feature": k,
               "influence": 0.05} for k, (layer, p) in enumerate([(3, 1), (10, 2), (20, 4)])]
    last = N_TOKENS - 1
    nodes += [{"id": f"F{29 - k % 2}_{100 + k}_{last}", "kind": "feature", "layer": 29 - k % 2, "position": last,
               "feature": 100 + k, "influence": 1.0 / (k + 1)} for k in range(n_last)]
    nodes += [{"id": f"R29_{last}", "kind": "error", "layer": 29, "position": last, "influence": 0.2},
              {"id": "L_42", "kind": "logit", "layer": N_LAYERS, "position": last, "token": " Paris", "feature": 42,
               "influence": 1.0}]
    features = [n["id"] for n in nodes if n["kind"] == "feature"]
    edges = [{"source": f, "target": "L_42", "weight": (-1) ** i * (i + 1) / 10} for i, f in enumerate(features)]
    return nodes, edges


def pixels(fig) -> list[tuple[str, float, float, float]]:
    """(customdata, x px, y px, marker diameter px) of every drawn node, for a plot PLOT_PX wide."""
    layout = fig.layout
    x0, x1 = layout.xaxis.range
    y0, y1 = layout.yaxis.range
    width = PLOT_PX * 0.92
    height = layout.height - layout.margin.t - layout.margin.b
    out = []
    for trace in fig.data:
        if trace.mode is None or "markers" not in trace.mode or trace.name in ("edges",) or trace.x[0] is None:
            continue
        sizes = trace.marker.size if isinstance(trace.marker.size, (list, tuple)) else [trace.marker.size] * len(
            trace.x)
        for data, x, y, size in zip(trace.customdata, trace.x, trace.y, sizes, strict=True):
            out.append((data, (x - x0) / (x1 - x0) * width, (y1 - y) / (y1 - y0) * height, float(size)))
    return out


@pytest.mark.parametrize("n_last", [19, 40])  # 40: more than the cells hold, so some fold into "+N more"
def test_a_crowded_last_column_is_drawn_apart_and_clear_of_the_logit(n_last):
    nodes, edges = crowded_graph(n_last)
    fig = graph_figure(nodes, edges, [f"t{i}" for i in range(N_TOKENS)], N_LAYERS, "crowded")
    drawn = pixels(fig)
    star = next(p for p in drawn if p[0] == "L_42")
    others = [p for p in drawn if p[0] != "L_42"]
    for data, x, y, size in others:  # no marker under the star
        assert math.dist((x, y), star[1:3]) >= (size + star[3]) / 2, (data, math.dist((x, y), star[1:3]))
    for a, b in itertools.combinations(others, 2):  # every node its own spot: apart by the grid's spacing
        assert math.dist(a[1:3], b[1:3]) >= APART_PX - 0.01, (a[0], b[0])
    shown = {d for d, *_ in drawn if not d.startswith(MORE)}
    folded = [i for d, *_ in drawn if d.startswith(MORE) for i in d[len(MORE):].split(",")]
    assert sorted([*shown, *folded]) == sorted(n["id"] for n in nodes)  # nothing lost, nothing twice
    assert bool(folded) == (n_last == 40)
    if folded:  # the weakest are folded: every shown feature of that cell outranks every folded one
        influence = {n["id"]: n["influence"] for n in nodes}
        cell = [i for i in shown if i.endswith(f"_{N_TOKENS - 1}") and i.startswith("F29")]
        assert min(influence[i] for i in cell) >= max(influence[i] for i in folded if i.startswith("F29"))


def test_every_edge_can_be_clicked_and_the_edge_colours_are_in_the_legend():
    nodes, edges = crowded_graph(4)
    fig = graph_figure(nodes, edges, [f"t{i}" for i in range(N_TOKENS)], N_LAYERS, "small")
    points = next(t for t in fig.data if t.name == "edges")
    assert {tuple(d) for d in points.customdata} == {(e["source"], e["target"]) for e in edges}
    legend = [t.name for t in fig.data if t.showlegend]
    assert "edge +: raises its target" in legend and "edge −: lowers its target" in legend
    assert fig.layout.dragmode != "select"  # Streamlit turns clicks off (clickmode "event") under select
