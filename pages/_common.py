"""What every page shares: the loaded model for the sidebar choice, text input (paste or upload), errors."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import streamlit as st

from backend.config import InterpscopeError
from backend.inputs import check_text, parse_examples
from backend.models import LoadedModel, load_model
from backend.models.registry import DEFAULT_MODEL


def model_key() -> tuple[str, str, str]:
    state = st.session_state
    return (state.get("model_name") or DEFAULT_MODEL, state.get("device", "auto"), state.get("dtype", "float32"))


def current_model() -> LoadedModel | None:
    """The model chosen in the sidebar, from the process's one model cache (one copy per resolved location, device
    and dtype, shared by all sessions; backend.models.cache); None on error."""
    name, device, dtype = model_key()
    from backend.models import smollm2

    first = name == "smollm2-135m" and not smollm2.is_converted()
    message = f"Loading {name}" + (" (first use: converting the bundled GGUF once, ~30 s)…" if first else "…")
    try:
        with st.spinner(message):
            return load_model(name, device=device, dtype=dtype)
    except InterpscopeError as err:
        st.error(f"Could not load model: {err}")
        return None


@contextmanager
def show_errors() -> Iterator[None]:
    """Turn errors meant for the user into a message in the page instead of a traceback."""
    try:
        yield
    except InterpscopeError as err:
        st.error(str(err))
        st.stop()


def text_source(key: str, label: str = "Text", default: str = "", height: int = 120) -> str | None:
    """A paste box, or an upload (.txt/.md one example per line, .csv text column, .jsonl "text") with a row
    pick. Returns checked text, or None after showing why the input can't be used."""
    mode = st.radio("Input", ["Paste text", "Upload a file"], horizontal=True, key=f"{key}-mode",
                    label_visibility="collapsed")
    if mode == "Paste text":
        text = st.text_area(label, value=default, height=height, key=f"{key}-text")
    else:
        upload = st.file_uploader("Upload .txt, .md, .csv (a text column) or .jsonl (a \"text\" field)",
                                  type=["txt", "md", "csv", "jsonl"], key=f"{key}-upload")
        if upload is None:
            st.info("Choose a file to upload; each line (or row) is one example.")
            return None
        try:
            examples = parse_examples(upload.getvalue(), upload.name)
        except InterpscopeError as err:
            st.error(str(err))
            return None
        preview = [{"row": i, "text": t[:120] + ("…" if len(t) > 120 else "")} for i, t in enumerate(examples[:500])]
        st.dataframe(preview, hide_index=True, height=min(240, 38 + 35 * len(preview)))
        row = st.number_input(f"Row (0–{len(examples) - 1})", min_value=0, max_value=len(examples) - 1, value=0,
                              key=f"{key}-row")
        text = examples[int(row)]
    try:
        return check_text(text)
    except InterpscopeError as err:
        st.warning(str(err))
        return None
