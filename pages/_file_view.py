"""The relevance page's whole-file section: every row of an uploaded file explained with one method (progress with
an ETA, Stop, resumable), aggregated, browsable row by row, exported as a tidy table and figures."""
from __future__ import annotations

import streamlit as st

from backend.config import InterpscopeError
from backend.limits import check_amounts
from backend.relevance.file_attribution import MAX_ROWS, explain_file
from backend.relevance.methods import MethodOptions
from backend.uploads import parse_table
from components.export import export_menu
from components.relevance_charts import mean_relevance_bars
from components.token_heatmap import heatmap_figure, token_heatmap
from pages._common import progress

PAGE = "relevance-file"


def method_options(key: str, method: str) -> MethodOptions:
    """IG steps and baseline, occlusion window and baseline: inputs shown for the methods that use them."""
    steps, baseline, window = 32, "zero", 1
    if method in ("ig", "occlusion"):
        cols = st.columns(2)
        baseline = cols[0].selectbox("Baseline", ["zero", "pad", "mean"], key=f"{key}-baseline",
                                     format_func={"zero": "zero embeddings", "pad": "the pad token",
                                                  "mean": "the mean embedding"}.get)
        if method == "ig":
            st.session_state.setdefault(f"{key}-ig-steps", 32)  # the page's URL may have set it
            steps = int(cols[1].number_input("IG steps", 1, 512, key=f"{key}-ig-steps"))
        else:
            st.session_state.setdefault(f"{key}-window", 1)
            window = int(cols[1].number_input("Occlusion window (tokens)", 1, 64, key=f"{key}-window"))
    check_amounts(ig_steps=steps, occlusion_window=window)  # a shared server's ceilings (backend/limits.py)
    return MethodOptions(ig_steps=steps, baseline=baseline, occlusion_window=window)


def file_section(lm, labels: dict[str, str]) -> None:
    with st.expander("Explain a whole file (every row, aggregated)"):
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
    with left:
        fig = mean_relevance_bars([r["token"] for r in aggregates.by_token[:25]],
                                  [r["mean_relevance"] for r in aggregates.by_token[:25]],
                                  [r["count"] for r in aggregates.by_token[:25]],
                                  f"Mean relevance per token type ({label})",
                                  "token (the 25 with the largest |mean|, seen twice or more first), by mean",
                                  by_value=True)
        st.plotly_chart(fig, key=f"{PAGE}-by-token")
        export_menu(fig, aggregates.by_token, key=f"{PAGE}-by-token", filename="file-relevance-by-token")
    with right:
        fig = mean_relevance_bars([str(r["distance"]) for r in aggregates.by_distance],
                                  [r["mean_relevance"] for r in aggregates.by_distance],
                                  [r["count"] for r in aggregates.by_distance],
                                  "Mean relevance by distance from the prediction", "tokens back (0 = last)")
        st.plotly_chart(fig, key=f"{PAGE}-by-distance")
        export_menu(fig, aggregates.by_distance, key=f"{PAGE}-by-distance", filename="file-relevance-by-distance")
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
        token_heatmap(row["tokens"], row["relevance"], row["sinks"])
        export_menu(heatmap_figure(row["tokens"], row["relevance"], f"Row {row['row']}: {label}", row["sinks"]),
                    row, key=f"{PAGE}-row", filename=f"file-row-{row['row']}")
