"""Attention heads: every head's pattern on a text, and the head finder (induction, previous-token and duplicate-token
scores against chance, with the top induction heads ablated against random heads)."""
from __future__ import annotations

import streamlit as st

from components.export import export_menu
from interpscope.figures.heads import SCORE_NAMES
from interpscope.heads.finder import KINDS, LABELS, HeadScores, find_heads
from interpscope.heads.patterns import SUMMARIES, HeadPatterns, head_patterns, parse_head
from interpscope.models.memory import run_checked
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
from pages._relevance_extras import bos_param, bos_toggle

PAGE, FINDER = "heads", "heads-find"
VIEWS = ["Patterns", "Head finder"]
DEFAULT_TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be "
                "in want of a wife. It is a truth universally acknowledged, that a single man in possession of a good "
                "fortune, must be in want of a wife.")
PARAMS = [Param("heads-view", "view", VIEWS[0], choices=VIEWS, scope="nav"),
          Param("heads-text", "text", DEFAULT_TEXT), bos_param("heads-bos"),
          Param("heads-head", "head", "", scope="view", max_length=12),
          Param("heads-summary", "summary", "previous_token", choices=SUMMARIES, scope="view"),
          Param("heads-seqs", "sequences", 8, int, low=1, high=64), Param("heads-half", "half", 40, int, low=2,
                                                                            high=256),
          Param("heads-seed", "seed", 0, int, low=0, high=2**31 - 1),
          Param("heads-ablate", "ablate", 5, int, low=0, high=100),
          # not "heads-mode": that key is the text source's paste/upload radio (text_source(PAGE))
          Param("heads-ablation", "ablation", "zero", choices=["zero", "mean"]),
          Param("heads-kind", "kind", "induction", choices=KINDS, scope="view")]


def open_head(name: str) -> None:
    """Callback: show head `name`'s pattern (Patterns view, run on the current text)."""
    st.session_state["heads-view"] = "Patterns"
    st.session_state["heads-head"] = name
    st.session_state["_heads-open"] = True


def clicked(event, key: str) -> str | None:
    """A newly clicked grid cell's "L.H" (None when the click was already handled). A click on the selected cell
    clears the selection (plotly toggles it): the next click on it is new again."""
    points = getattr(getattr(event, "selection", None), "points", None) or []
    names = [p.get("customdata") for p in points if isinstance(p.get("customdata"), str)]
    if not names:
        st.session_state.pop(f"_{key}-seen", None)
        return None
    if st.session_state.get(f"_{key}-seen") == names[0]:
        return None
    st.session_state[f"_{key}-seen"] = names[0]
    return names[0]


def patterns_view(lm) -> None:
    text = text_source(PAGE, label="Text", default=DEFAULT_TEXT, height=90)
    prepend = bos_toggle(lm, st, key="heads-bos")
    submitted = st.button("Run", type="primary", key="heads-run") or st.session_state.pop("_heads-open", False)
    run = committed(PAGE, {"text": text, "bos": prepend}, submitted) if text is not None else None
    if run is None:
        write_url(PARAMS, run=PAGE)
        st.info("Press **Run** to read every head's attention on this text (one forward pass).")
        return
    key = (model_key(), run["text"], run.get("bos"))
    cached = is_shared("heads", key)
    with show_errors(), st.spinner("Attention of every head…"):
        result: HeadPatterns = shared("heads", key, lambda: head_patterns(lm, run["text"],
                                                                          prepend_bos=run.get("bos")))
    summary = st.selectbox("Colour the grid by", SUMMARIES, key="heads-summary",
                           format_func=lambda s: SCORE_NAMES[s])
    names = [f"{layer}.{head}" for layer in range(result.n_layers) for head in range(result.n_heads)]
    # a click on the grid is read before the grid is drawn, so the head it opens is the one outlined in it
    new = clicked(st.session_state.get("heads-grid"), "heads-grid")
    if new:
        st.session_state["heads-head"] = new
    if st.session_state.get("heads-head") not in names:
        best = max(result.tidy(), key=lambda r: r["previous_token"])
        asked = st.session_state.get("heads-head")
        st.session_state["heads-head"] = f"{best['layer']}.{best['head']}"
        if asked:  # a link's head (or one of another model) that this model lacks: say so, never swap silently
            st.warning(f"There is no head {asked!r} here (heads are layer.head, layers 0–{result.n_layers - 1}, "
                       f"heads 0–{result.n_heads - 1}): showing {st.session_state['heads-head']}, the strongest "
                       "previous-token head.")
    grid = result.grid_figure(summary, shown=st.session_state["heads-head"])
    st.plotly_chart(grid, key="heads-grid", on_select="rerun", selection_mode="points")
    write_url(PARAMS, run=PAGE)
    name = st.selectbox("Head (layer.head)", names, key="heads-head")
    layer, head = parse_head(name, result.n_layers, result.n_heads)
    shown = result.with_heads([name])
    st.markdown(f"**{len(result.tokens)} tokens**, {result.n_layers} x {result.n_heads} heads · "
                f"{timing(result.seconds, cached)}")
    if result.sinks:
        st.caption("Excluded from every colour scale (drawn, outlined, named): " + "; ".join(
            f"{row['token']!r} at {row['position']}: {row['reason']}" for row in result.sinks) + ".")
    fig = shown.figure()
    st.plotly_chart(fig, key="heads-pattern")
    export_menu(fig, shown, key="heads-pattern", filename=f"attention-L{layer}H{head}")
    stats, chance = result.stats, result.chance
    share = float(stats["sinks"][layer, head])
    st.caption(f"Head {name} puts {stats['previous_token'][layer, head]:.1%} of a query's attention on the previous "
               f"token (a uniform causal pattern: {chance['previous_token']:.1%}), {stats['self'][layer, head]:.1%} on "
               f"the query itself ({chance['self']:.1%}), {share:.1%} on excluded positions; its rows' entropy is "
               f"{stats['entropy'][layer, head]:.2f} nats (uniform: {chance['entropy']:.2f}).")


def finder_view(lm) -> None:
    left, mid, right = st.columns(3)
    left.number_input("Random sequences", 1, 64, key="heads-seqs")
    mid.number_input("Tokens per copy", 2, 256, key="heads-half")
    right.number_input("Seed", 0, 2**31 - 1, key="heads-seed")
    left2, right2 = st.columns(2)
    left2.number_input("Ablate the top K induction heads (0: none)", 0, 100, key="heads-ablate")
    right2.selectbox("Ablation", ["zero", "mean"], key="heads-ablation")
    inputs = {k: st.session_state[f"heads-{k}"] for k in ("seqs", "half", "seed", "ablate", "ablation")}
    submitted = st.button("Run", type="primary", key="heads-find-run")
    run = committed(FINDER, inputs, submitted)
    if run is None:
        write_url(PARAMS, run=FINDER)
        st.info("Press **Run** to score every head (one pass over the random sequences; ablation adds more, each "
                "with the bar's estimate of the time left).")
        return
    key = (model_key(), *run.values())
    cached = is_shared("head-scores", key)
    with show_errors(), progress("Head finder", page=FINDER) as update:
        scores: HeadScores = shared("head-scores", key, lambda: run_checked(
            lm, "heads", None, lambda: find_heads(
                lm, n_sequences=int(run["seqs"]), half_len=int(run["half"]), seed=int(run["seed"]),
                ablate=int(run["ablate"]), mode=run["ablation"], progress=update),
            tokens=2 * int(run["half"]), sequences=int(run["seqs"])))
    kind = st.selectbox("Score", KINDS, key="heads-kind", format_func=lambda k: LABELS[k])
    write_url(PARAMS, run=FINDER)
    st.markdown(f"{scores.n_sequences} sequences of 2 x {scores.half_len} random tokens · "
                f"{timing(scores.seconds, cached)}")
    fig = scores.figure(kind)
    st.plotly_chart(fig, key="heads-finder", on_select="rerun", selection_mode="points")  # a click: main() opens it
    export_menu(fig, scores, key="heads-finder", filename="head-scores")
    top, chance = scores.top(kind, 10), scores.chance[kind]
    above = int((scores.scores[kind] > 10 * chance).sum())
    st.caption(f"The top {LABELS[kind]} head, {top[0]['layer']}.{top[0]['head']}, scores {top[0]['score']:.3f}, "
               f"{top[0]['score'] / chance:.0f}x a uniform causal pattern ({chance:.3f}); {above} of "
               f"{scores.n_layers * scores.n_heads} heads score over 10x chance.")
    st.dataframe([{"head": f"{r['layer']}.{r['head']}", "score": round(r["score"], 4),
                   "x chance": round(r["over_chance"], 1)} for r in top], hide_index=True)
    choice = st.selectbox("Open a head's pattern on the Patterns view's text", [f"{r['layer']}.{r['head']}"
                                                                                  for r in top], key="heads-open")
    st.button("Open pattern", key="heads-open-button", on_click=open_head, args=(choice,))
    ablation_caption(scores)


def ablation_caption(scores: HeadScores) -> None:
    a = scores.ablation
    if not a:
        return
    drop, control = a["clean_accuracy"] - a["ablated_accuracy"], a["clean_accuracy"] - a["random_accuracy_mean"]
    st.subheader("Ablation: in-context repetition")
    st.caption(f"Predicting the second copy's tokens: accuracy {a['clean_accuracy']:.1%} clean; with the top {a['k']} "
               f"induction heads ({', '.join(a['heads'])}) {a['mode']}-ablated {a['ablated_accuracy']:.1%} (a drop of "
               f"{drop:.1%}); with {a['k']} random heads {a['random_accuracy_mean']:.1%} on average over "
               f"{len(a['random'])} draws (drop {control:.1%}; worst draw {a['random_accuracy_min']:.1%}). "
               + ("The induction heads matter more than random ones here." if a["ablated_accuracy"] <
                  a["random_accuracy_min"] else "Here the induction heads do not stand out from random heads."))
    st.dataframe([{"heads ablated": "top induction: " + ", ".join(a["heads"]), "accuracy": a["ablated_accuracy"],
                   "loss": a["ablated_loss"]}] +
                 [{"heads ablated": "random: " + ", ".join(r["heads"]), "accuracy": r["accuracy"],
                   "loss": r["loss"]} for r in a["random"]], hide_index=True)


def main() -> None:
    st.title("Attention heads")
    st.caption("Every head's attention pattern on your text (hover for the query and key tokens; attention sinks "
               "are named and never set the colour scale), and the head finder: each head scored for induction, "
               "previous-token and duplicate-token behaviour on repeated random tokens, beside what a uniform "
               "causal pattern scores.")
    lm = current_model()
    if lm is None:
        return
    if "attention" not in lm.adapter.capabilities():
        st.info(f"{lm.name} ({lm.family}) has no attention heads: pick a transformer.")
        return
    url_inputs(PAGE, PARAMS)
    # a click on the finder's grid opens that head's pattern: read before the view radio is drawn (the view it
    # switches to cannot be set once the radio exists)
    if st.session_state.get("heads-view") == "Head finder":
        new = clicked(st.session_state.get("heads-finder"), "heads-finder")
        if new:
            open_head(new)
    view = st.radio("View", VIEWS, key="heads-view", horizontal=True, label_visibility="collapsed")
    if view == "Patterns":
        patterns_view(lm)
    else:
        finder_view(lm)


main()
