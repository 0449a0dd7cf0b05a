"""End to end: cache a model's activations at a hook, train SAEs on them, save them in the common folder format.

Inputs are scaled so that E||x||^2 = d_in during training (one sparsity coefficient then means the same thing on
every model and layer); the scale is folded into the saved weights, so saved SAEs read raw activations.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from interpscope import atomic
from interpscope.config import InterpscopeError
from interpscope.outputs import OutputFolder, check_output_folder, refuse_foreign_files
from interpscope.resume import check_same_settings
from interpscope.sae.activations import ActivationCache, ShuffledBuffer, build_activation_cache, check_cache_space
from interpscope.sae.architectures import SAEConfig, SparseAutoencoder, architecture_class, build_sae
from interpscope.sae.folder import CFG_FILE, WEIGHTS_FILE, hook_width, save_sae
from interpscope.sae.training import TrainConfig, Trainer, TrainRun
from interpscope.scale.pool import Scale
from interpscope.sinks import SINK_FACTOR

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

META_FILE = "train_meta.json"
OUTLIER_FACTOR = SINK_FACTOR  # training drops rows whose norm exceeds 10x the RMS norm (sinks past position 0)


@dataclass
class SAESpec:
    """One SAE to train: architecture, width, its sparsity knob (a coefficient, or k) and a run name."""

    architecture: str
    width: int
    sparsity: float | None = None
    k: int | None = None
    name: str | None = None

    @property
    def arch_class(self) -> type[SparseAutoencoder]:
        return architecture_class(self.architecture)

    @property
    def arch(self) -> str:
        return self.arch_class.architecture

    @property
    def coefficient(self) -> float:
        """The sparsity coefficient used (the architecture's default when none was given; 0 where the knob is k)."""
        knob = self.arch_class.knob
        default = 0.0 if knob.is_count else knob.default
        return float(self.sparsity if self.sparsity is not None else default)

    def knob_setting(self) -> dict:
        """{"k": k} or {"sparsity": coefficient}: the knob this architecture is trained with."""
        return {"k": self.k} if self.arch_class.knob.is_count else {"sparsity": self.coefficient}

    def run_name(self) -> str:
        if self.name:
            return self.name
        knob = f"k{self.k}" if self.arch_class.knob.is_count else f"l{self.coefficient:g}"
        return f"{self.arch_class.short_name}-{self.width}-{knob}"


def check_specs(specs: list[SAESpec]) -> None:
    """Clear errors for an unknown architecture, a width below 1, a k-based architecture without a valid k or a
    negative coefficient; run before any model is loaded or activation cached."""
    if not specs:
        raise InterpscopeError("Give at least one SAE to train.")
    for spec in specs:
        try:
            cls = spec.arch_class
        except ValueError as err:
            raise InterpscopeError(str(err)) from None
        if not isinstance(spec.width, int) or spec.width < 1:
            raise InterpscopeError(f"SAE width must be a positive integer (got {spec.width!r}).")
        if cls.knob.is_count and not spec.k:
            raise InterpscopeError(f"A {cls.label} SAE needs --k.")
        if cls.knob.is_count and spec.k is not None and (spec.k < 1 or spec.k > spec.width):
            raise InterpscopeError(f"--k must be from 1 to the width {spec.width} (got {spec.k}).")
        if spec.sparsity is not None and not (math.isfinite(spec.sparsity) and spec.sparsity >= 0):
            raise InterpscopeError(f"The sparsity coefficient must be 0 or more (got {spec.sparsity}).")


def training_memory_bytes(specs: list[SAESpec], d_in: int, batch_size: int) -> int:
    """What training `specs` on `d_in`-wide activations holds in memory, in bytes: per SAE, float32 W_enc, W_dec
    and biases with their gradients and two Adam moments (4 copies), and a batch's pre-activations, activations
    and their gradients (4 width-wide float32 arrays per row)."""
    total = 0
    for spec in specs:
        params = 2 * d_in * spec.width + spec.width + d_in
        total += 4 * 4 * params + 4 * 4 * batch_size * spec.width
    return total


def check_training_memory(specs: list[SAESpec], d_in: int | None, batch_size: int,
                          available: int | None = None) -> None:
    """Refuse, before any activation is cached, a training that cannot fit in the free memory (a width of 10^11
    would otherwise cache for minutes and then fail allocating hundreds of terabytes). d_in None: before the
    model is loaded, a lower bound (activations 1 wide)."""
    import psutil

    need = training_memory_bytes(specs, d_in or 1, batch_size)
    available = psutil.virtual_memory().available if available is None else available
    if need > available:
        widths = ", ".join(sorted({f"{spec.width:,}" for spec in specs}))
        what = f"on {d_in}-wide activations " if d_in else ""
        amount = "about" if d_in else "at least"
        raise InterpscopeError(f"Training {len(specs)} SAE(s) of width {widths} {what}with "
                               f"batches of {batch_size:,} needs {amount} {need / 2**30:,.1f} GiB of memory; "
                               f"{available / 2**30:,.1f} GiB is free. Lower --width or --batch-size.")


def run_names(specs: list[SAESpec]) -> list[str]:
    """Each spec's run (and output sub-folder) name; a repeated name gets its position appended."""
    names: list[str] = []
    for i, spec in enumerate(specs):
        name = spec.run_name()
        names.append(f"{name}-{i}" if name in names else name)
    return names


def make_runs(specs: list[SAESpec], d_in: int, model_name: str, hook_name: str, context_size: int,
              dataset: str, seed: int = 0) -> list[TrainRun]:
    """Fresh SAEs (decoder rows unit norm) for each spec, each with its sparsity coefficient."""
    check_specs(specs)
    runs = []
    for i, (spec, name) in enumerate(zip(specs, run_names(specs), strict=True)):
        layer = hook_name.split(".")[1] if hook_name.startswith("blocks.") else "-1"
        cfg = SAEConfig(d_in=d_in, d_sae=spec.width, architecture=spec.arch, model_name=model_name,
                        hook_name=hook_name, hook_layer=int(layer), k=spec.knob_setting().get("k"),
                        context_size=context_size, dataset_path=dataset)
        sae = build_sae(cfg, seed=seed + i)
        sae.sparse_training = True
        runs.append(TrainRun(name=name, sae=sae, sparsity=spec.coefficient))
    return runs


def input_scale(cache: ActivationCache) -> float:
    """Factor s with E||s x||^2 = d_in."""
    mean_sq = cache.mean_squared_norm()
    if not math.isfinite(mean_sq) or mean_sq <= 0:
        raise InterpscopeError("The cached activations are all zero or not finite; cannot train an SAE on them.")
    return math.sqrt(cache.d_in / mean_sq)


def train_settings(model_name: str, hook_name: str, specs: list[SAESpec], *, tokens: int,
                   cache_tokens: int = 200_000, source: str | None = None, split: str = "train",
                   context_size: int = 128, batch_size: int = 4096, lr: float = 3e-4, warmup_steps: int = 20,
                   decay_fraction: float = 0.2, resample_at: tuple[float, ...] = (0.25, 0.5),
                   dead_window_tokens: int = 1_000_000, seed: int = 0) -> dict:
    """Every setting that changes the trained weights; a checkpoint resumes only under identical ones."""
    saes = [{"name": name, "architecture": spec.arch, "width": spec.width, **spec.knob_setting()}
            for spec, name in zip(specs, run_names(specs), strict=True)]
    settings = {"model_name": model_name, "hook_name": hook_name, "saes": saes, "tokens": int(tokens),
                "cache_tokens": int(cache_tokens), "corpus": str(source or "austen"), "split": split,
                "context_size": int(context_size), "batch_size": int(batch_size), "lr": float(lr),
                "warmup_steps": int(warmup_steps), "decay_fraction": float(decay_fraction),
                "resample_at": [float(f) for f in resample_at], "dead_window_tokens": int(dead_window_tokens),
                "seed": int(seed)}
    return json.loads(json.dumps(settings))


LEGACY_SETTINGS = ("model_name", "hook_name", "lr", "batch_size")  # what train_meta.json held before "settings"


def check_resume(out_dir: str | Path, settings: dict, force: bool = False) -> bool:
    """Check the output folder (see interpscope.outputs) and any checkpoint in it, before any work; no side effects.

    True: nothing to resume, or a checkpoint made with the same settings. False: its settings differ and force
    says start afresh. Otherwise an error naming each differing setting with its old and new value.
    """
    folder = check_output_folder(out_dir, force)
    refuse_foreign_files(folder, (META_FILE,))  # a person's train_meta.json is neither replaced nor read as ours
    checkpoint = folder / "checkpoints" / "latest.json"
    if not checkpoint.is_file():
        return True
    try:
        meta = json.loads((folder / "train_meta.json").read_text(encoding="utf-8"))
        runs = json.loads(checkpoint.read_text(encoding="utf-8"))["runs"]
    except (OSError, ValueError, KeyError, TypeError):
        meta, runs = {}, None
    saved = meta.get("settings") if isinstance(meta, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    if isinstance(saved, dict):
        wanted = settings
    else:
        saved = {key: meta.get(key) for key in LEGACY_SETTINGS}
        saved["runs"] = runs
        wanted = {key: settings[key] for key in LEGACY_SETTINGS}
        wanted["runs"] = [sae["name"] for sae in settings["saes"]]
    return check_same_settings(saved, wanted, what=f"The training checkpoint in {checkpoint.parent}",
                               where="in the checkpoint", force=force)


def train_saes(lm: LoadedModel, hook_name: str, specs: list[SAESpec], out_dir: str | Path, *, tokens: int,
               cache_tokens: int = 200_000, source: str | None = None, split: str = "train",
               context_size: int = 128, batch_size: int = 4096, lr: float = 3e-4, warmup_steps: int = 20,
               decay_fraction: float = 0.2, resample_at: tuple[float, ...] = (0.25, 0.5),
               dead_window_tokens: int = 1_000_000,
               checkpoint_every: int = 50, save_dtype: str = "float32", seed: int = 0, log_every: int = 10,
               force: bool = False, cache_progress: Callable[[int, int], None] | None = None,
               progress: Callable[[int, int, dict], None] | None = None,
               stop: Callable[[], bool] | None = None, cache_batch_size: int = 8,
               scale: Scale | None = None) -> dict[str, Path]:
    """Cache activations (reused if present), train every spec from one buffer, save each to out_dir/<run name>.

    Resumes from out_dir/checkpoints when it holds a checkpoint made with the same settings; other settings are
    refused (force: start afresh). out_dir is an Interpscope output folder (interpscope.outputs): a folder holding
    files Interpscope did not write is refused unless force, and only files this command wrote are ever deleted.
    scale: cache the activations on Ray workers (interpscope.scale; same bytes as one process).
    """
    check_specs(specs)
    if any(spec.arch_class.paired for spec in specs):
        raise InterpscopeError("A transcoder reads one activation and predicts another: train it with "
                               "`interpscope sae sweep --archs transcoder --hook IN --target-hook OUT`.")
    if hook_name.endswith("mlp.hook_post"):
        raise InterpscopeError("Training on MLP neurons (mlp.hook_post) is not supported here; use "
                               "hook_resid_pre/post, hook_mlp_out or hook_attn_out.")
    width = hook_width(lm.adapter, hook_name)
    check_training_memory(specs, width, batch_size)
    settings = train_settings(lm.name, hook_name, specs, tokens=tokens, cache_tokens=cache_tokens,
                              source=source, split=split, context_size=context_size, batch_size=batch_size, lr=lr,
                              warmup_steps=warmup_steps, decay_fraction=decay_fraction, resample_at=resample_at,
                              dead_window_tokens=dead_window_tokens, seed=seed)
    resumable = check_resume(out_dir, settings, force)
    check_cache_space(lm, hook_name, cache_tokens, source=source, split=split, context_size=context_size)
    output = OutputFolder.claim(out_dir, force=force, command="sae train")
    if not resumable:
        output.remove("checkpoints")
    cache = build_activation_cache(lm, hook_name, cache_tokens, source=source, split=split,
                                   context_size=context_size, batch_size=cache_batch_size, dtype="float16",
                                   progress=cache_progress, scale=scale)
    if cache.n_rows < batch_size:
        raise InterpscopeError(f"Only {cache.n_rows} cached activations; need at least one batch of {batch_size}.")
    act_scale = input_scale(cache)  # `scale` is the Ray runner that cached them
    buffer = ShuffledBuffer(cache, batch_size, seed=seed, scale=act_scale, max_norm=OUTLIER_FACTOR * math.sqrt(width))
    runs = make_runs(specs, width, lm.name, hook_name, context_size, str(source or "austen"), seed=seed)
    cfg = TrainConfig(total_tokens=int(tokens), batch_size=batch_size, lr=lr, warmup_steps=warmup_steps,
                      decay_fraction=decay_fraction, resample_at=resample_at, dead_window_tokens=dead_window_tokens,
                      checkpoint_every=checkpoint_every, seed=seed, log_every=log_every)
    meta_file = output.path / META_FILE
    output.record(meta_file)  # listed before it is written: a kill in between leaves nothing of ours unlisted
    atomic.write_json(meta_file, {
        "input_scale": act_scale, "cache_folder": str(cache.folder), "cache_rows": cache.n_rows, "lr": lr,
        "batch_size": batch_size, "hook_name": hook_name, "model_name": lm.name, "settings": settings},
        indent=None)
    trainer = Trainer(runs, buffer, cfg, checkpoint_dir=output.path / "checkpoints", output=output)
    if resumable:
        trainer.resume()
    trainer.train(progress=progress, stop=stop)
    return export_runs(runs, output, act_scale, cache.n_rows, lr, batch_size, save_dtype)


def export_runs(runs: list[TrainRun], output: OutputFolder, scale: float, cache_rows: int, lr: float,
                batch_size: int, save_dtype: str) -> dict[str, Path]:
    """Fold the input scale into each SAE and save it (with its history) to <output folder>/<run name>."""
    saved = {}
    for run in runs:
        sae = run.sae
        sae.fold_input_scale(scale)
        sae.cfg.extra.update({"input_scale_folded": scale, "sparsity_coefficient": run.sparsity,
                              "cache_rows": cache_rows, "excluded_positions": [0], "lr": lr,
                              "batch_size": batch_size, "resampled_features": run.resampled,
                              "final_log": run.history[-1] if run.history else {}})
        folder = output.mkdir(run.name)
        saved[run.name] = save_sae(sae, folder, dtype=save_dtype)
        atomic.write_json(folder / "history.json", run.history, indent=None)
        output.record(*(folder / name for name in (CFG_FILE, WEIGHTS_FILE, "history.json")))
        sae.fold_input_scale(1.0 / scale)
    return saved


def export_checkpoint(out_dir: str | Path, save_dtype: str = "float32", force: bool = False) -> dict[str, Path]:
    """Save the SAEs of the newest checkpoint under out_dir/checkpoints as finished folders (e.g. when a long
    training run must stop early); training_tokens in cfg.json says how far it got."""
    from interpscope.sae.folder import load_sae

    output = OutputFolder.claim(out_dir, force=force, command="sae train")
    meta = json.loads((output.path / "train_meta.json").read_text(encoding="utf-8"))
    latest = json.loads((output.path / "checkpoints" / "latest.json").read_text(encoding="utf-8"))
    runs = []
    for name in latest["runs"]:
        run_dir = output.path / "checkpoints" / latest["folder"] / name
        saved = json.loads((run_dir / "history.json").read_text(encoding="utf-8"))
        runs.append(TrainRun(name=name, sae=load_sae(run_dir), sparsity=saved["sparsity"],
                             history=saved["history"], resampled=saved["resampled"]))
    return export_runs(runs, output, meta["input_scale"], meta["cache_rows"], meta["lr"], meta["batch_size"],
                       save_dtype)
