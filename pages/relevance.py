"""Relevance maps: which input tokens made the model predict what it did (AttnLRP, CP-LRP and baselines)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from components.export import export_menu
from components.relevance_readout import show_readout
from components.token_heatmap import token_heatmap
from interpscope.config import InterpscopeError
from interpscope.corpus import sample_prompts
from interpscope.figures.relevance import continuation_figure, latent_figure, top_bar
from interpscope.limits import check_amounts
from interpscope.models.memory import run_checked
from interpscope.predict import predict_next
from interpscope.relevance.api import (
    RelevanceResult,
    explain,
    explain_continuation,
    faithfulness_batch,
    top_heads,
    top_neurons,
)
from interpscope.relevance.heldout import compare_faithfulness
from interpscope.relevance.methods import MethodOptions, get_method, memory_view, methods_for
from interpscope.results import Panel
from interpscope.token_text import token_texts
from interpscope.uploads import parse_examples
from pages._common import (
    Param,
    committed,
    current_model,
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
from pages._file_view import file_params, file_section
from pages._method_options import method_options, option_params
from pages._relevance_extras import bos_param, bos_toggle, ig_convergence_view, sink_caption

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

PAGE = "relevance"
DEFAULT_TEXT = "Mr. Darcy looked at Elizabeth, and Elizabeth looked back at"
TARGETS = ["Predicted next token", "A token I pick", "A rather than B", "A continuation"]


def params(method_names: list[str]) -> list[Param]:
    return [Param("relevance-text", "text", DEFAULT_TEXT),
            Param("relevance-method", "method", method_names[0], choices=method_names),
            Param("relevance-target", "target", TARGETS[0], choices=TARGETS),
            Param("relevance-pick", "pick", None), Param("relevance-typed", "token", ""),
            Param("relevance-a", "a", ""), Param("relevance-b", "b", ""),
            Param("relevance-n-new", "new", 8, int, low=1, high=32),
            Param("relevance-compare", "compare", False, bool),
            Param("relevance-second", "second", method_names[min(1, len(method_names) - 1)], choices=method_names),
            Param("relevance-latent", "latent", False, bool), bos_param(),
            *option_params("relevance", ""), *option_params("relevance-second", "second_"), *file_params()]


def _top(text: str) -> list[str]:
    return shared("top10", (model_key(), text), lambda: [
        p.token for p in predict_next(current_model(), text, top=10).predictions])


def _explain(text: str, method: str, token: str | None, contrast: tuple | None, latent: bool,
             options: MethodOptions | None = None, prepend: bool | None = None) -> RelevanceResult:
    options = options or MethodOptions()
    key = (model_key(), text, method, token, contrast, latent, options, prepend)
    view = memory_view(method)
    return shared("explain", key, lambda: run_checked(current_model(), view, text, lambda: explain(
        current_model(), text, method, token=token, contrast=contrast, latent=latent, options=options,
        prepend_bos=prepend)))


def _explain_timed(*args) -> tuple[RelevanceResult, bool]:
    """_explain, and whether its result was already computed (by this or another session)."""
    options = args[5] if len(args) > 5 and args[5] is not None else MethodOptions()
    cached = is_shared("explain", (model_key(), *args[:5], options, args[6] if len(args) > 6 else None))
    return _explain(*args), cached


def show_map(result: RelevanceResult, key: str, cached: bool = False) -> None:
    """The heatmap, its export, and the readout of where the explained value went (below the map, full width)."""
    st.markdown(f"**{result.title}** · {timing(result.seconds, cached)}")
    token_heatmap(result.tokens, result.relevance, result.sink_positions, result.sink_reasons())
    sink_caption(result, current_model().prefix_token_id)
    export_menu(result.figure(), result, key=f"map-{key}", filename=f"relevance-{result.method}")
    show_readout(result, key)


def target_inputs(top: list[str]) -> tuple[str, str | None, tuple | None]:
    """The target choice and its inputs; returns (kind, token, contrast)."""
    kind = st.radio("Explain", TARGETS, horizontal=True, key="relevance-target")
    token, contrast = None, None
    if kind == "A token I pick":
        state = st.session_state
        asked = state.get("relevance-pick")
        if asked not in top:  # a pick from another text: the first of this one's
            state["relevance-pick"] = top[0]
            if asked and "relevance-pick" in state.get("_url-just-read", ()) and not state.get("relevance-typed"):
                state["relevance-typed"] = asked  # a link's token is what it asks to explain, top 10 or not
                st.info(f"The link's token {asked!r} is not among this text's 10 likeliest next tokens; it is in "
                        "the box below, which explains any single token.")
        picked = st.selectbox("Next token (top 10)", top, format_func=repr, key="relevance-pick")
        typed = st.text_input("…or type a token (a single token; '#id' for an id)", key="relevance-typed")
        token = typed or picked
    elif kind == "A rather than B":
        pair = st.columns(2)
        if not st.session_state.get("relevance-a"):
            st.session_state["relevance-a"] = top[0]
        if not st.session_state.get("relevance-b"):
            st.session_state["relevance-b"] = top[1] if len(top) > 1 else ""
        contrast = (pair[0].text_input("A", key="relevance-a"), pair[1].text_input("B", key="relevance-b"))
    return kind, token, contrast


def continuation_view(lm: LoadedModel, text: str, n_new: int, method: str, labels: dict, backward: list[str]) -> None:
    chosen = method if method in backward else backward[0]
    if chosen != method:
        st.info(f"Continuations use one backward pass per token; {labels[method]} needs more, so "
                f"{labels[chosen]} is shown.")
    with show_errors(), st.spinner("Generating and explaining…"):
        matrix, sequence = shared("continuation", (model_key(), text, n_new, chosen),
                                  lambda: explain_continuation(lm, text, n_new, chosen))
    generated = token_texts(lm.tokenizer, matrix.generated_ids)
    st.markdown("**Continuation:** " + repr("".join(generated)))
    fig = continuation_figure(generated, sequence, matrix.matrix, "Relevance of each token for each generated token")
    st.plotly_chart(fig, key="relevance-continuation")
    export_menu(fig, Panel(of="interpscope.relevance", part="continuation", data={
        "method": chosen, "generated": generated, "sequence": sequence, "matrix": matrix.matrix,
        "logits": matrix.logits}), key="continuation", filename="relevance-continuation")


def latent_view(result: RelevanceResult) -> None:
    st.subheader("Inside the model")
    fig = latent_figure(result.tokens, result.latent.residual, "Residual-stream relevance, layers x tokens")
    st.plotly_chart(fig, key="relevance-latent-fig")
    export_menu(fig, result.panel("latent_residual", {"tokens": result.tokens, "residual": result.latent.residual}),
                key="latent", filename="relevance-latent")
    tops = [(kind, rows) for kind, rows in (
        ("heads", [(f"L{h['layer']}.H{h['head']}", h) for h in top_heads(result.latent, 10)]),
        ("neurons", [(f"L{n['layer']}.N{n['neuron']}", n) for n in top_neurons(result.latent, 10)])) if rows]
    for column, (kind, rows) in zip(st.columns(max(1, len(tops))), tops, strict=False):
        with column:
            title = "Top attention heads" if kind == "heads" else "Top MLP neurons"
            fig = top_bar([name for name, _ in rows], [row["relevance"] for _, row in rows], title, kind[:-1])
            st.plotly_chart(fig, key=f"relevance-{kind}")
            export_menu(fig, result.panel(f"top_{kind}", [row for _, row in rows]), key=kind,
                        filename=f"relevance-top-{kind}")


def faithfulness_view(lm: LoadedModel, run: dict, labels: dict) -> None:
    st.subheader("Faithfulness")
    options = run.get("options") or MethodOptions()
    baseline = {"zero": "set to zero", "pad": "set to the pad token's", "mean": "set to the mean embedding"}.get(
        options.baseline, f"set to the {options.baseline} baseline")
    st.caption(f"Remove tokens (embedding {baseline}, the baseline the map's settings name) most relevant first "
               "(MoRF) or least relevant first (LeRF) and track the target. ABPC = AUC(LeRF) - AUC(MoRF): higher "
               "means the map found what matters. Every method runs with the settings above.")
    if not st.button("Curves for every method on this input", key="relevance-faith"):
        return
    maps = []
    with progress("Perturbing: methods", "relevance-faith") as report:
        for index, name in enumerate(labels):
            with show_errors():
                maps.append(_explain(run["text"], name, run["token"], run["contrast"], False, options, run.get("bos")))
            report(index + 1, len(labels))
        with show_errors():
            comparison = compare_faithfulness(lm, maps, baseline=options.baseline)
    fig = comparison.figure()
    st.plotly_chart(fig, key="relevance-curves")
    export_menu(fig, comparison, key="curves", filename="relevance-curves")
    st.dataframe([{"method": curve.method_label, "ABPC": curve.abpc, "random order ABPC": curve.random_abpc,
                   "seconds": explained.seconds} for curve, explained in zip(comparison.curves, maps, strict=True)],
                 hide_index=True)


def batch_view(lm: LoadedModel, labels: dict) -> None:
    with st.expander("Batch faithfulness over many texts"):
        source = st.radio("Texts", ["Bundled sample prompts (Austen, test split)", "Upload a file"],
                          key="relevance-batch-source", horizontal=True)
        texts: list[str] = []
        if source.startswith("Bundled"):
            count = st.slider("How many prompts", 2, 100, 20, key="relevance-batch-n")
            texts = sample_prompts(count)
        else:
            upload = st.file_uploader("One example per line/row (.txt, .md, .csv text column, .jsonl \"text\")",
                                      type=["txt", "md", "csv", "jsonl"], key="relevance-batch-upload")
            if upload is not None:
                try:
                    texts = parse_examples(upload.getvalue(), upload.name)
                except InterpscopeError as err:
                    st.error(str(err))
            if len(texts) > 200:
                st.warning(f"The file has {len(texts)} examples; the batch runs the first 200 of them.")
                texts = texts[:200]
        quick = [m for m in labels if not get_method(m).per_token_passes]  # one pass per token: slow on many texts
        chosen = st.multiselect("Methods", list(labels), default=quick[:3], format_func=labels.get,
                                key="relevance-batch-methods")
        if st.button("Run batch", key="relevance-batch-run", disabled=not texts or not chosen):
            with progress("Texts", "relevance-batch") as report, show_errors():
                check_amounts(batch_prompts=len(texts))
                summary = faithfulness_batch(lm, texts, chosen, progress=report)
            rows = [{"method": labels[m], "mean ABPC": summary.mean_abpc[m], "std": summary.std_abpc[m],
                     "texts": summary.n_texts, "seconds": summary.seconds[m]} for m in chosen]
            st.dataframe(rows, hide_index=True)
            fig = summary.figure()
            st.plotly_chart(fig, key="relevance-batch-fig")
            export_menu(fig, summary, key="batch", filename="relevance-abpc")


def main() -> None:
    from interpscope.models.vision import model_modality

    if model_modality(model_key()[0]) == "image":  # a ViT/DeiT classifier: the image view (pages/_relevance_image)
        from pages._relevance_image import image_page

        image_page()
        return
    st.title("Relevance maps")
    st.caption("Which input tokens made the model say it? AttnLRP propagates the target logit back through the "
               "network in one backward pass; CP-LRP detaches queries, keys and gates and conserves exactly; captum "
               "baselines explain the same target.")
    lm = current_model()
    if lm is None:
        return
    if lm.is_encoder_decoder:  # T5: source and decoder prefix, two heatmaps on one scale
        from pages._relevance_seq2seq import seq2seq_view

        seq2seq_view(lm)
        return
    methods = methods_for(lm.adapter)
    if not methods:
        st.warning(f"No relevance method is available for {lm.family} models yet.")
        return
    labels = {m.name: m.label for m in methods}
    backward = [m.name for m in methods if m.one_backward_pass]
    page_params = params(list(labels))
    url_inputs(PAGE, page_params)

    text = text_source(PAGE, label="Text to explain", default=DEFAULT_TEXT)
    if text is None:
        write_url(page_params, run=PAGE)
        file_section(lm, labels)
        return
    with show_errors():
        top = _top(text)
    kind, token, contrast = target_inputs(top)
    settings = st.columns([2, 2, 1])
    method = settings[0].selectbox("Method", list(labels), format_func=labels.get, key="relevance-method")
    n_new = int(settings[1].number_input("Tokens to generate", 1, 32, key="relevance-n-new")) \
        if kind == "A continuation" else 0
    latent = settings[1].toggle("Relevance inside the model", key="relevance-latent",
                                help="Layers x tokens, and the most relevant heads and MLP neurons.",
                                disabled=method not in backward or kind == "A continuation")
    prepend = bos_toggle(lm, settings[0])
    compare = settings[2].toggle("Compare two methods", key="relevance-compare", disabled=kind == "A continuation")
    second = settings[2].selectbox("Second method", [m for m in labels if m != method] or [method],
                                   format_func=labels.get, key="relevance-second") if compare else None
    options = method_options("relevance", method)
    second_options = None
    if second is not None and get_method(second).options:
        st.caption(f"Options of the second method ({labels[second]}):")
        second_options = method_options("relevance-second", second)
    submitted = st.button("Run", type="primary", key="relevance-run")
    inputs = {"text": text, "kind": kind, "token": token, "contrast": contrast, "method": method, "n_new": n_new,
              "latent": bool(latent and method in backward), "second": second, "options": options, "bos": prepend,
              "second_options": second_options}
    run = committed(PAGE, inputs, submitted)
    write_url(page_params, run=PAGE)
    if run is None:
        st.info("Choose a method and a target, then press **Run**.")
        file_section(lm, labels)
        return
    if run["kind"] == "A continuation":
        continuation_view(lm, run["text"], run["n_new"], run["method"], labels, backward)
        return
    with show_errors(), st.spinner(f"Explaining with {labels[run['method']]}…"):
        result, cached = _explain_timed(run["text"], run["method"], run["token"], run["contrast"], run["latent"],
                                        run["options"], run.get("bos"))
        second_result = (_explain_timed(run["text"], run["second"], run["token"], run["contrast"], False,
                                        run["second_options"], run.get("bos")) if run["second"] else None)
    if second_result is not None:
        for column, (shown, was_cached), key in zip(st.columns(2, gap="large"), ((result, cached), second_result),
                                                    ("first", "second"), strict=True):
            with column:
                show_map(shown, key, was_cached)
    else:
        show_map(result, "first", cached)
    ig_convergence_view(lm, run, result, PAGE)
    if result.latent is not None:
        latent_view(result)
    if "experts" in lm.adapter.capabilities():
        from pages._relevance_moe import moe_view

        moe_view(lm, result, labels)
    faithfulness_view(lm, run, labels)
    batch_view(lm, labels)
    file_section(lm, labels)
    if "state_space" in lm.adapter.capabilities():
        from pages._mamba_view import mamba_view

        mamba_view(lm, run["text"], run["token"], run["contrast"], labels)


main()
