"""Information flow (transformers): how the prediction forms layer by layer, and which heads and MLPs carry it."""
from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from components.export import export_menu
from interpscope.figures.heads import pattern_figure
from interpscope.flow.information import DEFAULT_THRESHOLD, InformationFlow, attention_pattern, information_flow
from interpscope.flow.tuned import available as tuned_available
from interpscope.sae.store import list_stores
from pages._common import (
    Param,
    committed,
    current_model,
    is_shared,
    model_key,
    model_params,
    progress,
    shared,
    show_errors,
    text_source,
    timing,
    url_inputs,
    write_url,
)
from pages._relevance_extras import bos_param, bos_toggle

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

PAGE = "flow"
DEFAULT_TEXT = "When Mary and John went to the store, John gave a drink to"
PARAMS = [Param("flow-text", "text", DEFAULT_TEXT), Param("flow-token", "token", ""),
          Param("flow-threshold", "threshold", DEFAULT_THRESHOLD, float, low=0.0, high=0.5, scope="view"),
          Param("flow-node", "node", "", scope="view"), bos_param("flow-bos"),
          Param("flow-tuned", "tuned", False, bool)]


def _flow(text: str, token: str | None, prepend: bool | None = None, lens: str = "logit",
          report=None) -> InformationFlow:
    key = (model_key(), text, token, prepend) + ((lens,) if lens != "logit" else ())
    return shared("flow", key, lambda: information_flow(current_model(), text, token=token, prepend_bos=prepend,
                                                        lens=lens, progress=report))


def selected_node(event) -> str | None:
    """The node id of a click on the graph (points carry their node id in customdata)."""
    points = getattr(getattr(event, "selection", None), "points", None) or []
    for point in points:
        node = point.get("customdata")
        if isinstance(node, str):
            return node
    return None


def node_detail(lm: LoadedModel, flow: InformationFlow, text: str, node_id: str) -> None:
    """What a clicked node leads to: a head's attention pattern, an MLP's most relevant neurons and SAE features."""
    nodes = flow.graph(0.0)[0]
    node = next((n for n in nodes if n.id == node_id), None)
    if node is None:  # only a link can name a node the graph lacks (a click names a drawn one)
        examples = [n.id for n in nodes if n.kind in ("head", "mlp")][:3]
        st.warning(f"The link opens node {node_id!r}, which this graph does not have (its nodes are named like "
                   f"{', '.join(examples) or 't0'}): click a node to open it.")
        return
    st.subheader(f"{node.label}: relevance {node.relevance:+.4g}")
    if node.kind == "head":
        with show_errors():
            # the flow's own tokens: with its BOS choice (the cache key carries it), sinks named and out of the scale
            tokens, pattern = shared("attention", (model_key(), text, flow.bos_prepended, node.layer, node.index),
                                     lambda: attention_pattern(lm, text, node.layer, node.index,
                                                               prepend_bos=flow.bos_prepended))
        excluded = [int(row["position"]) for row in flow.sinks]
        fig = pattern_figure(tokens, pattern, excluded, f"Attention pattern of head L{node.layer}.H{node.index}",
                             flow.sinks)
        st.plotly_chart(fig, key="flow-attention")
        export_menu(fig, flow.panel(f"attention_L{node.layer}H{node.index}", {"tokens": tokens, "pattern": pattern}),
                    key="flow-attention",
                    filename=f"attention-L{node.layer}H{node.index}")
    elif node.kind == "mlp":
        neurons = [n for n in flow.top_neurons if n["layer"] == node.layer][:10]
        if neurons:
            st.caption("Its most relevant neurons (open one on the Entropy neurons page):")
            for column, neuron in zip(st.columns(min(5, len(neurons))) * 2, neurons, strict=False):
                column.page_link("pages/entropy_neurons.py", label=f"{neuron['layer']}.{neuron['neuron']} "
                                 f"({neuron['relevance']:+.3g})", query_params={
                                     "view": "Neuron detail", "layer": str(neuron["layer"]),
                                     "neurons": f"{neuron['layer']}.{neuron['neuron']}", **model_params()})
        stores = [s for s in list_stores() if s.name.startswith(f"{lm.name}-blocks.{node.layer}-")]
        for store in stores:
            st.page_link("pages/sae_features.py", label=f"Features of {store.name} on this prompt",
                         query_params={"store": store.name, "view": "Prompt", "text": text, **model_params()})


def main() -> None:
    st.title("Information flow")
    st.caption("For one prompt and target: the logit lens (the target's probability and rank after every block), "
               "what each layer's attention and MLP write toward the target logit (they add up to it), and the "
               "heads and MLPs whose AttnLRP relevance passes a threshold, with the tokens they read from. Click a "
               "node to open it.")
    lm = current_model()
    if lm is None:
        return
    if "attention" not in lm.adapter.capabilities() or "transformer_lrp" not in lm.adapter.capabilities():
        st.info(f"{lm.name} ({lm.family}) has no attention for AttnLRP to pass through: pick a transformer.")
        return
    url_inputs(PAGE, PARAMS)
    text = text_source(PAGE, label="Prompt", default=DEFAULT_TEXT, height=90)
    token = st.text_input("Target token (empty: the predicted one; '#id' for an id)", key="flow-token")
    prepend = bos_toggle(lm, st, key="flow-bos")
    shipped = tuned_available(lm.name)
    tuned = st.checkbox("Tuned lens beside the logit lens (per-layer KL to the final distribution)", key="flow-tuned",
                        disabled=not shipped, help=None if shipped else f"No tuned lens ships for {lm.name}.")
    submitted = st.button("Run", type="primary", key="flow-run")
    inputs = {"text": text, "token": token, "bos": prepend, **({"lens": "tuned"} if tuned and shipped else {})}
    run = committed(PAGE, inputs, submitted) if text is not None else None
    threshold = st.slider("Show heads and MLPs with |relevance| ≥ this fraction of the target's value", 0.0, 0.5,
                          step=0.01, key="flow-threshold")
    if run is None:
        write_url(PARAMS, run=PAGE)
        st.info("Press **Run**: a forward pass for the logit lens and contributions, and one forward and backward "
                "pass for AttnLRP.")
        return
    lens = run.get("lens", "logit")
    cached = is_shared("flow", (model_key(), run["text"], run["token"] or None, run.get("bos")) +
                       ((lens,) if lens != "logit" else ()))
    with show_errors(), progress("Information flow", PAGE) as report:  # its Stop clears this Run
        flow = _flow(run["text"], run["token"] or None, run.get("bos"), lens, report)
    write_url(PARAMS, run=PAGE)
    last = flow.tidy()[-1]
    st.markdown(f"**{flow.target.value_label}** {flow.value:.4g} · p = {last['probability']:.3f} (rank "
                f"{last['rank']}) after the last block · {timing(flow.seconds, cached)}")
    shown = flow.at(float(threshold))  # every export is the flow's one document, its graph at the slider's value
    left, right = st.columns(2)
    with left:
        fig = flow.lens_figure()
        st.plotly_chart(fig, key="flow-lens")
        export_menu(fig, shown, key="flow-lens", filename="flow-logit-lens")
    with right:
        fig = flow.contributions_figure()
        st.plotly_chart(fig, key="flow-contrib")
        export_menu(fig, shown, key="flow-contrib", filename="flow-contributions")
    first = int(next((i for i, r in enumerate(flow.lens_rank) if r == 1), -1))
    biggest = int(abs(flow.mlp_contribution + flow.attn_contribution).argmax())
    st.caption((f"The target first becomes the top prediction after {flow.lens_layers[first]}"
                if first >= 0 else "The target never becomes the top prediction") +
               f"; layer {biggest} writes the most toward it (attention {flow.attn_contribution[biggest]:+.3g}, MLP "
               f"{flow.mlp_contribution[biggest]:+.3g}). The parts (embeddings {flow.embed_contribution:+.3g}, "
               f"constants {flow.constant_contribution:+.3g}) add up to {flow.value:.4g}.")
    if flow.tuned_lens is not None:
        fig = flow.tuned_lens.figure()
        st.plotly_chart(fig, key="flow-tuned-lens")
        export_menu(fig, shown, key="flow-tuned-lens", filename="flow-tuned-lens")
        st.caption(flow.tuned_lens.sentence() + f" Dotted: the same on held-out corpus text when the lens was fitted "
                   f"(rank-{flow.tuned_lens.rank} translators; rebuild: `{flow.tuned_lens.rebuild}`).")
    if flow.sinks:
        st.caption("Token nodes named (BOS) or (sink) are excluded positions, shown with their relevance: " + "; ".join(
            f"{row['token']!r} at {row['position']}: {row['reason']}" for row in flow.sinks) + ".")
    fig = shown.figure()
    event = st.plotly_chart(fig, key="flow-graph", on_select="rerun", selection_mode="points")
    export_menu(fig, shown, key="flow-graph", filename="flow-graph")
    clicked = selected_node(event)
    if clicked:
        st.session_state["flow-node"] = clicked
        write_url(PARAMS, run=PAGE)
    if st.session_state.get("flow-node"):
        node_detail(lm, flow, run["text"], st.session_state["flow-node"])


main()
