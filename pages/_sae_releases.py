"""The released-dictionary picker of the SAE pages: the catalogue's releases for the sidebar model (Gemma Scope 2
for Gemma 3 270M), each marked cached or not; choosing one resolves it through the Hugging Face cache
(interpscope.sae.releases: offline first, downloads only where allowed) into an SAE folder the page then reads."""
from __future__ import annotations

import streamlit as st

from interpscope.config import InterpscopeError
from interpscope.sae import releases

RELEASE = "A released dictionary (Gemma Scope, …)"


def release_names() -> list[str]:
    """Every catalogued RELEASE/SAE_ID (the URL parameter's allowed values)."""
    return [entry.name for entries in releases.catalogue().values() for entry in entries]


def pick_release(key: str, model_name: str | None) -> str | None:
    """A selectbox of the catalogue's dictionaries for model_name (all when None), cached ones first; returns the
    chosen dictionary's SAE folder, or None (nothing for this model, or it could not be had: said on the page)."""
    rows = releases.listing(model_name)
    if not rows:
        shown = model_name or "this model"
        st.info(f"The catalogue lists no released dictionaries for {shown}; they exist for "
                f"{', '.join(sorted({releases.release_model(e[0]) for e in releases.catalogue().values()}))}.")
        return None
    rows.sort(key=lambda row: (not row["cached"], row["name"]))
    labels = {row["name"]: (f"{'● cached' if row['cached'] else '○ not cached'} · {row['name']} · {row['kind']} on "
                            f"{row['hook']}{' → ' + row['hook_out'] if row['hook_out'] else ''} · "
                            f"{row['width']:,} features · L0 {row['l0']}") for row in rows}
    if st.session_state.get(key) not in labels:
        st.session_state.pop(key, None)
    name = st.selectbox("Released dictionary", list(labels), key=key, format_func=labels.get,
                        help="SAELens's names (RELEASE/SAE_ID). Cached: its weights are in the Hugging Face cache "
                             "(HF_HUB_CACHE). Others are downloaded only when this machine is online and not a shared "
                             "server; the command line takes the same names: --sae RELEASE/SAE_ID.")
    if name is None:
        return None
    try:
        with st.spinner(f"Reading {name} from the Hugging Face cache…"):
            return str(releases.resolve(name, model_name=model_name))
    except InterpscopeError as err:
        st.error(str(err))
        return None
