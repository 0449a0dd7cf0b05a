"""The relevance page's whole-file section: every row of an uploaded file explained with one method (progress with
an ETA, Stop, resumable), aggregated, browsable row by row, exported as a tidy table and figures; or the shipped
held-out prompt set, every method on every prompt, with the ABPC table (bootstrap 95% intervals, random control)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from components.export import export_menu
from components.token_heatmap import token_heatmap
from interpscope.config import InterpscopeError
from interpscope.figures.tokens import heatmap_figure
from interpscope.limits import check_amounts
from interpscope.relevance.file_attribution import MAX_ROWS, excluded_reasons, explain_file
from interpscope.relevance.heldout import DEFAULT_IG_STEPS, SETS, choose, load_set, run_heldout
from interpscope.uploads import parse_table
from pages._common import Param, bounded, model_key, progress, shared
from pages._method_options import method_options

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

PAGE = "relevance-file"
SOURCES = ["upload", "heldout"]
SOURCE_LABELS = {"upload": "Upload a file", "heldout": f"The shipped held-out set ({SETS['heldout']})"}
SET_CURVE_STEPS = 5


def file_params() -> list[Param]:
    """This section's inputs kept in the page's URL (the relevance page adds them to its own); "nav" scope: the
    section has its own Run, so they are in the link before the page's Run too."""
    return [Param(f"{PAGE}-source", "fsource", "upload", choices=SOURCES, scope="nav"),
            Param(f"{PAGE}-set-n", "fn", 24, int, low=1, high=1000, scope="nav"),
            Param(f"{PAGE}-set-confident", "fconfident", False, bool, scope="nav")]


def file_section(lm: LoadedModel, labels: dict[str, str]) -> None:
    with st.expander("Explain a whole file (every row, aggregated), or the shipped held-out set"):
        source = st.radio("Input", SOURCES, format_func=SOURCE_LABELS.get, horizontal=True, key=f"{PAGE}-source")
        if source == "heldout":
            heldout_section(lm, labels)
            return
        upload = st.file_uploader("A .txt/.md (one example per line), .csv (a text column, optionally a label "
                                  "column) or .jsonl file", type=["txt", "md", "csv", "jsonl"], key=f"{PAGE}-upload")
        if upload is None:
            st.caption(f"Up to {MAX_ROWS:,} rows; the run is saved as it goes and resumes where it stopped.")
            return
        try:
            table = parse_table(upload.getvalue(), upload.name)
            check_amounts(file_rows=len(table.examples))
        except InterpscopeError as err:
            st.error(str(err))
            return
        if table.note:
            st.caption(table.note)
        method = st.selectbox("Method", list(labels), format_func=labels.get, key=f"{PAGE}-method")
        options = method_options(PAGE, method)
        st.caption(f"{len(table.examples):,} rows" + (f", labels from {table.label_column!r}" if table.labels else ""))
        run = None
        if st.button("Run on every row", type="primary", key=f"{PAGE}-run"):
            st.session_state[f"{PAGE}-started"] = (upload.file_id, method, options)
        elif st.session_state.get(f"{PAGE}-stop"):  # Stop (in the progress row): no restart until Run again
            st.session_state.pop(f"{PAGE}-started", None)
        if st.session_state.get(f"{PAGE}-started") == (upload.file_id, method, options):
            with progress("Rows", PAGE) as report:
                try:
                    run = explain_file(lm, table, upload.getvalue(), method, options=options, progress=report)
                except InterpscopeError as err:
                    st.error(str(err))
                    return
        if run is None:
            return
        show_run(run, labels[method])


def show_run(run, label: str) -> None:
    done = f"{len(run.rows):,} of {run.spec.n_rows:,} rows explained"
    if run.errors:
        done += f"; {len(run.errors)} could not be (e.g. row {run.errors[0]['row']}: {run.errors[0]['error']})"
    st.markdown(f"**{done}**" + ("" if run.complete else " — stopped; Run again to continue where it stopped."))
    aggregates = run.aggregates()
    left, right = st.columns(2)
    with left:  # both charts export the aggregates' one document (schema interpscope.file_aggregates)
        fig = aggregates.figure()
        st.plotly_chart(fig, key=f"{PAGE}-by-token")
        export_menu(fig, aggregates, key=f"{PAGE}-by-token", filename="file-relevance-by-token")
    with right:
        fig = aggregates.distance_figure()
        st.plotly_chart(fig, key=f"{PAGE}-by-distance")
        export_menu(fig, aggregates, key=f"{PAGE}-by-distance", filename="file-relevance-by-distance")
    for name, group in aggregates.by_label.items():
        top = group["by_token"][:8]
        st.caption(f"Label {name!r} ({group['rows']} rows): most relevant token types " +
                   ", ".join(f"{r['token']!r} {r['mean_relevance']:+.3g}" for r in top))
    export_menu(None, run, key=f"{PAGE}-tidy", filename="file-relevance")
    if run.rows:
        index = int(st.number_input("Browse a row", 0, len(run.rows) - 1, 0, key=f"{PAGE}-browse"))
        row = run.rows[index]
        st.markdown(f"Row {row['row']}" + (f" · label {row['label']!r}" if row.get("label") is not None else "") +
                    f" · target {row['target']} · value {row['value']:.4g}")
        reasons = excluded_reasons(row)
        token_heatmap(row["tokens"], row["relevance"], row["sinks"], reasons)
        export_menu(heatmap_figure(row["tokens"], row["relevance"], f"Row {row['row']}: {label}", row["sinks"],
                                   reasons=reasons), run.panel(f"row_{row['row']}", row),
                    key=f"{PAGE}-row", filename=f"file-row-{row['row']}")


def heldout_section(lm: LoadedModel, labels: dict[str, str]) -> None:
    """Every method on the shipped held-out prompts: the ABPC table with intervals, the diagnosis, per-row maps."""
    rows = load_set("heldout")
    cols = st.columns(2)
    bounded(f"{PAGE}-set-n", 1, len(rows), "prompt count")  # a link's fn past the set: named, not a broken page
    count = int(cols[0].number_input("Prompts (taken from every category in turn)", 1, len(rows), key=f"{PAGE}-set-n"))
    confident = cols[1].toggle("Only prompts the model gets right", key=f"{PAGE}-set-confident")
    prompts = choose(rows, limit=count, confident=confident)
    st.caption(f"{len(prompts)} of {len(rows)} prompts; every method ({', '.join(labels.values())}) explains each "
               f"prompt's expected token; tokens are removed to the zero, pad and mean embedding (IG and occlusion "
               f"start from the same baseline), IG {DEFAULT_IG_STEPS} steps, {SET_CURVE_STEPS} curve steps, and a "
               f"random order per prompt is the chance level.")
    inputs = (model_key(), tuple(p["id"] for p in prompts), tuple(labels))
    if st.button("Run on the held-out set", type="primary", key=f"{PAGE}-set-run"):
        st.session_state[f"{PAGE}-set-started"] = inputs
    if st.session_state.get(f"{PAGE}-set-started") != inputs:
        st.info("Press **Run on the held-out set** to compute the table (every method on every prompt; the bar "
                "estimates the time left from its pace).")
        return
    with progress("Prompts", PAGE) as report:
        try:
            result = shared("heldout", inputs, lambda: run_heldout(
                lm, prompts, methods=list(labels), curve_steps=SET_CURVE_STEPS, progress=report))
        except InterpscopeError as err:
            st.error(str(err))
            return
    show_heldout(result)


def show_heldout(result) -> None:
    """The table and its figure (all prompts, then the model-correct ones), the sentence, accuracy, per-row maps."""
    st.markdown(result.sentence)
    for subset, title in (("all", "All prompts"), ("model_correct", "Prompts the model gets right")):
        table = [t for t in result.table if t["subset"] == subset]
        if not table:
            continue
        st.markdown(f"**{title}** ({table[0]['n']})")
        st.plotly_chart(result.figure(subset), key=f"{PAGE}-set-fig-{subset}")
        st.dataframe([{"baseline": t["baseline"], "rank": t["rank"], "method": t["label"],
                       "mean ABPC": round(t["mean_abpc"], 3), "95% low": round(t["ci_low"], 3),
                       "95% high": round(t["ci_high"], 3), "prompts": t["n"]}
                      for t in sorted(table, key=lambda t: (t["baseline"], t["rank"]))], hide_index=True)
    st.caption("The model's top-1 is the expected token on " + ", ".join(
        f"{k} {v['correct']}/{v['n']}" for k, v in result.accuracy.items()) + " prompts.")
    export_menu(None, result, key=f"{PAGE}-set-export", filename="heldout-faithfulness")
    index = int(st.number_input("Browse a prompt", 0, len(result.rows) - 1, 0, key=f"{PAGE}-set-browse"))
    row = result.rows[index]
    method = st.selectbox("Map", list(row["relevance"]), format_func=lambda m: result.labels.get(m, m),
                          key=f"{PAGE}-set-map")
    st.markdown(f"`{row['id']}` ({row['category']}) · expected {row['expected']!r} · model "
                f"{'right' if row.get('model_correct') else 'wrong'} · ABPC " + ", ".join(
                    f"{b} {row['abpc'][b][method]:.3g}" for b in result.settings.baselines))
    token_heatmap(row["tokens"], row["relevance"][method], row["sinks"], excluded_reasons(row))
