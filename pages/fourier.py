"""Fourier features of numbers (Zhou et al., NeurIPS 2024): spectra of number representations, the addition
probe with a Fourier-space logit lens, and low/high-pass filters on attention and MLP outputs."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd
import streamlit as st

from components.export import export_menu
from components.tables import fit_columns
from interpscope.figures import fourier as figs
from interpscope.fourier.addition import run_addition, small_sum_pairs
from interpscope.fourier.controls import control_fields
from interpscope.fourier.data import TEMPLATES, check_template
from interpscope.fourier.filters import KINDS, POSITIONS, reading
from interpscope.fourier.lens import default_tau, module_lens, prompt_fourier, top_components
from interpscope.fourier.numbers import splits_digits
from interpscope.fourier.probe import (
    check_numbers,
    default_numbers,
    default_prompts,
    prompt_pairs,
    run_filters,
    single_token_setup,
)
from interpscope.fourier.spectra import baseline_sentence, describe_regime, embedding_spectrum, hidden_spectra
from interpscope.limits import check_amounts
from interpscope.models.registry import BUNDLED
from pages._common import (
    Param,
    committed,
    current_model,
    model_key,
    progress,
    shared,
    show_errors,
    url_inputs,
    write_url,
)

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

PAGE = "fourier"
VIEWS = ["Spectrum", "Addition probe", "Filters"]
PAPER = (
    "- **Pre-trained models** (GPT-2-XL fine-tuned on a+b, numbers 0..520 as single tokens, 99.74% test accuracy): "
    "number-token embeddings have outlier frequencies at **periods 2, 2.5, 5 and 10**. MLP outputs carry mostly "
    "**low** frequencies (the answer's magnitude); attention outputs carry **high** frequencies (modular facts such "
    "as the last digit or parity). Removing low frequencies from attention + MLP drops accuracy to 5.94% (errors "
    "are multiples of 10); removing high frequencies drops it to 27.08% (errors are small). From MLP only / "
    "attention only: 35.89% / 99.12% (low removed), 98.10% / 78.36% (high removed).\n"
    "- **Models trained from scratch** use only low-frequency features and add less accurately; giving them "
    "pre-trained token embeddings rescues them.\n"
    "- The bundled **adder** is trained from scratch (scripts/train_adder.py): the views below show its regime.\n"
    "- For digit tokenisers (SmolLM2, Gemma) periods 10, 5, 3.33, 2.5 and 2 are there by construction (a number's "
    "last-digit state starts as a function of n mod 10): the spectrum shows that baseline and calls nothing in it "
    "an outlier.")


def params(lm: LoadedModel, digits: bool, n_default: int) -> list[Param]:
    return [Param("fourier-view", "view", VIEWS[0], choices=VIEWS, scope="nav"),
            Param("fourier-n", "numbers", n_default, int, low=10, high=2000 if digits else n_default),
            Param("fourier-matrix", "matrix", "embedding", choices=["embedding", "unembedding"]),
            Param("fourier-template", "template", list(TEMPLATES)[0], choices=list(TEMPLATES) + ["custom…"]),
            Param("fourier-prompts", "prompts", 40 if digits else 200, int, low=1, high=5000),
            Param("fourier-filter-prompts", "filter_prompts", default_prompts(n_default, "test"), int, low=1,
                  high=20000),  # the default split's size where it holds fewer than 500
            Param("fourier-filter-positions", "positions", "last", choices=list(POSITIONS)),
            Param("fourier-custom", "custom", "{a} + {b} =", max_length=200),
            Param("fourier-prefix", "prefix", "", max_length=2000),
            Param("fourier-split", "split", "test", choices=SPLITS),
            Param("fourier-tau", "tau", default_tau(n_default), int, low=1, high=max(1, n_default // 2)),
            Param("fourier-filter-tau", "filter_tau", default_tau(n_default), int, low=1,
                  high=max(1, n_default // 2)),
            Param("fourier-filter-split", "filter_split", "test", choices=SPLITS),
            Param("fourier-filter-template", "filter_template", list(TEMPLATES)[0], choices=list(TEMPLATES))]


SPLITS = ["test", "valid", "train", "all"]


def spectrum_view(lm: LoadedModel, digits: bool) -> None:
    n_numbers = check_numbers(int(st.number_input("Numbers N (analyse 0..N-1)", 10, key="fourier-n")))
    check_amounts(numbers=n_numbers)
    if digits:
        with show_errors(), st.spinner("Hidden states of every number, every layer…"):
            spectra = shared("fourier-hidden", (model_key(), n_numbers), lambda: hidden_spectra(lm, n_numbers))
        fig = figs.layer_frequency_heatmap(spectra.magnitude, spectra.periods, spectra.layer_names,
                                           f"{lm.name}: hidden state at each number's last token, per layer",
                                           "magnitude (unit norm per layer)")
        st.plotly_chart(fig, width="stretch", key="fourier-hidden-heatmap")
        export_menu(fig, spectra, "fourier-hidden", "fourier-hidden-spectra")
        regime = describe_regime(spectra)
        st.markdown(baseline_sentence(spectra))
        st.markdown(f"**Regime (last layer):** {regime.label}. Energy share at periods ≤ 10: {regime.high_share:.1%}.")
        columns = {"layer": spectra.layer_names,
                   "top periods": [", ".join(f"{p:.3g}" for p in periods) for periods in spectra.top_periods]}
        if spectra.baseline_share is not None:
            columns["power explained by n mod 10"] = spectra.baseline_share
            columns["outliers above the baseline"] = [", ".join(f"{p:.3g}" for p in periods) or "none"
                                                      for periods in spectra.outlier_periods]
        top = pd.DataFrame(columns)
        st.dataframe(top, hide_index=True, height=260)
        export_menu(None, spectra.panel("top_periods", top), "fourier-hidden-top", "fourier-hidden-top-periods")
        return
    matrix = st.radio("Matrix", ["embedding", "unembedding"], horizontal=True, key="fourier-matrix")
    with show_errors():
        spectrum = shared("fourier-embedding", (model_key(), n_numbers, matrix),
                          lambda: embedding_spectrum(lm, n_numbers, matrix=matrix))
    fig = figs.spectrum_figure(spectrum.periods, spectrum.magnitude, [o.period for o in spectrum.outliers],
                               f"{lm.name}: Fourier magnitude of the number-token {matrix}s (0..{n_numbers - 1})",
                               baseline=spectrum.baseline_magnitude, baseline_name="shuffled-numbers control (max)")
    st.plotly_chart(fig, width="stretch", key="fourier-spectrum")
    export_menu(fig, spectrum, "fourier-spectrum", f"fourier-{matrix}-spectrum")
    regime = describe_regime(spectrum)
    st.markdown(baseline_sentence(spectrum))
    st.markdown(f"**Regime:** {regime.label}. Energy share at periods ≤ 10: {regime.high_share:.1%}.")
    control = spectrum.baseline_magnitude
    outliers = pd.DataFrame([{"period": o.period, "frequency k": o.frequency, "magnitude": o.magnitude,
                              **({"control (max of shuffles)": float(control[o.frequency - 1])}
                                 if control is not None else {}),
                              "robust z-score": o.score} for o in spectrum.outliers])
    st.markdown("**Outlier frequencies** (robust z-score > 4" + (" and above the shuffled control)"
                                                                 if control is not None else ")"))
    st.dataframe(outliers, hide_index=True)
    export_menu(None, spectrum.panel("outliers", outliers), "fourier-outliers", f"fourier-{matrix}-outliers")


def probe_inputs(digits: bool, n_default: int) -> dict:
    columns = st.columns(4)
    choice = columns[0].selectbox("Template", list(TEMPLATES) + ["custom…"], key="fourier-template")
    template = check_template(st.text_input("Custom template", key="fourier-custom")
                              if choice == "custom…" else choice)
    n_prompts = int(columns[1].number_input("Prompts", 1, 5000, key="fourier-prompts"))
    check_amounts(fourier_prompts=n_prompts)
    if digits:
        prefix = st.text_area("Few-shot prefix (optional)", key="fourier-prefix", height=80)
        return {"template": template, "prompts": n_prompts, "prefix": prefix.replace("\\n", "\n")}
    split = columns[2].selectbox("Split", ["test", "valid", "train", "all"], key="fourier-split")
    tau = int(columns[3].number_input("τ (k < τ is low)", 1, n_default // 2, key="fourier-tau"))
    return {"template": template, "prompts": n_prompts, "split": split, "tau": tau}


def probe_view(lm: LoadedModel, digits: bool, n_default: int) -> None:
    inputs = probe_inputs(digits, n_default)
    run = committed("fourier-probe", inputs, st.button("Run the probe", type="primary", key="fourier-probe-run"))
    if run is None:
        st.info("Press **Run the probe**: the model answers each prompt" +
                (" by greedy generation." if digits else ", and the module lens reads every layer's outputs."))
        return
    if digits:
        with show_errors(), st.spinner("Generating answers…"):
            result = shared("fourier-generated", (model_key(), tuple(run.items())), lambda: run_addition(
                lm, small_sum_pairs(run["prompts"]), run["template"], prefix=run["prefix"]))
        lens = None
        st.caption("1-2 digit sums (a + b ≤ 99), answers by greedy generation.")
    else:
        def compute():
            numbers = single_token_setup(lm, n_default)
            pairs = prompt_pairs(numbers.n_numbers, run["prompts"], split=run["split"])
            return (pairs, run_addition(lm, pairs.pairs, run["template"], numbers=numbers),
                    module_lens(lm, numbers, pairs.pairs, run["template"], run["tau"]))

        with show_errors(), st.spinner("Running the prompts with the module lens…"):
            pairs, result, lens = shared("fourier-lens", (model_key(), tuple(run.items())), compute)
        if len(pairs.pairs) < pairs.requested:
            st.warning(f"The {pairs.split} split of N = {pairs.n_numbers} has {len(pairs.pairs)} pairs: the probe ran "
                       f"all {len(pairs.pairs)}, not the {pairs.requested} asked for.")
    metrics = st.columns(4)
    metrics[0].metric("Prompts", len(result.answers))
    metrics[1].metric("Accuracy", f"{result.accuracy:.2%}")
    metrics[2].metric("Within ±2", f"{result.within_2:.2%}")
    metrics[3].metric("Within ±10", f"{result.within_10:.2%}")
    if lens is not None:
        lens_figures(lm, result, lens, run["template"], n_default)
    answers = pd.DataFrame({"a": result.pairs[:, 0], "b": result.pairs[:, 1], "answer": result.answers,
                            "prediction": result.predictions})
    st.dataframe(answers, hide_index=True, height=240)
    export_menu(None, result.panel("answers", answers), "fourier-answers",
                "fourier-addition-answers")


def lens_figures(lm: LoadedModel, result, lens, template: str, n_numbers: int) -> None:
    fig = figs.lens_accuracy_figure(lens.lens_accuracy, lens.lens_within_2, lens.lens_within_10)
    st.plotly_chart(fig, width="stretch", key="fourier-lens-acc")
    export_menu(fig, lens.panel("accuracy", {
        "exact": lens.lens_accuracy, "within_2": lens.lens_within_2, "within_10": lens.lens_within_10}),
                "fourier-lens-acc", "fourier-logit-lens-accuracy")
    layer_names = [f"layer {layer}" for layer in range(len(lens.attn_fourier))]
    index = int(st.number_input("One prompt (row of the table below)", 0, len(result.answers) - 1, 0,
                                key="fourier-row"))
    answer = int(result.answers[index])
    st.markdown(f"Prompt **{template.format(a=int(result.pairs[index, 0]), b=int(result.pairs[index, 1]))}** → "
                f"answer {answer}, prediction {int(result.predictions[index])}")
    view = st.radio("Fourier heatmaps", ["mean over prompts", "this prompt"], horizontal=True, key="fourier-heat-view")
    attn_heat, mlp_heat = ((lens.attn_fourier, lens.mlp_fourier) if view == "mean over prompts"
                           else prompt_fourier(lens, index))
    for column, name, values in zip(st.columns(2), ("Attention", "MLP"), (attn_heat, mlp_heat), strict=True):
        fig = figs.layer_frequency_heatmap(values, lens.periods, layer_names,
                                           f"{name} output in Fourier space ({view})", "|F·W_U·h|")
        with column:
            st.plotly_chart(fig, width="stretch", key=f"fourier-heat-{name}")
            export_menu(fig, lens.panel(f"{name.lower()}_fourier",
                                        {"periods": lens.periods, "magnitude": values, "view": view}),
                        f"fourier-heat-{name}", f"fourier-{name.lower()}-frequency")
    shares = pd.DataFrame({"layer": layer_names, "attention: low-frequency share": lens.low_share_attn,
                           "MLP: low-frequency share": lens.low_share_mlp})
    mlp_low, attn_low = float(shares.iloc[:, 2].mean()), float(shares.iloc[:, 1].mean())
    st.markdown(f"**Low (k < τ = {lens.tau}, period > {n_numbers / lens.tau:.3g}) vs high frequencies**: on average "
                f"{mlp_low:.0%} of the MLPs' Fourier energy and {attn_low:.0%} of attention's is low-frequency "
                + ("(MLPs lean low, attention high, as in the paper)." if mlp_low > attn_low
                   else "(attention leans lower than the MLPs here, unlike the paper)."))
    st.dataframe(shares, hide_index=True)
    export_menu(None, lens.panel("low_high_split", shares), "fourier-shares",
                "fourier-low-high-split")
    for column, name, logits in zip(st.columns(2), ("Attention", "MLP"),
                                    (lens.attn_logits[index], lens.mlp_logits[index]), strict=True):
        fig = figs.answer_window_heatmap(logits, answer, name)
        with column:
            st.plotly_chart(fig, width="stretch", key=f"fourier-window-{name}")
            export_menu(fig, lens.panel(f"{name.lower()}_answer_window",
                                        {"answer": answer, "logits": logits}), f"fourier-window-{name}",
                        f"fourier-{name.lower()}-logits-prompt{index}")
    components = top_components(lens.final_logits[index])
    fig = figs.top_components_figure(components.logits, components.rebuilt, answer, components.labels)
    st.plotly_chart(fig, width="stretch", key="fourier-top5")
    st.caption(f"Argmax of the rebuilt logits: {components.rebuilt_argmax} (model: {components.predicted}).")
    export_menu(fig, lens.panel("top_components", components),
                "fourier-top5", f"fourier-top5-prompt{index}")


def filter_view(lm: LoadedModel, digits: bool, n_default: int) -> None:
    if digits:
        st.info("Filters project module outputs onto the null space of B·F·W_U_num, which needs a token per number. "
                "Pick **adder** (or a GPT-2 model) in the sidebar.")
        return
    top = st.columns(3)
    tau = int(top[0].number_input("τ (k < τ is low)", 1, n_default // 2, key="fourier-filter-tau"))
    prompts = int(top[1].number_input("Prompts", 1, 20000, key="fourier-filter-prompts"))
    check_amounts(fourier_prompts=prompts)
    split = top[2].selectbox("Split", ["test", "valid", "train", "all"], key="fourier-filter-split")
    bottom = st.columns([1, 2])
    template = check_template(bottom[0].selectbox("Template", list(TEMPLATES), key="fourier-filter-template"))
    positions = bottom[1].selectbox("Filtered at", list(POSITIONS), format_func=POSITIONS.get,
                                    key="fourier-filter-positions")
    st.caption(f"Low-pass = {KINDS['low']}; high-pass = {KINDS['high']}. Applied in every layer. Each filter removes "
               "rank(B F W_U) number directions; beside it, the control removes a random subspace of the same rank "
               "from the same number directions (B F replaced by random orthonormal functions of the numbers, 5 "
               "seeds): specificity = filter effect / control effect, effect = clean − filtered accuracy.")
    submitted = st.button("Run filter table", type="primary", key="fourier-run-filters")
    run = committed("fourier-filters", {"tau": tau, "prompts": prompts, "split": split, "template": template,
                                        "positions": positions}, submitted)
    if run is None:
        st.info("Press **Run filter table** (seven runs over the prompts, and five same-rank random controls beside "
                "each filter).")
        return

    def compute(report):
        return run_filters(lm, tau=run["tau"], prompts=run["prompts"], numbers=n_default, split=run["split"],
                           positions=run["positions"], template=run["template"], progress=report)

    with show_errors(), progress("Filters", "fourier-filters") as report:
        table = shared("fourier-filters", (model_key(), tuple(run.items())), lambda: compute(report))
    for warning in table.warnings:
        st.warning(warning)
    labels = ["no filter" if r.kind == "none" else f"{'low' if r.kind == 'low' else 'high'}-pass {r.modules}"
              for r in table.rows]
    frame = pd.DataFrame([{"filter": label, "removes": r.removed, "modules": r.modules, "loss": r.loss,
                           "accuracy": r.accuracy, "rank(B F W_U)": r.rank,
                           **{key: value for key, value in control_fields(r.control).items()
                              if key not in ("control_accuracies", "control_seeds")},
                           "within ±2": r.within_2, "within ±10": r.within_10,
                           "zeroes everything": r.zeroes_everything,
                           **{f"errors: {k}": v for k, v in r.error_counts.items()}}
                          for label, r in zip(labels, table.rows, strict=True)])
    leading = ["filter", "accuracy", "rank(B F W_U)", "control_accuracy_mean", "control_accuracy_sd", "specificity",
               "verdict", "removes", "modules", "loss", "effect", "control_effect_mean", "control_effect_sd"]
    frame = frame[[c for c in leading if c in frame] + [c for c in frame if c not in leading]]
    st.markdown(f"**Filter table** ({table.prompts} prompts, N = {table.numbers}, τ = {table.tau}, d_model = "
                f"{table.d_model}, filtered at {POSITIONS[table.positions]}, {table.seconds:.1f} s)")
    st.dataframe(frame, hide_index=True, key="fourier-filter-frame", column_config=fit_columns(frame))
    sentence = reading(table)
    if sentence:
        st.markdown(sentence)
    export_menu(None, table, "fourier-filter-table", "fourier-filter-table")
    fig = figs.error_kinds_figure(labels, [r.error_counts for r in table.rows], table.prompts)
    st.plotly_chart(fig, width="stretch", key="fourier-error-kinds")
    export_menu(fig, table.panel("error_kinds", frame), "fourier-error-kinds", "fourier-error-kinds")
    fig = figs.error_histogram_figure(labels, [r.errors for r in table.rows])
    st.plotly_chart(fig, width="stretch", key="fourier-error-hist")
    export_menu(fig, table.panel("errors", {label: r.errors for label, r in zip(labels, table.rows, strict=True)}),
                "fourier-error-hist",
                "fourier-error-histograms")


def main() -> None:
    st.title("Fourier features")
    st.caption("Do the model's numbers live on waves? A number's representation is written in the Fourier basis over "
               "0..N-1 (period N/k per frequency k). Zhou et al. (2024) found pre-trained models represent and add "
               "numbers with a few sparse frequencies.")
    with st.expander("What the paper found"):
        st.markdown(PAPER)
    lm = current_model()
    if lm is None:
        return
    digits = splits_digits(lm.tokenizer)
    n_default = default_numbers(lm)
    page_params = params(lm, digits, n_default)
    url_inputs(PAGE, page_params)
    if digits:
        st.info(f"{lm.name} splits numbers into digits, so numbers have no token of their own: the spectrum is taken "
                "on the hidden state at each number's last digit, layer by layer, and answers are generated. The "
                "module lens and the filters need single-token numbers: pick **adder** in the sidebar for those.")
    elif lm.name in BUNDLED and BUNDLED[lm.name].description:
        st.caption(f"**{lm.name}**: {BUNDLED[lm.name].description}")
    view = st.segmented_control("View", VIEWS, key="fourier-view") or VIEWS[0]
    with show_errors():
        if view == "Spectrum":
            spectrum_view(lm, digits)
        elif view == "Addition probe":
            probe_view(lm, digits, n_default)
        else:
            filter_view(lm, digits, n_default)
    write_url(page_params, run={"Addition probe": "fourier-probe", "Filters": "fourier-filters"}.get(view))


main()
