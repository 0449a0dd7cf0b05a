"""Figures of the attribution-graph page: the graph itself (positions across, layers up), the ablation check's
predicted-vs-actual scatter, and an intervention's predicted beside actual change. Plain data in, no models run.

The graph is laid out for its pixels: the figure grows with the layers, the logit row sits a layer above the last
one, nodes sharing a layer and position spread over a grid at least MIN_DX_PX x MIN_DY_PX apart, and a cell with
more nodes than fit is drawn with its strongest ones and one "+N more" node (a click on it selects them all)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from interpscope.figures.draw import BLUE, PLOT_PX, RED, token_axis

STYLE = {  # kind -> (marker symbol, colour)
    "embedding": ("diamond", "#444444"),
    "feature": ("circle", "#e6781e"),
    "error": ("square-open", "#888888"),
    "logit": ("star", "black"),
    "group": ("hexagon", "#8c510a"),
    "more": ("circle-open", "#555555"),
}
WIDTH_BINS = 5  # edges are drawn in this many width classes per sign (one trace each: fast with hundreds of edges)
LOGIT_GAP = 1.0  # the logit row's distance above the last layer (the star never sits on a last-layer feature)
MIN_DX_PX, MIN_DY_PX = 16.0, 12.0  # the closest two nodes of one cell are drawn (centre to centre)
MORE = "more:"  # customdata of a "+N more" node: MORE + the ids it stands for, comma-separated
EDGE_POINTS = (0.3, 0.5, 0.7)  # where along an edge a click (or hover) finds it
MARGIN = dict(l=60, r=20, t=60, b=100)


def graph_height(n_layers: int) -> int:
    """The figure's height: 26 px per layer of the y axis (30 layers: 1036 px), never under 480."""
    return max(480, int(MARGIN["t"] + MARGIN["b"] + 26 * (n_layers + 3.7)))


def _node_label(node: Mapping[str, Any]) -> str:
    kind = node.get("kind")
    if kind == "feature":
        return f"L{node['layer']}#{node['feature']}"
    if kind == "error":
        return f"err L{node['layer']}"
    if kind == "logit":
        share = f" p {node['probability']:.2f}" if node.get("probability") is not None else ""
        return f"logit {node.get('token', '')!r}{share}"
    if kind == "group":
        return str(node.get("label", node["id"]))
    if kind == "more":
        return f"+{len(node['members'])}"
    return ""


def merge_groups(nodes: Sequence[Mapping[str, Any]], groups: Sequence[Any]) -> list[dict[str, Any]]:
    """The node list with each group's members replaced by one node of kind 'group' (at their mean position and
    layer; influence and activation summed)."""
    owner = {m: g for g in groups for m in g.members}
    by_id = {str(n["id"]): n for n in nodes}
    out = [dict(n) for n in nodes if str(n["id"]) not in owner]
    for group in groups:
        members = [by_id[m] for m in group.members if m in by_id]
        if not members:
            continue
        out.append({"id": group.id, "kind": "group", "label": group.label,
                    "layer": float(np.mean([m["layer"] for m in members])),
                    "position": float(np.mean([m["position"] for m in members])),
                    "influence": float(sum(abs(m.get("influence") or 0.0) for m in members)),
                    "members": list(group.members), "token": members[-1].get("token", "")})
    return out


def layout(nodes: Sequence[Mapping[str, Any]], n_layers: int, n_tokens: int | None = None,
           height: int | None = None) -> dict[str, tuple[float, float]]:
    """x = token position, y = layer (embeddings -1, logits LOGIT_GAP above the last layer); nodes sharing a layer
    and position spread over a grid (within ±0.4 position and ±0.25 layer at most), every two nodes at least
    MIN_DX_PX across or MIN_DY_PX up apart in a figure of `height` (graph_height by default) PLOT_PX wide. A node
    folded into a "+N more" node (see arrange) is placed where that node is."""
    return arrange(nodes, n_layers, n_tokens, height)[0]


def logit_row(n_layers: int) -> float:
    return float(n_layers) + LOGIT_GAP


def arrange(nodes: Sequence[Mapping[str, Any]], n_layers: int, n_tokens: int | None = None,
            height: int | None = None) -> tuple[dict[str, tuple[float, float]], list[dict[str, Any]]]:
    """Positions of every node (see layout), and the "+N more" nodes of cells too crowded to draw whole: such a cell
    shows its error node and its most influential features, and one node of kind "more" (id MORE + cell, members:
    the folded ids) in its last slot."""
    if n_tokens is None:
        n_tokens = int(max([float(n["position"]) for n in nodes] or [0.0])) + 1
    height = height or graph_height(n_layers)
    many_logits = sum(n.get("kind") == "logit" for n in nodes) > 1
    span_y = logit_row(n_layers) + (1.8 if many_logits else 0.9) + 1.8
    layer_px = (height - MARGIN["t"] - MARGIN["b"]) / span_y
    column_px = PLOT_PX * 0.92 / (n_tokens + 0.4)
    # a cell's grid spans ±spread_x position and ±spread_y layer, leaving neighbouring cells' grids a gap of at
    # least MIN_DX_PX / MIN_DY_PX
    spread_x = max(0.0, min(0.4, 0.5 - MIN_DX_PX / (2 * column_px)))
    spread_y = max(0.0, min(0.25, 0.5 - MIN_DY_PX / (2 * layer_px)))
    most_across = int(2 * spread_x * column_px // MIN_DX_PX) + 1
    most_rows = int(2 * spread_y * layer_px // MIN_DY_PX) + 1
    cells: dict[tuple[float, float], list[str]] = defaultdict(list)
    influence = {str(n["id"]): abs(n.get("influence") or 0.0) for n in nodes}
    # a cell's order: its error node, its sinks (never ranked, so never folded away), then the most influential
    for node in sorted(nodes, key=lambda n: (n.get("kind") != "error", not n.get("sink"), str(n.get("kind")),
                                             -abs(n.get("influence") or 0.0), str(n["id"]))):
        kind = node.get("kind")
        y = -1.0 if kind == "embedding" else logit_row(n_layers) if kind == "logit" else float(node["layer"])
        cells[(float(node["position"]), y)].append(str(node["id"]))
    placed = {}
    logits = [n for n in nodes if n.get("kind") == "logit"]
    if len(logits) > 1:  # top logits: one row above the last layer, the target at its position, the rest leftwards
        logits.sort(key=lambda n: (not n.get("target", False), -abs(n.get("influence") or 0.0), str(n["id"])))
        last = max(float(n["position"]) for n in logits)
        step = min(1.0, (last + 0.6) / len(logits))  # within the token axis, however short the prompt
        for k, node in enumerate(logits):
            placed[str(node["id"])] = (float(node["position"]) - k * step, logit_row(n_layers))
        cells = {cell: ids for cell, ids in cells.items() if not any(i in placed for i in ids)}
    folds: list[dict[str, Any]] = []
    for (x, y), ids in cells.items():
        room = most_across * most_rows
        shown, folded = (ids, []) if len(ids) <= room else (ids[:room - 1], ids[room - 1:])
        slots = len(shown) + bool(folded)
        across = min(slots, most_across)  # a crowded cell becomes a grid
        rows = -(-slots // across)
        xs = np.linspace(-spread_x, spread_x, across) if across > 1 else [0.0]
        ys = np.linspace(-spread_y, spread_y, rows) if rows > 1 else [0.0]
        spots = [(x + float(xs[k % across]), y + float(ys[k // across])) for k in range(slots)]
        for node_id, spot in zip(shown, spots, strict=False):
            placed[node_id] = spot
        if folded:
            more = {"id": f"{MORE}{x:g}:{y:g}", "kind": "more", "members": folded, "position": x,
                    "layer": y, "influence": sum(influence[i] for i in folded)}
            folds.append(more)
            for node_id in folded:
                placed[node_id] = spots[-1]
            placed[more["id"]] = spots[-1]
    return placed, folds


def _edge_traces(edges: Sequence[Mapping[str, Any]], placed: Mapping[str, tuple[float, float]],
                 width: float) -> list[go.Scatter]:
    shown = [e for e in edges if str(e["source"]) in placed and str(e["target"]) in placed]
    biggest = max([abs(float(e["weight"])) for e in shown] or [1.0]) or 1.0
    buckets: dict[tuple[bool, int], list[Mapping[str, Any]]] = defaultdict(list)
    for edge in shown:
        strength = abs(float(edge["weight"])) / biggest
        buckets[(float(edge["weight"]) >= 0, min(WIDTH_BINS - 1, int(strength * WIDTH_BINS)))].append(edge)
    traces = [go.Scatter(x=[None], y=[None], mode="lines", name=name, legendgroup=group, showlegend=True,
                         line=dict(width=3, color=colour), hoverinfo="skip")  # the edge colours' legend
              for name, group, colour in (("edge +: raises its target", "edges+", RED),
                                          ("edge −: lowers its target", "edges-", BLUE))
              if any((float(e["weight"]) >= 0) == (group == "edges+") for e in shown)]
    for (positive, level), group in sorted(buckets.items(), key=lambda kv: kv[0][1]):
        xs: list[float | None] = []
        ys: list[float | None] = []
        for edge in group:
            (x0, y0), (x1, y1) = placed[str(edge["source"])], placed[str(edge["target"])]
            xs += [x0, x1, None]
            ys += [y0, y1, None]
        traces.append(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                 legendgroup="edges+" if positive else "edges-",
                                 opacity=0.25 + 0.5 * (level + 1) / WIDTH_BINS,
                                 line=dict(width=0.5 + width * (level + 1) / WIDTH_BINS,
                                           color=RED if positive else BLUE)))
    return traces


def _edge_targets(edges: Sequence[Mapping[str, Any]], placed: Mapping[str, tuple[float, float]]) -> go.Scatter:
    """Invisible points along every edge (strongest first), each carrying [source, target]: a line itself is never
    hovered or clicked in plotly, these are."""
    shown = sorted((e for e in edges if str(e["source"]) in placed and str(e["target"]) in placed),
                   key=lambda e: -abs(float(e["weight"])))
    xs, ys, data, hover = [], [], [], []
    for edge in shown:
        (x0, y0), (x1, y1) = placed[str(edge["source"])], placed[str(edge["target"])]
        for t in EDGE_POINTS:
            xs.append(x0 + t * (x1 - x0))
            ys.append(y0 + t * (y1 - y0))
            data.append([str(edge["source"]), str(edge["target"])])
            hover.append(f"edge {edge['source']} → {edge['target']}: direct effect {float(edge['weight']):+.4g}")
    return go.Scatter(x=xs, y=ys, mode="markers", name="edges", showlegend=False, customdata=data, hovertext=hover,
                      hoverinfo="text", marker=dict(size=8, color="rgba(0,0,0,0)", opacity=0),
                      selected=dict(marker=dict(opacity=0)), unselected=dict(marker=dict(opacity=0)))


def graph_figure(nodes: Sequence[Mapping[str, Any]], edges: Sequence[Mapping[str, Any]], tokens: Sequence[str],
                 n_layers: int, title: str, selected: Sequence[str] = (), height: int | None = None) -> go.Figure:
    """The attribution graph: tokens across, layers up; marker size ~ |influence| (sinks never set the scale),
    edge width ~ |weight| (red positive, blue negative, both in the legend), error nodes as open squares, sinks
    named; `selected` nodes outlined in green (an export passes none). Each node point carries its id in customdata
    (a "+N more" node: MORE + its ids), and points along each edge carry [source, target], so a click or a box
    selection returns what it hit. Drag zooms (double-click resets); the toolbar's box select selects several."""
    height = height or graph_height(n_layers)
    placed, folds = arrange(nodes, n_layers, len(tokens), height)
    folded = {i for more in folds for i in more["members"]}
    nodes = [*(n for n in nodes if str(n["id"]) not in folded), *folds]
    fig = go.Figure()
    for trace in _edge_traces(edges, placed, width=6.0):
        fig.add_trace(trace)
    fig.add_trace(_edge_targets(edges, placed))
    scale = max([abs(n.get("influence") or 0.0) for n in nodes
                 if not n.get("sink") and n.get("kind") not in ("logit", "more")] or [1.0]) or 1.0
    chosen = set(selected) | {str(m["id"]) for m in folds if set(m["members"]) & set(selected)}
    for kind, (symbol, colour) in STYLE.items():
        members = [n for n in nodes if n.get("kind") == kind]
        if not members:
            continue
        sizes = [(12 + 10 * min(1.0, abs(n.get("influence") or 0.0)) if n.get("probability") is not None else 22.0)
                 if kind == "logit" else 16.0 if kind == "more" else
                 7 + 17 * min(1.0, abs(n.get("influence") or 0.0) / scale) for n in members]
        hover = []
        for n in members:
            if kind == "more":
                names = ", ".join(n["members"][:8]) + (" …" if len(n["members"]) > 8 else "")
                hover.append(f"{len(n['members'])} more nodes at layer {n['layer']:g}, position {n['position']:g} "
                             f"(the cell's weakest; their edges end here): {names}. Click to select them all.")
                continue
            sink = " · attention SINK (never ranked; size not scaled by it)" if n.get("sink") else ""
            act = f" · activation {n['activation']:.4g}" if n.get("activation") is not None else ""
            inf = f" · influence {n['influence']:.3g}" if n.get("influence") is not None else ""
            hover.append(f"{n['id']} · {kind} at {n.get('position')} ({n.get('token', '')!r}){act}{inf}{sink}")
        fig.add_trace(go.Scatter(
            x=[placed[str(n["id"])][0] for n in members], y=[placed[str(n["id"])][1] for n in members],
            mode="markers+text" if kind in ("logit", "group", "more") else "markers", name=kind, cliponaxis=False,
            text=[_node_label(n) for n in members], textposition="middle right" if kind == "more" else "top center",
            customdata=[MORE + ",".join(n["members"]) if kind == "more" else str(n["id"]) for n in members],
            hovertext=hover, hoverinfo="text", selectedpoints=None,
            # a click selects one node: the others (and their labels) stay as drawn
            unselected=dict(marker=dict(opacity=1.0), textfont=dict(color="#444444")),
            marker=dict(symbol=symbol, color=colour, size=sizes,
                        line=dict(width=[3 if str(n["id"]) in chosen else 1 for n in members],
                                  color=["#1a9850" if str(n["id"]) in chosen else
                                         "#762a83" if n.get("sink") else "white" for n in members]))))
    sinks = [n for n in nodes if n.get("sink")]
    for n in sinks:
        x, y = placed[str(n["id"])]
        fig.add_annotation(x=x, y=y, text="sink", showarrow=False, yshift=-14, font=dict(size=10, color="#762a83"))
    top_room = 1.8 if sum(n.get("kind") == "logit" for n in nodes) > 1 else 0.9  # room for a row of logit labels
    layers = list(range(0, n_layers, max(1, n_layers // 10)))
    # dragmode zoom, not select: with select (or lasso) Streamlit sets clickmode "event", and a click selects nothing
    fig.update_layout(title=title, template="plotly_white", height=height, clickmode="event+select",
                      dragmode="zoom", margin=MARGIN,
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1, xanchor="right"),
                      xaxis=token_axis(list(tokens)),
                      yaxis=dict(title="layer", tickvals=[-1, *layers, logit_row(n_layers)],
                                 ticktext=["emb", *[str(i) for i in layers], "logit"],
                                 range=[-1.8, logit_row(n_layers) + top_room], zeroline=False))
    fig.update_xaxes(range=[-0.7, len(tokens) - 0.3])
    return fig


def ablation_scatter(check: Any) -> go.Figure:
    """Predicted (x) vs actual (y) change of the target logit per ablation: the strongest nodes and the random
    control, the y = x line, r of each in the title."""
    fig = go.Figure()
    every = [row[k] for row in check.rows for k in ("predicted", "actual", "predicted_real_linear")
             if row.get(k) is not None] or [0.0, 1.0]
    low, high = min(every), max(every)
    pad = 0.05 * (high - low or 1.0)
    fig.add_trace(go.Scatter(x=[low - pad, high + pad], y=[low - pad, high + pad], mode="lines", name="y = x",
                             line=dict(color="#999999", dash="dash")))
    groups = (("strongest nodes, before the last block", "#e6781e", "circle",
               lambda r: r["set"] == "strongest" and not r.get("last_layer")),
              ("strongest nodes, last block (exact by construction)", "#e6781e", "circle-open",
               lambda r: r["set"] == "strongest" and bool(r.get("last_layer"))),
              ("random active features (control)", "#4393c3", "circle", lambda r: r["set"] == "random"))
    for name, colour, symbol, member in groups:
        rows = [row for row in check.rows if member(row)]
        if not rows:
            continue
        fig.add_trace(go.Scatter(x=[r["predicted"] for r in rows], y=[r["actual"] for r in rows], mode="markers",
                                 name=name, marker=dict(color=colour, size=9, symbol=symbol,
                                                        line=dict(width=2, color=colour)),
                                 hovertext=[r["label"] for r in rows], hoverinfo="text+x+y"))
    estimated = [row for row in check.rows
                 if row["set"] == "strongest" and row.get("predicted_real_linear") is not None]
    if estimated:  # a reference, not the graph: off until the legend entry is clicked, so x stays the graph's
        fig.add_trace(go.Scatter(x=[r["predicted_real_linear"] for r in estimated], y=[r["actual"] for r in estimated],
                                 mode="markers", visible="legendonly",
                                 name="strongest, x = the real model's first-order estimate (not the graph)",
                                 marker=dict(color="#756bb1", size=9, symbol="x"),
                                 hovertext=[r["label"] for r in estimated], hoverinfo="text+x+y"))

    def said(r: float | None) -> str:
        return "n/a" if r is None else f"{r:.2f}"
    beyond = getattr(check, "r_beyond_last_layer", None)
    before = (f", {said(beyond)} (strongest before the last block)"
              if getattr(check, "n_last_layer", 0) and beyond is not None else "")
    reference = getattr(check, "r_real_linear", None)
    real = f"<br>the real model's own first-order estimate: r = {said(reference)} (strongest)" if estimated else ""
    fig.update_layout(title=f"Ablations: predicted vs actual logit change<br>r = {said(check.r)} (strongest){before}, "
                            f"{said(check.r_control)} (random control){real}", template="plotly_white", height=500,
                      xaxis_title="predicted by the graph", yaxis_title="actual (real forward pass)",
                      margin=dict(l=60, r=20, t=100, b=60))
    return fig


def intervention_figure(results: Sequence[Any]) -> go.Figure:
    """Predicted (the unpruned graph), predicted (the pruned graph's edges) and actual change per intervention."""
    fig = go.Figure()
    labels = [f"{r.label} ({'ablate' if r.mode == 'ablate' else f'×{r.factor:g}'})" for r in results]
    for name, key, colour in (("predicted (all paths)", "predicted", "#e6781e"),
                              ("predicted (pruned graph)", "predicted_pruned", "#fdb863"),
                              ("real model's first-order estimate (not the graph)", "predicted_real_linear",
                               "#9e9ac8"),
                              ("actual (real forward pass)", "actual", "#333333")):
        values = [getattr(r, key, None) for r in results]
        if all(v is None for v in values):  # a result made before the estimate existed: no bar, not 0
            continue
        fig.add_trace(go.Bar(x=labels, y=values, name=name, marker_color=colour))
    fig.update_layout(barmode="group", template="plotly_white", height=360, yaxis_title="change of the target logit",
                      margin=dict(l=60, r=20, t=40, b=80), title="Interventions")
    return fig
