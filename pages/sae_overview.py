"""SAE overview: how well an SAE reconstructs the model's activations, what splicing it in costs, and how often
its features fire (log10 density histogram, dead and dense fractions)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from backend.config import InterpscopeError
from backend.paths import user_path
from backend.sae import check_compatible, load_sae
from backend.sae.catalog import describe, list_saes
from backend.sae.evaluation import SAEEvaluation, evaluate_sae, text_windows
from backend.sae.sinks import SINK_FACTOR
from components.export import export_menu
from pages._common import current_model, show_errors, text_source

FOLDER = "A folder on this machine…"
METRIC_HELP = {
    "L0": "Mean number of features active per token.",
    "FVU": "Fraction of variance unexplained: E||x - x_hat||^2 / total variance.",
    "Explained variance": "1 - FVU.",
    "Loss recovered": "(CE_zero - CE_sae) / (CE_zero - CE_clean): 1 = splicing the SAE in costs nothing.",
    "Shrinkage γ": "E||x_hat||^2 / E[x·x_hat]; below 1 the SAE shrinks its reconstructions.",
    "Dead": "Fraction of features that never fired on these tokens.",
}


def density_figure(result: SAEEvaluation) -> go.Figure:
    edges = result.log10_density_edges
    centres = (edges[:-1] + edges[1:]) / 2
    fig = go.Figure(go.Bar(x=centres, y=result.log10_density_counts, width=np.diff(edges),
                           marker_color="#4c78a8", name="features",
                           hovertemplate="log10 density %{x:.2f}<br>%{y} features<extra></extra>"))
    dense = np.log10(result.dense_threshold)
    fig.add_vline(x=dense, line_dash="dash", line_color="#e45756",
                  annotation_text=f"dense > {result.dense_threshold:g}", annotation_position="top left")
    dead = int(round(result.dead_fraction * result.d_sae))
    fig.update_layout(title=f"Feature density over {result.n_tokens:,} tokens ({dead:,} dead features not shown)",
                      xaxis_title="log10(fraction of tokens on which the feature fires)",
                      yaxis_title="number of features", bargap=0.05, height=380, margin=dict(t=60, b=50))
    return fig


def pick_sae() -> str | None:
    saes = {label: str(path) for label, path in list_saes().items()}
    labels = list(saes) + [FOLDER]
    choice = st.selectbox("SAE", labels, key="sae_overview_choice",
                          help="Shipped SAEs (assets/saes), SAEs trained on the SAE training page, or any folder "
                               "with cfg.json + sae_weights.safetensors (the common SAE library format).")
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


def main() -> None:
    st.title("SAE overview")
    st.caption("Sparsity, reconstruction, loss recovered when the SAE's output replaces the activation, and the "
               "density of every feature. The first position of each window (the attention sink) is left as is.")
    path = pick_sae()
    if not path:
        return
    with show_errors():
        info = describe(path) if (Path(path) / "cfg.json").is_file() else None
        if info:
            st.caption(f"{info['architecture']} SAE · {info['d_sae']:,} features on {info['hook_name']} of "
                       f"{info['model_name']} · trained on {int(info['training_tokens'] or 0):,} tokens")
    source = st.radio("Evaluate on", ["Bundled corpus (held-out test split)", "My text"], horizontal=True,
                      key="sae_overview_source")
    text = None
    if source == "My text":
        text = text_source("sae_overview_text", "Text to evaluate on")
    tokens = int(st.number_input("Tokens", min_value=128, max_value=65536, value=2048, step=128,
                                 key="sae_overview_tokens", help="More tokens: steadier figures, slower (three "
                                 "model passes per window: clean, SAE spliced in, zeroed)."))
    if st.button("Evaluate", type="primary", key="sae_overview_run"):
        lm = current_model()
        if lm is None:
            return
        with show_errors():
            sae = load_sae(path)
            check_compatible(sae, lm.adapter, model_name=lm.name)
            if sae.cfg.model_name and sae.cfg.model_name != lm.name:
                st.warning(f"This SAE was trained on {sae.cfg.model_name}; the sidebar model is {lm.name}. "
                           "Shapes match, but the figures only mean something on the model it was trained on.")
            ids = None
            if source == "My text":
                if not text:
                    raise InterpscopeError("Give some text to evaluate on.")
                ids = text_windows(lm.tokenizer, text, max_tokens=tokens)
            bar = st.progress(0.0, text="Evaluating…")
            result = evaluate_sae(lm, sae, n_tokens=tokens, ids=ids,
                                  progress=lambda done, total: bar.progress(done / total,
                                                                            text=f"Window {done}/{total}"))
            bar.empty()
            st.session_state["sae_overview_result"] = (path, lm.name, result)
    stored = st.session_state.get("sae_overview_result")
    if not stored or stored[0] != path:
        return
    result: SAEEvaluation = stored[2]
    row1, row2 = st.columns(4), st.columns(4)
    row1[0].metric("L0", f"{result.l0:.1f}", help=METRIC_HELP["L0"])
    row1[1].metric("FVU", f"{result.fvu:.3f}", help=METRIC_HELP["FVU"])
    row1[2].metric("Explained variance", f"{result.explained_variance:.3f}", help=METRIC_HELP["Explained variance"])
    row1[3].metric("Loss recovered", f"{result.loss_recovered:.3f}", help=METRIC_HELP["Loss recovered"])
    row2[0].metric("Shrinkage γ", f"{result.shrinkage:.3f}", help=METRIC_HELP["Shrinkage γ"])
    row2[1].metric("KL (nats/token)", f"{result.kl:.3f}", help="E KL(p_clean || p_sae) of next-token distributions.")
    row2[2].metric("Dead", f"{result.dead_fraction:.1%}", help=METRIC_HELP["Dead"])
    row2[3].metric("Dense", f"{result.dense_fraction:.1%}",
                   help=f"Fraction of features firing on more than {result.dense_threshold:.0%} of tokens.")
    summary = result.summary()
    table = [{"metric": key, "value": value} for key, value in summary.items()]
    st.dataframe(table, hide_index=True, width="stretch", height=38 + 35 * min(len(table), 10))
    fig = density_figure(result)
    st.plotly_chart(fig, width="stretch", key="sae_overview_density")
    st.caption(f"Dead: {result.dead_fraction:.1%} of features never fired on these {result.n_tokens:,} tokens. "
               f"Dense: {result.dense_fraction:.1%} fire on more than {result.dense_threshold:.0%} of tokens.")
    if result.sink_tokens:
        st.caption(f"{result.sink_tokens:,} token(s) past position 0 with a massive activation (norm > "
                   f"{SINK_FACTOR:g}x the batch median, attention sinks the SAE was not trained on) were left "
                   "untouched and out of the reconstruction figures, like position 0; the next-token losses include "
                   "them.")
    export_menu(fig, {"summary": summary, "density": result.density,
                      "log10_density_edges": result.log10_density_edges,
                      "log10_density_counts": result.log10_density_counts},
                key="sae_overview", filename="sae_overview")


main()
