"""SAE overview: how well an SAE reconstructs the model's activations, what splicing it in costs, and how often
its features fire (log10 density histogram, dead and dense fractions)."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from components.export import export_menu
from interpscope.config import InterpscopeError
from interpscope.figures.sae import evaluation_density_figure
from interpscope.limits import check_amounts
from interpscope.paths import display_path, user_path
from interpscope.sae import check_compatible, load_sae
from interpscope.sae.catalog import describe, list_saes
from interpscope.sae.evaluation import SAEEvaluation, evaluate_sae, text_windows
from interpscope.sae.sinks import SINK_FACTOR
from interpscope.sae.store import FeatureStore
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
from pages._sae_bench import show_bench
from pages._sae_releases import RELEASE, pick_release, release_names

PAGE = "sae-overview"
FOLDER = "A folder on this machine…"
SOURCES = ["Bundled corpus (held-out test split)", "My text"]
METRIC_HELP = {
    "L0": "Mean number of features active per token.",
    "FVU": "Fraction of variance unexplained: E||x - x_hat||^2 / total variance.",
    "Explained variance": "1 - FVU.",
    "Loss recovered": "(CE_zero - CE_sae) / (CE_zero - CE_clean): 1 = splicing the SAE in costs nothing.",
    "CE increase": "CE_sae - CE_clean: what splicing the SAE in adds to the next-token loss, in nats per token.",
    "Shrinkage γ": "E||x_hat||^2 / E[x·x_hat]; below 1 the SAE shrinks its reconstructions.",
}


def pick_sae(saes: dict[str, str]) -> str | None:
    labels = list(saes) + [RELEASE, FOLDER]
    choice = st.selectbox("SAE", labels, key="sae_overview_choice",
                          help="Shipped SAEs (assets/saes), SAEs trained on the SAE training page, a released "
                               "dictionary (Gemma Scope 2 for Gemma 3 270M, from the Hugging Face cache), or any "
                               "folder with cfg.json + sae_weights.safetensors (the common SAE library format) or "
                               "in a released layout (Gemma Scope params.safetensors / params.npz).")
    if choice == RELEASE:
        return pick_release("sae_overview_release", model_key()[0])
    if choice == FOLDER:
        typed = st.text_input("SAE folder", key="sae_overview_path", placeholder="/path/to/sae folder")
        if not typed.strip():
            st.info("Choose an SAE, or give a folder.")
            return None
        try:
            return str(user_path(typed, "SAE folder"))
        except InterpscopeError as err:
            st.error(str(err))
            return None
    return saes[choice]


def store_dead(path: str) -> tuple[int, int, int] | None:
    """(dead features, features, corpus tokens) from the feature store built for exactly this SAE, if any."""
    try:
        store = FeatureStore.for_sae(path)
    except InterpscopeError:
        return None
    return int((store.density == 0).sum()), store.d_sae, store.n_counted


def _evaluate(path: str, source: str, text: str | None, tokens: int, report) -> SAEEvaluation:
    lm = current_model()
    sae = load_sae(path)
    check_compatible(sae, lm.adapter, model_name=lm.name)
    ids = None
    if source == "My text":
        if not text:
            raise InterpscopeError("Give some text to evaluate on.")
        ids = text_windows(lm.tokenizer, text, max_tokens=tokens)
    return evaluate_sae(lm, sae, n_tokens=tokens, ids=ids, progress=report)


def show_result(result: SAEEvaluation, path: str) -> None:
    row1, row2 = st.columns(5), st.columns(4)
    row1[0].metric("L0", f"{result.l0:.1f}", help=METRIC_HELP["L0"])
    row1[1].metric("FVU", f"{result.fvu:.3f}", help=METRIC_HELP["FVU"])
    row1[2].metric("Explained variance", f"{result.explained_variance:.3f}", help=METRIC_HELP["Explained variance"])
    row1[3].metric("Loss recovered", f"{result.loss_recovered:.3f}", help=METRIC_HELP["Loss recovered"]
                   + f" Here CE_zero = {result.ce_zero:.3f} nats.")
    row1[4].metric("CE increase (nats)", f"{result.ce_increase:+.3f}", help=METRIC_HELP["CE increase"])
    st.caption(result.loss_sentence())
    row2[0].metric("Shrinkage γ", f"{result.shrinkage:.3f}", help=METRIC_HELP["Shrinkage γ"])
    row2[1].metric("KL (nats/token)", f"{result.kl:.3f}", help="E KL(p_clean || p_sae) of next-token distributions.")
    from_store = store_dead(path)
    if from_store:
        dead, d_sae, n_tokens = from_store
        row2[2].metric(f"Dead (store, {n_tokens:,} tok)", f"{dead / d_sae:.1%}",
                       help=f"{dead:,} of {d_sae:,} features never fired on the {n_tokens:,} corpus tokens of this "
                            "SAE's feature store (the figure the feature browser shows).")
    else:
        row2[2].metric(f"Dead ({result.n_tokens:,} tok)", f"{result.dead_fraction:.1%}",
                       help=f"Features that never fired on these {result.n_tokens:,} evaluation tokens (no feature "
                            "store exists for this SAE; build one for a figure over more tokens).")
    row2[3].metric("Dense", f"{result.dense_fraction:.1%}",
                   help=f"Fraction of features firing on more than {result.dense_threshold:.0%} of tokens.")
    table = [{"metric": key, "value": f"{value:.4g}" if isinstance(value, float) else str(value)}
             for key, value in result.summary().items()]
    st.dataframe(table, hide_index=True, width="stretch", height=38 + 35 * min(len(table), 10))
    dead_here = int(round(result.dead_fraction * result.d_sae))
    fig = evaluation_density_figure(result.log10_density_counts, result.log10_density_edges, result.dense_threshold,
                                    result.n_tokens, dead_here)
    st.plotly_chart(fig, width="stretch", key="sae_overview_density")
    export_menu(fig, result, key="sae-overview", filename="sae-evaluation")
    sentence = (f"On these {result.n_tokens:,} evaluation tokens {dead_here:,} of {result.d_sae:,} features "
                f"({result.dead_fraction:.1%}) did not fire")
    if from_store:
        dead, d_sae, n_tokens = from_store
        sentence += (f"; over the {n_tokens:,} tokens of its feature store, {dead:,} ({dead / d_sae:.1%}) never "
                     "fired: a feature can be rare rather than dead, so the larger sample is the one to trust")
    st.caption(sentence + f". Dense: {result.dense_fraction:.1%} fire on more than {result.dense_threshold:.0%} "
               "of tokens.")
    if result.sink_tokens:
        st.caption(f"{result.sink_tokens:,} token(s) past position 0 with a massive activation (norm > "
                   f"{SINK_FACTOR:g}x the batch median, attention sinks the SAE was not trained on) were left "
                   "untouched and out of the reconstruction figures, like position 0; the next-token losses include "
                   "them.")


def main() -> None:
    st.title("SAE overview")
    st.caption("Sparsity, reconstruction, loss recovered when the SAE's output replaces the activation, and the "
               "density of every feature. The first position of each window (the attention sink) is left as is.")
    saes = {label: str(path) for label, path in list_saes().items()}
    params = [Param("sae_overview_choice", "sae", next(iter(saes), FOLDER), choices=list(saes) + [RELEASE, FOLDER]),
              Param("sae_overview_release", "release", None, choices=release_names()),
              Param("sae_overview_source", "source", SOURCES[0], choices=SOURCES),
              Param("sae_overview_tokens", "tokens", 2048, int, low=128, high=65536),
              Param("sae_overview_text-text", "text", "")]
    url_inputs(PAGE, params)
    path = pick_sae(saes)
    if not path:
        write_url(params, run=PAGE)
        return
    with show_errors():
        info = describe(path) if (Path(path) / "cfg.json").is_file() else None
        if info:
            st.caption(f"{info['architecture']} SAE · {info['d_sae']:,} features on {info['hook_name']} of "
                       f"{display_path(str(info['model_name']))} · trained on {int(info['training_tokens'] or 0):,} "
                       "tokens")
    with st.expander("SAEBench-style metrics: absorption, sparse probing, explanation scores", expanded=True):
        show_bench(path)
    st.subheader("Reconstruction and sparsity")
    source = st.radio("Evaluate on", SOURCES, horizontal=True, key="sae_overview_source")
    text = text_source("sae_overview_text", "Text to evaluate on") if source == "My text" else None
    tokens = int(st.number_input("Tokens", min_value=128, max_value=65536, step=128, key="sae_overview_tokens",
                                 help="More tokens: steadier figures, slower."))
    with show_errors():
        check_amounts(eval_tokens=tokens)
    submitted = st.button("Evaluate", type="primary", key="sae_overview_run")
    run = committed(PAGE, {"path": path, "source": source, "text": text, "tokens": tokens}, submitted)
    write_url(params, run=PAGE)
    if run is None:
        return
    lm = current_model()
    if lm is None:
        return
    key = (model_key(), run["path"], run["source"], run["text"], run["tokens"])
    with show_errors(), progress("Evaluating: windows", PAGE) as report:
        result = shared("sae-eval", key, lambda: _evaluate(run["path"], run["source"], run["text"], run["tokens"],
                                                            report))
    info = describe(run["path"]) if (Path(run["path"]) / "cfg.json").is_file() else None
    if info and info.get("model_name") and info["model_name"] != lm.name:
        st.warning(f"This SAE was trained on {display_path(info['model_name'])}; the sidebar model is "
                   f"{display_path(lm.name)}. Shapes match, "
                   "but the figures only mean something on the model it was trained on.")
    show_result(result, run["path"])


main()
