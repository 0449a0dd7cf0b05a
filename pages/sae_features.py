"""SAE feature browser: overview and search, feature pages, prompt view, attribution and steering.

Everything in the overview and on feature pages comes from a precomputed feature store (memory-mapped, instant);
the prompt, attribution and steering views run the SAE's model live. The URL's query parameters (store, view,
feature) make every feature page a permanent link.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from backend.config import REPO_ROOT, InterpscopeError
from backend.paths import display_path
from backend.sae_store import FeatureStore, list_stores
from backend.sae_store.search import no_match_reason, search
from components.export import export_menu
from components.feature_card import show_feature_card
from components.sae_figures import density_figure
from pages._sae_live import DEFAULT_PROMPT, VIEWS_LIVE, build_section, live_view
from pages._common import Param, run_flag, show_errors, url_inputs, write_url

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
    """The page's inputs kept in its URL: store, view and feature, then the live views' text and settings."""
    from backend.sae_store.steering import MAX_NEW_TOKENS
    from pages._sae_circuit import TARGETS

    first = next(iter(stores), "")
    return [Param("sae_store", "store", first, choices=list(stores)), Param("sae_view", "view", "Overview", choices=VIEWS),
            Param("sae_feature", "feature", 0, int, low=0, high=10 ** 8),
            Param("sae-prompt-text", "text", DEFAULT_PROMPT),
            Param("sae-prompt-top", "top", 20, int, low=5, high=50),
            Param("sae-attr-method", "method", "attnlrp", choices=["attnlrp", "cplrp"]),
            Param("sae-steer-mode", "mode", "add", choices=["add", "ablate"]),
            Param("sae-steer-new", "new", 12, int, low=0, high=MAX_NEW_TOKENS),
            Param("sae-circuit-target", "target", TARGETS[0], choices=TARGETS),
            Param("sae-circuit-method", "rules", "attnlrp", choices=["attnlrp", "cplrp"])]


def read_url(stores: dict[str, str], params: list[Param]) -> None:
    """Before the widgets: the URL's inputs (a link with only a feature opens that feature's page)."""
    if "feature" in st.query_params and "view" not in st.query_params \
            and dict(st.query_params) != st.session_state.get("_url-wrote"):
        st.session_state["sae_view"] = "Feature"
    url_inputs(PAGE, params)


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
    export_menu(fig, {"density": density}, key="sae-density", filename=f"{store.name}-density")

    st.subheader("Search")
    left, right = st.columns([1, 2])
    kind = left.radio("Search by", list(SEARCH_KINDS), key="sae_search_kind")
    query = right.text_input("Search", key="sae_search_query", placeholder="a feature id, a token or a word")
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
            export_menu(None, results, key="sae-search", filename=f"{store.name}-search")

    st.subheader("All features")
    table = overview_table(path)
    explained = int(table["explanation_score"].notna().sum())
    if explained:
        table = table.sort_values("explanation_score", ascending=False, na_position="last", kind="stable")
        st.caption(f"{explained:,} features have a written explanation; ranked by its detection score (best first). "
                   "Click a column header to sort, a row to open the feature.")
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
    export_menu(None, table, key="sae-table", filename=f"{store.name}-features")


def _tokenizer_for(store: FeatureStore):
    """The tokenizer of the store's model, for multi-token words (None if the model cannot be loaded)."""
    from pages._sae_live import model_for

    lm = model_for(store, quiet=True)
    return lm.tokenizer if lm is not None else None


def show_feature(store: FeatureStore, path: str) -> None:
    nav = st.columns([2, 1.2, 1.2, 1.4, 4])
    feature = int(nav[0].number_input(f"Feature (0–{store.d_sae - 1})", min_value=0, max_value=store.d_sae - 1,
                                      step=1, key="sae_feature"))
    nav[1].button("◀ Prev", on_click=step_feature, args=(-1, store.d_sae), key="sae-prev", width="stretch")
    nav[2].button("Next ▶", on_click=step_feature, args=(1, store.d_sae), key="sae-next", width="stretch")
    nav[3].button("Random", on_click=random_feature, args=(path,), key="sae-random", width="stretch")
    nav[4].markdown(f"Permanent link: [`?store={store.name}&view=Feature&feature={feature}`]"
                    f"(?store={store.name}&view=Feature&feature={feature})")
    show_feature_card(store.card(feature), store.name, open_feature)


RUN_PAGES = {"Attribution": "sae-attr", "Steering": "sae-steer", "Circuit": "sae-circuit"}


def main() -> None:
    st.title("SAE feature browser")
    st.caption("Feature dashboards for sparse autoencoders: what each feature fires on across a corpus, what it "
               "writes to the logits, and what it does on your own text.")
    stores = {p.name: str(p) for p in list_stores()}
    params = url_params(stores)
    read_url(stores, params)
    if not stores:
        st.info("No feature store yet. Build one for an SAE below (or with `interpscope sae store --sae DIR`).")
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
    st.session_state["sae_feature"] = int(np.clip(st.session_state["sae_feature"], 0, store.d_sae - 1))
    write_url(params, run_flag(RUN_PAGES.get(view)))  # before the slow part: a reload mid-run keeps the inputs
    with show_errors():
        if view == "Overview":
            show_overview(store, path)
        elif view == "Feature":
            show_feature(store, path)
        else:
            live_view(view, store, open_feature)
    too_long = write_url(params, run_flag(RUN_PAGES.get(view)))
    if too_long:
        st.caption("The prompt is too long for a link: a shared link opens with the default prompt.")
    with st.expander("Build another store"):
        build_section()


main()
