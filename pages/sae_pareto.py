"""SAE Pareto frontiers: a sweep of SAEs (architectures x sparsity settings, same activations, same tokens, same
held-out evaluation) as L0 against loss recovered and against FVU, each architecture's frontier, and its L0 relative
to the baseline at matched loss recovered, in a sentence computed from the numbers. Clicking a point opens that SAE
in the feature browser (after building its feature store, if it has none)."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from components.export import export_menu
from interpscope.config import ASSETS_DIR, InterpscopeError
from interpscope.paths import display_path, user_path
from interpscope.sae.pareto import METRICS, ParetoAnalysis, pareto_analysis
from interpscope.sae.sweep import TABLE_JSON, load_table
from interpscope.sae.sweep_docs import SweepTable, setting_text
from pages._common import Param, model_params, progress, show_errors, url_inputs, write_url

PAGE = "sae-pareto"
SHIPPED_DIR = ASSETS_DIR / "sae_sweeps"
FOLDER = "A sweep folder on this machine…"
# the sparsity knob (k, or an L1 / L0 coefficient) is the "setting" column, in words: one column for every
# architecture instead of a k column empty for L1 SAEs and a coefficient column empty for TopK ones
COLUMNS = ["name", "label", "l0", "loss_recovered", "fvu", "shrinkage", "dead_fraction", "dense_fraction",
           "ce_increase", "training_tokens"]


def shipped_sweeps() -> dict[str, str]:
    """Shipped sweeps (assets/sae_sweeps/<name>/sweep_table.json), by folder name."""
    if not SHIPPED_DIR.is_dir():
        return {}
    return {p.parent.name: str(p.parent) for p in sorted(SHIPPED_DIR.glob(f"*/{TABLE_JSON}"))}


def pick_sweep(sweeps: dict[str, str]) -> str | None:
    choice = st.selectbox("Sweep", list(sweeps) + [FOLDER], key="pareto_sweep",
                          help="Shipped sweeps (assets/sae_sweeps) or any folder written by `interpscope sae sweep`.")
    if choice != FOLDER:
        return sweeps[choice]
    typed = st.text_input("Sweep folder", key="pareto_path", placeholder="/path/to/sweep")
    if not typed.strip():
        st.info("Choose a sweep, or give its folder.")
        return None
    try:
        return str(user_path(typed, "Sweep folder"))
    except InterpscopeError as err:
        st.error(str(err))
        return None


def ratio_sentences(analysis: ParetoAnalysis, table: SweepTable) -> None:
    """The claim (each architecture's matched-fidelity L0 ratio) beside its control: the baseline's own frontier
    and how many SAEs and evaluation tokens each frontier rests on."""
    st.subheader(f"L0 relative to {analysis.baseline} at matched fidelity")
    for sentence in analysis.sentences("loss_recovered"):
        st.markdown(f"- {sentence}")
    with st.expander("At matched FVU"):
        for sentence in analysis.sentences("fvu"):
            st.markdown(f"- {sentence}")
    counts = {arch: len(names) for arch, names in analysis.frontiers["loss_recovered"].items()}
    n_eval = table.eval.get("n_tokens")
    st.caption(f"Control: the ratio of {analysis.baseline} to itself is 1 by construction; a ratio means something "
               f"only across the range both frontiers cover, where it is read by interpolating log L0 linearly in "
               f"loss recovered between neighbouring SAEs (never extrapolated). Frontier sizes (loss recovered): "
               + ", ".join(f"{arch} {n}" for arch, n in counts.items())
               + f". Every SAE was evaluated on the same {n_eval:,} held-out tokens ({table.eval.get('split')} split)"
               f"; {table.tokens_per_sae:,} training tokens each, one activation cache of {table.cache_tokens:,} "
               "corpus tokens requested.")


def l0_proxy_section(table: SweepTable, path: str) -> None:
    """The correct-L0 proxy beside the frontier: per architecture, the L0 where its decoder cosine c_dec is lowest
    (Sparse but Wrong, 2025) and which of its SAEs sit below it, every sentence computed from the c_dec values it
    lists; beside it, where the same proxy lands on synthetic data whose true L0 is known (docs)."""
    from interpscope.sae.l0_proxy import proxy_l0, proxy_sentence, sweep_points

    st.subheader("Correct-L0 proxy")
    st.caption("A frontier ranks reconstruction at each L0, but not whether the SAE found the model's features. "
               "\"Sparse but Wrong\" (Chanin & Garriga-Alonso, 2025) shows that an SAE trained below the correct L0 "
               "merges correlated features into shared latents, whose decoder rows then overlap: the mean |cos| "
               "between decoder rows, c_dec, is lowest near the correct L0.")
    folder = Path(path)
    points, source = sweep_points(table, folder if folder.is_dir() else folder.parent)
    labels = {row["architecture"]: row["label"] for row in table.rows}
    proxies = [proxy_l0(pts, arch) for arch, pts in points.items()]
    for proxy in proxies:
        st.markdown(f"- {proxy_sentence(proxy, labels[proxy.architecture])}")
    below = sum(len(p.below) for p in proxies if p.proxy_l0 is not None)
    counted = sum(len(p.points) for p in proxies if p.proxy_l0 is not None)
    if counted:
        st.markdown(f"**{below} of the {counted} SAEs** of architectures with a proxy sit below their "
                    "architecture's proxy L0.")
    st.caption(f"c_dec from {source}. A proxy at the edge of the grid says only that the minimum may lie beyond it.")
    st.markdown(f"**Control** (synthetic features, true L0 known): {synthetic_proxy_text()}")


SYNTH_DIR = ASSETS_DIR / "sae_synth"


def synthetic_result():
    """The shipped synthetic ground-truth run (assets/sae_synth), or None."""
    import json

    from interpscope.sae.synth_run import SynthResult

    files = sorted(SYNTH_DIR.glob("*.json")) if SYNTH_DIR.is_dir() else []
    if not files:
        return None
    data = json.loads(files[0].read_text(encoding="utf-8"))
    data.pop("schema", None)
    data.pop("schema_version", None)
    return SynthResult(**data)


def synthetic_proxy_text() -> str:
    """Where the same proxy landed on the shipped synthetic run, beside where MCC peaked and the true L0."""
    result = synthetic_result()
    if result is None or not result.l0_proxy:
        return "no shipped synthetic run (`interpscope sae synth`) to check the proxy against."
    parts = []
    for p in result.l0_proxy:
        edge = ", at the grid's edge" if p.get("at_edge") else ""
        verdict = ("pointing to the right SAE" if p["proxy_name"] == p["best_mcc_name"] else
                   "not the SAE with the best MCC")
        parts.append(f"{p['label']}: c_dec lowest at L0 {p['proxy_l0']:.1f}{edge}; MCC with the true features "
                     f"highest at L0 {p['best_mcc_l0']:.1f}; true L0 {p['true_l0']:.1f} ({verdict})")
    return "; ".join(parts) + ". Read the proxy above with that in mind."


def synthetic_section() -> None:
    """The shipped synthetic ground-truth run (assets/sae_synth): every architecture's MCC against the true
    dictionary by L0, beside the true dictionary (MCC 1) and a random one (chance); its sentences come from its
    numbers (SynthResult.sentences)."""
    result = synthetic_result()
    if result is None:
        return
    st.subheader("Against ground truth: synthetic features")
    spec = result.spec
    st.caption(f"The frontier above cannot say whether an SAE found the model's features. Here the features are "
               f"known: {spec['n_features']} unit directions in {spec['d_model']} dimensions (superposition), Zipf "
               f"firing rates, correlated groups, {spec['n_parents']} parent/child hierarchies and noise; each SAE is "
               "scored by MCC (mean |cos| of its decoder rows with the true directions, Hungarian matching), the share "
               "of true features it recovers at cos > 0.9 and the share of child rows on which its parent latent goes "
               "silent (absorption). Shipped run: `interpscope sae synth` (assets/sae_synth/README.md).")
    fig = result.figure()
    st.plotly_chart(fig, key="pareto-synth-figure")
    export_menu(fig, result, key="sae-synth", filename="sae-synth")
    for sentence in result.sentences():
        st.markdown(f"- {sentence}")
    import pandas as pd

    columns = ["name", "label", "l0", "fvu", "mcc", "recovery", "absorption", "dead_fraction", "c_dec"]
    st.dataframe(pd.DataFrame([{c: row.get(c) for c in columns} for row in result.rows]), hide_index=True,
                 width="stretch", key="pareto-synth-table")


def open_point(folder: Path) -> None:
    """The clicked SAE: its settings, and a link into the feature browser (building its store first if needed)."""
    from interpscope.sae.store import FeatureStore, build_store

    st.markdown(f"**Selected:** `{display_path(str(folder))}`")
    if not (folder / "cfg.json").is_file():
        st.info("This SAE's weights are not in the sweep folder (a shipped sweep keeps only the frontier SAEs' "
                "weights); rebuild the sweep with the command in its README to browse it.")
        return
    try:
        store = FeatureStore.for_sae(folder)
    except InterpscopeError:
        store = None
    if store is not None:
        st.page_link("pages/sae_features.py", label=f"Open {store.name} in the feature browser",
                     icon=":material/search:", query_params={"store": store.name, **model_params()})
        return
    st.caption("This SAE has no feature store yet: the feature browser shows stores (top contexts, feature "
               "cards). Build one (runs the model over the corpus).")
    tokens = int(st.number_input("Corpus tokens", min_value=1024, max_value=200_000, value=16384, step=4096,
                                 key="pareto_store_tokens"))
    if st.button("Build its feature store", key="pareto_build"):
        from interpscope.models import load_model
        from interpscope.sae import load_sae
        from interpscope.sae.folder import sae_model_name

        with show_errors(), progress("Building the feature store", PAGE) as report:
            lm = load_model(sae_model_name(load_sae(folder)))
            build_store(lm, folder, n_tokens=tokens, eval_tokens=1024, progress=report, use_cache=True)
        st.rerun()


def main() -> None:
    st.title("SAE Pareto frontiers")
    st.caption("A sweep trains several SAE architectures at several sparsity settings on the same activations and "
               "evaluates all of them on the same held-out tokens. Up-left is better in L0 vs loss recovered, "
               "down-left in L0 vs FVU; a line joins an architecture's non-dominated SAEs.")
    sweeps = shipped_sweeps()
    params = [Param("pareto_sweep", "sweep", next(iter(sweeps), FOLDER), choices=list(sweeps) + [FOLDER],
                    scope="nav"),
              Param("pareto_path", "path", "", scope="nav"),
              Param("pareto_baseline", "baseline", "relu", scope="nav")]
    url_inputs(PAGE, params)
    path = pick_sweep(sweeps)
    if not path:
        write_url(params)
        return
    try:
        table = load_table(path)
    except InterpscopeError as err:
        st.error(str(err))
        write_url(params)
        return
    if not table.rows:
        st.info("This sweep has no evaluated SAE yet.")
        write_url(params)
        return
    archs = table.architectures
    asked = st.session_state.get("pareto_baseline")
    if asked not in archs:
        st.session_state["pareto_baseline"] = "relu" if "relu" in archs else archs[0]
        if asked:  # a link's baseline, or one the previous sweep had: say which one the ratios use instead
            st.warning(f"This sweep has no {asked!r} SAEs to be the baseline (it has {', '.join(archs)}): the ratios "
                       f"are relative to {st.session_state['pareto_baseline']}.")
    baseline = st.selectbox("Baseline", archs, key="pareto_baseline", help="The ratios are relative to it.")
    write_url(params)
    analysis = pareto_analysis(table, baseline=baseline)
    target = f" → `{table.target_hook}`" if table.target_hook else ""
    st.caption(f"{len(table.rows)} SAEs of width {table.width:,} on `{table.hook_name}`{target} of "
               f"{display_path(table.model_name)}.")
    fig = analysis.figure()
    event = st.plotly_chart(fig, key="pareto-figure", on_select="rerun", selection_mode="points")
    export_menu(fig, analysis, key="sae-pareto", filename="sae-pareto")
    ratio_sentences(analysis, table)
    with show_errors():
        l0_proxy_section(table, path)
    points = getattr(getattr(event, "selection", None), "points", None) or []
    folder = next((p.get("customdata") for p in points if isinstance(p.get("customdata"), str)), None)
    if folder:
        with show_errors():
            open_point(Path(path) / folder)
    else:
        st.caption("Click a point to open that SAE in the feature browser.")
    synthetic_section()
    st.subheader("Every SAE of the sweep")
    import pandas as pd

    frame = pd.DataFrame([{"setting": setting_text(row)} | {c: row.get(c) for c in COLUMNS} for row in table.rows])
    st.dataframe(frame, hide_index=True, width="stretch", key="pareto-table")
    st.caption(", ".join(f"{label}: {sum(1 for r in table.rows if r['architecture'] == a)} SAEs"
                         for a, label in ((a, next(r["label"] for r in table.rows if r["architecture"] == a))
                                          for a in archs)) + f". Metrics: {', '.join(m[1] for m in METRICS.values())}"
               ", shrinkage γ = E||x̂||² / E[x·x̂], dead = never fired on the evaluation tokens, dense = fired on "
               "more than 10% of them.")


main()
