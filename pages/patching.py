"""Activation patching: which layer, position and head carry the difference between a clean and a corrupt prompt,
with attribution patching (gradients) and relevance patching (LRP) estimates beside it, and path patching."""
from __future__ import annotations

import streamlit as st

from components.export import export_menu
from interpscope.config import InterpscopeError
from interpscope.figures.patching import METHOD_TITLES, kind_figure
from interpscope.inputs import check_text
from interpscope.models.memory import run_checked
from interpscope.patching.attribution import DEFAULT_RELP_RULES, RELP_RULES
from interpscope.patching.patching import KIND_LABELS, KINDS
from interpscope.patching.prompts import METRIC_LABELS, METRICS
from interpscope.patching.results import PatchingResult, PathPatchingResult
from interpscope.patching.run import METHODS, patch, path_patch
from pages._common import (
    KEEP,
    Param,
    committed,
    current_model,
    is_shared,
    model_key,
    progress,
    shared,
    show_errors,
    timing,
    url_inputs,
    write_url,
)
from pages._patching_set import set_view
from pages._relevance_extras import bos_param, bos_toggle

PAGE = "patching"
PATH_PAGE = "patching-path"
DEFAULT_CLEAN = "When Mary and John went to the store, John gave a drink to"
DEFAULT_CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
RULES = tuple(RELP_RULES)
PARAMS = [Param("patch-clean", "clean", DEFAULT_CLEAN), Param("patch-corrupt", "corrupt", DEFAULT_CORRUPT),
          Param("patch-answer", "answer", " Mary"), Param("patch-wrong", "wrong", " John"),
          Param("patch-metric", "metric", "logit-diff", choices=METRICS),
          Param("patch-components", "components", ",".join(KINDS)),
          Param("patch-methods", "methods", ",".join(METHODS)),
          Param("patch-rules", "rules", DEFAULT_RELP_RULES, choices=RULES), bos_param("patch-bos"),
          Param("patch-mode", "mode", "One pair", choices=["One pair", "A set of pairs"], scope="nav"),
          Param("patch-set-source", "pairs", "The shipped IOI pairs (six, one template)",
                choices=["The shipped IOI pairs (six, one template)", "Upload a file"]),
          Param("patch-sender", "sender", "", scope="view"), Param("patch-receiver", "receiver", "logits",
                                                                     scope="view")]


MODES = ["One pair", "A set of pairs"]


def _picker(label: str, key: str, options: tuple[str, ...], names: dict[str, str]) -> list[str]:
    """A multiselect kept in the URL as a comma-separated Param (`key`)."""
    state = st.session_state
    pick = f"{key}-pick"
    if pick not in state or key in state.get("_url-just-read", ()):
        asked = [v for v in str(state.get(key, "")).split(",") if v]
        state[pick] = [v for v in asked if v in options]
        unknown = [v for v in asked if v not in options]
        if unknown and key in state.get("_url-just-read", ()):
            st.warning(f"Ignored from the link's {label.lower()}: {', '.join(map(repr, unknown))} (this page has "
                       f"{', '.join(options)}).")
    chosen = st.multiselect(label, list(options), key=pick, format_func=names.get)
    state[key] = ",".join(chosen)
    return chosen


def _result(run: dict, report=None) -> PatchingResult:
    key = (model_key(), *(run[k] for k in sorted(run)))
    return shared("patching", key, lambda: run_checked(current_model(), "patching", run["clean"], lambda: patch(
        current_model(), run["clean"], run["corrupt"], metric=run["metric"], answer=run["answer"] or None,
        wrong=run["wrong"] or None, components=run["components"], methods=run["methods"], relp_rules=run["rules"],
        prepend_bos=run["bos"], progress=report)))


def _tokens_note(result: PatchingResult) -> None:
    differ = [i for i, (a, b) in enumerate(zip(result.clean_tokens, result.corrupt_tokens, strict=True)) if a != b]
    pieces = ", ".join(f"position {i}: {result.clean_tokens[i]!r} → {result.corrupt_tokens[i]!r}" for i in differ)
    st.caption(f"Both prompts are {len(result.clean_tokens)} tokens; they differ at {pieces}. Cells before position "
               f"{differ[0]} see identical activations in both runs, so patching them changes nothing (0 for every "
               "method; left out of the correlations).")
    if result.sinks:
        st.caption("Named on the axes and never ranked: " + "; ".join(
            f"{row['token']!r} at {row['position']} ({row['reason']})" for row in result.sinks) + ".")


SENDERS = {"heads": "L{row}.H{column}", "attn": "L{row}.attn", "mlp": "L{row}.mlp"}  # a cell as a path sender


def _clicked_cell(event, kind: str) -> tuple[int, int] | None:
    """A newly clicked cell (row, column) of kind's heatmaps (None when none, or the click was handled)."""
    points = getattr(getattr(event, "selection", None), "points", None) or []
    cells = [p.get("customdata") for p in points if isinstance(p.get("customdata"), list)]
    seen = f"_patch-seen-{kind}"
    if not cells:
        st.session_state.pop(seen, None)  # a click on the selected cell unselects it: the next one is new again
        return None
    if st.session_state.get(seen) == cells[0]:
        return None
    st.session_state[seen] = cells[0]
    return int(cells[0][2]), int(cells[0][3])


def _cell_readout(result: PatchingResult, kind: str, row: int, column: int) -> None:
    """What the clicked cell holds under every method, and the cell as path patching's sender where it can be."""
    values = " · ".join(f"{METHOD_TITLES[m].split(' (')[0].lower()} {float(result.grid(kind, m)[row, column]):+.3f}"
                        for m in result.methods)
    unchanged = "" if bool(result.grids[kind]["changed"][row][column]) else \
        " (its clean and corrupt activations are identical: patching it changes nothing)"
    st.markdown(f"**Clicked: {result.cell_label(kind, row, column)}**: {values}{unchanged}.")
    sender = SENDERS.get(kind)
    if sender:
        st.caption(f"Path patching's sender (below) is now {sender.format(row=row, column=column)}: run it to see how "
                   "much of this cell's effect reaches a receiver.")


def _show(result: PatchingResult, cached: bool) -> None:
    st.markdown(f"**{result.metric_label}**: clean {result.clean_value:.4g}, corrupt {result.corrupt_value:.4g} · "
                + timing(result.seconds.get("total", 0.0), cached) + " · "
                + ", ".join(f"{METHOD_TITLES[m].split(' (')[0].lower()} {result.seconds[m]:.2f} s"
                            for m in result.methods if m in result.seconds))
    _tokens_note(result)
    for sentence in result.summary():
        st.markdown(f"- {sentence}")
    st.caption("Colour: 1 (red) = patching this cell alone restores the clean metric, 0 (white) = no change, "
               "negative (blue) = further from clean; the scale is fixed at −1..1, not fitted to any cell.")
    st.caption("Click a cell to read it under every method (a head, attention or MLP cell becomes path patching's "
               "sender).")
    for kind in result.components:  # the clicks, read before any figure is drawn: one readout, under its figure
        cell = _clicked_cell(st.session_state.get(f"patch-fig-{kind}"), kind)
        if cell is not None:
            st.session_state["_patch-cell"] = (kind, *cell)
            if kind in SENDERS:
                st.session_state["patch-sender"] = SENDERS[kind].format(row=cell[0], column=cell[1])
    for kind in result.components:
        fig = kind_figure(result, kind)
        st.plotly_chart(fig, key=f"patch-fig-{kind}", on_select="rerun", selection_mode="points")
        held = st.session_state.get("_patch-cell")
        if held is not None and held[0] == kind and held[1] < result.grid(kind, result.methods[0]).shape[0] and \
                held[2] < result.grid(kind, result.methods[0]).shape[1]:  # a cell of this result's grid
            _cell_readout(result, kind, held[1], held[2])
        export_menu(fig, result, key=f"patch-{kind}", filename=f"patching-{kind}")
    if "real" in result.methods and len(result.methods) > 1:
        fig = result.scatter_figure()
        st.plotly_chart(fig, key="patch-fig-scatter")
        export_menu(fig, result, key="patch-scatter", filename="patching-agreement")


def _path_section(run: dict) -> None:
    st.subheader("Path patching")
    st.caption("The sender's clean output reaches only the receiver: every attention and MLP output between them is "
               "frozen at its corrupt value. Components: L<layer>.H<head>, L<layer>.attn, L<layer>.mlp; the receiver "
               "may also be 'logits' (the sender's direct effect).")
    left, right = st.columns(2)
    sender = left.text_input("Sender", key="patch-sender", placeholder="L9.H3")
    receiver = right.text_input("Receiver", key="patch-receiver", placeholder="L20.attn or logits")
    submitted = st.button("Run path patching", key="patch-path-run")
    inputs = {**run, "sender": sender.strip(), "receiver": receiver.strip()}
    path_run = committed(PATH_PAGE, inputs, submitted) if sender.strip() else None
    if path_run is None:
        return
    key = (model_key(), *(path_run[k] for k in sorted(path_run)))
    with show_errors(), st.spinner("Two passes…"):
        result: PathPatchingResult = shared("path-patching", key, lambda: path_patch(
            current_model(), path_run["clean"], path_run["corrupt"], path_run["sender"], path_run["receiver"],
            metric=path_run["metric"], answer=path_run["answer"] or None, wrong=path_run["wrong"] or None,
            prepend_bos=path_run["bos"]))
    st.markdown(result.summary())
    fig = result.figure()
    st.plotly_chart(fig, key="patch-fig-path")
    export_menu(fig, result, key="patch-path", filename="path-patching")


def main() -> None:
    st.title("Activation patching")
    st.caption("Run the corrupt prompt with one clean activation put back (a layer's residual stream, attention or "
               "MLP output at one position, or one head) and see how much of the clean answer returns: 1 = the "
               "clean metric, 0 = the corrupt one. Attribution patching (gradients) and relevance patching (LRP "
               "coefficients) estimate the same grids from one backward pass each (RelP's default rules average their "
               "coefficients over two points between the corrupt and the clean input: one pass over a batch of two); "
               "their Pearson r against real patching is shown beside each, with a shuffled control.")
    lm = current_model()
    if lm is None:
        return
    if "attention" not in lm.adapter.capabilities():
        st.info(f"{lm.name} ({lm.family}) has no attention heads to patch: pick a transformer.")
        return
    url_inputs(PAGE, PARAMS)
    one_pair = st.segmented_control("Patch", MODES, key="patch-mode") != MODES[1]  # 45.15: or a set of pairs
    clean = corrupt = answer = wrong = ""
    if one_pair:
        left, right = st.columns(2)
        clean = left.text_area("Clean prompt", key="patch-clean", height=90, **KEEP)
        corrupt = right.text_area("Corrupt prompt (same number of tokens)", key="patch-corrupt", height=90,
                                **KEEP)  # kept while the set-of-pairs mode hides it
    a, b, c = st.columns(3)
    metric = c.selectbox("Metric", METRICS, key="patch-metric", format_func=METRIC_LABELS.get)
    if one_pair:
        answer = a.text_input("Answer token (empty: the clean prompt's top prediction)", key="patch-answer", **KEEP)
        wrong = b.text_input("Wrong token (empty: the corrupt prompt's top prediction)", key="patch-wrong",
                             disabled=metric != "logit-diff", **KEEP)
    d, e, f = st.columns([2, 2, 1])
    with d:
        components = _picker("Components", "patch-components", KINDS, KIND_LABELS)
    with e:
        methods = _picker("Methods", "patch-methods", METHODS, METHOD_TITLES)
    rules = f.selectbox("RelP rules", RULES, key="patch-rules", help="LRP rules of RelP's backward pass. relp-half-q: "
                        "norm identity, half rule on the gated MLP product, gradient through queries, keys detached; "
                        "relp-half-q-ig2 (default): the same rules, coefficients averaged at 1/4 and 3/4 of the way "
                        "from the corrupt to the clean input (one pass of batch 2); relp-half: the RelP paper's "
                        "(queries and keys detached); cp-lrp: gate detached too; attnlrp: relevance through the "
                        "softmax; -qk / -qk4 / -q: queries and keys kept, x 1/4, queries only.")
    prepend = bos_toggle(lm, st, key="patch-bos")
    if not one_pair:
        write_url(PARAMS, run="patch-set")
        set_view(lm, metric, components, methods, rules, prepend)
        return
    submitted = st.button("Run", type="primary", key="patch-run")
    try:
        inputs = {"clean": check_text(clean), "corrupt": check_text(corrupt), "answer": answer, "wrong": wrong,
                  "metric": metric, "components": ",".join(components), "methods": ",".join(methods),
                  "rules": rules, "bos": prepend}
    except InterpscopeError as err:
        st.warning(str(err))
        write_url(PARAMS, run=PAGE)
        return
    if not components or not methods:
        st.warning("Choose at least one component and one method.")
        write_url(PARAMS, run=PAGE)
        return
    run = committed(PAGE, inputs, submitted)
    if run is None:
        write_url(PARAMS, run=PAGE)
        st.info("Press **Run**: real patching runs one forward pass per changed cell (batched; the bar estimates the "
                "time left from its pace); AtP and RelP estimate every cell from one backward pass each.")
        return
    key = (model_key(), *(run[k] for k in sorted(run)))
    cached = is_shared("patching", key)
    with show_errors(), progress("Patched runs", PAGE) as report:
        result = _result(run, report)
    write_url(PARAMS, run=PAGE)
    _show(result, cached)
    _path_section(run)


main()
