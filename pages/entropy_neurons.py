"""Entropy neurons and token-frequency neurons (Stolfo et al., NeurIPS 2024): find them from the weights,
prove what they do by mean ablation, and watch them on induction and on your own text."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import streamlit as st

from components.export import export_menu
from components.tables import fit_columns
from interpscope.entropy_neurons import ablation as ablation_mod
from interpscope.entropy_neurons.cards import text_activations
from interpscope.entropy_neurons.induction import induction_study
from interpscope.entropy_neurons.page import neuron_card, neuron_page
from interpscope.entropy_neurons.page_store import corpus_means
from interpscope.entropy_neurons.store import DEFAULT_STORE_TOKENS
from interpscope.entropy_neurons.weights import default_k
from interpscope.figures import entropy_neurons as figs
from interpscope.limits import check_amounts
from interpscope.paths import display_path
from pages._common import (
    Param,
    committed,
    current_model,
    model_key,
    progress,
    shared,
    show_errors,
    text_source,
    url_inputs,
    write_url,
)
from pages._relevance_extras import bos_param, bos_toggle

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

PAGE = "neurons"
BOS_KEY = "en-text-bos"
VIEWS = ["Candidates", "Neuron detail", "Causal ablation", "Token-frequency neurons", "Induction", "Your text"]
DEFAULT_TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must "
                "be in want of a wife.")


def params(adapter) -> list[Param]:
    return [Param("en-view", "view", VIEWS[0], choices=VIEWS, scope="nav"),
            Param("en-layer", "layer", adapter.n_layers - 1, int, low=0, high=adapter.n_layers - 1),
            Param("en-k", "k", default_k(adapter.d_model), int, low=1, high=adapter.d_model - 1),
            Param("en-store-tokens", "tokens", DEFAULT_STORE_TOKENS, int, choices=[256, 1024, 2048, 4096, 8192]),
            Param("en-neurons", "neurons", ""), Param("en-abl-tokens", "abl_tokens", 2048, int, low=128, high=20000),
            Param("en-abl-random", "random", 8, int, low=0, high=32),
            Param("en-text-text", "text", DEFAULT_TEXT),
            bos_param(BOS_KEY),
            Param("en-tf-tokens", "tf_tokens", 1024, int, low=128, high=20000),
            Param("en-ind-seqs", "sequences", 4, int, low=1, high=64),
            Param("en-ind-half", "half", 40, int, low=4, high=256),
            Param("en-ind-random", "ind_random", 6, int, low=0, high=32)]


def _fmt(value) -> str:
    """A number, or a pair of numbers, short enough for a table cell."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple, np.ndarray)):
        return " / ".join(f"{float(v):+.3g}" for v in value)
    return f"{float(value):+.3g}"


def _write_note(post_scale: float | None) -> str:
    """What 'write' means for this layer: W_out's row, or its image through the MLP's output norm."""
    if post_scale is None:
        return " A neuron's write is its row of W_out."
    return (" This layer's MLP output passes through a norm before the residual, so a neuron's write is "
            f"gamma_post * w_out / r, at the norm's typical scale r = {post_scale:.3g} (its mean over the corpus "
            "sample, sinks left out).")


def open_neuron(label: str) -> None:
    """Callback: add neuron `label` to the chosen neurons (if it is not there) and show it in Neuron detail."""
    state = st.session_state
    listed = [s for s in str(state.get("en-neurons", "")).replace(" ", ",").split(",") if s]
    if label not in listed:
        state["en-neurons"] = ", ".join([*listed, label])
    state["en-view"] = "Neuron detail"
    state["en-detail-neuron"] = label


def candidates_view(lm: LoadedModel, page, chosen: list[str]) -> None:
    stats, layer = page.stats, page.layer
    in_layer = [int(n.split(".")[1]) for n in chosen if int(n.split(".")[0]) == layer]
    fig = figs.candidates_scatter(stats.norm, stats.logit_var, stats.rho, layer, stats.k, in_layer, lm.name)
    event = st.plotly_chart(fig, key="en-scatter", on_select="rerun", selection_mode="points")
    st.caption("Click a neuron to read its numbers; open it in Neuron detail from there.")
    export_menu(fig, stats, key="en-scatter", filename=f"entropy-candidates-layer{layer}")
    points = getattr(getattr(event, "selection", None), "points", None) or []
    clicked = next((p.get("customdata") for p in points if isinstance(p.get("customdata"), str)), None)
    if clicked and clicked.startswith(f"{layer}."):
        index = int(clicked.split(".")[1])
        st.markdown(f"**Clicked: neuron {clicked}**: rho {stats.rho[index]:.3f} (rank "
                    f"{int((stats.rho > stats.rho[index]).sum()) + 1} of {len(stats.rho)} by rho), ||write|| "
                    f"{stats.norm[index]:.3g}, LogitVar {stats.logit_var[index]:.3g}, rho x norm "
                    f"{stats.rho[index] * stats.norm[index]:.3g}.")
        st.button(f"Open {clicked} in Neuron detail", key="en-open-clicked", on_click=open_neuron, args=(clicked,))
    table = pd.DataFrame(stats.rows())
    table.insert(0, "neuron", [f"{r['layer']}.{r['index']}" for r in stats.rows()])
    table["null_space_norm"] = table["rho"] * table["norm"]
    table = table.drop(columns=["layer", "index"])
    best = table.iloc[int(table["rho"].idxmax())]
    st.markdown(f"**All neurons** (click a column header to sort). The highest null-space fraction is neuron "
                f"{best['neuron']} (rho {best['rho']:.3f}, ||write|| {best['norm']:.3g}); rho x norm is how much a "
                "neuron writes into the directions the unembedding cannot read." + _write_note(stats.post_scale))
    st.dataframe(table, hide_index=True, key="en-table", height=320,
                 column_config={"logit_var": st.column_config.NumberColumn("LogitVar", format="%.2e")})
    export_menu(None, stats.panel("table", table), key="en-table", filename=f"entropy-candidates-table-layer{layer}")


def detail_view(lm: LoadedModel, chosen: list[str], k: int, store_tokens: int) -> None:
    pick = st.selectbox("Neuron", chosen, key="en-detail-neuron")
    layer, index = (int(v) for v in pick.split("."))
    card_key = (model_key(), layer, index, k, store_tokens)
    detail = shared("neuron-card", card_key, lambda: neuron_card(lm, layer, index, k=k, n_tokens=store_tokens))
    if detail.histogram_counts is None:
        st.caption(f"Corpus activations of layer {layer} over {store_tokens:,} tokens are not computed yet (no "
                   "precomputed store for this model and layer).")
        if st.button("Compute them (cached on disk afterwards)", key="en-detail-run"):
            with progress("Corpus activations", PAGE) as report:
                detail = neuron_card(lm, layer, index, k=k, n_tokens=store_tokens, compute=True, progress=report)
            shared("neuron-card", card_key, lambda: detail)
    st.markdown(f"**{pick}**: rho = {detail.rho:.3f}, ||write|| = {detail.norm:.3f}." + _write_note(detail.post_scale))
    left, right = st.columns(2)
    with left:
        fig = figs.spectrum_figure(detail.singular_values, detail.cosines, detail.k, pick)
        st.plotly_chart(fig, key="en-spectrum")
        export_menu(fig, detail, key="en-spectrum", filename=f"spectrum-{pick}")
    with right:
        fig = figs.token_bars(detail.promoted, detail.suppressed, pick)
        st.plotly_chart(fig, key="en-tokens")
        export_menu(fig, detail.panel("tokens", {"promoted": detail.promoted, "suppressed": detail.suppressed}),
                    key="en-tokens",
                    filename=f"tokens-{pick}")
    if detail.histogram_counts is None:
        return
    fig = figs.histogram_figure(detail.histogram_counts, detail.histogram_edges, pick, detail.mean_activation)
    st.plotly_chart(fig, key="en-hist")
    export_menu(fig, detail.panel("histogram", {"counts": detail.histogram_counts, "edges": detail.histogram_edges}),
                key="en-hist",
                filename=f"histogram-{pick}")
    contexts = pd.DataFrame([{"activation": c.activation,
                              "context": "".join(f"[[{t}]]" if i == c.position else t for i, t in enumerate(c.tokens))}
                             for c in detail.contexts])
    st.markdown("**Top activating contexts** (the firing token in [[ ]], with the text before it)")
    if detail.excluded_tokens:
        st.caption(f"{detail.excluded_tokens:,} attention-sink tokens (position 0 of each window and massive "
                   "activations) are left out of the contexts, the histogram and the mean.")
    st.dataframe(contexts, hide_index=True, key="en-contexts")
    export_menu(None, detail.panel("contexts", contexts), key="en-contexts", filename=f"contexts-{pick}")


def _ablation(lm: LoadedModel, neurons: tuple, tokens: int, n_random: int, k: int, store_tokens: int, report):
    return shared("neuron-ablation", (model_key(), neurons, tokens, n_random, k, store_tokens),
                  lambda: ablation_mod.ablate(lm, list(neurons), n_tokens=tokens, n_random=n_random, k=k,
                                              mean_tokens=store_tokens, progress=report))


def ablation_view(lm: LoadedModel, chosen: list[str], k: int, store_tokens: int) -> None:
    cols = st.columns(2)
    n_tokens = int(cols[0].number_input("Held-out tokens", 128, 20_000, step=128, key="en-abl-tokens"))
    n_random = int(cols[1].number_input("Random neurons per layer", 0, 32, key="en-abl-random"))
    with show_errors():
        check_amounts(neuron_tokens=n_tokens, random_neurons=n_random)
    submitted = st.button("Run ablation", key="en-abl-run", type="primary")
    run = committed("en-abl", {"neurons": tuple(chosen), "tokens": n_tokens, "random": n_random}, submitted)
    if run is None:
        st.info("Mean-ablates each chosen neuron (and random neurons of the same layers) over held-out text: the total "
                "effect vs the direct effect with the final norm's scale frozen. Results are shared by every "
                "session. Press Run ablation.")
        return
    with show_errors(), progress("Mean ablation", "en-abl") as report:
        result = _ablation(lm, run["neurons"], run["tokens"], run["random"], k, store_tokens, report)
    effects = result.effects
    quantity = st.radio("Quantity", ["loss", "entropy"], horizontal=True, key="en-abl-quantity")
    fig = figs.effects_bars([e.neuron for e in effects], [getattr(e, f"{quantity}_total_abs") for e in effects],
                            [getattr(e, f"{quantity}_direct_abs") for e in effects],
                            [e.is_random for e in effects], quantity)
    st.plotly_chart(fig, key="en-abl-bars")
    export_menu(fig, result, key="en-abl-bars", filename="ablation-effects")
    chosen_rows, random_rows = result.chosen(), result.random()
    sentence = result.control_sentence(quantity)  # about the quantity the chart shows
    if sentence:
        st.caption(sentence)
    ablated = ", ".join(e.neuron for e in chosen_rows) or "no chosen neuron"
    st.caption(f"Mean-ablated {ablated} (and {len(random_rows)} random neurons) over {result.n_tokens} tokens: clean "
               f"loss {result.clean_loss:.3f}, clean entropy "
               f"{result.clean_entropy:.3f} nats, {result.seconds:.1f} s. Norm-mediated share = 1 - |direct| / "
               "|total| on mean |Δ loss|, left empty where |direct| > |total| or total ~0.")
    table = pd.DataFrame([{"neuron": e.neuron, "random": e.is_random, "rho": e.rho, "norm": e.norm,
                           "Δloss total": e.loss_total, "Δloss direct": e.loss_direct,
                           "|Δloss| total": e.loss_total_abs, "|Δloss| direct": e.loss_direct_abs,
                           "ΔH total": e.entropy_total, "ΔH direct": e.entropy_direct, "norm share": e.norm_share,
                           "note": e.norm_share_note} for e in effects])
    short = st.column_config.NumberColumn(format="%+.3g")
    st.dataframe(table, hide_index=True, key="en-abl-table", column_config=fit_columns(table, {
        name: short for name in table.columns if name.startswith(("Δ", "|Δ"))} | {
        "rho": st.column_config.NumberColumn(format="%.3f"), "norm": st.column_config.NumberColumn(format="%.3g"),
        "norm share": st.column_config.NumberColumn(format="%.3f")}))
    export_menu(None, result, key="en-abl-table", filename="ablation-table")
    fig = figs.share_scatter([e.rho for e in effects], [e.norm_share for e in effects],
                             [e.entropy_total_abs for e in effects], [e.neuron for e in effects],
                             [e.is_random for e in effects])
    st.plotly_chart(fig, key="en-abl-share")
    export_menu(fig, result.panel("rho_vs_share", effects), key="en-abl-share", filename="rho-vs-share")
    which = st.selectbox("Per-token view of", list(run["neurons"]), key="en-abl-token-neuron")
    row = list(run["neurons"]).index(which)
    fig = figs.activation_entropy_scatter(result.activation[row], result.clean_entropy_per_token, which)
    st.plotly_chart(fig, key="en-abl-token-fig")
    export_menu(fig, result.panel(f"per_token_{which}", {
        "activation": result.activation[row], "entropy": result.clean_entropy_per_token,
        "entropy_change_total": result.entropy_total_per_token[row]}),
                key="en-abl-token-fig", filename=f"activation-vs-entropy-{which}")


def frequency_view(lm: LoadedModel, page, k: int, store_tokens: int) -> None:
    stats, layer = page.stats, page.layer
    cosines = stats.unigram_cosine
    fig = figs.unigram_histogram(cosines, layer)
    st.plotly_chart(fig, key="en-uni-hist")
    order = np.argsort(-np.abs(cosines))[:20]
    top = pd.DataFrame([{"neuron": f"{layer}.{i}", "unigram_cosine": round(float(cosines[i]), 4),
                         "rho": round(float(stats.rho[i]), 4), "norm": round(float(stats.norm[i]), 4)} for i in order])
    export_menu(fig, stats.panel("unigram_cosines", top), key="en-uni-hist", filename=f"unigram-cosines-layer{layer}")
    st.markdown(f"**Highest |cosine| with the unigram direction**: {top['neuron'].iloc[0]} at "
                f"{top['unigram_cosine'].iloc[0]:+.3f} (token counts of the bundled corpus)")
    st.dataframe(top, hide_index=True, key="en-uni-table")
    export_menu(None, stats.panel("unigram_cosines", top),
                key="en-uni-table", filename=f"token-frequency-neurons-layer{layer}")
    tokens = int(st.number_input("Held-out tokens", 128, 20_000, step=128, key="en-tf-tokens"))
    with show_errors():
        check_amounts(neuron_tokens=tokens)
    submitted = st.button("Run frozen-unigram ablation of the top 3", key="en-tf-run")
    run = committed("en-tf", {"neurons": tuple(top["neuron"][:3]), "tokens": tokens}, submitted)
    if run is None:
        return
    with show_errors(), progress("Frozen-unigram ablation", "en-tf") as report:
        result = _ablation(lm, run["neurons"], run["tokens"], 0, k, store_tokens, report)
    rows = result.chosen()
    fig = figs.frozen_unigram_figure([e.neuron for e in rows], [e.loss_total_abs for e in rows],
                                     [e.loss_frozen_unigram_abs for e in rows], result.clean_kl_unigram,
                                     [e.kl_unigram_ablated for e in rows])
    st.plotly_chart(fig, key="en-tf-fig")
    export_menu(fig, result.panel("frozen_unigram", rows), key="en-tf-fig", filename="frozen-unigram-ablation")


def induction_view(lm: LoadedModel, chosen: list[str], store_tokens: int) -> None:
    cols = st.columns(3)
    n_seqs = int(cols[0].number_input("Sequences", 1, 64, key="en-ind-seqs"))
    half_len = int(cols[1].number_input("Tokens before repeating", 4, 256, key="en-ind-half"))
    n_random = int(cols[2].number_input("Random neurons", 0, 32, key="en-ind-random"))
    with show_errors():
        check_amounts(induction_sequences=n_seqs, induction_length=half_len, random_neurons=n_random)
    submitted = st.button("Run induction study", key="en-ind-run")
    run = committed("en-ind", {"neurons": tuple(chosen), "seqs": n_seqs, "half": half_len, "random": n_random},
                    submitted)
    if run is None:
        return

    def compute():
        layers = sorted({int(n.split(".")[0]) for n in run["neurons"]})
        with progress("Mean activations", "en-ind") as report:
            means = corpus_means(lm, layers, n_tokens=store_tokens, progress=report)
        return induction_study(lm, list(run["neurons"]), n_sequences=run["seqs"], half_len=run["half"],
                               n_random=run["random"], means=means)

    with show_errors(), st.spinner("Induction study…"):
        study = shared("neuron-induction", (model_key(), tuple(sorted(run.items())), store_tokens), compute)
    fig = figs.induction_figure(study.activation, study.neurons, study.is_random, study.entropy, study.loss,
                                study.half_len)
    st.plotly_chart(fig, key="en-ind-fig")
    summary = pd.DataFrame([{
        "neuron": n, "random": r, "mean act, 1st half": round(a, 4), "mean act, 2nd half": round(b, 4),
        "change / std": round(c, 3), "ΔH from ablation (1st / 2nd half)": _fmt(study.ablation_entropy_change.get(n)),
        "Δloss from ablation (1st / 2nd half)": _fmt(study.ablation_loss_change.get(n))}
        for n, r, a, b, c in zip(study.neurons, study.is_random, study.first_half_activation,
                                 study.second_half_activation, study.standardised_change, strict=True)])
    export_menu(fig, study, key="en-ind-fig", filename="induction")
    st.dataframe(summary, hide_index=True, key="en-ind-table", column_config=fit_columns(summary))
    export_menu(None, study.panel("summary", summary), key="en-ind-table", filename="induction-summary")


def text_view(lm: LoadedModel, chosen: list[str]) -> None:
    text = text_source("en-text", label="Text", default=DEFAULT_TEXT)
    if text is None:
        return
    prepend = bos_toggle(lm, st, key=BOS_KEY)
    submitted = st.button("Run", type="primary", key="en-text-run")
    run = committed("en-text", {"text": text, "neurons": tuple(chosen), "bos": prepend}, submitted)
    if run is None:  # the model runs on an explicit Run only, never on opening the view
        st.info("Press **Run** to read the chosen neurons, the entropy and the top prediction at every token of the "
                "text (one pass of the model).")
        return
    with show_errors(), st.spinner("Reading the neurons on the text…"):
        seen = shared("neuron-text", (model_key(), run["text"], run["neurons"], run["bos"]),
                      lambda: text_activations(lm, run["text"], list(run["neurons"]), prepend_bos=run["bos"]))
    excluded = seen.excluded_positions or []
    reasons = seen.reasons()
    fig = figs.text_figure(seen.tokens, seen.activation, seen.neurons, seen.entropy, excluded, reasons)
    st.plotly_chart(fig, key="en-text-fig")
    if not reasons:
        st.caption("Nothing is left out: no row is measured as a massive activation and no BOS was prepended.")
    table = pd.DataFrame({"token": seen.tokens, **{f"act {n}": seen.activation[i] for i, n in enumerate(seen.neurons)},
                          "excluded": [reasons.get(i, "") for i in range(len(seen.tokens))], "entropy": seen.entropy,
                          "top prediction": seen.top_prediction, "p(top)": seen.top_probability})
    export_menu(fig, seen.panel("table", table), key="en-text-fig", filename="your-text")
    st.dataframe(table, hide_index=True, key="en-text-table")


def main() -> None:
    st.title("Entropy neurons")
    st.caption("Entropy neurons write into directions the unembedding cannot read (W_U's bottom singular directions): "
               "they barely move the logits directly, but change the residual norm and so, through the final norm, "
               "how confident the model is. Token-frequency neurons push the logits along log unigram frequency. "
               "W_U is taken with the final norm's gain folded in (LayerNorm models: residual writes centred).")
    lm = current_model()
    if lm is None:
        return
    adapter = lm.adapter
    if not adapter.has_mlp:
        st.info(f"{lm.name} ({adapter.family}) has no MLP neurons: pick a transformer model in the sidebar.")
        return
    page_params = params(adapter)
    url_inputs(PAGE, page_params)
    cols = st.columns([1, 1, 1, 3])
    layer = int(cols[0].number_input("Layer", 0, adapter.n_layers - 1, key="en-layer",
                                     help="Entropy neurons live mostly in the final layer."))
    k = int(cols[1].number_input("k (bottom singular directions)", 1, adapter.d_model - 1, key="en-k",
                                 help="about 1% of d_model"))
    store_tokens = int(cols[2].select_slider("Corpus tokens", options=[256, 1024, 2048, 4096, 8192],
                                             key="en-store-tokens", help="Mean activations, histograms and top "
                                             "contexts come from this many tokens of the bundled corpus."))
    with show_errors():
        page = shared("neuron-page", (model_key(), layer, k), lambda: neuron_page(lm, layer, k))
    if not st.session_state.get("en-neurons"):
        st.session_state["en-neurons"] = ", ".join(page.default_neurons)
    neuron_text = cols[3].text_input("Neurons (LAYER.INDEX, comma-separated)", key="en-neurons",
                                     help="Default: the three highest-rho neurons of the layer.")
    with show_errors():
        chosen = [n.label for n in ablation_mod.parse_neurons(
            [s for s in neuron_text.replace(" ", ",").split(",") if s], adapter)]
    source = f"the precomputed store {display_path(page.store)}" if page.store else \
        "a live computation (no precomputed store for this model)"
    st.caption(f"Weight statistics and corpus data from {source}.")
    view = st.segmented_control("View", VIEWS, key="en-view") or VIEWS[0]
    runs = {"Causal ablation": "en-abl", "Token-frequency neurons": "en-tf", "Induction": "en-ind",
            "Your text": "en-text"}
    write_url(page_params, run=runs.get(view))  # before the slow part: a reload mid-run keeps the last Run's inputs
    with show_errors():
        if view == "Candidates":
            candidates_view(lm, page, chosen)
        elif view == "Neuron detail":
            detail_view(lm, chosen, k, store_tokens)
        elif view == "Causal ablation":
            ablation_view(lm, chosen, k, store_tokens)
        elif view == "Token-frequency neurons":
            frequency_view(lm, page, k, store_tokens)
        elif view == "Induction":
            induction_view(lm, chosen, store_tokens)
        else:
            text_view(lm, chosen)
    write_url(page_params, run=runs.get(view))  # and after it: a Run just pressed goes into the link


main()
