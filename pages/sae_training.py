"""SAE training: cache activations at a hook, train one or more SAEs from one pass with live loss / L0 / FVU
curves, resume from checkpoints, and finish with an evaluation report."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pandas as pd
import streamlit as st

from components.export import export_menu
from interpscope.config import InterpscopeError
from interpscope.figures.sae import CURVES
from interpscope.limits import check_amounts
from interpscope.paths import PLAIN_NAME, display_path, plain_name, user_path
from interpscope.sae import load_sae, registered
from interpscope.sae.catalog import trained_dir
from interpscope.sae.documents import training_report
from interpscope.sae.evaluation import evaluate_sae
from interpscope.sae.pipeline import SAESpec, train_saes
from pages._common import Param, committed, current_model, progress, show_errors, url_inputs, write_url

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

ARCHITECTURES = {cls.short_name: cls for cls in registered() if not cls.paired}  # transcoders: `sae sweep`
TRAINABLE = re.compile(r"^blocks\.\d+\.(hook_resid_pre|hook_resid_post|hook_mlp_out|hook_attn_out|hook_mixer_out)$")
PAGE = "sae-training"


def params(lm: LoadedModel) -> list[Param]:
    hooks = [h for h in lm.adapter.hook_points() if TRAINABLE.match(h)]
    middle = f"blocks.{lm.adapter.n_layers // 2}.hook_resid_post"
    return [Param("sae_train_hook", "hook", middle if middle in hooks else hooks[0], choices=hooks),
            Param("sae_train_archs_text", "archs", ",".join(n for n, c in ARCHITECTURES.items()
                                                           if c.selected_by_default)),
            Param("sae_train_width", "width", 8 * lm.adapter.d_model, int, low=16, high=262144),
            Param("sae_train_tokens", "tokens", 1_000_000, int, low=1024),
            Param("sae_train_cache_tokens", "cache", 100_000, int, low=256),
            Param("sae_train_batch", "batch", 4096, int, low=16, high=65536),
            Param("sae_train_lr", "lr", 7e-4, float, low=1e-6, high=1.0),
            Param("sae_train_corpus", "corpus", "austen"),
            Param("sae_train_eval_tokens", "eval", 1024, int, low=0),
            Param("sae_train_name", "name", None),
            *(Param(knob_key(name), f"{cls.knob.kind}_{name}",
                    int(cls.knob.default) if cls.knob.is_count else float(cls.knob.default),
                    int if cls.knob.is_count else float, low=1 if cls.knob.is_count else 0.0)
              for name, cls in ARCHITECTURES.items())]


def knob_key(arch: str) -> str:
    """The widget key of an architecture's sparsity knob (k, or its coefficient)."""
    knob = ARCHITECTURES[arch].knob
    return f"sae_train_k_{arch}" if knob.is_count else f"sae_train_{knob.kind}_{arch}"


def default_run_name(model_name: str, hook: str) -> str:
    """'<model>-<hook>' as a plain name: a model given as a folder contributes its last part, cut to fit."""
    name = f"{model_name.replace('/', '_')}-{hook}"
    if PLAIN_NAME.fullmatch(name):
        return name
    model = re.sub(r"[^A-Za-z0-9._-]", "_", model_name.rstrip("/\\").replace("\\", "/").split("/")[-1])
    return f"{model.lstrip('.')[:30] or 'model'}-{hook}"[:64]


def settings(lm: LoadedModel) -> dict | None:
    hooks = [h for h in lm.adapter.hook_points() if TRAINABLE.match(h)]
    c1, c2, c3 = st.columns(3)
    hook = c1.selectbox("Hook point", hooks, key="sae_train_hook")
    if "sae_train_archs" not in st.session_state:
        asked = [a for a in st.session_state["sae_train_archs_text"].split(",") if a]
        st.session_state["sae_train_archs"] = [a for a in asked if a in ARCHITECTURES]
        unknown = [a for a in asked if a not in ARCHITECTURES]
        if unknown:  # only a link can name one (the page writes what its picker holds)
            st.warning(f"Ignored from the link's architectures: {', '.join(map(repr, unknown))} (this page trains "
                       f"{', '.join(ARCHITECTURES)}).")
    archs = c2.multiselect("Architectures (trained together from one buffer)", list(ARCHITECTURES),
                           format_func=lambda name: ARCHITECTURES[name].label, key="sae_train_archs")
    st.session_state["sae_train_archs_text"] = ",".join(archs)
    width = int(c3.number_input("Width (features)", min_value=16, max_value=262144, step=64,
                                key="sae_train_width"))
    specs = []
    if archs:
        cols = st.columns(len(archs))
        for col, arch in zip(cols, archs, strict=True):
            knob = ARCHITECTURES[arch].knob
            label = f"{knob.label} · {ARCHITECTURES[arch].label}"
            if knob.is_count:
                k = int(col.number_input(label, min_value=1, max_value=4096, key=knob_key(arch)))
                specs.append(SAESpec(arch, width, k=k))
            else:
                coefficient = float(col.number_input(label, min_value=0.0, step=0.5, key=knob_key(arch)))
                specs.append(SAESpec(arch, width, coefficient))
    c1, c2, c3, c4 = st.columns(4)
    tokens = int(c1.number_input("Training tokens", min_value=1024, step=65536, key="sae_train_tokens",
                                 help="Passes over the cached activations repeat."))
    cache_tokens = int(c2.number_input("Corpus tokens to cache", min_value=256, step=10_000,
                                       key="sae_train_cache_tokens"))
    batch = int(c3.number_input("Batch size", min_value=16, max_value=65536, step=256, key="sae_train_batch"))
    lr = float(c4.number_input("Learning rate", min_value=1e-6, max_value=1.0, format="%.5f", key="sae_train_lr"))
    corpus = st.text_input("Corpus", key="sae_train_corpus",
                           help="'austen' = the bundled Jane Austen novels, or a .txt/.md/.jsonl file or folder.")
    c1, c2 = st.columns(2)
    run_name = c1.text_input("Run name (rerun the same name to resume)", key="sae_train_name")
    eval_tokens = int(c2.number_input("Evaluation tokens for the final report", min_value=0, step=128,
                                      key="sae_train_eval_tokens"))
    if not archs:
        st.info("Choose at least one architecture.")
        return None
    try:
        check_amounts(training_tokens=tokens, cache_tokens=cache_tokens, sae_width=width, batch_size=batch,
                      eval_tokens=eval_tokens, sae_k=max((spec.k for spec in specs if spec.k), default=None))
        run_name = plain_name(run_name, "run name")
        source = None if corpus.strip() in ("", "austen") else str(user_path(corpus, "corpus file or folder"))
    except InterpscopeError as err:
        st.error(str(err))
        return None
    return dict(hook=hook, specs=specs, tokens=tokens, cache_tokens=cache_tokens, batch=batch, lr=lr,
                corpus=source, run_name=run_name, eval_tokens=eval_tokens)


def run_training(lm: LoadedModel, cfg: dict) -> None:
    out = trained_dir() / cfg["run_name"]
    live = st.empty()
    histories: dict[str, list[dict]] = {}
    with progress("Caching activations: tokens", PAGE) as cache_report, progress("Training: steps") as train_report:
        def train_progress(step: int, total: int, logs: dict) -> None:
            for name, entry in logs.items():
                histories.setdefault(name, []).append(entry)
            train_report(step, total)
            frame = pd.DataFrame([{"tokens": e["tokens"], f"{n} {label}": e[key]}
                                  for n, h in histories.items() for e in h for key, label in CURVES])
            live.line_chart(frame.groupby("tokens").first(), height=260)

        try:
            saved = train_saes(lm, cfg["hook"], cfg["specs"], out, tokens=cfg["tokens"],
                               cache_tokens=cfg["cache_tokens"], source=cfg["corpus"], batch_size=cfg["batch"],
                               lr=cfg["lr"], log_every=max(1, min(10, cfg["tokens"] // cfg["batch"] // 20)),
                               cache_progress=cache_report, progress=train_progress)
        finally:
            live.empty()  # the live curves are progress too: the final report below replaces them
    report = {}
    if cfg["eval_tokens"] > 0:
        with progress("Evaluating: SAEs") as eval_report:
            for index, (name, folder) in enumerate(saved.items()):
                result = evaluate_sae(lm, load_sae(folder), n_tokens=cfg["eval_tokens"], context_size=128)
                report[name] = result.summary()
                eval_report(index + 1, len(saved))
    st.session_state["sae_training_result"] = {"saved": {k: str(v) for k, v in saved.items()}, "report": report,
                                               "model": lm.name, "hook": cfg["hook"]}


def show_result(result: dict) -> None:
    st.subheader("Final report")
    document = training_report(result["model"], result["hook"], result["saved"], result["report"])
    if result["report"]:
        rows = [{"SAE": name, **{k: v for k, v in summary.items() if not isinstance(v, str)}}
                for name, summary in result["report"].items()]
        st.dataframe(rows, hide_index=True, width="stretch")
    fig = document.figure()
    st.plotly_chart(fig, width="stretch", key="sae_training_curves")
    export_menu(fig, document, key="sae_training", filename="sae_training")
    for name, folder in result["saved"].items():
        st.caption(f"{name} saved to `{display_path(folder)}` (open it on the SAE overview page).")


def main() -> None:
    st.title("SAE training")
    st.caption("Activations are cached on disk once; every selected architecture trains from the same shuffled "
               "buffer. Adam (β1 = 0), unit-norm decoder rows, dead-feature resampling; checkpoints every 50 "
               "steps, so the same run name resumes.")
    lm = current_model()
    if lm is None:
        return
    page_params = params(lm)
    url_inputs(PAGE, page_params)
    if not st.session_state.get("sae_train_name"):
        st.session_state["sae_train_name"] = default_run_name(lm.name, st.session_state["sae_train_hook"])
    with show_errors():
        cfg = settings(lm)
        if cfg and st.button("Start / resume training", type="primary", key="sae_train_run"):
            if cfg["tokens"] < cfg["batch"]:
                write_url(page_params, run=PAGE)
                raise InterpscopeError("Training tokens must be at least one batch.")
            committed(PAGE, cfg, True)  # the link holds the settings of the last start, not pending edits
            write_url(page_params, run=PAGE)
            run_training(lm, cfg)
        write_url(page_params, run=PAGE)
    if "sae_training_result" in st.session_state:
        show_result(st.session_state["sae_training_result"])


main()
