"""Entropy neurons and token-frequency neurons (Stolfo et al., NeurIPS 2024): find them from the weights,
prove what they do by mean ablation, and watch them on induction and on your own text."""
from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from backend.neurons import ablation as ablation_mod
from backend.neurons.candidates import candidates
from backend.neurons.detail import neuron_detail, text_activations
from backend.neurons.induction import induction_study
from backend.neurons.store import DEFAULT_STORE_TOKENS, activation_stores, store_exists
from backend.neurons.weights import check_layer, default_k
from components import neuron_figures as figs
from components.export import export_menu
from pages._common import current_model, model_key, show_errors, text_source

st.title("Entropy neurons")
st.caption("Entropy neurons write into directions the unembedding cannot read (W_U's bottom singular directions): "
           "they barely move the logits directly, but change the residual norm and so, through the final norm, "
           "how confident the model is. Token-frequency neurons push the logits along log unigram frequency. "
           "W_U is taken with the final norm's weight folded in (LayerNorm models: residual writes centred).")

lm = current_model()
if lm is None:
    st.stop()
adapter = lm.adapter
if not adapter.has_mlp:
    st.info(f"{lm.name} ({adapter.family}) has no MLP neurons: pick a transformer model in the sidebar.")
    st.stop()
KEY = model_key()


def _progress(label: str):
    bar = st.progress(0.0, text=label)

    def update(fraction: float, text: str) -> None:
        bar.progress(min(max(fraction, 0.0), 1.0), text=text)
    return update


def _memo(name: str, args: tuple, compute):
    """Per-session memo of long computations (their progress bars must not be replayed by st.cache_data);
    the heavy corpus passes behind them are cached on disk for every session."""
    memo = st.session_state.setdefault("en-memo", {})
    key = (name, KEY, args)
    if key not in memo:
        memo[key] = compute(*args)
    return memo[key]


@st.cache_data(show_spinner="Weight statistics…", max_entries=32)
def _stats(key: tuple, layer: int, k: int):
    return candidates(current_model(), layer=layer, k=k)


def _detail(layer: int, index: int, k: int, store_tokens: int, with_corpus: bool):
    store = None
    if with_corpus:
        store = activation_stores(lm, [layer], n_tokens=store_tokens,
                                  progress=_progress("Corpus activations (cached on disk afterwards)…"))[layer]
    return neuron_detail(lm, layer, index, k=k, store=store)


def _ablation(neurons: tuple, tokens: int, n_random: int, k: int, store_tokens: int):
    return ablation_mod.ablate(lm, list(neurons), n_tokens=tokens, n_random=n_random, k=k,
                               mean_tokens=store_tokens, progress=_progress("Mean ablation…"))


def _induction(neurons: tuple, n_seqs: int, half_len: int, n_random: int, store_tokens: int):
    model = lm
    layers = sorted({int(n.split(".")[0]) for n in neurons})
    means = {layer: s.mean for layer, s in activation_stores(model, layers, n_tokens=store_tokens,
                                                             progress=_progress("Mean activations…")).items()}
    return induction_study(model, list(neurons), n_sequences=n_seqs, half_len=half_len, n_random=n_random,
                           means=means)


@st.cache_data(show_spinner="Running the model on your text…", max_entries=64)
def _text(key: tuple, text: str, neurons: tuple):
    return text_activations(current_model(), text, list(neurons))


with st.container(border=True):
    cols = st.columns([1, 1, 1, 3])
    layer = cols[0].number_input("Layer", min_value=0, max_value=adapter.n_layers - 1, value=adapter.n_layers - 1,
                                 key="en-layer", help="Entropy neurons live mostly in the final layer.")
    k = cols[1].number_input("k (bottom singular directions)", min_value=1, max_value=adapter.d_model - 1,
                             value=default_k(adapter.d_model), key="en-k", help="about 1% of d_model")
    store_tokens = cols[2].select_slider("Corpus tokens for means", options=[256, 1024, 2048, 4096, 8192],
                                         value=DEFAULT_STORE_TOKENS, key="en-store-tokens",
                                         help="Mean activations, histograms and top contexts come from this many "
                                              "tokens of the bundled corpus (computed once, cached on disk).")
    with show_errors():
        layer = check_layer(adapter, int(layer))
        stats = _stats(KEY, layer, int(k))
    default_neurons = ", ".join(f"{layer}.{i}" for i in stats.ranking()[:3])
    neuron_text = cols[3].text_input("Neurons (LAYER.INDEX, comma-separated)", value=default_neurons,
                                     key="en-neurons", help="Default: the three highest-rho neurons of the layer.")
    with show_errors():
        chosen = [n.label for n in ablation_mod.parse_neurons(
            [s for s in neuron_text.replace(" ", ",").split(",") if s], adapter)]

tabs = st.tabs(["Candidates", "Neuron detail", "Causal ablation", "Token-frequency neurons", "Induction",
                "Your text"])

with tabs[0]:
    in_layer = [int(n.split(".")[1]) for n in chosen if int(n.split(".")[0]) == layer]
    fig = figs.candidates_scatter(stats.norm, stats.logit_var, stats.rho, layer, stats.k, in_layer, lm.name)
    st.plotly_chart(fig, key="en-scatter")
    export_menu(fig, stats.rows(), key="en-scatter", filename=f"entropy-candidates-layer{layer}")
    table = pd.DataFrame(stats.rows())
    table.insert(0, "neuron", [f"{r['layer']}.{r['index']}" for r in stats.rows()])
    table["null_space_norm"] = table["rho"] * table["norm"]
    table = table.drop(columns=["layer", "index"])
    st.markdown("**All neurons** (click a column header to sort; rho x norm = how much the neuron writes into the "
                "null space)")
    st.dataframe(table, hide_index=True, key="en-table", height=320,
                 column_config={"logit_var": st.column_config.NumberColumn("LogitVar", format="%.2e")})
    export_menu(None, table, key="en-table", filename=f"entropy-candidates-table-layer{layer}")

with tabs[1]:
    pick = st.selectbox("Neuron", chosen, key="en-detail-neuron")
    d_layer, d_index = (int(v) for v in pick.split("."))
    with_corpus = store_exists(lm, d_layer, store_tokens) or st.session_state.get("en-detail-corpus", False)
    if not with_corpus and st.button(f"Compute corpus activations of layer {d_layer} ({store_tokens} tokens)",
                                     key="en-detail-run"):
        st.session_state["en-detail-corpus"] = with_corpus = True
    with show_errors():
        detail = _memo("detail", (d_layer, d_index, int(k), store_tokens, with_corpus), _detail)
    st.markdown(f"**{pick}**: rho = {detail.rho:.3f}, ||w_out|| = {detail.norm:.3f}")
    fig = figs.spectrum_figure(detail.singular_values, detail.cosines, detail.k, pick)
    st.plotly_chart(fig, key="en-spectrum")
    export_menu(fig, {"singular_values": detail.singular_values, "cosines": detail.cosines},
                key="en-spectrum", filename=f"spectrum-{pick}")
    fig = figs.token_bars(detail.promoted, detail.suppressed, pick)
    st.plotly_chart(fig, key="en-tokens")
    export_menu(fig, {"promoted": detail.promoted, "suppressed": detail.suppressed}, key="en-tokens",
                filename=f"tokens-{pick}")
    if detail.histogram_counts is not None:
        fig = figs.histogram_figure(detail.histogram_counts, detail.histogram_edges, pick, detail.mean_activation)
        st.plotly_chart(fig, key="en-hist")
        export_menu(fig, {"counts": detail.histogram_counts, "edges": detail.histogram_edges}, key="en-hist",
                    filename=f"histogram-{pick}")
        contexts = pd.DataFrame([{"activation": c.activation,
                                  "context": "".join(f"[[{t}]]" if i == c.position else t
                                                     for i, t in enumerate(c.tokens))} for c in detail.contexts])
        st.markdown("**Top activating contexts** (the firing token in [[ ]])")
        st.dataframe(contexts, hide_index=True, key="en-contexts")
        export_menu(None, contexts, key="en-contexts", filename=f"contexts-{pick}")

with tabs[2]:
    cols = st.columns(3)
    n_tokens = cols[0].number_input("Held-out tokens", 128, 20_000, 1024, step=128, key="en-abl-tokens")
    n_random = cols[1].number_input("Random neurons per layer", 0, 32, 8, key="en-abl-random")
    if cols[2].button("Run ablation", key="en-abl-run", type="primary"):
        st.session_state["en-abl-args"] = (tuple(chosen), int(n_tokens), int(n_random))
    args = st.session_state.get("en-abl-args")
    if args is None:
        st.info("Mean-ablates each chosen neuron (and random neurons of the same layers) over held-out text: "
                "total effect vs direct effect with the final norm's scale frozen. Press Run ablation.")
    else:
        with show_errors():
            result = _memo("ablation", (*args, int(k), store_tokens), _ablation)
        effects = result.effects
        quantity = st.radio("Quantity", ["loss", "entropy"], horizontal=True, key="en-abl-quantity")
        fig = figs.effects_bars([e.neuron for e in effects], [getattr(e, f"{quantity}_total_abs") for e in effects],
                                [getattr(e, f"{quantity}_direct_abs") for e in effects],
                                [e.is_random for e in effects], quantity)
        st.plotly_chart(fig, key="en-abl-bars")
        export_menu(fig, effects, key="en-abl-bars", filename="ablation-effects")
        st.caption(f"{result.n_tokens} tokens, clean loss {result.clean_loss:.3f}, clean entropy "
                   f"{result.clean_entropy:.3f} nats, {result.seconds:.1f} s. Norm-mediated share = 1 - |direct| / "
                   "|total| on mean |Δ loss|, left empty where |direct| > |total| or total ~0.")
        table = pd.DataFrame([{"neuron": e.neuron, "random": e.is_random, "rho": e.rho, "norm": e.norm,
                               "Δloss total": e.loss_total, "Δloss direct": e.loss_direct,
                               "|Δloss| total": e.loss_total_abs, "|Δloss| direct": e.loss_direct_abs,
                               "ΔH total": e.entropy_total, "ΔH direct": e.entropy_direct,
                               "norm share": e.norm_share, "note": e.norm_share_note} for e in effects])
        st.dataframe(table, hide_index=True, key="en-abl-table")
        export_menu(None, table, key="en-abl-table", filename="ablation-table")
        fig = figs.share_scatter([e.rho for e in effects], [e.norm_share for e in effects],
                                 [e.entropy_total_abs for e in effects], [e.neuron for e in effects],
                                 [e.is_random for e in effects])
        st.plotly_chart(fig, key="en-abl-share")
        export_menu(fig, table, key="en-abl-share", filename="rho-vs-share")
        which = st.selectbox("Per-token view of", list(args[0]), key="en-abl-token-neuron")
        row = list(args[0]).index(which)
        fig = figs.activation_entropy_scatter(result.activation[row], result.clean_entropy_per_token, which)
        st.plotly_chart(fig, key="en-abl-token-fig")
        export_menu(fig, {"activation": result.activation[row], "entropy": result.clean_entropy_per_token,
                          "entropy_change_total": result.entropy_total_per_token[row]},
                    key="en-abl-token-fig", filename=f"activation-vs-entropy-{which}")

with tabs[3]:
    cosines = stats.unigram_cosine
    fig = figs.unigram_histogram(cosines, layer)
    st.plotly_chart(fig, key="en-uni-hist")
    order = np.argsort(-np.abs(cosines))[:20]
    top = pd.DataFrame([{"neuron": f"{layer}.{i}", "unigram_cosine": float(cosines[i]), "rho": float(stats.rho[i]),
                         "norm": float(stats.norm[i])} for i in order])
    export_menu(fig, top, key="en-uni-hist", filename=f"unigram-cosines-layer{layer}")
    st.markdown("**Highest |cosine| with the unigram direction** (token counts of the bundled corpus, cached)")
    st.dataframe(top, hide_index=True, key="en-uni-table")
    export_menu(None, top, key="en-uni-table", filename=f"token-frequency-neurons-layer{layer}")
    cols = st.columns(3)
    tf_tokens = cols[0].number_input("Held-out tokens", 128, 20_000, 1024, step=128, key="en-tf-tokens")
    if cols[1].button("Run frozen-unigram ablation of the top 3", key="en-tf-run"):
        st.session_state["en-tf-args"] = (tuple(top["neuron"][:3]), int(tf_tokens))
    tf_args = st.session_state.get("en-tf-args")
    if tf_args is not None:
        with show_errors():
            tf = _memo("ablation", (*tf_args, 0, int(k), store_tokens), _ablation)
        rows = tf.chosen()
        fig = figs.frozen_unigram_figure([e.neuron for e in rows], [e.loss_total_abs for e in rows],
                                         [e.loss_frozen_unigram_abs for e in rows], tf.clean_kl_unigram,
                                         [e.kl_unigram_ablated for e in rows])
        st.plotly_chart(fig, key="en-tf-fig")
        export_menu(fig, rows, key="en-tf-fig", filename="frozen-unigram-ablation")

with tabs[4]:
    cols = st.columns(4)
    n_seqs = cols[0].number_input("Sequences", 1, 64, 4, key="en-ind-seqs")
    half_len = cols[1].number_input("Tokens before repeating", 4, 256, 40, key="en-ind-half")
    ind_random = cols[2].number_input("Random neurons", 0, 32, 6, key="en-ind-random")
    if cols[3].button("Run induction study", key="en-ind-run"):
        st.session_state["en-ind-args"] = (tuple(chosen), int(n_seqs), int(half_len), int(ind_random))
    ind_args = st.session_state.get("en-ind-args")
    if ind_args is not None:
        with show_errors():
            study = _memo("induction", (*ind_args, store_tokens), _induction)
        fig = figs.induction_figure(study.activation, study.neurons, study.is_random, study.entropy, study.loss,
                                    study.half_len)
        st.plotly_chart(fig, key="en-ind-fig")
        summary = pd.DataFrame([{
            "neuron": n, "random": r, "mean act, 1st half": a, "mean act, 2nd half": b, "change / std": c,
            "ΔH from ablation (1st, 2nd half)": study.ablation_entropy_change.get(n),
            "Δloss from ablation (1st, 2nd half)": study.ablation_loss_change.get(n)}
            for n, r, a, b, c in zip(study.neurons, study.is_random, study.first_half_activation,
                                     study.second_half_activation, study.standardised_change)])
        export_menu(fig, study, key="en-ind-fig", filename="induction")
        st.dataframe(summary, hide_index=True, key="en-ind-table")
        export_menu(None, summary, key="en-ind-table", filename="induction-summary")

with tabs[5]:
    text = text_source("en-text", label="Text", default="It is a truth universally acknowledged, that a single man "
                                                        "in possession of a good fortune, must be in want of a wife.")
    if text is not None:
        with show_errors():
            seen = _text(KEY, text, tuple(chosen))
        fig = figs.text_figure(seen.tokens, seen.activation, seen.neurons, seen.entropy)
        st.plotly_chart(fig, key="en-text-fig")
        table = pd.DataFrame({"token": seen.tokens, **{f"act {n}": seen.activation[i] for i, n in
                                                        enumerate(seen.neurons)},
                              "entropy": seen.entropy, "top prediction": seen.top_prediction,
                              "p(top)": seen.top_probability})
        export_menu(fig, table, key="en-text-fig", filename="your-text")
        st.dataframe(table, hide_index=True, key="en-text-table")
