"""Relevance maps: which input tokens made the model predict what it did (AttnLRP, CP-LRP and baselines)."""
from __future__ import annotations

import numpy as np
import streamlit as st

from backend.config import InterpscopeError
from backend.corpus import sample_prompts
from backend.inputs import parse_examples
from backend.predict import predict_next
from backend.relevance.api import (RelevanceResult, explain, explain_continuation, faithfulness,
                                   faithfulness_batch, top_heads, top_neurons)
from backend.relevance.methods import methods_for
from components.export import export_menu
from components.relevance_charts import (abpc_bar, continuation_figure, curves_figure, latent_figure,
                                         top_bar)
from components.token_heatmap import heatmap_figure, token_heatmap
from pages._common import current_model, model_key, show_errors, text_source

st.title("Relevance maps")
st.caption("Which input tokens made the model say it? AttnLRP propagates the target logit back through the "
           "network in one backward pass; CP-LRP detaches queries, keys and gates and conserves exactly; captum "
           "baselines explain the same target.")

lm = current_model()
if lm is None:
    st.stop()
methods = methods_for(lm.adapter)
if not methods:
    st.warning(f"No relevance method is available for {lm.family} models yet.")
    st.stop()
labels = {m.name: m.label for m in methods}
backward_methods = [m.name for m in methods if m.one_backward_pass]


@st.cache_data(show_spinner=False, max_entries=128)
def _explain(key: tuple, text: str, method: str, token: str | None, contrast: tuple | None,
             latent: bool) -> RelevanceResult:
    return explain(current_model(), text, method, token=token, contrast=contrast, latent=latent)


@st.cache_data(show_spinner=False, max_entries=64)
def _top(key: tuple, text: str) -> list[str]:
    return [p.token for p in predict_next(current_model(), text, top=10).predictions]


def conservation_readout(result: RelevanceResult) -> None:
    c = result.conservation
    st.metric("Target logit", f"{result.logit:.4f}")
    if c is None:
        st.caption(f"{result.method_label} has no conservation law. Sum of relevance: "
                   f"{float(np.sum(result.relevance)):.4f}.")
        return
    st.metric("Sum of input relevance", f"{c.input_sum:.4f}")
    st.metric("Bias share", f"{c.bias_sum:.4f}")
    st.metric("Softmax share", f"{c.softmax_sum:.4f}")
    st.metric("Relative error", f"{c.relative_error:.1e}")
    if abs(c.softmax_sum) > 1e-3 * abs(result.logit):
        st.caption(f"Inputs + biases leave a gap of {c.gap_without_softmax:.1%} of the logit: AttnLRP drops it "
                   "at the softmaxes (counted above), so it does not conserve on its own.")
    else:
        st.caption("Inputs + biases account for the whole logit (conservative).")


def show_map(result: RelevanceResult, leave_out_first: bool, key: str) -> None:
    title = f"{result.method_label}: relevance for {result.target.label} ({result.model})"
    map_column, readout_column = st.columns([3, 1])
    with map_column:
        st.markdown(f"**{title}** · {result.seconds:.2f} s")
        token_heatmap(result.tokens, result.relevance, leave_out_first)
        export_menu(heatmap_figure(result.tokens, result.relevance, title, leave_out_first), result,
                    key=f"map-{key}", filename=f"relevance-{result.method}")
    with readout_column:
        conservation_readout(result)


text = text_source("relevance", label="Text to explain",
                   default="Mr. Darcy looked at Elizabeth, and Elizabeth looked back at")
if text is None:
    st.stop()

settings = st.columns(3)
method = settings[0].selectbox("Method", list(labels), format_func=labels.get, key="relevance-method")
target_kind = settings[1].radio("Explain", ["Predicted next token", "A token I pick", "A rather than B",
                                            "A continuation"], key="relevance-target")
leave_out_first = settings[2].toggle("Leave out first token", help="Drop the first token (often an attention sink) and renormalise the colours by the rest.",
                                     key="relevance-sink")
compare = settings[2].toggle("Compare two methods", key="relevance-compare")

with show_errors():
    top = _top(model_key(), text)
token, contrast = None, None
if target_kind == "A token I pick":
    picked = st.selectbox("Next token (top 10)", top, format_func=repr, key="relevance-pick")
    typed = st.text_input("…or type a token (a single token; '#id' for an id)", key="relevance-typed")
    token = typed if typed else picked
elif target_kind == "A rather than B":
    pair = st.columns(2)
    first = pair[0].text_input("A", value=top[0], key="relevance-a")
    second = pair[1].text_input("B", value=top[1] if len(top) > 1 else "", key="relevance-b")
    contrast = (first, second)

if target_kind == "A continuation":
    n_new = st.number_input("Tokens to generate", 1, 32, 8, key="relevance-n-new")
    kinds = backward_methods
    if method not in kinds:
        st.info(f"Continuations use one backward pass per token; showing {labels[kinds[0]]}.")
    with show_errors(), st.spinner("Generating and explaining…"):
        matrix, sequence = explain_continuation(lm, text, int(n_new), method if method in kinds else kinds[0])
    generated = [lm.tokenizer.decode([i]) for i in matrix.generated_ids]
    st.markdown("**Continuation:** " + repr("".join(generated)))
    fig = continuation_figure(generated, sequence, matrix.matrix, "Relevance of each token for each generated token")
    st.plotly_chart(fig, key="relevance-continuation")
    export_menu(fig, {"generated": generated, "sequence": sequence, "matrix": matrix.matrix,
                      "logits": matrix.logits}, key="continuation", filename="relevance-continuation")
    st.stop()

show_latent = method in backward_methods and st.toggle(
    "Show relevance inside the model (layers x tokens, top heads and neurons)", key="relevance-latent")
with show_errors(), st.spinner(f"Explaining with {labels[method]}…"):
    result = _explain(model_key(), text, method, token, contrast, bool(show_latent))

if compare:
    other = st.selectbox("Second method", [m for m in labels if m != method], format_func=labels.get,
                         key="relevance-second")
    with show_errors(), st.spinner(f"Explaining with {labels[other]}…"):
        second = _explain(model_key(), text, other, token, contrast, False)
    left, right = st.columns(2)
    with left:
        show_map(result, leave_out_first, "first")
    with right:
        show_map(second, leave_out_first, "second")
else:
    show_map(result, leave_out_first, "first")

if show_latent and result.latent is not None:
    st.subheader("Inside the model")
    fig = latent_figure(result.tokens, result.latent.residual, "Residual-stream relevance, layers x tokens")
    st.plotly_chart(fig, key="relevance-latent-fig")
    export_menu(fig, {"tokens": result.tokens, "residual": result.latent.residual}, key="latent",
                filename="relevance-latent")
    tops = [(kind, rows) for kind, rows in (
        ("heads", [(f"L{h['layer']}.H{h['head']}", h) for h in top_heads(result.latent, 10)]),
        ("neurons", [(f"L{n['layer']}.N{n['neuron']}", n) for n in top_neurons(result.latent, 10)])) if rows]
    for column, (kind, rows) in zip(st.columns(max(1, len(tops))), tops):
        with column:
            title = "Top attention heads" if kind == "heads" else "Top MLP neurons"
            fig = top_bar([name for name, _ in rows], [row["relevance"] for _, row in rows], title, kind[:-1])
            st.plotly_chart(fig, key=f"relevance-{kind}")
            export_menu(fig, [row for _, row in rows], key=kind, filename=f"relevance-top-{kind}")

st.subheader("Faithfulness")
st.caption("Remove tokens (embedding set to zero) most relevant first (MoRF) or least relevant first (LeRF) and "
           "track the target logit. ABPC = AUC(LeRF) - AUC(MoRF): higher means the map found what matters.")
if st.button("Curves for every method on this input", key="relevance-faith"):
    curves, rows = {}, []
    progress = st.progress(0.0, text="Perturbing…")
    for index, name in enumerate(labels):
        with show_errors():
            explained = _explain(model_key(), text, name, token, contrast, False)
            curve = faithfulness(lm, explained)
        curves[labels[name]] = (curve.fractions, curve.morf, curve.lerf, curve.abpc)
        rows.append({"method": labels[name], "ABPC": curve.abpc, "seconds": explained.seconds})
        progress.progress((index + 1) / len(labels), text=f"{labels[name]} done")
    fig = curves_figure(curves, "Perturbation curves on this input")
    st.plotly_chart(fig, key="relevance-curves")
    export_menu(fig, {name: {"fractions": c[0], "morf": c[1], "lerf": c[2], "abpc": c[3]}
                      for name, c in curves.items()}, key="curves", filename="relevance-curves")
    st.dataframe(rows, hide_index=True)

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
                texts = parse_examples(upload.getvalue(), upload.name)[:200]
            except InterpscopeError as err:
                st.error(str(err))
    chosen = st.multiselect("Methods", list(labels), default=[m for m in labels if m != "occlusion"][:3],
                            format_func=labels.get, key="relevance-batch-methods")
    if st.button("Run batch", key="relevance-batch-run", disabled=not texts or not chosen):
        progress = st.progress(0.0, text=f"0 / {len(texts)} texts")
        with show_errors():
            summary = faithfulness_batch(lm, texts, chosen, progress=lambda done, total: progress.progress(
                done / total, text=f"{done} / {total} texts"))
        rows = [{"method": labels[m], "mean ABPC": summary.mean_abpc[m], "std": summary.std_abpc[m],
                 "texts": summary.n_texts, "seconds": summary.seconds[m]} for m in chosen]
        st.dataframe(rows, hide_index=True)
        fig = abpc_bar([labels[m] for m in chosen], [summary.mean_abpc[m] for m in chosen],
                       [summary.std_abpc[m] for m in chosen], f"Mean ABPC over {summary.n_texts} texts")
        st.plotly_chart(fig, key="relevance-batch-fig")
        export_menu(fig, summary, key="batch", filename="relevance-abpc")

if lm.family == "mamba":
    from pages._mamba_view import mamba_view

    mamba_view(lm, text, token, contrast, labels)
