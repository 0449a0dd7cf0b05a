"""The SAE overview's SAEBench-style section: the shipped bench result of the chosen SAE (assets/sae_bench/), or a
rerun on an explicit Run; every number beside its control, with what the metric means and a sentence computed from
the two numbers."""
from __future__ import annotations

import streamlit as st

from components.export import export_menu
from interpscope.sae.bench import SAEBenchResult, bench_sae, metrics, shipped_bench
from pages._common import committed, current_model, model_key, progress, shared, show_errors

PAGE = "sae-overview-bench"


def _value(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def sample_size(name: str, settings: dict) -> str:
    """How much each number rests on (small samples: a difference of a few hundredths can be noise)."""
    if name == "absorption" and "words" in settings:
        return (f"{settings['words']:,} tokenizer words ({settings.get('with_leading_space', 0):,} with a leading "
                f"space), {settings.get('letters_scored', 0)} letters with enough test words")
    if name == "probing" and "passages" in settings:
        return f"{len(settings.get('novels', []))} one-vs-rest tasks over {settings['passages']:,} passages"
    if "features_scored" in settings:
        return (f"{settings['features_scored']} sampled features, {settings.get('n_examples', 0)} positive examples "
                f"each; judge: {settings.get('judge', 'a judge')}")
    return ""


def show_result(result: SAEBenchResult, origin: str) -> None:
    """Each metric: its meaning, its numbers beside their controls, and the sentence each pair says."""
    st.caption(f"{origin} · {result.architecture} SAE {result.sae} on {result.hook_name} of {result.model_name}"
               + (f" · {result.seconds:.0f} s" if result.seconds else ""))
    for name, metric in result.metrics.items():
        st.markdown(f"**{name.capitalize()}**")
        size = sample_size(name, metric.settings)
        st.caption(metric.meaning + (f" Measured on {size}." if size else ""))
        columns = st.columns(min(len(metric.measures), 5))
        for index, measure in enumerate(metric.measures):
            delta = None if measure.value is None or measure.control is None else measure.value - measure.control
            columns[index % len(columns)].metric(
                measure.name, _value(measure.value),
                delta=None if delta is None else f"{delta:+.3f} vs control",
                delta_color="normal" if measure.higher_is_better else "inverse",
                help=f"Control: {measure.control_name} = {_value(measure.control)}.")
        st.caption(" ".join(measure.sentence() for measure in metric.measures))
    for name, why in result.skipped.items():
        st.info(f"{name.capitalize()} was not measured: {why}")
    fig = result.figure()
    st.plotly_chart(fig, width="stretch", key="sae_bench_figure")
    with st.expander("Table and details"):
        st.dataframe(result.table_rows(), hide_index=True, width="stretch")
    export_menu(fig, result, key="sae-bench", filename="sae-bench")


def show_bench(path: str) -> None:
    """The section: the shipped result (no computing), or the result of the last Run of the chosen metrics."""
    st.subheader("SAEBench-style metrics")
    registry = metrics()
    chosen = st.multiselect("Metrics", list(registry), default=list(registry), key="sae_bench_metrics",
                            help=" ".join(f"{m.name}: {m.meaning}" for m in registry.values()))
    submitted = st.button("Run bench", key="sae_bench_run",
                          help="Recompute the chosen metrics on this SAE (slow: the bundled LM judges every "
                               "explanation; the bar estimates the time left from the pace so far).")
    run = committed(PAGE, {"path": path, "metrics": chosen}, submitted)
    result, origin = None, ""
    if run is not None and run["path"] == path and run["metrics"]:
        lm = current_model()
        if lm is None:
            return
        key = (model_key(), run["path"], tuple(run["metrics"]))
        with show_errors(), progress("Bench", PAGE, first="starting") as report:
            result = shared("sae-bench", key, lambda: bench_sae(lm, run["path"], metric_names=list(run["metrics"]),
                                                                  progress=report))
        origin = "Measured on this Run"
    if result is None:
        result = shipped_bench(path)
        origin = "Shipped result (assets/sae_bench, measured on these exact weights)"
    if result is None:
        st.info("No bench result for this SAE yet: choose metrics and press Run bench.")
        return
    show_result(result, origin)
