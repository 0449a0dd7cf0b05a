"""SAE feature browser: overview and search, feature pages, prompt view, attribution and steering.

Everything in the overview and on feature pages comes from a precomputed feature store (memory-mapped, instant);
the prompt, attribution and steering views run the SAE's model live. The URL's query parameters (store, view,
feature) make every feature page a permanent link.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st

from components.export import export_menu
from components.feature_card import show_feature_card
from interpscope.config import REPO_ROOT, InterpscopeError
from interpscope.figures.sae import density_figure
from interpscope.paths import display_path, from_display
from interpscope.relevance.methods import rule_methods
from interpscope.results import Panel
from interpscope.sae.store import FeatureStore, list_stores
from interpscope.sae.store.documents import FeatureSearch
from interpscope.sae.store.explanation_quality import explanation_summary
from interpscope.sae.store.search import no_match_reason, search
from interpscope.sae.store.verification import verified_features
from pages._common import KEEP, Param, bounded, model_key, model_params, show_errors, url_inputs, url_is_new, write_url
from pages._relevance_extras import bos_param
from pages._sae_live import BOS_KEY, DEFAULT_PROMPT, VIEWS_LIVE, build_section, live_view

VIEWS = ["Overview", "Feature", *VIEWS_LIVE]
SEARCH_KINDS = {"Label or explanation": "label", "Feature id": "id", "Token in top logits": "logit",
                "Word in top contexts": "context"}
DENSE = 0.1
PAGE = "sae"


@st.cache_resource(show_spinner=False, max_entries=8)
def open_store(path: str) -> FeatureStore:
    return FeatureStore(path)


@st.cache_data(show_spinner=False, max_entries=8, ttl=60)
def store_is_stale(path: str) -> bool:
    return open_store(path).is_stale()


@st.cache_data(show_spinner=False, max_entries=8)
def overview_table(path: str) -> pd.DataFrame:
    return pd.DataFrame(open_store(path).overview())


def open_feature(feature: int) -> None:
    """Button/selection callback: show this feature's page."""
    st.session_state["sae_feature"] = int(feature)
    st.session_state["sae_view"] = "Feature"


def step_feature(delta: int, d_sae: int) -> None:
    st.session_state["sae_feature"] = int(np.clip(st.session_state.get("sae_feature", 0) + delta, 0, d_sae - 1))


def random_feature(store_path: str) -> None:
    """Open a random feature that fired at least once (any feature if none did)."""
    store = open_store(store_path)
    alive = np.flatnonzero(np.asarray(store.arrays["fire_count"]) > 0)
    pool = alive if alive.size else np.arange(store.d_sae)
    st.session_state["sae_feature"] = int(np.random.default_rng().choice(pool))


def select_from_table(table_key: str, ids: list[int]) -> None:
    """Dataframe selection callback: open the selected row's feature."""
    rows = st.session_state[table_key].selection.rows
    if rows:
        open_feature(ids[rows[0]])


def url_params(stores: dict[str, str]) -> list[Param]:
    """The page's inputs kept in its URL: store, view, feature and search, then the live views' text and settings."""
    from interpscope.sae.store.steering import MAX_NEW_TOKENS
    from pages._sae_circuit import TARGETS

    first = next(iter(stores), "")
    feature_id = dict(kind=int, low=0)  # the store's own count bounds it from above, named by bounded()
    rules = [m.name for m in rule_methods()]  # methods with LRP rules (the views narrow them to the store's model)
    return [Param("sae_store", "store", first, choices=list(stores), scope="nav"),
            Param("sae_view", "view", "Overview", choices=VIEWS, scope="nav"),
            Param("sae_feature", "feature", 0, scope="nav", **feature_id),
            Param("sae_search_kind", "search_by", next(iter(SEARCH_KINDS)), choices=list(SEARCH_KINDS), scope="nav"),
            Param("sae_search_query", "search", "", scope="nav"),
            Param("sae-prompt-text", "text", DEFAULT_PROMPT),
            Param("sae-prompt-top", "top", 20, int, low=5, high=50, scope="view"),
            bos_param(BOS_KEY),
            Param("sae-attr-feature", "attr_feature", None, **feature_id),
            Param("sae-attr-position", "position", None, int, low=0),  # past the text: named by the view
            Param("sae-attr-method", "method", rules[0] if rules else None, choices=rules),
            Param("sae-steer-feature", "steer_feature", None, **feature_id),
            Param("sae-steer-mode", "mode", "add", choices=["add", "ablate"]),
            Param("sae-steer-strength", "strength", None, float, low=-1e6, high=1e6),
            Param("sae-steer-new", "new", 12, int, low=0, high=MAX_NEW_TOKENS),
            Param("sae-circuit-upstream", "upstream", None),
            Param("sae-circuit-target", "target", TARGETS[0], choices=TARGETS),
            Param("sae-circuit-feature", "circuit_feature", None, **feature_id),
            Param("sae-circuit-pos", "circuit_position", -1, int, low=-1, high=4096),
            Param("sae-circuit-method", "rules", rules[0] if rules else None, choices=rules),
            Param("sae-weak-explanations", "weak", False, bool, scope="nav"),
            Param("sae-all-models", "all_models", False, bool, scope="nav")]


def read_url(stores: dict[str, str], params: list[Param]) -> None:
    """Before the widgets: the URL's inputs (a link with only a feature opens that feature's page)."""
    if url_is_new(PAGE) and "feature" in st.query_params and "view" not in st.query_params:
        st.session_state["sae_view"] = "Feature"
    url_inputs(PAGE, params)


def stores_for_model(every: dict[str, str], model: str) -> dict[str, str]:
    """The stores of SAEs that read `model` (the sidebar's choice): by name, or the same folder."""
    def same(name: str) -> bool:
        if name == model:
            return True
        try:
            return Path(from_display(name)).expanduser().resolve() == Path(from_display(model)).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):
            return False
    return {name: path for name, path in every.items() if same(open_store(path).spec["model_name"])}


def pick_stores(every: dict[str, str]) -> dict[str, str] | None:
    """The stores to offer: those of the sidebar's model, or every store when asked (or when a link names a store
    of another model); None after saying there is none for the model, how to build one, and which models have."""
    model = model_key()[0]
    mine = stores_for_model(every, model)
    linked = st.session_state.get("sae_store")
    if linked in every and linked not in mine and "sae_store" in st.session_state.get("_url-just-read", ()):
        st.session_state["sae-all-models"] = True
    show_all = st.toggle("Show the stores of every model", key="sae-all-models",
                         help="By default only stores of SAEs on the model chosen in the sidebar are listed.")
    if show_all:
        return every
    if mine:
        return mine
    others = sorted({open_store(path).spec["model_name"] for path in every.values()})
    st.info(f"No feature store for **{model}** (the model chosen in the sidebar)"
            + (f"; there are stores for {', '.join(others)} (switch the sidebar model, or show every model's "
               "stores above)" if others else "") +
            f". To build one: train an SAE on {model} (the SAE training page, or `interpscope sae train --model "
            f"{model}`), then build its store below or with `interpscope sae store --sae DIR`.")
    return None


def show_overview(store: FeatureStore, path: str) -> None:
    metrics = store.manifest.get("metrics") or {}
    density = store.density
    dead = int((density == 0).sum())
    dense = int((density > DENSE).sum())
    cols = st.columns(6)
    cols[0].metric("Features", f"{store.d_sae:,}")
    cols[1].metric(f"Dead ({dead / store.d_sae:.1%})", f"{dead:,}",  # the share in the label: the value fits
                   help=f"features that never fired on the store's {store.n_counted:,} corpus tokens")
    cols[2].metric("Dense", f"{dense:,}", help=f"features active on more than {DENSE:.0%} of tokens")
    cols[3].metric("Corpus tokens", f"{store.n_counted:,}")
    if metrics:
        cols[4].metric("L0", f"{metrics['l0']:.1f}")
        cols[5].metric("Loss recovered", f"{metrics['loss_recovered']:.1%}")
        st.caption(f"Evaluated on {metrics['n_tokens']:,} held-out tokens: explained variance "
                   f"{metrics['explained_variance']:.3f}, FVU {metrics['fvu']:.3f}, cosine {metrics['cosine']:.3f}, "
                   f"CE clean {metrics['ce_clean']:.3f} / with SAE {metrics['ce_sae']:.3f} / zero-ablated "
                   f"{metrics['ce_zero']:.3f}, KL {metrics['kl']:.4f}."
                   + (f" {metrics['sink_tokens']} massive-activation (attention-sink) token(s) left out of the "
                      "reconstruction figures." if metrics.get("sink_tokens") else ""))
    fig = density_figure(density)
    st.plotly_chart(fig, width="stretch", key="sae-density-chart")
    export_menu(fig, Panel(of="interpscope.sae.evaluation", part="density", data={"density": density}),
                key="sae-density", filename=f"{store.name}-density")

    st.subheader("Search")
    left, right = st.columns([1, 2])
    kind = left.radio("Search by", list(SEARCH_KINDS), key="sae_search_kind", **KEEP)
    query = right.text_input("Search", key="sae_search_query", placeholder="a feature id, a token or a word", **KEEP)
    if query.strip():
        try:
            tokenizer = _tokenizer_for(store) if SEARCH_KINDS[kind] == "context" else None
            results = search(store, query, SEARCH_KINDS[kind], tokenizer)
        except InterpscopeError as err:
            st.warning(str(err))
            results = None
        if results is not None and not results:
            st.info(no_match_reason(store, query, SEARCH_KINDS[kind]))
        elif results:
            frame = pd.DataFrame(results[:200])
            front = [c for c in ("feature", "label", "snippet", "score") if c in frame.columns]
            frame = frame[front + [c for c in frame.columns if c not in front]]
            st.caption(f"{len(results)} features{' (the first 200 shown)' if len(results) > 200 else ''}; each with "
                       "its label and strongest context (the firing token in ⟦ ⟧); click a row to open it.")
            st.dataframe(frame, hide_index=True, on_select=lambda: select_from_table(
                "sae-search-table", frame["feature"].tolist()), selection_mode="single-row", key="sae-search-table")
            export_menu(None, FeatureSearch(store=store.name, query=query, kind=SEARCH_KINDS[kind], results=results,
                                            total=len(results)),
                        key="sae-search", filename=f"{store.name}-search")

    st.subheader("All features")
    table = overview_table(path)
    summary = explanation_summary(store)
    if summary["written"]:
        show_unverified = bool(st.session_state.get("sae-weak-explanations"))
        statuses = status_column(store, table)
        table = table.assign(explanation=statuses, explanation_score=verified_scores(store, table, statuses))
        table = table.sort_values("explanation_score", ascending=False, na_position="last", kind="stable")
        st.caption(explanation_sentence(summary, show_unverified) + " Click a column header to sort, a row to open "
                   "the feature.")
    else:
        table = table.drop(columns=["explanation_score"])
        st.caption("Click a column header to sort, a row to open the feature. (No written explanations yet: "
                   "`interpscope sae explain --store STORE` adds them.)")
    st.dataframe(table, hide_index=True, height=360, on_select=lambda: select_from_table(
        "sae-feature-table", table["feature"].tolist()), selection_mode="single-row", key="sae-feature-table",
                 column_config={"density": st.column_config.NumberColumn(format="%.2e"),
                                "max_activation": st.column_config.NumberColumn(format="%.3g"),
                                "mean_activation": st.column_config.NumberColumn(format="%.3g"),
                                "explanation_score": st.column_config.NumberColumn("score", format="%.2f")})
    export_menu(None, Panel(of="interpscope.sae.feature", part="table", data=table),
                key="sae-table", filename=f"{store.name}-features")


def status_column(store: FeatureStore, table: pd.DataFrame) -> list[str]:
    """Each row's explanation status (explanation_quality.status): verified, not verified, unverified, ..."""
    return [(store.explanation_entry(int(f)) or {}).get("status", "none") for f in table["feature"]]


def verified_scores(store: FeatureStore, table: pd.DataFrame, statuses: list[str]) -> list[float]:
    """The verification score (AUROC against the feature's contexts) of verified explanations; NaN for the rest, so
    no unverified explanation ranks as one."""
    rows = verified_features(store.verification)
    return [rows[int(f)]["score"] if s == "verified" else np.nan
            for f, s in zip(table["feature"], statuses, strict=True)]


def comparison_sentence(comparison: dict) -> str:
    """The scorers measured side by side on a sample of this store's features, from their counts."""
    lexical, embedding = comparison.get("lexical"), comparison.get("embedding")
    if not lexical or not embedding:
        return ""
    return (f" On a sample of {lexical['tested']} tested features the embedding scorer (the model's mean-pooled "
            f"hidden state) verifies {embedding['verified']} and the lexical one {lexical['verified']} (mean lead "
            f"over the control {embedding['mean_lead']:.2f} vs {lexical['mean_lead']:.2f}).")


def explanation_sentence(summary: dict, show_unverified: bool) -> str:
    """How many written explanations are verified against their controls, and what the others show instead."""
    check = summary.get("verification")
    if check is None:
        tested = ("None has been tested against its control (no verification of this store's current "
                  "explanations: scripts/verify_explanations.py measures it), so none is shown as an explanation.")
    else:
        tested = (f"**{summary['verified']:,} of {summary['written']:,} are verified**: their score beats the mean of "
                  f"{check['controls']} other features' explanations on the same contexts ({check['scorer']} scorer), "
                  f"by a {check['bootstrap']}-draw paired-bootstrap interval above 0. {summary['not_verified']:,} do "
                  f"not beat their control, {summary['degenerate']:,} are degenerate (no word beyond the writer's "
                  f"instructions) and {summary['unverified']:,} could not be tested (no held-out contexts)."
                  + comparison_sentence(check.get("comparison") or {}))
    return (f"{summary['written']:,} features have a written explanation. {tested} A feature without a verified "
            "explanation shows the tokens it fires on and its contexts, \"no verified explanation\"; "
            + ("the writer's text is shown beside it as unverified text." if show_unverified else
               "Show unverified text (above) shows the writer's text beside it.")
            + " Ranked by the verified explanations' score (best first).")


def _tokenizer_for(store: FeatureStore):
    """The tokenizer of the store's model, for multi-token words (None if the model cannot be loaded)."""
    from pages._sae_live import model_for

    lm = model_for(store, quiet=True)
    return lm.tokenizer if lm is not None else None


def show_feature(store: FeatureStore, path: str) -> None:
    nav = st.columns([2, 1.2, 1.2, 1.4, 4])
    feature = int(nav[0].number_input(f"Feature (0–{store.d_sae - 1})", min_value=0, max_value=store.d_sae - 1,
                                      step=1, key="sae_feature", **KEEP))
    nav[1].button("◀ Prev", on_click=step_feature, args=(-1, store.d_sae), key="sae-prev", width="stretch")
    nav[2].button("Next ▶", on_click=step_feature, args=(1, store.d_sae), key="sae-next", width="stretch")
    nav[3].button("Random", on_click=random_feature, args=(path,), key="sae-random", width="stretch")
    link = "?" + urlencode({"store": store.name, "view": "Feature", "feature": feature, **model_params()})
    nav[4].markdown(f"Permanent link: [`{link}`]({link})")
    card = store.card(feature)
    show_feature_card(card, store.name, open_feature,
                      show_unverified=bool(st.session_state.get("sae-weak-explanations", False)))


RUN_PAGES = {"Prompt": "sae-prompt", "Attribution": "sae-attr", "Steering": "sae-steer", "Circuit": "sae-circuit"}
BROWSING = "sae-browse"  # Overview, Feature: no Run; the URL holds where the visitor is, not the live views' inputs


def main() -> None:
    st.title("SAE feature browser")
    st.caption("Feature dashboards for sparse autoencoders: what each feature fires on across a corpus, what it "
               "writes to the logits, and what it does on your own text.")
    every = {p.name: str(p) for p in list_stores()}
    params = url_params(every)
    read_url(every, params)
    if not every:
        write_url(params)
        st.info("No feature store yet. Build one for an SAE below (or with `interpscope sae store --sae DIR`).")
        build_section()
        return
    stores = pick_stores(every)
    if stores is None:
        write_url(params)
        with st.expander("Build another store"):
            build_section()
        return
    if st.session_state.get("sae_store") not in stores:
        st.session_state["sae_store"] = next(iter(stores))
    name = st.selectbox("Feature store", list(stores), key="sae_store",
                        help="Each store describes one SAE over one corpus sample (built once, browsed instantly).")
    path = stores[name]
    with show_errors():
        store = open_store(path)
    spec = store.spec
    architecture = store.manifest["sae_cfg"]["architecture"]
    sae_shown = display_path(REPO_ROOT / spec["sae_path"])
    st.caption(f"SAE `{sae_shown}` · {architecture} · {store.d_sae:,} features · reads `{spec['hook_name']}` of "
               f"{display_path(spec['model_name'])} · corpus {display_path(spec['corpus'])} ({spec['split']}, "
               f"{store.n_counted:,} tokens)")
    if store_is_stale(path):
        st.warning(f"The SAE `{sae_shown}` changed (or is missing) since this store was built: what is shown "
                   f"describes the old weights. Rebuild it: `interpscope sae store --sae {sae_shown} --force`.")
    view = st.segmented_control("View", VIEWS, key="sae_view") or "Overview"
    bounded("sae_feature", 0, store.d_sae - 1, "feature")
    write_url(params, run=RUN_PAGES.get(view, BROWSING))  # before the slow part: a reload mid-run keeps the last Run's
    if view in ("Overview", "Feature") and store.explanations:
        st.toggle("Show unverified text", key="sae-weak-explanations", **KEEP,
                  help="Only an explanation that beats its control (other features' explanations on the same "
                       "contexts) is shown as an explanation. This shows the writer's text of the others beside "
                       "\"no verified explanation\", named as unverified text.")
    with show_errors():
        if view == "Overview":
            show_overview(store, path)
        elif view == "Feature":
            show_feature(store, path)
        else:
            live_view(view, store, open_feature)
    too_long = write_url(params, run=RUN_PAGES.get(view, BROWSING))
    if too_long:
        st.caption("The prompt is too long for a link: a shared link opens with the default prompt.")
    with st.expander("Build another store"):
        build_section()


main()
