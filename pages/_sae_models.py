"""The SAE pages' shared loaders: a store's SAE and model (the model the store names, on the sidebar's device and
dtype) and a prompt's feature activations, cached per process. Both the live views and the circuit view read them,
so they live here rather than in either (the two pages used to import each other's private helpers)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from interpscope.models import load_model
from interpscope.sae.store import FeatureStore
from interpscope.sae.store.prompt import PromptFeatures, prompt_features

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


def device_dtype() -> tuple[str, str]:
    """The sidebar's device and dtype."""
    return st.session_state.get("device", "auto"), st.session_state.get("dtype", "float32")


@st.cache_resource(show_spinner=False, max_entries=4)
def store_sae(store_path: str):
    return FeatureStore(store_path).load_sae()


def store_lm(store: FeatureStore, model_key: tuple) -> LoadedModel:
    """The store's model; model_key is (name, device, dtype)."""
    return load_model(store.spec["model_name"], device=model_key[1], dtype=model_key[2])


@st.cache_data(show_spinner=False, max_entries=32)
def prompt_view(store_path: str, model_key: tuple, text: str, n_top: int, bos: bool | None = None) -> PromptFeatures:
    """Every feature's activation on every token of `text` (see interpscope.sae.store.prompt)."""
    store = FeatureStore(store_path)
    return prompt_features(store_lm(store, model_key), store_sae(store_path), text, n_top, prepend_bos=bos)


def firing_note(firing: list[dict]) -> str:
    """The sentence naming the features active at a token (PromptFeatures.active_at rows, strongest first), for a
    view that was asked about a feature that is 0 there."""
    names = ", ".join(f"#{row['feature']} ({row['activation']:.3g})" for row in firing)
    return f"Features active there, strongest first: {names}." if names else "No feature is active there."
