"""Home: the model card and a next-token box."""
from __future__ import annotations

import streamlit as st

from components.export import export_menu
from components.model_card import model_card
from interpscope.figures.predict import token_chips
from interpscope.models.memory import run_checked
from interpscope.predict import Prediction, predict_next
from pages._common import Param, current_model, model_key, shared, show_errors, text_source, url_inputs, write_url
from pages._relevance_extras import bos_default, bos_toggle

DEFAULT_TEXT = "The capital of France is"
PARAMS = [Param("home-text", "text", DEFAULT_TEXT), Param("home-top", "top", 10, int, low=3, high=30)]


def params(lm) -> list[Param]:
    """The page's link inputs; the BOS choice goes in the link only when it differs from the model's default (the
    pages that take no such input would otherwise be handed bos=1 on every visit from Home)."""
    return [*PARAMS, Param("home-bos", "bos", bos_default(lm), bool)]


def _predict(text: str, top: int, prepend: bool) -> Prediction:
    return shared("predict", (model_key(), text, top, prepend), lambda: run_checked(
        current_model(), "predict", text, lambda: predict_next(current_model(), text, top=top, prepend_bos=prepend)))


def main() -> None:
    st.title("Interpscope")
    st.caption("Look inside language models: relevance maps, sparse-autoencoder features, entropy neurons and "
               "Fourier features of numbers. Pick a model in the sidebar.")
    lm = current_model()
    if lm is None:
        url_inputs("home", PARAMS)
        return
    url_inputs("home", params(lm))
    model_card(lm.card())

    st.subheader("Next token")
    text = text_source("home", label="Text", default=DEFAULT_TEXT, height=90)
    top = st.slider("How many tokens", 3, 30, key="home-top")
    prepend = bos_toggle(lm, st, key="home-bos")
    write_url(params(lm))
    if text is None:
        return
    with show_errors():
        result = _predict(text, int(top), prepend)
    fig = result.figure()
    st.plotly_chart(fig, key="home-chart")
    export_menu(fig, result, key="home-prediction", filename="next-token")
    first = (f"{result.tokens[0]!r} put first, as every view runs a text by default (switch it off above)"
             if result.bos_prepended else "nothing put before the text")
    st.markdown(f"**Tokenisation** ({len(result.tokens)} tokens the model ran: {first})")
    st.markdown(token_chips(result.tokens), unsafe_allow_html=True)


main()
