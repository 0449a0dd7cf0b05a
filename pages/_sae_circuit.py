"""The feature browser's Circuit view: which features of an upstream SAE (and which input tokens) a feature of this
store, or the next-token logit, draws on, by LRP through the model with the upstream SAE spliced in."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import streamlit as st

from components.export import export_menu
from interpscope.figures.sae import circuit_figure, circuit_readout_figure
from interpscope.relevance.methods import method_labels, rule_methods
from interpscope.sae.circuits import FeatureCircuit, feature_circuit
from interpscope.sae.store import FeatureStore, list_stores
from pages._common import KEEP, bounded, committed, follow, is_shared, shared, show_errors, timing
from pages._sae_models import device_dtype, firing_note, prompt_view

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

TARGETS = ["This store's feature at a token", "The next-token logit"]


def upstream_stores(store: FeatureStore, lm: LoadedModel) -> dict[str, FeatureStore]:
    """Stores of SAEs on the same model that read an earlier hook point."""
    points = lm.adapter.hook_points()
    here = points.index(store.spec["hook_name"]) if store.spec["hook_name"] in points else len(points)
    found = {}
    for path in list_stores():
        other = FeatureStore(path)
        hook = other.spec["hook_name"]
        if other.spec["model_name"] == store.spec["model_name"] and hook in points and points.index(hook) < here:
            found[other.name] = other
    return found


def _circuit_key(lm: LoadedModel, upstream: FeatureStore, downstream: FeatureStore | None, text: str,
                 feature: int | None,
                 position: int, method: str, bos: bool | None = None) -> tuple:
    return (lm.name, str(lm.device), str(lm.dtype), upstream.name, downstream.name if downstream else None, text,
            feature, position, method, bos)


def _circuit(lm: LoadedModel, upstream: FeatureStore, downstream: FeatureStore | None, text: str, feature: int | None,
             position: int, method: str, bos: bool | None = None) -> FeatureCircuit:
    key = _circuit_key(lm, upstream, downstream, text, feature, position, method, bos)
    return shared("circuit", key, lambda: feature_circuit(
        lm, upstream.load_sae(), downstream.load_sae() if downstream else None, text, feature=feature,
        position=position, method=method, prepend_bos=bos))


def show_circuit(store: FeatureStore, lm: LoadedModel, text: str, open_in_store: Callable[[str, int], None],
                 bos: bool | None = None) -> None:
    candidates = upstream_stores(store, lm)
    if not candidates:
        st.info(f"No feature store of an SAE on {store.spec['model_name']} at a hook before "
                f"{store.spec['hook_name']}: build one (`interpscope sae store --sae DIR`) to trace circuits.")
        return
    cols = st.columns([2, 2, 1])
    if st.session_state.get("sae-circuit-upstream") not in candidates:
        st.session_state["sae-circuit-upstream"] = next(iter(candidates))
    upstream_name = cols[0].selectbox("Upstream SAE (spliced in)", list(candidates), key="sae-circuit-upstream", **KEEP)
    target = cols[1].radio("Explain", TARGETS, key="sae-circuit-target", **KEEP)
    rules = method_labels(rule_methods(lm.adapter))  # the LRP rule sets this model can run, from the registry
    if rules and st.session_state.get("sae-circuit-method") not in rules:
        st.session_state["sae-circuit-method"] = next(iter(rules))
    method = cols[2].radio("Rules", list(rules), key="sae-circuit-method", format_func=rules.get, **KEEP)
    feature, position = None, -1
    if target == TARGETS[0]:
        pair = st.columns(2)
        browsing = int(st.session_state.get("sae_feature", 0))  # as the other live views' boxes (_feature_input)
        follow("sae-circuit-feature", browsing, lambda: browsing)
        bounded("sae-circuit-feature", 0, store.d_sae - 1, "feature")
        feature = int(pair[0].number_input(f"Feature (0–{store.d_sae - 1})", 0, store.d_sae - 1,
                                           key="sae-circuit-feature", **KEEP))
        position = int(pair[1].number_input("Token position (-1 = last)", -1, 4096, key="sae-circuit-pos", **KEEP))
    submitted = st.button("Run", type="primary", key="sae-circuit-run")
    run = committed("sae-circuit", {"store": store.name, "upstream": upstream_name, "text": text, "target": target,
                                    "feature": feature, "position": position, "method": method, "bos": bos},
                    submitted)
    if run is None or run["store"] != store.name:
        st.info("Press **Run** (a backward pass through the spliced model, then one per top feature for its token "
                "edges).")
        return
    upstream = candidates[run["upstream"]]
    args = (lm, upstream, store if run["feature"] is not None else None, run["text"], run["feature"], run["position"],
            run["method"], run.get("bos"))
    cached = is_shared("circuit", _circuit_key(*args))
    with show_errors(), st.spinner("Propagating relevance through the spliced model…"):
        circuit = _circuit(*args)
    if run["feature"] is not None and circuit.value == 0:
        _not_active(store, lm, run)
        return
    c = circuit.conservation
    softmax = c.softmax or 0.0  # absent (None) where the rules send nothing through the softmaxes
    model_biases = c.model_biases or 0.0  # absent (None) where the model has no bias to absorb any
    target_biases = c.target_sae_biases or 0.0  # absent (None) for a logit target: no target SAE
    parts = [("input tokens", c.input_tokens), ("SAE error node", c.error_node),
             ("SAE biases", c.sae_biases + target_biases),
             *([("softmax (AttnLRP)", softmax)] if c.softmax is not None else []),
             *([("model biases", model_biases)] if c.model_biases is not None else []),
             ("rest", c.value - c.input_tokens - c.error_node - c.sae_biases - target_biases - softmax
              - model_biases)]
    st.markdown(f"**{circuit.method} circuit to {circuit.target}** · value {circuit.value:.4g} · "
                f"{timing(circuit.seconds, cached)}")
    fig = circuit_figure(circuit.nodes, circuit.edges, f"Strongest edges into {circuit.target} through "
                                                        f"{upstream.name}")
    event = st.plotly_chart(fig, key="sae-circuit-graph", on_select="rerun", selection_mode="points")
    export_menu(fig, circuit, key="sae-circuit", filename=f"circuit-{store.name}")
    st.plotly_chart(circuit_readout_figure(parts, circuit.value, "value"), key="sae-circuit-readout")
    share = c.upstream_features / circuit.value if circuit.value else 0.0
    dropped = f", the softmaxes drop {c.softmax:.3g}" if c.softmax is not None else ""
    st.caption(f"The upstream SAE's features carry {c.upstream_features:.3g} of the value ({share:.0%}); its error "
               f"term {c.error_node:.3g}; its biases {c.sae_biases:.3g}"
               + ("" if c.target_sae_biases is None
                  else f" (the target feature's own encoder biases {c.target_sae_biases:.3g})")
               + f". Below the splice the input tokens get "
               f"{c.input_tokens:.3g}{dropped}"
               f". Relative error {c.relative_error:.1e}. Click a feature to open it in {upstream.name}.")
    for point in getattr(getattr(event, "selection", None), "points", None) or []:
        feature_id = point.get("customdata")
        if isinstance(feature_id, int) and feature_id >= 0:
            open_in_store(upstream.name, feature_id)
            st.rerun()
    cols = st.columns(4)
    for k, top in enumerate(circuit.top_features(8)):
        cols[k % 4].button(f"#{top['feature']} · {top['relevance']:+.3g} · {upstream.labels[top['feature']][:40]}",
                           key=f"sae-circuit-open-{top['feature']}", on_click=open_in_store,
                           args=(upstream.name, top["feature"]), width="stretch")


def _not_active(store: FeatureStore, lm: LoadedModel, run: dict) -> None:
    """The chosen feature is 0 at the chosen token: say so and name the features that do fire there."""
    view = prompt_view(str(store.folder), (lm.name,) + device_dtype(), run["text"], 20, run.get("bos"))
    position = run["position"] if run["position"] >= 0 else len(view.tokens) + run["position"]
    firing = view.active_at(position, limit=5) if 0 < position < len(view.tokens) else []
    token = f" ({view.tokens[position]!r})" if 0 <= position < len(view.tokens) else ""
    st.info(f"Feature {run['feature']} is not active at token {position}{token} of this text: "
            "its value is 0, so there is nothing to propagate. "
            + firing_note(firing)
            + " Or explain the next-token logit.")
