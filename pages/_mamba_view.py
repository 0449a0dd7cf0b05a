"""The Mamba-only part of the relevance page: how far back the model looks, and why each MambaLRP rule is needed.

Shown by pages/relevance.py under the main map when the chosen model is a Mamba model.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from components.export import export_menu
from interpscope.corpus import sample_prompts
from interpscope.figures.relevance.mamba import distance_figure, fix_error_figure
from interpscope.relevance.api import make_target
from interpscope.relevance.mamba.analysis import conservation_by_disabled_fix, distance_profile
from interpscope.relevance.methods import get_method
from interpscope.results import Panel
from pages._common import current_model, model_key, progress, show_errors

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


@st.cache_data(show_spinner=False, max_entries=32)
def _fix_ablation(key: tuple, text: str, token: str | None, contrast: tuple | None) -> dict:
    lm = current_model()
    ids = lm.encode(text)
    ablation = conservation_by_disabled_fix(lm, ids, make_target(lm, ids, token=token, contrast=contrast))
    return {"labels": ablation.labels, "relative_errors": ablation.relative_errors,
            "target_logit": ablation.target_logit}


def _distance(key: tuple, n_prompts: int, method: str, progress) -> dict:
    profile = distance_profile(current_model(), sample_prompts(n_prompts), method=method, progress=progress)
    return {"distances": profile.distances, "share": profile.share, "signed": profile.signed,
            "counts": profile.counts, "n_prompts": profile.n_prompts, "method": method}


def mamba_view(lm: LoadedModel, text: str, token: str | None, contrast: tuple | None, labels: dict[str, str]) -> None:
    """Relevance vs distance over bundled prompts, and conservation error per disabled fix for this input."""
    st.subheader("Mamba: how far back the model looks")
    st.caption("Each prompt (Austen, test split) is explained for its predicted next token; relevance is "
               "normalised per prompt by its sum of |R| and averaged by distance from the predicted position.")
    columns = st.columns([1, 1, 2])
    n_prompts = columns[0].slider("Prompts", 2, 50, 10, key="mamba-distance-n")
    choices = [m for m in labels if not get_method(m).per_token_passes]  # one pass per token: slow on many prompts
    method = columns[1].selectbox("Method", choices, format_func=labels.get, key="mamba-distance-method")
    store = st.session_state.setdefault("mamba-distance-results", {})
    wanted = (model_key(), n_prompts, method)
    if columns[2].button("Compute relevance vs distance", key="mamba-distance-run"):
        with show_errors(), progress("Prompts", "mamba-distance") as report:
            store[wanted] = _distance(model_key(), n_prompts, method, report)
    if wanted in store:
        data = store[wanted]
        fig = distance_figure(data["distances"], data["share"], data["signed"], data["counts"], data["n_prompts"],
                              labels[method])
        st.plotly_chart(fig, key="mamba-distance-fig")
        export_menu(fig, Panel(of="interpscope.relevance", part="relevance_vs_distance", data=data),
                    key="mamba-distance", filename="mamba-relevance-vs-distance")

    st.subheader("Mamba: why each MambaLRP rule is needed")
    st.caption("Relative conservation error |sum of input relevance + bias shares - logit| / |logit| on this input, "
               "with all four fixes, with each one switched off alone, and with none (plain Gradient x Input).")
    with show_errors(), st.spinner("Explaining with each fix switched off…"):
        data = _fix_ablation(model_key(), text, token, contrast)
    fig = fix_error_figure(data["labels"], data["relative_errors"], "Conservation error per disabled fix")
    st.plotly_chart(fig, key="mamba-fix-fig")
    export_menu(fig, Panel(of="interpscope.relevance", part="conservation_per_fix", data=data),
                key="mamba-fix", filename="mamba-conservation-per-fix")
