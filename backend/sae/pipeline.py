"""End to end: cache a model's activations at a hook, train SAEs on them, save them in the common folder format.

Inputs are scaled so that E||x||^2 = d_in during training (one sparsity coefficient then means the same thing on
every model and layer); the scale is folded into the saved weights, so saved SAEs read raw activations.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from backend.config import InterpscopeError
from backend.sae.activations import ActivationCache, ShuffledBuffer, build_activation_cache
from backend.sae.architectures import SAEConfig, build_sae, canonical_architecture
from backend.sae.folder import hook_width, save_sae
from backend.sinks import SINK_FACTOR
from backend.sae.training import TrainConfig, Trainer, TrainRun

OUTLIER_FACTOR = SINK_FACTOR  # training drops rows whose norm exceeds 10x the RMS norm (sinks past position 0)
DEFAULT_SPARSITY = {"standard": 5.0, "gated": 5.0, "jumprelu": 0.5, "topk": 0.0}


@dataclass
class SAESpec:
    """One SAE to train: architecture, width, sparsity coefficient (L1 / L0) or k, and a run name."""

    architecture: str
    width: int
    sparsity: float | None = None
    k: int | None = None
    name: str | None = None

    def run_name(self) -> str:
        if self.name:
            return self.name
        arch = canonical_architecture(self.architecture)
        knob = f"k{self.k}" if arch == "topk" else f"l{self.sparsity if self.sparsity is not None else DEFAULT_SPARSITY[arch]:g}"
        return f"{'relu' if arch == 'standard' else arch}-{self.width}-{knob}"


def make_runs(specs: list[SAESpec], d_in: int, model_name: str, hook_name: str, context_size: int,
              dataset: str, seed: int = 0) -> list[TrainRun]:
    """Fresh SAEs (decoder rows unit norm) for each spec, each with its sparsity coefficient."""
    runs = []
    names = set()
    for i, spec in enumerate(specs):
        arch = canonical_architecture(spec.architecture)
        if spec.width < 1:
            raise InterpscopeError("SAE width must be positive.")
        if arch == "topk" and not spec.k:
            raise InterpscopeError("A TopK SAE needs --k.")
        layer = hook_name.split(".")[1] if hook_name.startswith("blocks.") else "-1"
        cfg = SAEConfig(d_in=d_in, d_sae=spec.width, architecture=arch, model_name=model_name, hook_name=hook_name,
                        hook_layer=int(layer), k=spec.k, context_size=context_size, dataset_path=dataset)
        name = spec.run_name()
        if name in names:
            name = f"{name}-{i}"
        names.add(name)
        sparsity = spec.sparsity if spec.sparsity is not None else DEFAULT_SPARSITY[arch]
        sae = build_sae(cfg, seed=seed + i)
        sae.sparse_training = True
        runs.append(TrainRun(name=name, sae=sae, sparsity=float(sparsity)))
    return runs


def input_scale(cache: ActivationCache) -> float:
    """Factor s with E||s x||^2 = d_in."""
    mean_sq = cache.mean_squared_norm()
    if not math.isfinite(mean_sq) or mean_sq <= 0:
        raise InterpscopeError("The cached activations are all zero or not finite; cannot train an SAE on them.")
    return math.sqrt(cache.d_in / mean_sq)


def train_saes(loaded, hook_name: str, specs: list[SAESpec], out_dir: str | Path, *, tokens: int,
               cache_tokens: int = 200_000, source: str | None = None, split: str = "train",
               context_size: int = 128, batch_size: int = 4096, lr: float = 3e-4, warmup_steps: int = 20,
               decay_fraction: float = 0.2, resample_at: tuple[float, ...] = (0.25, 0.5),
               dead_window_tokens: int = 1_000_000,
               checkpoint_every: int = 50, save_dtype: str = "float32", seed: int = 0, log_every: int = 10,
               cache_progress: Callable[[int, int], None] | None = None,
               progress: Callable[[int, int, dict], None] | None = None,
               stop: Callable[[], bool] | None = None) -> dict[str, Path]:
    """Cache activations (reused if present), train every spec from one buffer, save each to out_dir/<run name>.

    Resumes from out_dir/checkpoints when it holds a checkpoint for the same runs.
    """
    width = hook_width(loaded.adapter, hook_name)
    if hook_name.endswith("mlp.hook_post"):
        raise InterpscopeError("Training on MLP neurons (mlp.hook_post) is not supported here; use "
                               "hook_resid_pre/post, hook_mlp_out or hook_attn_out.")
    cache = build_activation_cache(loaded, hook_name, cache_tokens, source=source, split=split,
                                   context_size=context_size, dtype="float16", progress=cache_progress)
    if cache.n_rows < batch_size:
        raise InterpscopeError(f"Only {cache.n_rows} cached activations; need at least one batch of {batch_size}.")
    scale = input_scale(cache)
    buffer = ShuffledBuffer(cache, batch_size, seed=seed, scale=scale, max_norm=OUTLIER_FACTOR * math.sqrt(width))
    runs = make_runs(specs, width, loaded.name, hook_name, context_size, str(source or "austen"), seed=seed)
    cfg = TrainConfig(total_tokens=int(tokens), batch_size=batch_size, lr=lr, warmup_steps=warmup_steps,
                      decay_fraction=decay_fraction, resample_at=resample_at, dead_window_tokens=dead_window_tokens,
                      checkpoint_every=checkpoint_every, seed=seed, log_every=log_every)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "train_meta.json").write_text(json.dumps({
        "input_scale": scale, "cache_folder": str(cache.folder), "cache_rows": cache.n_rows, "lr": lr,
        "batch_size": batch_size, "hook_name": hook_name, "model_name": loaded.name}), encoding="utf-8")
    trainer = Trainer(runs, buffer, cfg, checkpoint_dir=out_dir / "checkpoints")
    trainer.resume()
    trainer.train(progress=progress, stop=stop)
    return export_runs(runs, out_dir, scale, cache.n_rows, lr, batch_size, save_dtype)


def export_runs(runs: list[TrainRun], out_dir: Path, scale: float, cache_rows: int, lr: float, batch_size: int,
                save_dtype: str) -> dict[str, Path]:
    """Fold the input scale into each SAE and save it (with its history) to out_dir/<run name>."""
    saved = {}
    for run in runs:
        sae = run.sae
        sae.fold_input_scale(scale)
        sae.cfg.extra.update({"input_scale_folded": scale, "sparsity_coefficient": run.sparsity,
                              "cache_rows": cache_rows, "excluded_positions": [0], "lr": lr,
                              "batch_size": batch_size, "resampled_features": run.resampled,
                              "final_log": run.history[-1] if run.history else {}})
        saved[run.name] = save_sae(sae, out_dir / run.name, dtype=save_dtype)
        (saved[run.name] / "history.json").write_text(json.dumps(run.history), encoding="utf-8")
        sae.fold_input_scale(1.0 / scale)
    return saved


def export_checkpoint(out_dir: str | Path, save_dtype: str = "float32") -> dict[str, Path]:
    """Save the SAEs of the newest checkpoint under out_dir/checkpoints as finished folders (e.g. when a long
    training run must stop early); training_tokens in cfg.json says how far it got."""
    from backend.sae.folder import load_sae

    out_dir = Path(out_dir)
    meta = json.loads((out_dir / "train_meta.json").read_text(encoding="utf-8"))
    latest = json.loads((out_dir / "checkpoints" / "latest.json").read_text(encoding="utf-8"))
    runs = []
    for name in latest["runs"]:
        run_dir = out_dir / "checkpoints" / latest["folder"] / name
        saved = json.loads((run_dir / "history.json").read_text(encoding="utf-8"))
        runs.append(TrainRun(name=name, sae=load_sae(run_dir), sparsity=saved["sparsity"],
                             history=saved["history"], resampled=saved["resampled"]))
    return export_runs(runs, out_dir, meta["input_scale"], meta["cache_rows"], meta["lr"], meta["batch_size"],
                       save_dtype)
