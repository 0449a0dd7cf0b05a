"""Parts of the relevance page about what a map leaves out and how far to trust it: the prepend-BOS option and its
caption (measured sinks named), and Integrated Gradients' convergence check (gap per step count, on its own Run).

Used by pages/relevance.py.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from components.export import export_menu
from interpscope.figures.relevance.ig import convergence_sentence, convergence_table
from interpscope.inputs import default_prepend_bos, tokenizer_adds_bos
from interpscope.relevance.api import RelevanceResult, ig_convergence
from interpscope.relevance.baselines import CONVERGENCE_STEPS
from interpscope.relevance.methods import MethodOptions, get_method
from interpscope.sinks import SINK_FACTOR
from pages._common import KEEP, Param, follow, model_key, progress, shared, show_errors

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

BOS_KEY = "relevance-bos"


def bos_param(key: str = BOS_KEY) -> Param:
    """The prepend-BOS option in the URL (default chosen by the page from the model: bos_default)."""
    return Param(key, "bos", None, bool)


def bos_default(lm: LoadedModel) -> bool:
    """On where the tokenizer adds no BOS and the model has attention (interpscope.inputs.default_prepend_bos)."""
    return default_prepend_bos(lm.tokenizer, "attention" in lm.adapter.capabilities(), lm.prefix_token_id)


def bos_toggle(lm: LoadedModel, container, key: str = BOS_KEY, owner=None) -> bool:
    """The prepend-BOS toggle (disabled where the tokenizer adds its BOS itself or has none); its value. Its default
    follows `owner` (the sidebar's model_key() unless given: the SAE views run their store's model)."""
    token_id = lm.prefix_token_id  # the measured prefix of a bundled model, else the tokenizer's BOS
    owner = model_key() if owner is None else owner
    follow(key, owner, lambda: bos_default(lm))  # each model starts at its own default; a link's value stays
    adds = tokenizer_adds_bos(lm.tokenizer)
    name = lm.tokenizer.convert_ids_to_tokens(token_id) if token_id is not None else None
    where = ("so the model's attention sink lands on it and the first word is explained like any other"
             if "attention" in lm.adapter.capabilities() else
             "off by default: this model has no attention, so no attention sink to give it")
    help_text = (f"This tokenizer puts {name!r} first itself." if adds else
                 "This tokenizer has no BOS token." if token_id is None else
                 f"Put {name!r} before the text (this tokenizer adds none), {where}. A prepended token is shown, "
                 "named, and never ranked or used for the colour scale.")
    return bool(container.toggle("Prepend BOS", key=key, help=help_text, disabled=adds or token_id is None, **KEEP))


def sink_caption(result: RelevanceResult, bos_id: int | None = None) -> None:
    """Under a map (the legend already names each excluded position and why): that no sink was measured, or that
    the first word (not the tokenizer's own BOS, `bos_id`) is the measured sink and how to explain it."""
    if not result.sinks:
        st.caption(f"No {result.sink_word} measured on this input (no row over {SINK_FACTOR:g}x the median norm of the "
                   "others at the middle block): every token sets the colour scale.")
        return
    first = next((row for row in result.sinks if row["position"] == 0 and not row["prepended"]), None)
    if first is not None and not result.bos_prepended and result.token_ids[0] != bos_id:
        st.caption(f"The first word {first['token']!r} is left out of the colour scale because it is measured as "
                   f"the {result.sink_word} ({first['ratio']:.0f}x the median norm of the other rows). Turn on "
                   "Prepend BOS to give the sink a token of its own and explain the first word like any other.")


def ig_convergence_view(lm: LoadedModel, run: dict, result: RelevanceResult, page: str) -> None:
    """Integrated Gradients' completeness gap at 8..128 steps and the target along the path, on an explicit Run."""
    completeness = [options for name, options in ((run["method"], run["options"]),
                                                  (run.get("second"), run.get("second_options")))
                    if name and get_method(name).law == "completeness"]  # the method with a completeness gap (IG)
    if not completeness:
        return
    options = completeness[0] or MethodOptions()
    st.subheader("Integrated Gradients: does the gap shrink with more steps?")
    steps = "/".join(str(s) for s in CONVERGENCE_STEPS)
    st.caption(f"IG at {steps} steps from the same baseline ({options.baseline}) on this input, and the target "
               "along the straight path from the baseline: a gap that does not shrink means a rough path, not too "
               f"few steps. {sum(CONVERGENCE_STEPS)} gradient passes.")
    key = (model_key(), run["text"], run["token"], run["contrast"], options.baseline, run.get("bos"))
    store = st.session_state.setdefault("relevance-ig-convergence", {})
    if st.button("Run the convergence check", key="relevance-ig-run"):
        with progress("Integrating…", page) as report, show_errors():
            store[key] = shared("ig-convergence", key, lambda: ig_convergence(
                lm, run["text"], token=run["token"], contrast=run["contrast"], options=options,
                prepend_bos=run.get("bos"), progress=report))
    data = store.get(key)
    if data is None:
        return
    st.markdown(convergence_sentence(data))
    fig = data.figure()
    st.plotly_chart(fig, key="relevance-ig-fig")
    st.dataframe(convergence_table(data.rows, data.tokens, result.sink_positions), hide_index=True)
    export_menu(fig, data, key="ig-convergence", filename="relevance-ig-convergence")
