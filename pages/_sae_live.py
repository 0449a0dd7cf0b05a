"""The SAE feature browser's live views (prompt view, attribution, steering) and its store-building section.

These run the SAE's own model (the one named in the store), not necessarily the sidebar's choice.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import streamlit as st

from components.export import export_menu
from components.token_heatmap import token_heatmap
from interpscope.config import ASSETS_DIR, InterpscopeError
from interpscope.figures.sae import logprob_change_figure, prompt_heatmap_figure, steering_figure
from interpscope.figures.tokens import heatmap_figure
from interpscope.limits import check_amounts
from interpscope.models import load_model
from interpscope.paths import display_path, user_path
from interpscope.relevance import methods_for
from interpscope.relevance.methods import rule_methods
from interpscope.sae import load_sae
from interpscope.sae.folder import sae_model_name
from interpscope.sae.store import FeatureStore, build_store
from interpscope.sae.store.prompt import FeatureAttribution, PromptFeatures, feature_attribution
from interpscope.sae.store.steering import MAX_NEW_TOKENS, STRENGTH_MULTIPLE, SteeringResult, default_strength, steer
from interpscope.sinks import SINK_FACTOR
from pages._common import KEEP, bounded, committed, follow, progress, shared, text_source
from pages._relevance_extras import bos_toggle
from pages._sae_circuit import show_circuit
from pages._sae_models import device_dtype, firing_note, prompt_view, store_lm, store_sae

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

VIEWS_LIVE = ["Prompt", "Attribution", "Steering", "Circuit"]
DEFAULT_PROMPT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, "
                  "must be in want of a wife.")
MAX_TOKEN_PILLS = 160
TOP_MAX = 50  # the most features the prompt heatmap shows: computed once per Run, the slider shows a prefix
BOS_KEY = "sae-prompt-bos"


def model_for(store: FeatureStore, quiet: bool = False):
    """The store's model (loaded once per process), or None after a message."""
    device, dtype = device_dtype()
    try:
        with st.spinner(f"Loading {store.spec['model_name']}…"):
            return load_model(store.spec["model_name"], device=device, dtype=dtype)
    except InterpscopeError as err:
        if not quiet:
            st.error(f"This store's SAE reads {store.spec['model_name']}, which could not be loaded: {err}")
        return None


@st.cache_data(show_spinner=False, max_entries=64)
def _attribution(store_path: str, model_key: tuple, text: str, feature: int, position: int,
                 method: str, bos: bool | None = None) -> FeatureAttribution:
    store = FeatureStore(store_path)
    return feature_attribution(store_lm(store, model_key), store_sae(store_path), text, feature, position, method,
                               prepend_bos=bos)


def _steer(store_path: str, model_key: tuple, text: str, feature: int, mode: str, strength: float,
           n_new: int, bos: bool | None = None, report=None) -> SteeringResult:
    """One steering run, computed once per process (shared: its progress callback draws on the page's bar, which
    st.cache_data cannot replay)."""
    def compute() -> SteeringResult:
        store = FeatureStore(store_path)
        return steer(store_lm(store, model_key), store_sae(store_path), text, feature, mode, strength, n_new,
                     progress=report, prepend_bos=bos)
    return shared("sae-steer", (store_path, model_key, text, feature, mode, strength, n_new, bos), compute)


def _feature_input(store: FeatureStore, key: str) -> int:
    """A live view's feature box: starts at the feature open in the browser (or the one a link names), follows it
    when another feature is opened there, and keeps a feature picked in the box while the browser's stays."""
    browsing = int(st.session_state.get("sae_feature", 0))
    follow(key, browsing, lambda: browsing)
    bounded(key, 0, store.d_sae - 1, "feature")
    return int(st.number_input(f"Feature (0–{store.d_sae - 1})", min_value=0, max_value=store.d_sae - 1, step=1,
                               key=key, **KEEP))


def exclusion_caption(result: PromptFeatures) -> str:
    """What the prompt view leaves out and why, from the view's own measurements (never a fixed sentence)."""
    if not result.sinks:
        return (f"No {result.sink_word} measured on this text (no row over {SINK_FACTOR:g}x the median norm of the "
                "others at the SAE's hook): every token is read and ranked.")
    named = "; ".join(f"{row['position']} {row['token']!r} ({row['reason']})" for row in result.sinks[:8])
    more = f" and {len(result.sinks) - 8} more" if len(result.sinks) > 8 else ""
    text = f"Left out of the ranking and blanked in the heatmap: {named}{more}."
    first = next((row for row in result.sinks if row["position"] == 0 and not row["prepended"]), None)
    if first is not None and not result.bos_prepended:
        text += (f" The first word {first['token']!r} is measured as the {result.sink_word}: turn on Prepend BOS to "
                 "give the sink a token of its own and read the first word like any other.")
    elif result.bos_prepended and 1 < len(result.tokens) and 1 not in result.reasons():
        text += f" The first word {result.tokens[1]!r} is read like any other."
    return text


def show_prompt(store: FeatureStore, lm: LoadedModel, text: str, open_feature: Callable[[int], None],
                bos: bool | None) -> None:
    """Every feature on the text, after an explicit Run (the model and the SAE run on it); the heatmap's size is a
    view of that Run (no recomputing)."""
    submitted = st.button("Run", type="primary", key="sae-prompt-run")
    run = committed("sae-prompt", {"store": store.name, "text": text, "bos": bos}, submitted)
    n_top = st.slider("Features in the heatmap", 5, TOP_MAX, key="sae-prompt-top", **KEEP)  # default, URL: the Param
    if run is None or run["store"] != store.name:
        st.info("Press **Run** to read every feature of this SAE on the text (one pass of the store's model).")
        return
    text = run["text"]
    with st.spinner("Reading every feature on the text…"):
        every = prompt_view(str(store.folder), (lm.name,) + device_dtype(), text, TOP_MAX, run.get("bos"))
    # the strongest n_top of the same ranking (prompt_features sorts by peak activation, stably)
    result = replace(every, top_features=every.top_features[:n_top], top_values=every.top_values[:, :n_top])
    sinks = result.excluded_positions
    st.caption(exclusion_caption(result))
    if not result.top_features:
        st.info(f"No feature fires on this text outside the excluded positions ({result.sink_word}s, a prepended "
                "BOS).")
        return
    title = f"Top {len(result.top_features)} features on the prompt ({store.name})"
    fig = prompt_heatmap_figure(result.tokens, result.top_features, result.top_values, title, sinks, result.reasons())
    st.plotly_chart(fig, width="stretch", key="sae-prompt-heatmap")
    export_menu(fig, result, key="sae-prompt",
                filename=f"{store.name}-prompt")
    st.subheader("Features active at a token")
    positions = [i for i in range(len(result.tokens)) if i not in sinks]
    if not positions:
        st.info(f"Every token of this text is excluded ({result.sink_word} or prepended BOS).")
        return
    default = positions[-1]  # the last token: what the model predicts from
    label = lambda i: f"{i}: {result.tokens[i]!r}"  # noqa: E731
    # keyed by the text and its positions (a prepended BOS moves every word by one): a new reading starts at its own
    # last token, never at a position picked on the old one (which would now be another word)
    reading = text + f"\x00bos={result.bos_prepended}"
    text_key = hashlib.sha1(reading.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    if len(positions) <= MAX_TOKEN_PILLS:
        chosen = st.pills("Click a token", positions, default=default, format_func=lambda i: result.tokens[i] or "∅",
                          key=f"sae-prompt-token-{text_key}")
    else:
        chosen = st.selectbox("Token", positions, index=positions.index(default), format_func=label,
                              key=f"sae-prompt-token-select-{text_key}")
    if chosen is None:
        st.caption("Pick a token to list its active features.")
        return
    active = result.active_at(int(chosen))
    if not active:
        st.info(f"No feature is active at {label(int(chosen))}.")
        return
    st.caption(f"{len(active)} features active at {label(int(chosen))} (largest first); click one to open its page.")
    columns = st.columns(4)
    for k, row in enumerate(active[:40]):
        logit = store.card(row["feature"]).top_logits[0].token
        columns[k % 4].button(f"#{row['feature']} · {row['activation']:.3g} · → {logit!r}",
                              key=f"sae-active-{row['feature']}", on_click=open_feature, args=(row["feature"],),
                              width="stretch")
    export_menu(None, result.panel(f"active_at_{chosen}", active),
                key="sae-active", filename=f"{store.name}-token-{chosen}-features")


def _attribution_block(result: FeatureAttribution, sinks: list[int], reasons: dict[int, str], key: str) -> None:
    st.markdown(f"**{result.method}** · feature {result.feature} at token {result.position} "
                f"({result.tokens[result.position]!r})")
    token_heatmap(result.tokens, result.relevance, sinks, reasons)
    st.caption(f"activation {result.activation:.4g} = relevance reaching the hook {result.at_hook:.4g} + SAE biases "
               f"{result.sae_bias_share:.4g}; sum over input tokens {result.input_sum:.4g}")
    title = f"{result.method}: relevance for feature {result.feature} at token {result.position}"
    export_menu(heatmap_figure(result.tokens, result.relevance, title, sinks, reasons=reasons), result, key=key,
                filename=f"feature-{result.feature}-attribution-{key}")


def show_attribution(store: FeatureStore, lm: LoadedModel, text: str, bos: bool | None) -> None:
    feature = _feature_input(store, "sae-attr-feature")
    view = prompt_view(str(store.folder), (lm.name,) + device_dtype(), text, TOP_MAX, bos)
    column = view.activations[:, feature]
    sinks = view.excluded_positions
    readable = np.array([i not in sinks for i in range(len(view.tokens))])
    if not np.any(column[readable] > 0):
        st.info(f"Feature {feature} does not fire on this text (outside the excluded positions); pick another "
                "feature or text.")
    positions = list(range(len(view.tokens)))
    best = int(np.argmax(np.where(readable, column, -np.inf))) if readable.any() else 0
    # a new feature or text starts at its strongest token; a link's position stays
    follow("sae-attr-position", (feature, text), lambda: best)
    if st.session_state["sae-attr-position"] not in positions:
        if "sae-attr-position" in st.session_state.get("_url-just-read", ()):
            st.warning(f"The link asks for position {st.session_state['sae-attr-position']}, which this text does "
                       f"not have (positions 0–{len(positions) - 1}): showing {best}, where feature {feature} is "
                       "strongest.")
        st.session_state["sae-attr-position"] = best
    position = st.selectbox("Position", positions, key="sae-attr-position",
                            format_func=lambda i: f"{i}: {view.tokens[i]!r} (activation {column[i]:.3g})", **KEEP)
    lrp = rule_methods(lm.adapter)  # the LRP rule sets this model can run, from the registry
    names = [m.name for m in lrp]
    if names and st.session_state.get("sae-attr-method") not in names:
        st.session_state["sae-attr-method"] = names[0]
    method = st.radio("Method", names, format_func=lambda n: {m.name: m.label for m in lrp}[n], horizontal=True,
                      key="sae-attr-method", **KEEP) if names else None
    submitted = st.button("Run", type="primary", key="sae-attr-run")
    run = committed("sae-attr", {"store": store.name, "text": text, "feature": feature, "position": int(position),
                                 "method": method, "bos": bos}, submitted)
    if run is None or run["store"] != store.name:
        st.info("Press **Run** (one backward pass per method).")
        return
    stale = run.get("bos") != bos or run["text"] != text  # the view above reads the text box, not the last Run
    text, feature, position, method = run["text"], run["feature"], run["position"], run["method"]
    if stale:  # the positions of the last Run's text, as it was read then
        view = prompt_view(str(store.folder), (lm.name,) + device_dtype(), text, TOP_MAX, run.get("bos"))
        sinks = view.excluded_positions
    if 0 <= position < len(view.tokens) and not view.activations[position, feature] > 0:
        # an inactive feature's value is 0: its maps would be all zeros, drawn as if they meant something
        st.info(f"Feature {feature} is not active at token {position} ({view.tokens[position]!r}): its activation "
                "is 0, so there is nothing to attribute. " + firing_note(view.active_at(position, limit=5))
                + " Pick one of those, or a token where this feature fires.")
        return
    reasons = view.reasons()
    left, right = st.columns(2)
    # beside the rules, the registry's rule-free gradient (Gradient x Input) as a reference
    plain = next((m.name for m in methods_for(lm.adapter) if m.kind == "gradient"), None)
    with st.spinner("Attributing…"):
        if method:
            with left:
                _attribution_block(_attribution(str(store.folder), (lm.name,) + device_dtype(), text, feature,
                                                int(position), method, run.get("bos")), sinks, reasons, "lrp")
        if plain is not None:
            with right if method else left:
                _attribution_block(_attribution(str(store.folder), (lm.name,) + device_dtype(), text, feature,
                                                int(position), plain, run.get("bos")), sinks, reasons, "gxi")


def show_steering(store: FeatureStore, lm: LoadedModel, text: str, bos: bool | None) -> None:
    feature = _feature_input(store, "sae-steer-feature")
    max_act = float(store.max_activation[feature]) or 1.0
    cols = st.columns(3)
    mode = cols[0].radio("Edit", ["add", "ablate"], horizontal=True, key="sae-steer-mode",
                         format_func=lambda m: {"add": "Add the direction", "ablate": "Remove the feature"}[m], **KEEP)
    follow("sae-steer-strength", feature, lambda: round(default_strength(max_act), 3))  # a link's strength stays
    strength = cols[1].number_input("Strength (activation units)", step=max_act / 2, key="sae-steer-strength",
                                    disabled=mode == "ablate",
                                    help=f"Adds strength × W_dec[{feature}] at every position. The default is "
                                         f"{STRENGTH_MULTIPLE:g}× this feature's max activation on the corpus "
                                         f"({max_act:.3g}): larger edits break the text (see the README).", **KEEP)
    n_new = cols[2].slider("Tokens to generate", 0, MAX_NEW_TOKENS, key="sae-steer-new", **KEEP)
    submitted = st.button("Run", type="primary", key="sae-steer-run")
    run = committed("sae-steer", {"store": store.name, "text": text, "feature": feature, "mode": mode,
                                  "strength": float(strength), "n_new": n_new, "bos": bos}, submitted)
    if run is None or run["store"] != store.name:
        st.info("Press **Run** to generate the clean and the edited continuation.")
        return
    # a bar per generated token with a Stop (which clears this Run), not a spinner that only waits
    with progress("Clean and edited continuations: token", "sae-steer") as report:
        result = _steer(str(store.folder), (lm.name,) + device_dtype(), run["text"], run["feature"], run["mode"],
                        run["strength"], run["n_new"], run.get("bos"), report)
    feature, mode, text = run["feature"], run["mode"], run["text"]
    verb = f"+ {result.strength:.3g} × direction" if mode == "add" else "removed"
    st.metric("KL(clean ‖ edited), next token", f"{result.kl:.4f}")
    silent = silent_note(result)
    if silent:
        st.info(silent)
    left, right = st.columns(2)
    left.markdown("**Clean continuation**")
    left.code(text[-200:] + "⟶" + result.clean_continuation, language=None, wrap_lines=True)
    right.markdown(f"**Feature {feature} {verb}**")
    right.code(text[-200:] + "⟶" + result.edited_continuation, language=None, wrap_lines=True)
    fig = steering_figure(result.clean_top, result.edited_top, f"Next token: clean vs feature {feature} {verb}")
    st.plotly_chart(fig, width="stretch", key="sae-steer-chart")
    export_menu(fig, result, key="sae-steer", filename=f"{store.name}-feature-{feature}-{mode}")
    fig = logprob_change_figure(result.tokens, result.logprob_change,
                                f"Per-token effect: Δ log p(next token), feature {feature} {verb}")
    st.plotly_chart(fig, width="stretch", key="sae-steer-change")
    export_menu(fig, result.panel("logprob_change", {"tokens": result.tokens[1:],
                                                     "logprob_change": result.logprob_change}),
                key="sae-steer-change",
                filename=f"{store.name}-feature-{feature}-{mode}-per-token")


def silent_note(result: SteeringResult) -> str | None:
    """Why an ablation changed nothing: the feature is 0 at every position of the prompt the edit acts on (from 1
    on), so removing it removes nothing (computed from its activations on this prompt)."""
    active = np.asarray(result.feature_on_prompt)[1:]
    if result.mode != "ablate" or np.any(active > 0):
        return None
    same = result.clean_continuation == result.edited_continuation
    return (f"Feature {result.feature} never fires on this text (its activation is 0 at all {active.size} prompt "
            "positions the edit acts on), so removing it cannot change the next token: KL 0. "
            + ("The continuations are the same too." if same else "The continuations differ: it fires on a "
               "generated token.") + " Pick a feature that fires here (the Prompt view lists them).")


def open_in_store(store_name: str, feature: int) -> None:
    """Open a feature of another store (the circuit view's upstream SAE)."""
    st.session_state["sae_store"] = store_name
    st.session_state["sae_feature"] = int(feature)
    st.session_state["sae_view"] = "Feature"


def live_view(view: str, store: FeatureStore, open_feature: Callable[[int], None]) -> None:
    """Prompt / Attribution / Steering / Circuit: a text box shared by them, then the chosen view."""
    text = text_source("sae-prompt", "Prompt", default=DEFAULT_PROMPT)
    if text is None:
        return
    lm = model_for(store)
    if lm is None:
        return
    bos = bos_toggle(lm, st, key=BOS_KEY, owner=lm.name)  # one text, one set of positions for every live view
    if view == "Prompt":
        show_prompt(store, lm, text, open_feature, bos)
    elif view == "Attribution":
        show_attribution(store, lm, text, bos)
    elif view == "Circuit":
        show_circuit(store, lm, text, open_in_store, bos)
    else:
        show_steering(store, lm, text, bos)


def shipped_saes() -> list[Path]:
    root = ASSETS_DIR / "saes"
    return sorted(p for p in root.iterdir() if (p / "cfg.json").is_file()) if root.is_dir() else []


def build_section() -> None:
    """Pick an SAE folder and build its store with a progress bar (resumes a build that was interrupted)."""
    options = [str(p) for p in shipped_saes()]
    choice = st.selectbox("SAE folder", options + ["Other folder…"], key="sae-build-choice", format_func=display_path)
    folder = st.text_input("SAE folder path", key="sae-build-path") if choice == "Other folder…" else choice
    try:
        folder = str(user_path(folder, "SAE folder")) if folder.strip() else ""
    except InterpscopeError as err:
        st.error(str(err))
        folder = ""
    tokens = st.number_input("Corpus tokens", min_value=256, max_value=2_000_000, value=65536, step=8192,
                             key="sae-build-tokens")
    try:
        check_amounts(store_tokens=int(tokens))
    except InterpscopeError as err:
        st.error(str(err))
        folder = ""
    if not st.button("Build store", key="sae-build-go", disabled=not folder):
        return
    try:
        with progress("Building the store", "sae-build") as report:
            sae = load_sae(folder)
            device, dtype = device_dtype()
            lm = load_model(sae_model_name(sae), device=device, dtype=dtype)
            out = build_store(lm, folder, n_tokens=int(tokens), eval_tokens=2048, progress=report, use_cache=True)
    except InterpscopeError as err:
        st.error(str(err))
        return
    st.success(f"Store ready: {display_path(out)}")
