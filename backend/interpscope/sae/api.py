"""The public Python API for sparse autoencoders (`interpscope.sae.load`, `.features`, `.feature`, `.steer`,
`.circuit`, `.evaluate`, `.stores`, `.train_sweep`, `.frontiers`): thin wrappers over the functions the SAE pages and
`interpscope sae ...` call, so a notebook gets the same results, as the same documents (`.to_dict()`), tables and
figures."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel
    from interpscope.sae.architectures import SparseAutoencoder
    from interpscope.sae.circuits import FeatureCircuit
    from interpscope.sae.evaluation import SAEEvaluation
    from interpscope.sae.pareto import ParetoAnalysis
    from interpscope.sae.store.prompt import PromptFeatures
    from interpscope.sae.store.steering import SteeringResult
    from interpscope.sae.store.store import FeatureCard, FeatureStore
    from interpscope.sae.sweep_docs import SweepTable

def saes() -> dict[str, Path]:
    """Every SAE shipped with Interpscope or trained here: name -> folder (what `load` accepts by name)."""
    from interpscope.sae.catalog import list_saes

    found = {}
    for label, folder in list_saes().items():
        found[label] = folder
        found.setdefault(folder.name, folder)
    return found


def load(path_or_name: str | Path) -> SparseAutoencoder:
    """An SAE from a folder in SAELens format (cfg.json + sae_weights.safetensors), or a shipped or trained one by
    name (a key of `saes()`, e.g. the shipped folder's name)."""
    from interpscope.sae.folder import load_sae

    return load_sae(_folder(path_or_name))


def _folder(path_or_name: str | Path) -> Path:
    return saes().get(str(path_or_name), Path(path_or_name).expanduser())


def _sae(sae) -> SparseAutoencoder:
    return load(sae) if isinstance(sae, (str, Path)) else sae


def features(lm: LoadedModel, sae, text: str, top: int = 20, per_token: int = 10,
             prepend_bos: bool | None = None) -> PromptFeatures:
    """The features on a text (the SAE page's prompt view, `interpscope sae prompt`): every feature's activation on
    every token, the `top` features with the largest activation outside the attention sinks, and per token its
    active features (at most `per_token` in the document). Schema interpscope.sae.features."""
    from interpscope.sae.store.prompt import prompt_features

    return prompt_features(lm, _sae(sae), text, n_top=top, prepend_bos=prepend_bos, per_token=per_token)


def stores() -> dict[str, Path]:
    """Every complete feature store, shipped then built here: name -> folder (what `feature` accepts by name)."""
    from interpscope.sae.store.layout import list_stores

    return {folder.name: folder for folder in list_stores()}


def store(store_or_name) -> FeatureStore:
    """A feature store opened read-only: a FeatureStore, a name from `stores()`, a store folder, or an SAE folder
    (its default store)."""
    from interpscope.sae.store.layout import MANIFEST
    from interpscope.sae.store.store import FeatureStore

    if isinstance(store_or_name, FeatureStore):
        return store_or_name
    named = stores().get(str(store_or_name))
    if named is not None:
        return FeatureStore(named)
    folder = Path(store_or_name).expanduser()
    return FeatureStore(folder) if (folder / MANIFEST).is_file() else FeatureStore.for_sae(folder)


def feature(store_or_name, feature_id: int) -> FeatureCard:
    """One feature's card (the feature page, `interpscope sae feature`): density, top activating contexts, activation
    and logit histograms, top and bottom logit effects, neighbours, label. Schema interpscope.sae.feature."""
    return store(store_or_name).card(feature_id)


def steer(lm: LoadedModel, sae, feature: int, text: str, mode: str = "add", strength: float | None = None,
          tokens: int = 32,
          prepend_bos: bool | None = None) -> SteeringResult:
    """Add (`mode="add"`, `strength` x the feature's decoder row) or remove (`mode="ablate"`) one feature while the
    model reads `text` and writes `tokens` more (the Steering view, `interpscope sae steer`). strength None: the
    page's default, from the feature's max activation in the SAE's feature store (add mode then needs `sae` as a
    folder or name whose store exists). Schema interpscope.sae.steering."""
    from interpscope.config import InterpscopeError
    from interpscope.sae.store.steering import default_strength
    from interpscope.sae.store.steering import steer as steer_feature

    if strength is None and mode == "add":
        max_activation = None
        if isinstance(sae, (str, Path)):
            try:
                max_activation = float(store(_folder(sae)).max_activation[feature])
            except (InterpscopeError, OSError, IndexError):
                pass
        if max_activation is None:
            raise InterpscopeError("Give strength=...: the default strength is the feature's max activation in the "
                                   "SAE's feature store, which needs the SAE given by folder or name, with a store.")
        strength = default_strength(max_activation)
    return steer_feature(lm, _sae(sae), text, feature, mode=mode, strength=0.0 if strength is None else strength,
                         n_new=tokens, prepend_bos=prepend_bos)


def circuit(lm: LoadedModel, upstream, downstream, feature: int | None, text: str, position: int = -1,
            method: str = "attnlrp",
            n_features: int = 8, prepend_bos: bool | None = None) -> FeatureCircuit:
    """Which upstream SAE features (and input tokens) the downstream SAE's `feature` at `position` (or, with
    downstream and feature None, the next-token logit) draws on: AttnLRP or CP-LRP through the model with the upstream
    SAE spliced in (the Circuit view, `interpscope sae circuit`). Schema interpscope.sae.circuit."""
    from interpscope.sae.circuits import feature_circuit

    return feature_circuit(lm, _sae(upstream), None if downstream is None else _sae(downstream), text,
                           feature=feature, position=position, method=method, n_features=n_features,
                           prepend_bos=prepend_bos)


def evaluate(lm: LoadedModel, sae, tokens: int = 4096, context: int = 128, corpus=None,
             split: str = "test") -> SAEEvaluation:
    """L0, FVU, loss recovered, CE increase, shrinkage, KL and feature density of an SAE on `tokens` corpus tokens
    (the SAE overview page, `interpscope sae eval`). Schema interpscope.sae.evaluation."""
    from interpscope.sae.transcoder_eval import evaluate_any

    return evaluate_any(lm, _sae(sae), n_tokens=tokens, context_size=context, source=corpus, split=split)


def train_sweep(lm: LoadedModel, out: str | Path, *, hook: str, archs: tuple[str, ...] = ("relu", "gated", "topk"),
          sparsity: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0), k: tuple[int, ...] = (8, 16, 32, 64),
          settings: dict[str, list[float]] | None = None, width: int = 1152, tokens: int = 1_000_000,
          target_hook: str | None = None, eval_tokens: int = 8192, **options) -> SweepTable:
    """Train a grid of SAEs (each architecture at each sparsity setting: `sparsity` for coefficient knobs, `k` for
    count knobs, `settings` {short name: values} per architecture) on one activation cache with `tokens` each,
    evaluate them on the same held-out tokens and return the table (`interpscope sae sweep`; resumable in `out`).
    A transcoder sweep: archs ("transcoder",) with `target_hook`. `options`: SweepSettings fields (lr, batch_size,
    cache_tokens, ...). Schema interpscope.sae_sweep."""
    from interpscope.sae.arch import architecture_class
    from interpscope.sae.sweep import SweepSettings, grid, run_sweep

    coefficients: dict[str, list[float]] = {"*": list(sparsity)}
    counts: dict[str, list[int]] = {"*": list(k)}
    for name, values in (settings or {}).items():
        cls = architecture_class(name)
        if cls.knob.is_count:
            counts[cls.short_name] = [int(v) for v in values]
        else:
            coefficients[cls.short_name] = [float(v) for v in values]
    specs = grid(list(archs), width, coefficients, counts)
    config = SweepSettings(model_name=lm.name, hook_name=hook, target_hook=target_hook, width=width, tokens=tokens,
                           **options)
    return run_sweep(lm, specs, config, out, eval_tokens=eval_tokens)


def frontiers(sweep_or_table, baseline: str = "relu") -> ParetoAnalysis:
    """Each architecture's Pareto frontiers (L0 vs loss recovered, L0 vs FVU) in a sweep (its folder, its
    sweep_table.json or a SweepTable) and its L0 ratio to `baseline` at matched loss recovered and FVU (the Pareto
    page, `interpscope sae pareto`). Schema interpscope.sae_pareto."""
    from interpscope.sae.pareto import pareto_analysis
    from interpscope.sae.sweep import load_table
    from interpscope.sae.sweep_docs import SweepTable

    table = sweep_or_table if isinstance(sweep_or_table, SweepTable) else load_table(sweep_or_table)
    return pareto_analysis(table, baseline=baseline)


def benchmark(lm: LoadedModel, sae: str | Path, metrics: str | list[str] | None = None, *, seed: int = 0,
              **options):
    """SAEBench-style metrics of the SAE folder `sae`, each beside its control: first-letter feature absorption,
    sparse probing on the Austen-novel tasks, explanation detection and fuzzing scores with the bundled LM as the
    simulator (`interpscope sae bench`, the SAE overview page). `options`: per-metric sizes, e.g.
    absorption={"n_words": 800}. Schema interpscope.sae_bench."""
    from interpscope.sae.bench import bench_sae

    return bench_sae(lm, sae, metric_names=metrics, seed=seed, options=options)
