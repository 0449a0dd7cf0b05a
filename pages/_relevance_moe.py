"""The mixture-of-experts part of the relevance page: which expert carried how much of the explained value.

Shown by pages/relevance.py under the main map when the model declares the 'experts' capability (Mixtral,
Qwen2-MoE, Qwen3-MoE, OLMoE). It explains the main map's own input and target, in one more LRP pass.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st
import torch

from components.export import export_menu
from interpscope.figures.relevance.moe import share_figure
from interpscope.relevance.experts import ExpertRelevance, expert_methods, expert_relevance
from pages._common import current_model, model_key, shared, show_errors, timing

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel
    from interpscope.relevance.api import RelevanceResult


def _experts(key: tuple, token_ids: tuple[int, ...], target, method: str, prepended: bool,
             tokens: tuple[str, ...]) -> ExpertRelevance:
    return shared("experts", (key, token_ids, target, method, prepended), lambda: expert_relevance(
        current_model(), torch.tensor([list(token_ids)]), target, method, prepended=0 if prepended else None,
        tokens=list(tokens)))


def moe_view(lm: LoadedModel, result: RelevanceResult, labels: dict[str, str]) -> None:
    """Per-expert relevance for the main map's input and target, beside the router's weight share (the control)."""
    adapter = lm.adapter
    st.subheader("Mixture of experts: which expert carried the relevance")
    method = result.method if result.method in expert_methods() else next(iter(expert_methods()))
    if method != result.method:
        st.info(f"Per-expert relevance needs an LRP pass: {labels.get(result.method, result.method)} has none, so "
                f"this section uses {labels.get(method, method)} for the same target.")
    with show_errors(), st.spinner(f"Reading each expert's share ({labels.get(method, method)})…"):
        experts = _experts(model_key(), tuple(result.token_ids), result.target, method, result.bos_prepended,
                           tuple(result.tokens))
    st.caption(f"{adapter.family}: {experts.n_experts} experts, top {experts.top_k} per token, "
               f"{len(experts.layers)} sparse layer(s). The router's weights are held fixed, so each chosen expert's "
               f"share is its weighted output times its gradient; blank cells are experts the router did not choose. "
               f"The shares add up to the relevance at each block's output to {experts.closure:.1e} of the logit. "
               f"{timing(experts.seconds, False)}")
    fig = experts.figure()
    st.plotly_chart(fig, key="relevance-experts-fig")
    if experts.sink_positions:
        named = "; ".join(f"position {row['position']} {row['token']!r} ({row['reason']})" for row in experts.sinks)
        st.caption(f"Not used for the colour scale or the shares: {named}.")
    export_menu(fig, experts, key="experts", filename=f"relevance-experts-{method}")
    for sentence in experts.readings():
        st.markdown(f"- {sentence}")
    if experts.shared is not None:
        kept = [i for i in range(len(experts.tokens)) if i not in experts.sink_positions]
        shared_total = float(experts.shared[:, kept].sum())
        routed = float(sum(experts.expert_totals().sum(1)))
        st.caption(f"The shared expert carried {shared_total:+.3f} of the relevance beside {routed:+.3f} through the "
                   "routed experts (summed over the sparse layers).")
    shares = share_figure(experts.layers, experts.relevance_share(), experts.routing_share(),
                          "Share of each layer's relevance per expert, beside its share of the router's weight")
    st.plotly_chart(shares, key="relevance-experts-shares")
    panel = experts.panel("shares", {"layers": experts.layers, "relevance_share": experts.relevance_share(),
                                     "routing_share": experts.routing_share()})
    export_menu(shares, panel, key="experts-shares", filename=f"relevance-expert-shares-{method}")
