"""Interpscope: Streamlit entry point. Page config, navigation over pages/, and the sidebar model picker."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from interpscope.config import InterpscopeError
from interpscope.models.registry import BUNDLED, DEFAULT_MODEL, model_choice
from pages._guard import run_page

ROOT = Path(__file__).resolve().parent
# URL paths differ on purpose from the file names: Streamlit maps a first request for /<file stem> straight to
# pages/<file stem>.py (its old pages/ folder convention), skipping this entry script, its sidebar and navigation.
PAGES = [
    ("pages/home.py", "Home", ":material/home:", ""),
    ("pages/relevance.py", "Relevance maps", ":material/gradient:", "relevance-maps"),
    ("pages/flow.py", "Information flow", ":material/account_tree:", "information-flow"),
    ("pages/heads.py", "Attention heads", ":material/visibility:", "attention-heads"),
    ("pages/patching.py", "Activation patching", ":material/swap_horiz:", "activation-patching"),
    ("pages/graphs.py", "Attribution graphs", ":material/hub:", "attribution-graphs"),
    ("pages/sae_overview.py", "SAE overview", ":material/grid_view:", "sae-metrics"),
    ("pages/sae_features.py", "SAE feature browser", ":material/search:", "feature-browser"),
    ("pages/sae_training.py", "SAE training", ":material/model_training:", "train-sae"),
    ("pages/sae_pareto.py", "SAE Pareto frontiers", ":material/stacked_line_chart:", "sae-pareto"),
    ("pages/entropy_neurons.py", "Entropy neurons", ":material/thermostat:", "neurons"),
    ("pages/fourier.py", "Fourier features", ":material/graphic_eq:", "numbers-fourier"),
]
OTHER = "Other: Hugging Face id or local folder…"
DEMO_NOTE = ("No mixture-of-experts or T5 model ships (no such weights exist offline). Give a saved Mixtral, "
             "Qwen2-MoE, OLMoE or T5 / Flan-T5 folder, or write tiny random ones to try those views with "
             "`python scripts/make_demo_models.py` (a clone; it prints their folders).")

DEVICES = ["auto", "cpu", "cuda", "mps"]
DTYPES = ["float32", "bfloat16", "float16", "float64"]


def model_from_url(names: list[str]) -> None:
    """On a session's first run, the sidebar's model, device and dtype from the URL (pages write them there when
    they differ from the defaults, so a shared link opens on the same model); a device or dtype the picker does not
    offer is left out with a note."""
    state = st.session_state
    if state.get("_url-read-model"):
        return
    state["_url-read-model"] = True
    params = st.query_params
    model = (params.get("model") or "").strip()
    if model in BUNDLED:
        state["model_choice"] = model
    elif model and len(model) <= 500:
        state["model_choice"], state["model_custom"] = OTHER, model
    ignored = []
    for key, allowed in (("device", DEVICES), ("dtype", DTYPES)):
        value = params.get(key)
        if value in allowed:
            state[key] = value
        elif value is not None:
            ignored.append(f"{key}={value!r} (one of {', '.join(allowed)})")
    if ignored:
        st.warning(f"Ignored link parameter(s): {'; '.join(ignored)}.")
    state.setdefault("model_choice", DEFAULT_MODEL)


def model_picker() -> str | None:
    """Sidebar choice of model, device and dtype, kept in session_state for every page; returns why a typed
    model cannot be used (None when it can)."""
    refusal = None
    names = list(BUNDLED) + [OTHER]
    model_from_url(names)
    with st.sidebar:
        st.header("Model")
        choice = st.selectbox("Model", names, key="model_choice",
                              help="Bundled models work offline. Others must be a local folder or already in "
                                   "the Hugging Face cache.")
        if choice == OTHER:
            custom = st.text_input("Hugging Face id or folder", key="model_custom",
                                   placeholder="gpt2 or /path/to/model")
            st.caption(DEMO_NOTE)
            try:
                st.session_state["model_name"] = model_choice(custom) if custom.strip() else DEFAULT_MODEL
            except InterpscopeError as err:
                st.session_state.pop("model_name", None)
                refusal = str(err)
        else:
            st.session_state["model_name"] = choice
        st.selectbox("Device", DEVICES, key="device", help="auto = CUDA GPU if present, else Apple MPS, else CPU")
        st.selectbox("Dtype", DTYPES, key="dtype")
    return refusal


def main() -> None:
    st.set_page_config(page_title="Interpscope", page_icon=":material/biotech:", layout="wide")
    refusal = model_picker()
    pages = [st.Page(str(ROOT / path), title=title, icon=icon, default=not url, url_path=url or None)
             for path, title, icon, url in PAGES if (ROOT / path).is_file()]
    page = st.navigation(pages, position="sidebar")
    if refusal:
        st.error(f"Could not load model: {refusal}")
    else:
        run_page(page)


if __name__ == "__main__":
    main()
