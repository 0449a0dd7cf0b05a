"""The relevance page for an encoder-decoder (T5, Flan-T5): the source text, an optional decoder prefix, the target
(the next decoder token after the prefix: predicted, picked, or A rather than B), a method, and on Run two aligned
heatmaps (source; decoder input) on one colour scale with the conservation readout and the JSON/CSV/figure export
(the same document as `interpscope explain --decoder-text ... --json`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from components.export import export_menu
from interpscope.figures.relevance.seq2seq import pair_html, readout_figure, seq2seq_readout, split_sentence
from interpscope.relevance.methods import get_method
from interpscope.relevance.seq2seq import Seq2SeqRelevance, explain_seq2seq, next_decoder_tokens, seq2seq_methods
from pages._common import (
    Param,
    committed,
    is_shared,
    model_key,
    progress,
    shared,
    show_errors,
    text_source,
    timing,
    url_inputs,
    write_url,
)
from pages._method_options import method_options, option_params

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

PAGE = "relevance"
DEFAULT_SOURCE = "translate English to German: The house is wonderful."
TARGETS = ["Predicted next token", "A token I pick", "A rather than B"]


def params(methods: list[str]) -> list[Param]:
    return [Param("relevance-text", "text", DEFAULT_SOURCE),
            Param("relevance-decoder", "decoder", ""),
            Param("relevance-s2s-method", "method", methods[0], choices=methods),
            Param("relevance-s2s-target", "target", TARGETS[0], choices=TARGETS),
            Param("relevance-s2s-pick", "pick", None), Param("relevance-s2s-a", "a", ""),
            Param("relevance-s2s-b", "b", ""), *option_params("relevance", "")]


def _top(lm: LoadedModel, text: str, prefix: str) -> list[str]:
    return shared("s2s-top10", (model_key(), text, prefix), lambda: [
        p.token for p in next_decoder_tokens(lm, text, prefix or None)])


def _targets(top: list[str]) -> tuple[str, str | None, tuple[str, str] | None]:
    kind = st.radio("Explain the next decoder token", TARGETS, horizontal=True, key="relevance-s2s-target")
    token, contrast = None, None
    if kind == "A token I pick":
        if st.session_state.get("relevance-s2s-pick") not in top:
            st.session_state["relevance-s2s-pick"] = top[0]
        token = st.selectbox("Next decoder token (top 10)", top, format_func=repr, key="relevance-s2s-pick")
    elif kind == "A rather than B":
        pair = st.columns(2)
        if not st.session_state.get("relevance-s2s-a"):
            st.session_state["relevance-s2s-a"] = top[0]
        if not st.session_state.get("relevance-s2s-b"):
            st.session_state["relevance-s2s-b"] = top[1] if len(top) > 1 else ""
        contrast = (pair[0].text_input("A", key="relevance-s2s-a"), pair[1].text_input("B", key="relevance-s2s-b"))
    return kind, token, contrast


def show_result(result: Seq2SeqRelevance, cached: bool) -> None:
    """The two heatmaps on one scale, the split against its uniform control, the export and the readout."""
    st.markdown(f"**{result.title}** · {timing(result.seconds, cached)}")
    st.markdown(pair_html(result.source_tokens, result.source_relevance, result.decoder_tokens,
                          result.decoder_relevance, result.colour_scale, result.source_sinks, result.decoder_sinks),
                unsafe_allow_html=True)
    st.caption(split_sentence(result))
    export_menu(result.figure(), result, key="map-seq2seq", filename=f"relevance-seq2seq-{result.method}")
    data = seq2seq_readout(result)
    st.markdown(f"**{data.value_label}:** {data.value:.4g}")
    if len(data.parts) > 1:
        st.plotly_chart(readout_figure(data), key="readout-seq2seq", config={"displayModeBar": False})
    st.caption(data.sentence)


def seq2seq_view(lm: LoadedModel) -> None:
    """The whole page body for an encoder-decoder model."""
    labels = seq2seq_methods()
    page_params = params(list(labels))
    url_inputs(PAGE, page_params)
    st.caption(f"{lm.name} is an encoder-decoder: the text goes to the encoder, and the explained token is the "
               "decoder's next token after the decoder prefix (the first decoder token when the prefix is empty). "
               "Relevance covers both the source tokens and the decoder input.")
    text = text_source(PAGE, label="Source text (encoder input)", default=DEFAULT_SOURCE)
    if text is None:
        write_url(page_params, run=PAGE)
        return
    prefix = st.text_input("Decoder prefix (optional)", key="relevance-decoder",
                           help="Tokens the decoder has already produced; the start token comes before them.")
    with show_errors():
        top = _top(lm, text, prefix)
    kind, token, contrast = _targets(top)
    method = st.selectbox("Method", list(labels), format_func=labels.get, key="relevance-s2s-method")
    options = method_options("relevance", method)
    submitted = st.button("Run", type="primary", key="relevance-run")
    inputs = {"text": text, "prefix": prefix, "kind": kind, "token": token, "contrast": contrast, "method": method,
              "options": options}
    run = committed(PAGE, inputs, submitted)
    write_url(page_params, run=PAGE)
    if run is None:
        st.info("Choose a method and a target, then press **Run**.")
        return
    key = (model_key(), run["text"], run["prefix"], run["method"], run["token"], run["contrast"], run["options"])
    cached = is_shared("explain-seq2seq", key)
    with show_errors(), progress(f"Explaining with {labels[run['method']]}", PAGE) as report:
        result = shared("explain-seq2seq", key, lambda: explain_seq2seq(
            lm, run["text"], run["prefix"] or None, run["method"], token=run["token"], contrast=run["contrast"],
            options=run["options"], progress=report if get_method(run["method"]).options else None))
    show_result(result, cached)
