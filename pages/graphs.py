"""Attribution graphs: which transcoder features, at which layers and positions, produce a next-token logit; click
nodes for their features, group them into supernodes, ablate or steer them and compare the graph's predicted logit
change with a real forward pass; LRP edges beside the direct effects; which attention head carries an edge."""
from __future__ import annotations

import json
from contextlib import nullcontext
from typing import Any

import pandas as pd
import streamlit as st

from components.export import export_menu
from interpscope.config import InterpscopeError
from interpscope.figures.graphs import MORE, graph_figure, intervention_figure, merge_groups
from interpscope.graphs.defaults import (
    CONVENTIONS,
    DEFAULT_EDGE_BUDGET,
    DEFAULT_LOGIT_PROBABILITY,
    DEFAULT_MAX_LOGITS,
    DEFAULT_NODE_BUDGET,
    MAX_LOGITS,
    MAX_TOKENS,
)
from interpscope.graphs.freeze import READOUTS
from interpscope.graphs.grouping import (
    Supernode,
    decoder_top_tokens,
    group_by_contexts,
    group_by_decoder,
    group_edges,
    manual_group,
)
from interpscope.graphs.interventions import GraphRun, ablation_check, edge_heads, intervene, target_node
from interpscope.inputs import check_text
from interpscope.models.memory import run_checked
from pages._common import (
    Param,
    committed,
    current_model,
    is_shared,
    model_key,
    progress,
    shared,
    show_errors,
    timing,
    url_inputs,
    write_url,
)

PAGE = "graph"
DEFAULT_TEXT = "The capital of France is"
SOURCES = {"shipped": "Shipped for this model", "random": "Random (a control)", "folder": "A set folder"}
GROUPINGS = {"none": "None", "decoder": "Decoder direction (cosine)", "contexts": "Shared top contexts"}
PARAMS = [Param("graph-text", "text", DEFAULT_TEXT), Param("graph-target", "target", "", max_length=100),
          Param("graph-contrast", "contrast", "", max_length=100),
          Param("graph-targets", "targets", "", max_length=1000),
          Param("graph-nodes", "nodes", DEFAULT_NODE_BUDGET, int, low=1, high=2000),
          Param("graph-edges", "edges", DEFAULT_EDGE_BUDGET, int, low=1, high=50000),
          Param("graph-logits", "logits", DEFAULT_MAX_LOGITS, int, low=1, high=MAX_LOGITS),
          Param("graph-cover", "cover", DEFAULT_LOGIT_PROBABILITY, float, low=0.01, high=1.0),
          Param("graph-source", "transcoders", "shipped", choices=tuple(SOURCES)),
          Param("graph-convention", "convention", CONVENTIONS[0], choices=CONVENTIONS),
          Param("graph-folder", "folder", ""), Param("graph-width", "width", 256, int, low=1, high=65536),
          Param("graph-group", "group", "none", choices=tuple(GROUPINGS), scope="view"),
          Param("graph-threshold", "threshold", 0.5, float, low=-1.0, high=1.0, scope="view"),
          Param("graph-merge", "merge", False, bool, scope="view"),
          # what is selected, the node shown, and the supernodes made by hand: node ids, "," between nodes and
          # ";" between supernodes (ids are letters, digits and _)
          Param("graph-select", "select", "", scope="view", max_length=4000),
          Param("graph-node", "node", "", scope="view", max_length=100),
          Param("graph-supernodes", "supernodes", "", scope="view", max_length=4000)]
LINKED_VIEW = ("graph-select", "graph-node", "graph-supernodes")
SCORE_MEANING = {
    "replacement_score": "the share of the graph's end-to-end influence on the logit that starts at token "
                         "embeddings rather than error nodes (1: the transcoders explain every path)",
    "completeness_score": "the share of the nodes' direct inputs (weighted by influence) that come from features "
                          "and embeddings rather than error nodes",
}


# --- computing (shared by every session: clean runs only) -------------------------------------------------------
def _transcoders(lm, source: str, folder: str, width: int):
    from interpscope.sae.transcoder_set import default_transcoder_set, load_dictionary, random_transcoder_set

    key = (*model_key(), source, folder if source == "folder" else "", width if source == "random" else 0)
    if source == "random":
        return shared("graph-transcoders", key, lambda: random_transcoder_set(lm, width, seed=0))
    path = folder.strip() if source == "folder" else default_transcoder_set(lm.name)
    if not path:
        raise InterpscopeError(f"No transcoder set is shipped for {lm.name}: choose a set folder, or random "
                               "transcoders (a control: they explain nothing).")
    return shared("graph-transcoders", key, lambda: load_dictionary(path, lm=lm))


def _graph_key(run: dict) -> tuple:
    return (*model_key(), *(run[k] for k in sorted(run)))


def _graph(lm, tset, run: dict, report=None):
    from interpscope.graphs.build import build_graph
    from interpscope.sae.transcoder_set import dictionary_width

    logits = run.get("logits", DEFAULT_MAX_LOGITS)  # a one-logit run names no coverage
    targets = _target_list(run.get("targets", "")) or None
    convention = run.get("convention", CONVENTIONS[0])  # an interpscope run keeps its old key
    return shared("graph", _graph_key(run), lambda: run_checked(lm, "graph", run["text"], lambda: build_graph(
        lm, tset, run["text"], target=None if targets else run["target"] or None, node_budget=run["nodes"],
        edge_budget=run["edges"], progress=report, max_logits=logits, convention=convention,
        logit_probability=run.get("cover", DEFAULT_LOGIT_PROBABILITY), contrast=run.get("contrast") or None,
        targets=targets), graph_width=dictionary_width(tset)))


def _target_list(text: str) -> list[str]:
    """The listed logit nodes: tokens separated by '|' (a token may hold a space or a comma), the first the target."""
    return [part for part in (p.strip("\n") for p in text.split("|")) if part.strip()] if text.strip() else []


def _prepared(lm, tset, graph, key: tuple, spinner: bool = True) -> GraphRun:
    """The graph's frozen run for interventions and edge heads, kept in this session (one per graph). spinner=False
    under a progress bar that already names this step."""
    state = st.session_state
    held = state.get("_graph-prepared")
    if held is None or held[0] != key:
        with st.spinner("Freezing the prompt's run (one forward pass)…") if spinner else nullcontext():
            state["_graph-prepared"] = (key, GraphRun(lm, tset, graph))
    return state["_graph-prepared"][1]


def _session(name: str, key: tuple, default: Any) -> Any:
    """A per-graph value of this session (selection, groups, interventions): reset when the graph changes."""
    state = st.session_state
    if state.get(f"_graph-{name}-key") != key:
        state[f"_graph-{name}-key"] = key
        state[f"_graph-{name}"] = default
    return state[f"_graph-{name}"]


# --- feature facts ------------------------------------------------------------------------------------------------
def _stores(lm, tset, key: tuple) -> dict[int, Any]:
    """Feature stores of this set's transcoders, by layer (a store whose SAE is the layer's folder, or on its hook);
    looked up once per graph in this session."""
    held = _session("stores", key, None)
    if held is None:
        held = st.session_state["_graph-stores"] = _find_stores(lm, tset)
    return held


def _find_stores(lm, tset) -> dict[int, Any]:
    from pathlib import Path

    from interpscope.sae.store import FeatureStore, list_stores

    found: dict[int, Any] = {}
    hooks = {tset.hook_in_name(layer): layer for layer in range(tset.n_layers)}
    for path in list_stores():
        try:
            store = FeatureStore(path)
        except (InterpscopeError, OSError, ValueError):
            continue
        spec = store.spec
        layer = hooks.get(spec.get("hook_name"))
        if layer is None or spec.get("model_name") != lm.name:
            continue
        if tset.folder is not None and Path(str(spec.get("sae_path", ""))).resolve() != (
                Path(tset.folder) / f"layer_{layer:02d}").resolve():
            continue
        found[layer] = store
    return found


def _top_tokens(lm, tset, graph, key: tuple) -> dict[str, list[tuple[str, float]]]:
    """Each feature node's decoder top logit tokens (W_dec[f] @ W_U), computed once per graph in this session."""
    table = _session("tokens", key, {})
    missing = [n for n in graph.nodes if n["kind"] == "feature" and n["id"] not in table]
    if missing:
        table.update(decoder_top_tokens(lm, tset, missing, k=5))
    return table


def _context_tokens(stores: dict[int, Any], node: dict) -> list[str]:
    card = stores[int(node["layer"])].card(int(node["feature"]))
    return [c.tokens[c.centre] for c in card.top_contexts if c.centre is not None and 0 <= c.centre < len(c.tokens)]


# --- views ----------------------------------------------------------------------------------------------------------
def _header(graph, cached: bool) -> None:
    t = graph.target
    if "contrast" in t:
        other = t["contrast"]
        st.markdown(f"**Why {t['token']!r} rather than {other['token']!r}**: the graph explains the logit "
                    f"difference {graph.logit:.4g} (p = {t['probability']:.3f} vs {other['probability']:.3f}); its "
                    "interventions, ablation check and LRP explain the difference too.")
    compatible = graph.convention == "circuit-tracer"
    what = "logit difference" if "contrast" in t else "demeaned logit" if compatible else "logit"
    st.markdown(f"**Target {t['token']!r}** (p = {t['probability']:.3f}) · {what} {graph.logit:.4g}; every direct "
                f"contribution before pruning sums to {graph.logit_inputs_sum:.4g}"
                + (f" (+ {graph.left_out['total']:.4g} in no node: b_dec {graph.left_out['b_dec']:.4g}, the first "
                   f"position {graph.left_out['bos']:.4g})" if graph.left_out else "")
                + (f" (+ biases {graph.bias_sum:.4g})" if graph.bias_sum is not None else "")
                + f" · {len(graph.nodes)} nodes, {len(graph.edges)} edges kept of {graph.n_active_features} active "
                  f"features · {timing(graph.seconds, cached)}")
    if graph.sinks:
        st.caption("Attention sinks, named and never ranked (their features are drawn but set no scale): "
                   + "; ".join(f"{s.get('token', '')!r} at {s.get('position')} ({s.get('reason', 'measured')})"
                               for s in graph.sinks) + ".")
    if graph.logits:
        st.markdown(f"**{len(graph.logits)} logit nodes** (influence on their weighted sum; interventions, the "
                    "ablation check and LRP explain the target alone):")
        st.dataframe(pd.DataFrame([{"token": repr(e["token"]), "id": e["id"], "probability": e["probability"],
                                    "weight": e["weight"], "logit": e["logit"],
                                    "contributions sum": e["logit_inputs_sum"],
                                    "target": e["node"] == target_node(graph)} for e in graph.logits]),
                     hide_index=True, height=38 + 35 * len(graph.logits))
    for note in graph.notes:
        st.caption(note)


def _scores(lm, graph, run: dict, width: int) -> None:
    cols = st.columns(2)
    for col, name in zip(cols, SCORE_MEANING, strict=True):
        value = getattr(graph, name)
        col.metric(name.replace("_", " ").capitalize(), "n/a" if value is None else f"{value:.3f}",
                   help=SCORE_MEANING[name])
        col.caption(SCORE_MEANING[name])
    if run["source"] == "random":
        st.caption("These transcoders are random: the scores above ARE the control (what transcoders that learned "
                   "nothing score on this prompt).")
        return
    if st.button("Control: the same graph over random transcoders", key="graph-control"):
        st.session_state["_graph-control-for"] = _graph_key(run)
    if st.session_state.get("_graph-control-for") == _graph_key(run):
        control_run = {**run, "source": "random", "folder": "", "width": width}
        with show_errors(), progress("Control graph", None) as report:
            control = _graph(lm, _transcoders(lm, "random", "", width), control_run, report)
        parts = []
        for name in SCORE_MEANING:
            real, chance = getattr(graph, name), getattr(control, name)
            if real is not None and chance is not None:
                parts.append(f"{name.replace('_', ' ')} {real:.3f} here vs {chance:.3f} with random transcoders of "
                             f"width {width} ({'above' if real > chance else 'NOT above'} the control)")
        st.markdown("Control: " + "; ".join(parts) + "." if parts else "The control graph has no scores.")


def _lrp(graph, tokens: list[str], n_layers: int) -> None:
    if not graph.lrp_edges:
        return
    st.subheader(f"Direct effects beside LRP ({graph.lrp_method})")
    into = [e for e in graph.edges if e["target"] == target_node(graph)]  # the target's logit: what LRP explains
    left, right = st.columns(2)
    left.plotly_chart(graph_figure(graph.nodes, into, tokens, n_layers, "Direct effect on the logit", height=420),
                      key="graph-fig-direct")
    right.plotly_chart(graph_figure(graph.nodes, graph.lrp_edges, tokens, n_layers,
                                    f"{graph.lrp_method} relevance for the logit", height=420), key="graph-fig-lrp")
    sentence = graph.agreement_sentence(len(into))
    if sentence is not None:
        st.markdown(sentence)


def _hits(event) -> tuple[list[str], list[tuple[str, str]]]:
    """The node ids and the edges (source, target) a figure event holds: node points carry their id (a "+N more"
    node MORE + the ids it stands for), points along an edge carry [source, target]."""
    points = getattr(getattr(event, "selection", None), "points", None) or []
    ids: list[str] = []
    edges: list[tuple[str, str]] = []
    for point in points:
        data = point.get("customdata")
        if isinstance(data, str):
            ids += [i for i in data[len(MORE):].split(",") if i] if data.startswith(MORE) else [data]
        elif isinstance(data, list) and len(data) == 2:
            edges.append((str(data[0]), str(data[1])))
    return ids, edges


def _selection(event, graph, key: tuple) -> list[str]:
    """The selected nodes, after the figure's newest event: nodes (a click, a box: edges inside a box are not
    selected), or one edge (a click on it): its two ends, the edge remembered for its readout."""
    state = st.session_state
    selected = _session("selected", key, [])
    ids, edges = _hits(event)
    if not ids and not edges:  # nothing selected in the figure (a click on the selected point unselects it)
        state.pop("_graph-last-event", None)
        return selected
    if state.get("_graph-last-event") == [ids, edges]:
        return selected
    state["_graph-last-event"] = [ids, edges]
    known = {n["id"] for n in graph.nodes}
    if ids:
        selected[:] = [i for i in dict.fromkeys(ids) if i in known]
        state.pop("_graph-edge-clicked", None)
    elif len(set(edges)) == 1:
        source, target = edges[0]
        selected[:] = [i for i in (source, target) if i in known]
        state["_graph-edge-clicked"] = (key, source, target)
        if selected:
            state["graph-node"] = selected[0]
    return selected


def _edge_readout(graph, key: tuple, edges: list[dict]) -> tuple[str, str] | None:
    """The clicked edge, said with its direct effect (the edge as drawn: merged supernodes' edges are sums)."""
    held = st.session_state.get("_graph-edge-clicked")
    if held is None or held[0] != key:
        return None
    source, target = held[1], held[2]
    edge = next((e for e in edges if (str(e["source"]), str(e["target"])) == (source, target)), None)
    if edge is None:
        return None
    weight, strongest = float(edge["weight"]), max(abs(float(e["weight"])) for e in edges)
    logit = " (the logit)" if target == target_node(graph) else ""
    st.markdown(f"**Edge {source} → {target}**: direct effect {weight:+.4g} ({'raises' if weight >= 0 else 'lowers'} "
                f"{target}{logit}; the strongest edge drawn has |direct effect| {strongest:.3g}).")
    return source, target


def _apply_link(graph, key: tuple, link: dict[str, str]) -> None:
    """A link's selection, node and supernodes, on the graph it opened (ids this graph lacks named, left out)."""
    known = {n["id"] for n in graph.nodes}
    asked = [i for i in link.get("graph-select", "").split(",") if i]
    missing = [i for i in asked if i not in known]
    _session("selected", key, [])[:] = [i for i in dict.fromkeys(asked) if i in known]
    manual = _session("manual", key, [])
    manual.clear()
    for text in [g for g in link.get("graph-supernodes", "").split(";") if g]:
        members = [i for i in text.split(",") if i]
        missing += [i for i in members if i not in known]
        try:
            manual.append(manual_group(graph.nodes, [i for i in members if i in known], index=len(manual)))
        except (InterpscopeError, ValueError) as err:
            st.warning(f"The link's supernode {text!r} was left out: {err}")
    if missing:
        st.warning(f"The link names node(s) this graph does not have, left out: {', '.join(dict.fromkeys(missing))}.")


def _keep_in_url(key: tuple, selected: list[str]) -> None:
    """The selection and the supernodes made by hand, into the URL's view inputs."""
    state = st.session_state
    state["graph-select"] = ",".join(selected)
    state["graph-supernodes"] = ";".join(",".join(g.members) for g in _session("manual", key, []))
    if not selected:
        state["graph-node"] = ""
    write_url(PARAMS, run=PAGE)


def _groups(lm, tset, graph, key: tuple) -> list[Supernode]:
    st.subheader("Supernodes")
    cols = st.columns([2, 2, 1])
    how = cols[0].radio("Automatic grouping", list(GROUPINGS), key="graph-group", format_func=GROUPINGS.get,
                        horizontal=True)
    threshold = cols[1].slider("Threshold (cosine, or Jaccard overlap of top-context tokens)", -1.0, 1.0,
                               key="graph-threshold", step=0.05)
    cols[2].checkbox("Merge in the figure", key="graph-merge")
    groups: list[Supernode] = list(_session("manual", key, []))
    if how == "decoder":
        tokens = _top_tokens(lm, tset, graph, key)
        groups += group_by_decoder(graph.nodes, tset, threshold,
                                   tokens_of=lambda n: [t for t, _ in tokens[n["id"]][:3]])
    elif how == "contexts":
        stores = _stores(lm, tset, key)
        nodes = [n for n in graph.nodes if n["kind"] != "feature" or int(n["layer"]) in stores]
        if not stores:
            st.info("No feature store exists for these transcoders' layers, so there are no top contexts to share: "
                    "build one per layer (`interpscope sae store --sae <set>/layer_XX`), or group by decoder "
                    "direction.")
        else:
            skipped = sum(1 for n in graph.nodes if n["kind"] == "feature") - sum(
                1 for n in nodes if n["kind"] == "feature")
            if skipped:
                st.caption(f"{skipped} feature nodes are on layers without a store and stay ungrouped.")
            groups += group_by_contexts(nodes, lambda n: _context_tokens(stores, n), max(threshold, 0.0))
    if groups:
        st.dataframe(pd.DataFrame([{"supernode": g.id, "label": g.label, "members": len(g.members),
                                    "layers": ", ".join(map(str, g.layers)), "formed by": g.how} for g in groups]),
                     hide_index=True, height=min(260, 38 + 35 * len(groups)))
    return groups


def _add_group(graph, key: tuple, features: list[str]) -> None:
    """The button's callback: the new supernode exists before the rerun draws the groups."""
    manual = _session("manual", key, [])
    manual.append(manual_group(graph.nodes, features, index=len(manual)))


def _make_group(graph, key: tuple, selected: list[str]) -> None:
    features = [s for s in selected if graph.node(s)["kind"] == "feature"]
    st.button(f"Make a supernode of the {len(features)} selected feature nodes", key="graph-make-group",
              disabled=not features, on_click=_add_group, args=(graph, key, features))


def _node_panel(lm, tset, graph, key: tuple, node_id: str) -> None:
    node = graph.node(node_id)
    st.markdown(f"**{node_id}** · {node['kind']} at position {node['position']} ({node.get('token', '')!r})"
                + (f" · activation {node['activation']:.4g}" if node.get("activation") is not None else "")
                + (" · attention SINK (never ranked)" if node.get("sink") else ""))
    if node["kind"] == "feature":
        stores = _stores(lm, tset, key)
        store = stores.get(int(node["layer"]))
        if store is not None:
            from components.feature_card import show_feature_card

            show_feature_card(store.card(int(node["feature"])), store.name, lambda f: None)
        else:
            tokens = _top_tokens(lm, tset, graph, key)[node_id]
            st.caption(f"No feature store for layer {node['layer']}'s transcoder, so no top contexts: its decoder's "
                       "top logit tokens instead (W_dec[f] @ W_U, the final norm's gain folded in).")
            st.dataframe(pd.DataFrame([{"token": t, "logit weight": v} for t, v in tokens]), hide_index=True)
    edges = [e for e in graph.edges if node_id in (e["source"], e["target"])]
    edges.sort(key=lambda e: -abs(e["weight"]))
    if edges:
        st.dataframe(pd.DataFrame(edges[:12]), hide_index=True)


def _edge_name(edge: dict) -> str:
    return f"{edge['source']} → {edge['target']} ({edge['weight']:+.3g})"


def _edge_heads(lm, tset, graph, key: tuple, node_id: str, clicked: tuple[str, str] | None = None) -> None:
    writes, reads = {"feature", "embedding", "error"}, {"feature", "logit"}
    kinds = {n["id"]: n["kind"] for n in graph.nodes}
    edges = sorted((e for e in graph.edges if node_id in (e["source"], e["target"]) and kinds[e["source"]] in writes
                    and kinds[e["target"]] in reads), key=lambda e: -abs(e["weight"]))
    chosen = [e for e in edges if (e["source"], e["target"]) == clicked]
    edges = edges[:20] + [e for e in chosen if e not in edges[:20]]  # a clicked edge is offered, however weak
    if not edges:
        return
    names = {_edge_name(e): e for e in edges}
    if chosen and st.session_state.get("_graph-edge-shown") != (key, clicked):  # a new click picks its edge
        st.session_state["_graph-edge-shown"] = (key, clicked)
        st.session_state["graph-edge"] = _edge_name(chosen[0])
    choice = st.selectbox("Which attention heads carry this edge?", list(names), key="graph-edge")
    edge = names[choice]
    with show_errors():
        split = edge_heads(_prepared(lm, tset, graph, key).run, tset, graph, edge["source"], edge["target"])
    st.markdown(split.summary())
    st.dataframe(pd.DataFrame(split.heads), hide_index=True, height=min(300, 38 + 35 * len(split.heads)))
    export_menu(None, split, key="graph-edge-heads", filename="edge-heads")
    if split.heads:
        _qk(lm, tset, graph, key, edge, split.heads[0])


def _qk(lm, tset, graph, key: tuple, edge: dict, best: dict) -> None:
    """Why the edge's strongest head attends from the target's position to the source's: its score split over the
    nodes on the query side and the key side (interpscope.graphs.qk), on an explicit press."""
    from interpscope.graphs.qk import qk_attribution

    nodes = {n["id"]: n for n in graph.nodes}
    target = nodes[edge["target"]]
    key_position = int(nodes[edge["source"]]["position"])
    query_position = len(graph.tokens) - 1 if target["kind"] == "logit" else int(target["position"])
    layer, head = int(best["layer"]), int(best["head"])
    asked = (key, edge["source"], edge["target"], layer, head)
    if st.button(f"Why does L{layer}.H{head} attend from position {query_position} to {key_position}? "
                 "(QK attribution)", key="graph-qk"):
        st.session_state["_graph-qk"] = asked
    if st.session_state.get("_graph-qk") != asked:
        return
    with show_errors(), st.spinner("Splitting the attention score over the nodes"):
        split = qk_attribution(lm, _prepared(lm, tset, graph, key, spinner=False).run, tset, graph, layer, head,
                               query_position, key_position)
    st.markdown(split.summary())
    cols = st.columns(2)
    for col, side, label in ((cols[0], split.query_side, f"Query side (position {query_position}): who asks"),
                             (cols[1], split.key_side, f"Key side (position {key_position}): who answers")):
        col.caption(label)
        col.dataframe(pd.DataFrame(side), hide_index=True, height=min(300, 38 + 35 * len(side)))
    export_menu(None, split, key="graph-qk-export", filename="qk-attribution")


def _interventions(lm, tset, graph, key: tuple, selected: list[str], groups: list[Supernode]) -> None:
    st.subheader("Ablate or steer")
    options: dict[str, tuple[list[str], str | None]] = {}
    for s in selected:
        if graph.node(s)["kind"] == "feature":
            options[s] = ([s], None)
    for g in groups:
        options[f"{g.id}: {g.label} ({len(g.members)} features)"] = (list(g.members), g.label)
    if not options:
        st.caption("Select feature nodes in the graph (click, or drag a box), or form supernodes, to intervene.")
    else:
        cols = st.columns([3, 2, 1, 1])
        pick = cols[0].selectbox("Node or supernode", list(options), key="graph-pick")
        mode = cols[1].radio("Intervention", ["ablate", "steer"], key="graph-mode", horizontal=True)
        factor = cols[2].number_input("Factor", value=2.0, step=0.5, key="graph-factor", disabled=mode == "ablate")
        done = _session("results", key, [])
        if st.session_state.pop("_stop-graph-intervene", False):  # its Stop's rerun: nothing is half-shown
            st.toast("Stopped: the intervention did not finish; press Intervene to start it again.")
        if cols[3].button("Intervene", key="graph-intervene", type="primary"):
            members, label = options[pick]
            with show_errors(), progress("Intervening", "graph-intervene", first="freezing the prompt's run") as report:
                prepared = _prepared(lm, tset, graph, key, spinner=False)
                done.append(intervene(lm, tset, graph, members, mode=mode, scale=factor, label=label,
                                      prepared=prepared, progress=report))
        if done:
            st.markdown(done[-1].summary())
            fig = intervention_figure(done[-8:])
            st.plotly_chart(fig, key="graph-fig-interventions")
            export_menu(fig, done[-1], key="graph-intervention", filename="graph-intervention")
    check_groups = groups if groups and st.checkbox("Ablation check over the supernodes", key="graph-check-groups") \
        else None
    readouts = tuple(READOUTS) if st.checkbox(
        "Also diagnostic readouts (the real model with the graph's frozen parts imposed, labelled as such)",
        key="graph-check-readouts") else ()
    if st.session_state.pop("_stop-graph-check", False):
        st.toast("Stopped: the ablation check did not finish; press its button to start it again.")
    if st.button("Ablation check: the 20 strongest ablated one by one, and 20 random (control)", key="graph-check"):
        with show_errors(), progress("Ablations (real forward passes)", "graph-check") as report:
            st.session_state["_graph-check"] = (key, ablation_check(
                lm, tset, graph, n=20, groups=check_groups, prepared=_prepared(lm, tset, graph, key),
                progress=report, readouts=readouts))
    held = st.session_state.get("_graph-check")
    if held is not None and held[0] == key:
        check = held[1]
        st.markdown(check.summary())
        fig = check.figure()
        st.plotly_chart(fig, key="graph-fig-check")
        export_menu(fig, check, key="graph-check", filename="graph-ablation-check")


def _show(lm, tset, graph, run: dict, cached: bool, control_width: int) -> None:
    key = _graph_key(run)
    n_layers = lm.adapter.n_layers
    link = st.session_state.pop("_graph-link-view", None)
    if link is not None:
        _apply_link(graph, key, link)
    _header(graph, cached)
    _scores(lm, graph, run, control_width)
    groups = _groups(lm, tset, graph, key)
    nodes, edges = graph.nodes, graph.edges
    if st.session_state.get("graph-merge") and groups:
        nodes, edges = merge_groups(graph.nodes, groups), group_edges(graph.edges, groups)
    # the figure's newest click, read before it is drawn: what it selected is what the figure outlines
    selected = _selection(st.session_state.get("graph-figure"), graph, key)
    title = f"Attribution graph of {graph.target['token']!r}" + (
        f" rather than {graph.target['contrast']['token']!r}" if "contrast" in graph.target else "")
    fig = graph_figure(nodes, edges, graph.tokens, n_layers, title, selected=selected)
    st.plotly_chart(fig, key="graph-figure", on_select="rerun", selection_mode=("points", "box", "lasso"))
    st.caption("x: token position; y: layer (embeddings at the bottom, the logit on top). Marker size: |influence| "
               "on the logit; edge width: |direct effect|, red positive, blue negative; open squares: error nodes "
               "(what the transcoders miss); \"+N\": a crowded cell's weakest nodes. Click a node (shift-click adds "
               "one) or an edge to inspect it; the toolbar's box select selects many; drag to zoom, double-click to "
               "zoom out.")
    # the export: the same graph without this session's selection outlines
    export_menu(graph_figure(nodes, edges, graph.tokens, n_layers, title), graph, key="graph",
                filename="attribution-graph")
    st.download_button("Neuronpedia JSON", data=lambda: json.dumps(graph.to_neuronpedia()).encode("utf-8"),
                       file_name="attribution-graph.neuronpedia.json", mime="application/json",
                       key="graph-neuronpedia", on_click="ignore")
    clicked = _edge_readout(graph, key, list(edges))
    if selected:
        if st.session_state.get("graph-node") not in selected:
            st.session_state["graph-node"] = selected[0]
        _make_group(graph, key, selected)
        focus = st.selectbox("Selected node", selected, key="graph-node")
        _node_panel(lm, tset, graph, key, focus)
        if graph.convention == "interpscope":
            _edge_heads(lm, tset, graph, key, focus, clicked)
    _keep_in_url(key, selected)
    if graph.convention == "interpscope":
        _interventions(lm, tset, graph, key, selected, groups)
    else:
        st.caption("Interventions, the ablation check and edge heads predict the raw logit with every part in a node: "
                   "choose Interpscope's convention for them.")
    _lrp(graph, graph.tokens, n_layers)


def main() -> None:
    st.title("Attribution graphs")
    st.caption("Trace one next-token logit through the transcoder replacement model (each MLP replaced by a sparse "
               "transcoder, attention patterns and norm scales frozen from the real run, an error node per layer and "
               "position so the logit is reproduced exactly): which features, at which layers and positions, produce "
               "it. Edges are direct linear effects, pruned by influence to your budgets.")
    lm = current_model()
    if lm is None:
        return
    from interpscope.graphs.replay import check_architecture

    try:
        check_architecture(lm.adapter)
    except InterpscopeError as err:
        st.info(str(err))
        return
    url_inputs(PAGE, PARAMS)
    if set(st.session_state.get("_url-just-read", ())) & set(LINKED_VIEW):  # for the graph this link opens
        st.session_state["_graph-link-view"] = {k: str(st.session_state.get(k) or "") for k in LINKED_VIEW}
    text = st.text_area("Prompt", key="graph-text", height=80, help=f"Up to {MAX_TOKENS} tokens.")
    cols = st.columns([2, 1, 1])
    target = cols[0].text_input("Target token (empty: the top prediction; #id for a token id)", key="graph-target")
    nodes = int(cols[1].number_input("Node budget", 1, 2000, key="graph-nodes"))
    edges = int(cols[2].number_input("Edge budget", 1, 50000, key="graph-edges"))
    cols = st.columns([1, 2])
    contrast = cols[0].text_input("Rather than (contrast token; empty: none)", key="graph-contrast",
                                  help="Explain logit(target) - logit(this token): why the target rather than it "
                                       "(one logit node, the difference).")
    listed = cols[1].text_input("Or the logit nodes as a list (tokens separated by |; the first is the target)",
                                key="graph-targets", help="Instead of the top logits: these tokens' logits, "
                                                          "influence weighted by their probabilities.")
    cols = st.columns([1, 1, 2])
    n_logits = int(cols[0].number_input("Logit nodes", 1, MAX_LOGITS, key="graph-logits",
                                        help="1: the target alone. More: the target and the most probable other next "
                                             "tokens until they cover the probability beside (circuit-tracer's top "
                                             "logits); influence is weighted by their probabilities."))
    cover = float(cols[1].number_input("…covering p", 0.01, 1.0, key="graph-cover", step=0.05,
                                       disabled=n_logits == 1))
    cols = st.columns([2, 2, 1])
    source = cols[0].radio("Transcoders", list(SOURCES), key="graph-source", format_func=SOURCES.get, horizontal=True)
    folder = cols[1].text_input("Set folder (manifest.json + layer folders) or CLT folder", key="graph-folder",
                                disabled=source != "folder")
    width = int(cols[2].number_input("Random width", 1, 65536, key="graph-width", disabled=source != "random"))
    convention = st.radio("Convention", CONVENTIONS, key="graph-convention", horizontal=True,
                          format_func={"interpscope": "Interpscope (raw logit, every part in a node, budgets)",
                                       "circuit-tracer": "circuit-tracer (demeaned logit, b_dec and BOS in no node, "
                                                         "its thresholds)"}.get,
                          help="circuit-tracer 0.5.0's graph: the demeaned logit, b_dec and the first position's MLP "
                               "output in no node (the sums fall short by them, said above the graph), expanded "
                               "features only, pruned at its node (0.8) and edge (0.98) thresholds instead of the "
                               "budgets. See the method page.")
    submitted = st.button("Run", type="primary", key="graph-run")
    try:
        # a token is typed as it is: its leading space is part of it (" Paris" is not "Paris")
        inputs = {"text": check_text(text), "target": target.strip("\n") if target.strip() else "", "nodes": nodes,
                  "edges": edges,
                  "source": source, "folder": folder.strip() if source == "folder" else "",
                  "width": width if source == "random" else 0}
        if n_logits > 1:  # a one-logit run keeps its old key (and its shared cache entry)
            inputs.update(logits=n_logits, cover=cover)
        if convention != CONVENTIONS[0]:
            inputs["convention"] = convention
        if contrast.strip():
            inputs["contrast"] = contrast.strip("\n")
        if listed.strip():
            inputs["targets"] = listed
    except InterpscopeError as err:
        st.warning(str(err))
        write_url(PARAMS, run=PAGE)
        return
    run = committed(PAGE, inputs, submitted)
    write_url(PARAMS, run=PAGE)
    if run is None:
        st.info("Press **Run**: one real forward pass, then the linear replay's backward passes for the strongest "
                "features (the bar estimates the time left from its pace).")
        return
    cached = is_shared("graph", _graph_key(run))
    with show_errors():
        tset = _transcoders(lm, run["source"], run["folder"], run["width"])
        with progress("Attribution graph", PAGE) as report:
            graph = _graph(lm, tset, run, report)
    _show(lm, tset, graph, run, cached, control_width=width)


main()
