"""Fourier features of numbers (Zhou et al., NeurIPS 2024): spectra of number representations, the addition
probe with a Fourier-space logit lens, and low/high-pass filters on attention and MLP outputs."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from backend.fourier.addition import run_addition, small_sum_pairs
from backend.fourier.data import TEMPLATES, check_template
from backend.fourier.filters import KINDS, POSITIONS, filter_table
from backend.fourier.lens import default_tau, module_lens, prompt_fourier, top_components
from backend.fourier.numbers import splits_digits
from backend.fourier.probe import check_numbers, default_numbers, probe_pairs, single_token_setup
from backend.fourier.spectrum import describe_regime, embedding_spectrum, hidden_spectra
from backend.models.registry import BUNDLED
from components import fourier_figures as figs
from components.export import export_menu
from pages._common import current_model, model_key, show_errors

st.title("Fourier features")
st.caption("Do the model's numbers live on waves? A number's representation is written in the Fourier basis over "
           "0..N-1 (period N/k per frequency k). Zhou et al. (2024) found pre-trained models represent and add "
           "numbers with a few sparse frequencies.")
with st.expander("What the paper found, and which regime this model is in", expanded=True):
    st.markdown(
        "- **Pre-trained models** (GPT-2-XL fine-tuned on a+b, numbers 0..520 as single tokens, 99.74% test "
        "accuracy): number-token embeddings have outlier frequencies at **periods 2, 2.5, 5 and 10**. MLP outputs "
        "carry mostly **low** frequencies (the answer's magnitude); attention outputs carry **high** frequencies "
        "(modular facts such as the last digit or parity). Removing low frequencies from attention + MLP drops "
        "accuracy to 5.94% (errors are multiples of 10); removing high frequencies drops it to 27.08% (errors are "
        "small). From MLP only / attention only: 35.89% / 99.12% (low removed), 98.10% / 78.36% (high removed).\n"
        "- **Models trained from scratch** use only low-frequency features and add less accurately; giving them "
        "pre-trained token embeddings rescues them.\n"
        "- The bundled **adder** is trained from scratch (scripts/train_adder.py): the spectrum tab below shows its "
        "regime, and the filters tab what each frequency band is worth to it.")

lm = current_model()
if lm is None:
    st.stop()
KEY = model_key()
DIGITS = splits_digits(lm.tokenizer)
N_DEFAULT = default_numbers(lm)
if DIGITS:
    st.info(f"{lm.name} splits numbers into digits, so numbers have no token of their own: the spectrum is taken "
            "on the hidden state at each number's last digit, layer by layer, and answers are generated. The "
            "module lens and the filters need single-token numbers: pick **adder** in the sidebar for those.")
elif lm.name in BUNDLED and BUNDLED[lm.name].description:
    st.caption(f"**{lm.name}**: {BUNDLED[lm.name].description}")


def _progress(label: str):
    bar = st.progress(0.0, text=label)
    return lambda fraction, text: bar.progress(min(max(fraction, 0.0), 1.0), text=f"{label} {text}")


@st.cache_data(show_spinner="Fourier transform of the number embeddings…", max_entries=16)
def _embedding_spectrum(key: tuple, n_numbers: int, matrix: str):
    return embedding_spectrum(current_model(), n_numbers, matrix=matrix)


@st.cache_data(show_spinner="Hidden states at each number's last token, every layer…", max_entries=16)
def _hidden_spectra(key: tuple, n_numbers: int, template: str | None):
    return hidden_spectra(current_model(), n_numbers, template=template)


@st.cache_data(show_spinner="Running the addition prompts with the module lens…", max_entries=16)
def _lens(key: tuple, n_numbers: int, n_prompts: int, split: str, template: str, tau: int):
    model = current_model()
    numbers = single_token_setup(model, n_numbers)
    pairs = probe_pairs(numbers.n_numbers, n_prompts, split=split)
    return run_addition(model, pairs, template, numbers=numbers), module_lens(model, numbers, pairs, template, tau)


@st.cache_data(show_spinner="Generating answers…", max_entries=16)
def _generated(key: tuple, n_prompts: int, template: str, prefix: str):
    return run_addition(current_model(), small_sum_pairs(n_prompts), template, prefix=prefix)


spectrum_tab, probe_tab, filter_tab = st.tabs(["Embedding spectrum", "Addition probe", "Filters"])

with spectrum_tab, show_errors():
    n_numbers = check_numbers(st.number_input("Numbers N (analyse 0..N-1)", 10, 2000 if DIGITS else N_DEFAULT,
                                              N_DEFAULT, key=f"fourier-n-{lm.name}"))
    if DIGITS:
        template = st.text_input("Context around each number ({n})", value="", key="fourier-ctx",
                                 placeholder="default: 'Number: {n}'") or None
        spectra = _hidden_spectra(KEY, n_numbers, template)
        fig = figs.layer_frequency_heatmap(spectra.magnitude, spectra.periods, spectra.layer_names,
                                           f"{lm.name}: hidden state at each number's last token, per layer",
                                           "magnitude (unit norm per layer)")
        st.plotly_chart(fig, width="stretch", key="fourier-hidden-heatmap")
        top = pd.DataFrame({"layer": spectra.layer_names,
                            "top periods": [", ".join(f"{p:.3g}" for p in periods) for periods in spectra.top_periods]})
        export_menu(fig, {"periods": spectra.periods, "layers": spectra.layer_names, "magnitude": spectra.magnitude,
                          "top_periods": spectra.top_periods}, "fourier-hidden", "fourier-hidden-spectra")
        regime = describe_regime(spectra)
        st.markdown(f"**Regime (last layer):** {regime.label}. Energy share at periods ≤ 10: "
                    f"{regime.high_share:.1%}.")
        st.dataframe(top, hide_index=True, height=260)
        export_menu(None, top, "fourier-hidden-top", "fourier-hidden-top-periods")
    else:
        matrix = st.radio("Matrix", ["embedding", "unembedding"], horizontal=True, key="fourier-matrix")
        spectrum = _embedding_spectrum(KEY, n_numbers, matrix)
        fig = figs.spectrum_figure(spectrum.periods, spectrum.magnitude, [o.period for o in spectrum.outliers],
                                   f"{lm.name}: Fourier magnitude of the number-token {matrix}s (0..{n_numbers - 1})")
        st.plotly_chart(fig, width="stretch", key="fourier-spectrum")
        export_menu(fig, spectrum, "fourier-spectrum", f"fourier-{matrix}-spectrum")
        regime = describe_regime(spectrum)
        st.markdown(f"**Regime:** {regime.label}. Energy share at periods ≤ 10: {regime.high_share:.1%}.")
        outliers = pd.DataFrame([{"period": o.period, "frequency k": o.frequency, "magnitude": o.magnitude,
                                  "robust z-score": o.score} for o in spectrum.outliers])
        st.markdown("**Outlier frequencies** (robust z-score > 4)")
        st.dataframe(outliers, hide_index=True)
        export_menu(None, outliers, "fourier-outliers", f"fourier-{matrix}-outliers")

with probe_tab, show_errors():
    columns = st.columns(4)
    choice = columns[0].selectbox("Template", list(TEMPLATES) + ["custom…"], key="fourier-template")
    template = check_template(st.text_input("Custom template", "{a} + {b} =", key="fourier-custom")
                              if choice == "custom…" else choice)
    n_prompts = int(columns[1].number_input("Prompts", 1, 5000, 40 if DIGITS else 200,
                                            key=f"fourier-prompts-{lm.name}"))
    if DIGITS:
        prefix = st.text_area("Few-shot prefix (optional)", "", key="fourier-prefix", height=80)
        result = _generated(KEY, n_prompts, template, prefix.replace("\\n", "\n"))
        st.caption("1-2 digit sums (a + b ≤ 99), answers by greedy generation.")
    else:
        numbers_n = check_numbers(N_DEFAULT)
        split = columns[2].selectbox("Split", ["test", "valid", "train", "all"], key="fourier-split")
        tau = int(columns[3].number_input("τ (k < τ is low)", 1, numbers_n // 2, default_tau(numbers_n),
                                          key=f"fourier-tau-{lm.name}"))
        result, lens = _lens(KEY, numbers_n, n_prompts, split, template, tau)
    metrics = st.columns(4)
    metrics[0].metric("Prompts", len(result.answers))
    metrics[1].metric("Accuracy", f"{result.accuracy:.2%}")
    metrics[2].metric("Within ±2", f"{result.within_2:.2%}")
    metrics[3].metric("Within ±10", f"{result.within_10:.2%}")
    answers = pd.DataFrame({"a": result.pairs[:, 0], "b": result.pairs[:, 1], "answer": result.answers,
                            "prediction": result.predictions})
    if not DIGITS:
        fig = figs.lens_accuracy_figure(lens.lens_accuracy, lens.lens_within_2, lens.lens_within_10)
        st.plotly_chart(fig, width="stretch", key="fourier-lens-acc")
        export_menu(fig, {"exact": lens.lens_accuracy, "within_2": lens.lens_within_2,
                          "within_10": lens.lens_within_10}, "fourier-lens-acc", "fourier-logit-lens-accuracy")
        layer_names = [f"layer {l}" for l in range(len(lens.attn_fourier))]
        index = int(st.number_input("One prompt (row of the table below)", 0, len(result.answers) - 1, 0,
                                    key="fourier-row"))
        answer = int(result.answers[index])
        st.markdown(f"Prompt **{template.format(a=int(result.pairs[index, 0]), b=int(result.pairs[index, 1]))}** → "
                    f"answer {answer}, prediction {int(result.predictions[index])}")
        view = st.radio("Fourier heatmaps", ["mean over prompts", "this prompt"], horizontal=True,
                        key="fourier-heat-view")
        attn_heat, mlp_heat = ((lens.attn_fourier, lens.mlp_fourier) if view == "mean over prompts"
                               else prompt_fourier(lens, index))
        heat = st.columns(2)
        for column, name, values in ((heat[0], "Attention", attn_heat), (heat[1], "MLP", mlp_heat)):
            fig = figs.layer_frequency_heatmap(values, lens.periods, layer_names,
                                               f"{name} output in Fourier space ({view})", "|F·W_U·h|")
            with column:
                st.plotly_chart(fig, width="stretch", key=f"fourier-heat-{name}")
                export_menu(fig, {"periods": lens.periods, "magnitude": values, "view": view},
                            f"fourier-heat-{name}", f"fourier-{name.lower()}-frequency")
        shares = pd.DataFrame({"layer": layer_names, "attention: low-frequency share": lens.low_share_attn,
                               "MLP: low-frequency share": lens.low_share_mlp})
        st.markdown(f"**Low (k < τ = {lens.tau}, period > {numbers_n / lens.tau:.3g}) vs high frequencies**: share "
                    "of each module's Fourier energy (number logits at the last token, all prompts) that is "
                    "low-frequency.")
        st.dataframe(shares, hide_index=True)
        export_menu(None, shares, "fourier-shares", "fourier-low-high-split")
        one = st.columns(2)
        for column, name, logits in ((one[0], "Attention", lens.attn_logits[index]),
                                     (one[1], "MLP", lens.mlp_logits[index])):
            fig = figs.answer_window_heatmap(logits, answer, name)
            with column:
                st.plotly_chart(fig, width="stretch", key=f"fourier-window-{name}")
                export_menu(fig, {"answer": answer, "logits": logits}, f"fourier-window-{name}",
                            f"fourier-{name.lower()}-logits-prompt{index}")
        components = top_components(lens.final_logits[index])
        fig = figs.top_components_figure(components.logits, components.rebuilt, answer, components.labels)
        st.plotly_chart(fig, width="stretch", key="fourier-top5")
        st.caption(f"Argmax of the rebuilt logits: {components.rebuilt_argmax} (model: {components.predicted}).")
        export_menu(fig, components, "fourier-top5", f"fourier-top5-prompt{index}")
    st.dataframe(answers, hide_index=True, height=240)
    export_menu(None, answers, "fourier-answers", "fourier-addition-answers")

with filter_tab, show_errors():
    if DIGITS:
        st.info("Filters project module outputs onto the null space of B·F·W_U_num, which needs a token per "
                "number. Pick **adder** (or a GPT-2 model) in the sidebar.")
    else:
        numbers_f = N_DEFAULT
        columns = st.columns(5)
        tau_f = int(columns[0].number_input("τ (k < τ is low)", 1, numbers_f // 2, default_tau(numbers_f),
                                            key=f"fourier-filter-tau-{lm.name}"))
        prompts_f = int(columns[1].number_input("Prompts", 1, 20000, 500, key="fourier-filter-prompts"))
        split_f = columns[2].selectbox("Split", ["test", "valid", "train", "all"], key="fourier-filter-split")
        template_f = check_template(columns[3].selectbox("Template", list(TEMPLATES), key="fourier-filter-template"))
        positions_f = columns[4].selectbox("Positions", list(POSITIONS), format_func=POSITIONS.get,
                                           key="fourier-filter-positions")
        st.caption(f"Low-pass = {KINDS['low']}; high-pass = {KINDS['high']}. Applied in every layer. Each filter "
                   f"removes one direction of d_model per removed basis row: the rank column says how many.")
        params = (KEY, numbers_f, tau_f, prompts_f, split_f, template_f, positions_f)
        if st.button("Run filter table", type="primary", key="fourier-run-filters"):
            numbers = single_token_setup(lm, numbers_f)
            pairs = probe_pairs(numbers.n_numbers, prompts_f, split=split_f)
            st.session_state["fourier-table"] = (params, filter_table(
                lm, numbers, pairs, template=template_f, tau=tau_f, progress=_progress("Filters:"),
                positions=positions_f))
        stored = st.session_state.get("fourier-table")
        if stored is None or stored[0] != params:
            st.info("Press **Run filter table** (7 runs over the prompts).")
        else:
            table = stored[1]
            for warning in table.warnings:
                st.warning(warning)
            labels = ["no filter" if r.kind == "none" else f"{'low' if r.kind == 'low' else 'high'}-pass {r.modules}"
                      for r in table.rows]
            frame = pd.DataFrame([{"filter": label, "removes": r.removed, "modules": r.modules, "loss": r.loss,
                                   "accuracy": r.accuracy, "within ±2": r.within_2, "within ±10": r.within_10,
                                   "rank(B F W_U)": r.rank, "zeroes everything": r.zeroes_everything,
                                   **{f"errors: {k}": v for k, v in r.error_counts.items()}}
                                  for label, r in zip(labels, table.rows)])
            st.markdown(f"**Filter table** ({table.prompts} prompts, N = {table.numbers}, τ = {table.tau}, "
                        f"d_model = {table.d_model}, filtered at {POSITIONS[table.positions]}, "
                        f"{table.seconds:.1f} s)")
            st.dataframe(frame, hide_index=True, key="fourier-filter-frame")
            by_filter = {(r.kind, r.modules): r.accuracy for r in table.rows}
            if {("none", "none"), ("high", "both"), ("low", "both")} <= set(by_filter):
                base = by_filter[("none", "none")]
                lost_low, lost_high = base - by_filter[("high", "both")], base - by_filter[("low", "both")]
                st.markdown(f"Removing **low** frequencies from attention + MLP costs **{lost_low:.1%}** accuracy, "
                            f"removing **high** frequencies **{lost_high:.1%}** (paper, pre-trained GPT-2-XL: 93.8 "
                            "and 72.7 points). A model that loses little without its high frequencies relies on "
                            "low-frequency features: the from-scratch regime.")
            export_menu(None, frame, "fourier-filter-table", "fourier-filter-table")
            fig = figs.error_kinds_figure(labels, [r.error_counts for r in table.rows], table.prompts)
            st.plotly_chart(fig, width="stretch", key="fourier-error-kinds")
            export_menu(fig, frame, "fourier-error-kinds", "fourier-error-kinds")
            fig = figs.error_histogram_figure(labels, [r.errors for r in table.rows])
            st.plotly_chart(fig, width="stretch", key="fourier-error-hist")
            export_menu(fig, {label: r.errors for label, r in zip(labels, table.rows)}, "fourier-error-hist",
                        "fourier-error-histograms")
