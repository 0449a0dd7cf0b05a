"""A sweep: a grid of SAEs (architectures x sparsity settings) trained on ONE activation cache with the same number
of tokens each, then evaluated together on the same held-out tokens, written as one table.

Layout of the output folder (an Interpscope output folder, interpscope.outputs; nothing it did not write is ever
deleted):
  sweep.json            the shared settings (model, hook(s), width, tokens, schedule, cache) and the grid;
  <run>/                one SAE per grid point, itself an output folder: cfg.json + sae_weights.safetensors (the
                        SAELens folder format), history.json, checkpoints/ while it trains, train.json written
                        last (a finished SAE), eval.json (its evaluation and the evaluation settings);
  sweep_table.csv / sweep_table.json   the table (interpscope.sae.sweep_docs.SweepTable).
Resuming: a rerun with the same shared settings skips every SAE whose train.json matches its grid point, resumes
an unfinished one from its newest checkpoint, and evaluates only SAEs without a matching eval.json; the table is
rebuilt from the folders. A grid may grow or shrink between runs (e.g. relu,gated,topk first, the rest later);
the shared settings may not change.
Ray (`scale`): the SAEs are the shards; each worker trains whole SAEs from the same cache on disk, each in its
own sub-folder (with its own output marker), and the driver records the sub-folders. Every SAE's seed comes from
its name, so where it trains does not change its initialisation.
"""
from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from interpscope import atomic
from interpscope.config import InterpscopeError
from interpscope.outputs import OutputFolder, check_output_folder, refuse_foreign_files
from interpscope.paths import confined, display_path
from interpscope.resume import check_same_settings
from interpscope.sae.activations import ActivationCache, ShuffledBuffer, build_activation_cache, check_cache_space
from interpscope.sae.architectures import SAEConfig, build_sae
from interpscope.sae.folder import CFG_FILE, WEIGHTS_FILE, hook_width, load_sae, save_sae
from interpscope.sae.pipeline import OUTLIER_FACTOR, SAESpec, check_specs, check_training_memory, input_scale
from interpscope.sae.sweep_docs import SweepTable, row_problem, sweep_row
from interpscope.sae.training import TrainConfig, Trainer, TrainRun
from interpscope.scale.pool import Scale, Shard, map_shards

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

SWEEP_FILE = "sweep.json"
TRAIN_FILE = "train.json"
EVAL_FILE = "eval.json"
TABLE_CSV = "sweep_table.csv"
TABLE_JSON = "sweep_table.json"


@dataclass
class SweepSettings:
    """What every SAE of the sweep shares; a sweep folder resumes only under identical ones."""

    model_name: str
    hook_name: str
    width: int
    tokens: int
    target_hook: str | None = None
    cache_tokens: int = 300_000
    source: str = "austen"
    context_size: int = 128
    batch_size: int = 4096
    lr: float = 7e-4
    warmup_steps: int = 20
    decay_fraction: float = 0.2
    resample_at: tuple[float, ...] = (0.3, 0.5)
    dead_window_tokens: int = 250_000
    seed: int = 0
    save_dtype: str = "float32"

    def to_json(self) -> dict:
        data = dict(self.__dict__)
        data["resample_at"] = [float(f) for f in self.resample_at]
        return json.loads(json.dumps(data))

    @property
    def cache_hook(self) -> str:
        """The activation cache's hook: the SAE's hook, or 'input->target' for a transcoder's paired rows."""
        return f"{self.hook_name}->{self.target_hook}" if self.target_hook else self.hook_name


def grid(archs: list[str], width: int, coefficients: dict[str, list[float]], ks: dict[str, list[int]]) -> list[SAESpec]:
    """One SAESpec per architecture and sparsity setting (a k for count knobs, a coefficient otherwise),
    interleaved (every architecture's first setting, then every second one, ...) so that a sweep stopped early
    has points of every architecture."""
    per_arch: list[list[SAESpec]] = []
    for arch in archs:
        specs: list[SAESpec] = []
        try:
            cls = SAESpec(arch, width).arch_class
        except ValueError as err:
            raise InterpscopeError(str(err)) from None
        key = cls.short_name
        if cls.knob.is_count:
            counts = ks.get(key) or ks.get("*") or []
            specs.extend(SAESpec(arch, width, k=int(v)) for v in counts)
        else:
            weights = coefficients.get(key) or coefficients.get("*") or []
            specs.extend(SAESpec(arch, width, sparsity=float(v)) for v in weights)
        if not specs:
            raise InterpscopeError(f"No sparsity settings for {arch}: give "
                                   f"{'--k' if cls.knob.is_count else '--sparsity'} (or --set {key}=...).")
        per_arch.append(specs)
    specs = [group[i] for i in range(max(len(g) for g in per_arch)) for group in per_arch if i < len(group)]
    check_specs(specs)
    names = [spec.run_name() for spec in specs]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InterpscopeError(f"The grid repeats {', '.join(repeated)}; give each setting once.")
    return specs


def point_seed(settings: SweepSettings, name: str) -> int:
    """A grid point's initialisation seed: from its name, so it does not depend on the rest of the grid."""
    return settings.seed + zlib.crc32(name.encode()) % 100_003


def point_record(spec: SAESpec) -> dict:
    """What identifies a grid point in its train.json."""
    return {"name": spec.run_name(), "architecture": spec.arch, "width": spec.width, **spec.knob_setting()}


def check_sweep_memory(specs: list[SAESpec], d_in: int | None, batch_size: int) -> None:
    """Refuse a grid whose SAEs cannot be trained in the free memory, before the activation cache is built (a width
    of 10^11 used to cache for half an hour first). The grid trains one SAE at a time in a process, so the largest
    one must fit; d_in None: before the model is loaded, a lower bound (as `sae train` checks)."""
    if specs:
        check_training_memory([max(specs, key=lambda spec: spec.width)], d_in, batch_size)


def check_sweep(out_dir: str | Path, settings: SweepSettings, force: bool = False) -> Path:
    """Before any work: the folder may be written, and any sweep already there has the same shared settings."""
    folder = check_output_folder(out_dir, force)
    refuse_foreign_files(folder, (SWEEP_FILE, TABLE_CSV, TABLE_JSON))  # a person's files of those names are kept
    saved_file = folder / SWEEP_FILE
    if saved_file.is_file():
        try:
            saved = json.loads(saved_file.read_text(encoding="utf-8"))["settings"]
        except (OSError, ValueError, KeyError, TypeError):
            saved = {}
        check_same_settings(saved, settings.to_json(), what=f"The sweep in {folder}", where="in sweep.json",
                            force=force)
    return folder


def finished(folder: Path, spec: SAESpec, settings: SweepSettings) -> bool:
    """True when folder holds this grid point trained to the end under these settings."""
    try:
        done = json.loads((folder / TRAIN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (done.get("point") == point_record(spec) and done.get("settings") == settings.to_json()
            and (folder / CFG_FILE).is_file() and (folder / WEIGHTS_FILE).is_file())


@dataclass
class TrainJob:
    """Train one grid point per shard (payload: its SAESpec) into <out>/<run name>."""

    out_dir: str
    cache_folder: str
    settings: SweepSettings
    checkpoint_every: int = 25

    def run(self, lm: LoadedModel | None, shard: Shard) -> dict:
        return train_point(Path(self.out_dir), ActivationCache(Path(self.cache_folder)), self.settings,
                           shard.payload, self.checkpoint_every)


def train_point(out_dir: Path, cache: ActivationCache, settings: SweepSettings, spec: SAESpec,
                checkpoint_every: int = 25, progress: Callable[[int, int, dict], None] | None = None) -> dict:
    """Train (or resume) one grid point into out_dir/<run name>; returns its train.json record."""
    name = spec.run_name()
    output = OutputFolder.claim(out_dir / name, command="sae sweep")
    scale = input_scale(cache)
    d_in = cache.d_in
    max_norm = OUTLIER_FACTOR * math.sqrt(d_in)
    buffer = ShuffledBuffer(cache, settings.batch_size, seed=settings.seed, scale=scale, max_norm=max_norm)
    runs = [build_point(spec, name, d_in, settings)]
    cfg = TrainConfig(total_tokens=settings.tokens, batch_size=settings.batch_size, lr=settings.lr,
                      warmup_steps=settings.warmup_steps, decay_fraction=settings.decay_fraction,
                      resample_at=settings.resample_at, dead_window_tokens=settings.dead_window_tokens,
                      checkpoint_every=checkpoint_every, seed=settings.seed)
    trainer = Trainer(runs, buffer, cfg, checkpoint_dir=output.path / "checkpoints", output=output)
    trainer.resume()
    trainer.train(progress=progress)
    history = runs[0].history
    seconds = float(history[-1]["seconds"]) if history else 0.0
    export_point(runs[0], output, scale, cache.n_rows, settings)
    output.remove("checkpoints")
    record = {"point": point_record(spec), "settings": settings.to_json(), "steps": trainer.step,
              "training_tokens": trainer.step * settings.batch_size, "cache_rows": cache.n_rows,
              "input_scale": scale, "resampled": runs[0].resampled, "seconds_last_session": seconds,
              "process": os.getpid()}
    atomic.write_json(output.path / TRAIN_FILE, record, indent=1)
    output.record(output.path / TRAIN_FILE)
    return record


def _layer(hook: str) -> int:
    parts = hook.split(".")
    return int(parts[1]) if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() else -1


def build_point(spec: SAESpec, name: str, d_in: int, settings: SweepSettings) -> TrainRun:
    """A fresh SAE for a grid point (a transcoder reads the first half of the paired rows and predicts the
    second), seeded from its name."""
    target = settings.target_hook
    width_in = d_in // 2 if target else d_in
    extra = {"d_out": d_in - width_in, "hook_name_out": target, "hook_layer_out": _layer(target)} if target else {}
    cfg = SAEConfig(d_in=width_in, d_sae=spec.width, architecture=spec.arch, model_name=settings.model_name,
                    hook_name=settings.hook_name, hook_layer=_layer(settings.hook_name),
                    k=spec.knob_setting().get("k"), context_size=settings.context_size,
                    dataset_path=settings.source, apply_b_dec_to_input=not target, extra=extra)
    sae = build_sae(cfg, seed=point_seed(settings, name))
    sae.sparse_training = True
    return TrainRun(name=name, sae=sae, sparsity=spec.coefficient)


def export_point(run: TrainRun, output: OutputFolder, scale: float, cache_rows: int, settings: SweepSettings) -> None:
    """Fold the input scale into the SAE and save it (with its history) as the point's folder."""
    sae = run.sae
    sae.fold_input_scale(scale)
    sae.cfg.extra.update({"input_scale_folded": scale, "sparsity_coefficient": run.sparsity, "cache_rows": cache_rows,
                          "excluded_positions": [0], "lr": settings.lr, "batch_size": settings.batch_size,
                          "resampled_features": run.resampled})
    save_sae(sae, output.path, dtype=settings.save_dtype)
    atomic.write_json(output.path / "history.json", run.history, indent=None)
    output.record(*(output.path / name for name in (CFG_FILE, WEIGHTS_FILE, "history.json")))
    sae.fold_input_scale(1.0 / scale)


def sweep_cache(lm: LoadedModel, settings: SweepSettings, scale: Scale | None = None,
                progress: Callable[[int, int], None] | None = None) -> ActivationCache:
    """The sweep's one activation cache (an SAE's hook, or a transcoder's paired input/target rows)."""
    return build_activation_cache(lm, settings.cache_hook, settings.cache_tokens, source=settings.source,
                                  split="train", context_size=settings.context_size, dtype="float16",
                                  progress=progress, scale=scale)


def run_sweep(lm: LoadedModel, specs: list[SAESpec], settings: SweepSettings, out_dir: str | Path, *,
              eval_tokens: int = 16384, eval_batch_size: int = 4, force: bool = False,
              scale: Scale | None = None, checkpoint_every: int = 25,
              cache_progress: Callable[[int, int], None] | None = None,
              progress: Callable[[str, int, int], None] | None = None, train: bool = True) -> SweepTable:
    """Train every grid point not yet finished, evaluate every SAE not yet evaluated on these eval settings, and
    write the table (see the module docstring). progress(stage, done, total) reports SAEs trained and evaluated.
    train False: train nothing; evaluate and tabulate the grid points already finished."""
    check_specs(specs)
    check_sweep_memory(specs, hook_width(lm.adapter, settings.hook_name), settings.batch_size)
    check_sweep(out_dir, settings, force)
    check_cache_space(lm, settings.cache_hook, settings.cache_tokens, source=settings.source,
                      context_size=settings.context_size)
    output = OutputFolder.claim(out_dir, force=force, command="sae sweep")
    saved = {"settings": settings.to_json(), "grid": [point_record(spec) for spec in specs]}
    output.record(output.path / SWEEP_FILE)  # listed before it is written (a kill in between: nothing unlisted)
    atomic.write_json(output.path / SWEEP_FILE, saved, indent=1)
    cache = sweep_cache(lm, settings, scale, cache_progress)
    if cache.n_rows < settings.batch_size:
        raise InterpscopeError(f"Only {cache.n_rows} cached activations; need at least one batch of "
                               f"{settings.batch_size}.")
    todo: list[Shard] = []
    if not train:
        specs = [spec for spec in specs if finished(output.path / spec.run_name(), spec, settings)]
    for index, spec in enumerate(specs):
        folder = output.path / spec.run_name()
        if not finished(folder, spec, settings):
            output.mkdir(folder)
            todo.append(Shard(len(todo), index, index + 1, spec))
    trained = len(specs) - len(todo)
    if progress:
        progress("train", trained, len(specs))

    def done(shard: Shard, record: dict) -> None:
        nonlocal trained
        trained += 1
        output.record(output.path / shard.payload.run_name())
        if progress:
            progress("train", trained, len(specs))

    map_shards(TrainJob(str(output.path), str(cache.folder), settings, checkpoint_every), todo, done, lm=lm,
               scale=scale)
    evaluate_pending(lm, specs, output, settings, eval_tokens=eval_tokens, batch_size=eval_batch_size,
                     scale=scale, progress=progress)
    return write_table(output, specs, settings, eval_tokens)


def eval_settings(settings: SweepSettings, eval_tokens: int) -> dict:
    """What an evaluation depends on besides the SAE: its held-out tokens."""
    return {"n_tokens": int(eval_tokens), "context_size": min(settings.context_size, int(eval_tokens)),
            "source": settings.source, "split": "test"}


def evaluate_pending(lm: LoadedModel, specs: list[SAESpec], output: OutputFolder, settings: SweepSettings, *,
                     eval_tokens: int, batch_size: int = 4, scale: Scale | None = None,
                     progress: Callable[[str, int, int], None] | None = None) -> None:
    """Evaluate together (one clean and one ablated pass) every SAE without an eval.json for these settings."""
    from interpscope.sae.evaluation import evaluate_saes

    wanted = eval_settings(settings, eval_tokens)
    pending = []
    for spec in specs:
        folder = output.path / spec.run_name()
        try:
            saved = json.loads((folder / EVAL_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = {}
        if saved.get("settings") != wanted or saved.get("weights") != _weights_stamp(folder):
            pending.append(folder)
    if progress:
        progress("evaluate", len(specs) - len(pending), len(specs))
    if not pending:
        return
    saes = [load_sae(folder) for folder in pending]
    options = dict(n_tokens=wanted["n_tokens"], context_size=wanted["context_size"], source=settings.source,
                   split="test", batch_size=batch_size, scale=scale)
    if settings.target_hook:
        from interpscope.sae.transcoder_eval import evaluate_transcoders

        results = evaluate_transcoders(lm, saes, **options)
    else:
        results = evaluate_saes(lm, saes, **options)
    for folder, result in zip(pending, results, strict=True):
        atomic.write_json(folder / EVAL_FILE, {"settings": wanted, "weights": _weights_stamp(folder),
                                               "summary": result.summary()}, indent=1)
        OutputFolder.claim(folder, command="sae sweep").record(folder / EVAL_FILE)
    if progress:
        progress("evaluate", len(specs), len(specs))


def _weights_stamp(folder: Path) -> list[int]:
    """Size and modification time of the weights: an eval.json of other weights is stale."""
    stat = (folder / WEIGHTS_FILE).stat()
    return [int(stat.st_size), int(stat.st_mtime_ns)]


def write_table(output: OutputFolder, specs: list[SAESpec], settings: SweepSettings, eval_tokens: int) -> SweepTable:
    """The table of every grid point that is trained and evaluated, as CSV and as the JSON document."""
    rows = []
    for spec in specs:
        folder = output.path / spec.run_name()
        try:
            evaluation = json.loads((folder / EVAL_FILE).read_text(encoding="utf-8"))["summary"]
            trained = json.loads((folder / TRAIN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError):
            continue
        rows.append(sweep_row(spec, folder.name, evaluation, trained))
    order = {arch: i for i, arch in enumerate(dict.fromkeys(row["architecture"] for row in rows))}
    rows.sort(key=lambda row: (order[row["architecture"]], row.get("l0") or 0.0))
    table = SweepTable(model_name=settings.model_name, hook_name=settings.hook_name,
                       target_hook=settings.target_hook, width=settings.width, tokens_per_sae=settings.tokens,
                       cache_tokens=settings.cache_tokens, eval=eval_settings(settings, eval_tokens), rows=rows)
    output.record(output.path / TABLE_CSV, output.path / TABLE_JSON)  # listed before they are written
    table.to_csv(output.path / TABLE_CSV)
    atomic.write_json(output.path / TABLE_JSON, table.to_dict(), indent=1)
    return table


def load_table(sweep_dir: str | Path) -> SweepTable:
    """The table a sweep folder holds (sweep_table.json), or a clear error."""
    # confined first, the folder and then the table file itself (resolved with its symlinks): in server mode a table
    # that is a link leading outside the allowed roots is refused like a typed path outside them
    folder = confined(sweep_dir, "sweep folder")
    path = confined(folder / TABLE_JSON, "sweep table") if folder.is_dir() else folder
    shown = display_path(path)
    if not path.is_file():
        raise InterpscopeError(f"No sweep table at {shown}: run `interpscope sae sweep --out FOLDER` first.")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise InterpscopeError(f"{shown} is not a sweep table (not JSON: {err}).") from None
    if not isinstance(document, dict):
        raise InterpscopeError(f"{shown} is not a sweep table: it holds a JSON {type(document).__name__}, not an "
                               "object.")
    try:
        table = SweepTable.from_dict(document)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise InterpscopeError(f"{shown} is not a sweep table ({err}).") from None
    problem = row_problem(table.rows)
    if problem:
        raise InterpscopeError(f"{shown}: {problem}; a table written by `interpscope sae sweep` has every figure, "
                               "so rerun the sweep (or fix that row) rather than compare frontiers without it.")
    return table
