"""The Activation patching page's "A set of pairs" mode (issue 45.15): the grids of many pairs of one template
averaged cell by cell, with their spread (interpscope.patching.dataset), the dataset-level figure of the AtP and RelP
papers. The shipped six IOI pairs, or an uploaded .jsonl / .csv of pairs."""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from components.export import export_menu
from interpscope.models.loading import LoadedModel
from interpscope.patching.dataset import PatchingSetResult, patch_set, read_pairs, shipped_pairs
from pages._common import committed, model_key, progress, shared, show_errors

SOURCES = ["The shipped IOI pairs (six, one template)", "Upload a file"]
PAGE = "patch-set"


def _pairs(source: str) -> list[dict] | None:
    if source == SOURCES[0]:
        return shipped_pairs("ioi")
    upload = st.file_uploader("Pairs: .jsonl (one {\"clean\", \"corrupt\", \"answer\", \"wrong\"} object per line) or "
                              ".csv (columns clean, corrupt, optional answer, wrong); the pairs of one template, so "
                              "their positions line up", type=["jsonl", "csv"], key="patch-set-upload")
    if upload is None:
        st.info("Upload a file of pairs, or choose the shipped IOI pairs.")
        return None
    with show_errors():
        return read_pairs(upload.getvalue(), upload.name)
    return None


def set_view(lm: LoadedModel, metric: str, components: list[str], methods: list[str], rules: str,
             prepend: bool | None) -> None:
    """Pick the pairs, Run, and show the mean grids with their spread (components, methods, metric and rules are the
    page's own inputs)."""
    source = st.radio("Pairs", SOURCES, key="patch-set-source", horizontal=True)
    pairs = _pairs(source)
    if not pairs:
        return
    st.dataframe(pd.DataFrame(pairs), hide_index=True, key="patch-set-pairs")
    st.caption(f"{len(pairs)} pairs. Each is patched as one pair is (real patching costs one forward pass per changed "
               "cell per pair: choose few components for a long set); pairs without answer / wrong use their "
               "prompts' top predictions.")
    submitted = st.button("Run over the pairs", type="primary", key="patch-set-run")
    inputs = {"pairs": json.dumps(pairs, sort_keys=True), "metric": metric, "components": ",".join(components),
              "methods": ",".join(methods), "rules": rules, "bos": prepend}
    run = committed(PAGE, inputs, submitted)
    if run is None:
        st.info("Press **Run over the pairs**: every pair's grids, then their mean and spread.")
        return
    key = (model_key(), *(run[k] for k in sorted(run)))
    with show_errors(), progress("Pairs patched", PAGE) as report:
        result: PatchingSetResult = shared("patching-set", key, lambda: patch_set(
            lm, json.loads(run["pairs"]), metric=run["metric"], components=run["components"],
            methods=run["methods"], relp_rules=run["rules"], prepend_bos=run["bos"], progress=report))
    for sentence in result.summary():
        st.markdown(sentence)
    if result.excluded:
        st.caption(f"Excluded positions (a prepended BOS or a measured sink in some pair; never ranked): "
                   f"{', '.join(map(str, result.excluded))}.")
    fig = result.figure()
    st.plotly_chart(fig, key="patch-set-fig")
    export_menu(fig, result, key="patch-set", filename="patching-set")
