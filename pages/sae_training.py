"""SAE training: cache activations at a hook, train one or more SAEs from one pass with live loss / L0 / FVU
curves, resume from checkpoints, and finish with an evaluation report."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from backend.config import InterpscopeError
from backend.paths import PLAIN_NAME, plain_name, user_path
from backend.sae import load_sae, registered
from backend.sae.catalog import trained_dir
from backend.sae.evaluation import evaluate_sae
from backend.sae.pipeline import SAESpec, train_saes
from components.export import export_menu
from pages._common import current_model, show_errors

ARCHITECTURES = {cls.short_name: cls for cls in registered()}
TRAINABLE = re.compile(r"^blocks\.\d+\.(hook_resid_pre|hook_resid_post|hook_mlp_out|hook_attn_out|hook_mixer_out)$")
CURVES = (("loss", "loss"), ("l0", "L0"), ("fvu", "FVU (batch)"))


def curves_figure(histories: dict[str, list[dict]]) -> go.Figure:
    fig = make_subplots(rows=1, cols=3, subplot_titles=[label for _, label in CURVES], horizontal_spacing=0.08)
    palette = ["#4c78a8", "#e45756", "#54a24b", "#b279a2", "#f58518"]
    for i, (name, history) in enumerate(histories.items()):
        tokens = [h["tokens"] for h in history]
        for col, (key, _) in enumerate(CURVES, start=1):
            fig.add_trace(go.Scatter(x=tokens, y=[h[key] for h in history], mode="lines", name=name,
                                     legendgroup=name, showlegend=col == 1,
                                     line=dict(color=palette[i % len(palette)])), row=1, col=col)
            fig.update_xaxes(title_text="training tokens", row=1, col=col)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_layout(height=360, title="Training curves", margin=dict(t=70, b=50), legend=dict(orientation="h",
                      y=-0.25))
    return fig


def default_run_name(model_name: str, hook: str) -> str:
    """'<model>-<hook>' as a plain name: a model given as a folder contributes its last part, cut to fit."""
    name = f"{model_name.replace('/', '_')}-{hook}"
    if PLAIN_NAME.fullmatch(name):
        return name
    model = re.sub(r"[^A-Za-z0-9._-]", "_", model_name.rstrip("/\\").replace("\\", "/").split("/")[-1])
    return f"{model.lstrip('.')[:30] or 'model'}-{hook}"[:64]


def settings(lm) -> dict | None:
    hooks = [h for h in lm.adapter.hook_points() if TRAINABLE.match(h)]
    middle = f"blocks.{lm.adapter.n_layers // 2}.hook_resid_post"
    c1, c2, c3 = st.columns(3)
    hook = c1.selectbox("Hook point", hooks, index=hooks.index(middle) if middle in hooks else 0,
                        key="sae_train_hook")
    archs = c2.multiselect("Architectures (trained together from one buffer)", list(ARCHITECTURES),
                           default=[name for name, cls in ARCHITECTURES.items() if cls.selected_by_default],
                           format_func=lambda name: ARCHITECTURES[name].label, key="sae_train_archs")
    width = int(c3.number_input("Width (features)", min_value=16, max_value=262144, value=8 * lm.adapter.d_model,
                                step=64, key="sae_train_width"))
    specs = []
    if archs:
        cols = st.columns(len(archs))
        for col, arch in zip(cols, archs):
            knob = ARCHITECTURES[arch].knob
            label = f"{knob.label} · {ARCHITECTURES[arch].label}"
            if knob.is_count:
                k = int(col.number_input(label, min_value=1, max_value=4096, value=int(knob.default),
                                         key=f"sae_train_k_{arch}"))
                specs.append(SAESpec(arch, width, k=k))
            else:
                coefficient = float(col.number_input(label, min_value=0.0, value=float(knob.default), step=0.5,
                                                     key=f"sae_train_{knob.kind}_{arch}"))
                specs.append(SAESpec(arch, width, coefficient))
    c1, c2, c3, c4 = st.columns(4)
    tokens = int(c1.number_input("Training tokens", min_value=1024, value=1_000_000, step=65536,
                                 key="sae_train_tokens", help="Passes over the cached activations repeat."))
    cache_tokens = int(c2.number_input("Corpus tokens to cache", min_value=256, value=100_000, step=10_000,
                                       key="sae_train_cache_tokens"))
    batch = int(c3.number_input("Batch size", min_value=16, max_value=65536, value=4096, step=256,
                                key="sae_train_batch"))
    lr = float(c4.number_input("Learning rate", min_value=1e-6, max_value=1.0, value=7e-4, format="%.5f",
                               key="sae_train_lr"))
    corpus = st.text_input("Corpus", value="austen", key="sae_train_corpus",
                           help="'austen' = the bundled Jane Austen novels, or a .txt/.md/.jsonl file or folder.")
    c1, c2 = st.columns(2)
    run_name = c1.text_input("Run name (rerun the same name to resume)", key="sae_train_name",
                             value=default_run_name(lm.name, hook))
    eval_tokens = int(c2.number_input("Evaluation tokens for the final report", min_value=0, value=1024,
                                      step=128, key="sae_train_eval_tokens"))
    if not archs:
        st.info("Choose at least one architecture.")
        return None
    try:
        run_name = plain_name(run_name, "run name")
        source = None if corpus.strip() in ("", "austen") else str(user_path(corpus, "corpus file or folder"))
    except InterpscopeError as err:
        st.error(str(err))
        return None
    return dict(hook=hook, specs=specs, tokens=tokens, cache_tokens=cache_tokens, batch=batch, lr=lr,
                corpus=source, run_name=run_name, eval_tokens=eval_tokens)


def run_training(lm, cfg: dict) -> None:
    out = trained_dir() / cfg["run_name"]
    cache_bar = st.progress(0.0, text="Caching activations…")
    train_bar = st.progress(0.0, text="Training…")
    live = st.empty()
    histories: dict[str, list[dict]] = {}

    def cache_progress(done: int, total: int) -> None:
        cache_bar.progress(done / total, text=f"Caching activations: {done:,} / {total:,}")

    def progress(step: int, total: int, logs: dict) -> None:
        cache_bar.progress(1.0, text="Activations cached")
        for name, entry in logs.items():
            histories.setdefault(name, []).append(entry)
        text = " · ".join(f"{n}: L0 {e['l0']:.0f}, FVU {e['fvu']:.3f}" for n, e in logs.items())
        train_bar.progress(step / total, text=f"Step {step}/{total} — {text}")
        frame = pd.DataFrame([{"tokens": e["tokens"], f"{n} {label}": e[key]}
                              for n, h in histories.items() for e in h for key, label in CURVES])
        live.line_chart(frame.groupby("tokens").first(), height=260)

    saved = train_saes(lm, cfg["hook"], cfg["specs"], out, tokens=cfg["tokens"], cache_tokens=cfg["cache_tokens"],
                       source=cfg["corpus"], batch_size=cfg["batch"], lr=cfg["lr"],
                       log_every=max(1, min(10, cfg["tokens"] // cfg["batch"] // 20)),
                       cache_progress=cache_progress, progress=progress)
    live.empty()
    report = {}
    if cfg["eval_tokens"] > 0:
        bar = st.progress(0.0, text="Evaluating…")
        for name, folder in saved.items():
            result = evaluate_sae(lm, load_sae(folder), n_tokens=cfg["eval_tokens"], context_size=128)
            report[name] = result.summary()
        bar.empty()
    st.session_state["sae_training_result"] = {"saved": {k: str(v) for k, v in saved.items()}, "report": report}


def show_result(result: dict) -> None:
    st.subheader("Final report")
    histories = {name: json.loads((Path(folder) / "history.json").read_text())
                 for name, folder in result["saved"].items() if (Path(folder) / "history.json").is_file()}
    if result["report"]:
        rows = [{"SAE": name, **{k: v for k, v in summary.items() if not isinstance(v, str)}}
                for name, summary in result["report"].items()]
        st.dataframe(rows, hide_index=True, width="stretch")
    fig = curves_figure(histories)
    st.plotly_chart(fig, width="stretch", key="sae_training_curves")
    export_menu(fig, {"report": result["report"], "histories": histories}, key="sae_training",
                filename="sae_training")
    for name, folder in result["saved"].items():
        st.caption(f"{name} saved to `{folder}` (open it on the SAE overview page).")


def main() -> None:
    st.title("SAE training")
    st.caption("Activations are cached on disk once; every selected architecture trains from the same shuffled "
               "buffer. Adam (β1 = 0), unit-norm decoder rows, dead-feature resampling; checkpoints every 50 "
               "steps, so the same run name resumes.")
    lm = current_model()
    if lm is None:
        return
    with show_errors():
        cfg = settings(lm)
        if cfg and st.button("Start / resume training", type="primary", key="sae_train_run"):
            if cfg["tokens"] < cfg["batch"]:
                raise InterpscopeError("Training tokens must be at least one batch.")
            run_training(lm, cfg)
    if "sae_training_result" in st.session_state:
        show_result(st.session_state["sae_training_result"])


main()
