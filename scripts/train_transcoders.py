"""Train one transcoder per block of a model (MLP input `blocks.L.mlp.hook_in` -> MLP output `blocks.L.hook_mlp_out`)
and ship the set under assets/transcoders/<model>/ (interpscope.sae.transcoder_set).

    nice -n 10 .venv/bin/python scripts/train_transcoders.py --model smollm2-135m

Gemma 3 270M's shipped set (JumpReLU transcoders with a skip connection, in Gemma Scope 2's layout; windows start
with BOS as Gemma's tokenizer puts it; the exact command is in the set's manifest.json):

    scripts/train_transcoders.sh --model gemma3-270m --work build/transcoders_gemma3 --tokens 49152 \
        --arch jumprelu_transcoder --skip --width 512 --l1 0.03 --steps-tokens 204800 --layout gemma_scope_2

Stages, all resumable in --work (build/transcoders_smollm2 by default):
1. cache: ONE forward pass per batch of corpus windows (train split) records every layer's (input, output) pair;
   rows go to one float16 file per layer, layer_XX/acts.bin [rows, 2 d_model] ([x_in | y], an activation cache
   the project's ShuffledBuffer reads). Position 0 and measured sink rows (interpscope.sinks.sink_rows on the
   input or the output of that layer, per batch) are left out. progress.json records the windows and rows done
   after each batch, so a rerun continues there (a half-written batch is cut off), also with another --tokens
   (the windows of fewer tokens are the first windows of more: an interrupted build can be finished smaller).
2. train: each layer's transcoder (the project's ReLU + L1 transcoder and Trainer) on its cache; a finished
   layer's folder (work/trained/layer_XX, float32) is not retrained. Inputs and outputs are scaled to
   E||x||^2 = d while training (the L1 coefficient then means the same at every layer); the scales are folded
   back into the weights before saving, so the saved transcoder reads and writes raw activations.
3. eval: per layer, on held-out windows (test split): FVU and spliced loss recovered
   (interpscope.sae.transcoder_eval), L0 and dead fraction; stored per layer in work/eval/layer_XX.json.
4. ship: layer_XX/ in --save-dtype (SAELens transcoder format) + manifest.json under --out.
Uses --threads torch threads (1: on a shared 2-core machine more threads ran slower).
"""
from __future__ import annotations

import argparse
import inspect
import json
import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from interpscope import atomic
from interpscope.capture import hooks, model_lock
from interpscope.config import REPO_ROOT, InterpscopeError
from interpscope.corpus import token_chunks
from interpscope.sae.activations import ActivationCache, CacheSpec, ShuffledBuffer
from interpscope.sae.arch.base import SAEConfig
from interpscope.sae.arch.transcoder import Transcoder
from interpscope.sae.folder import load_sae, save_sae
from interpscope.sae.training import TrainConfig, Trainer, TrainRun
from interpscope.sae.transcoder_eval import evaluate_transcoders
from interpscope.sae.transcoder_set import (
    HOOK_IN,
    HOOK_OUT,
    TranscoderSet,
    layer_folder_name,
    new_transcoder,
    save_transcoder_set,
)
from interpscope.sinks import sink_rows

PROGRESS = "progress.json"


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, flush=True)


# --- stage 1: one pass, every layer -----------------------------------------------------------------------------
def layer_pairs(lm, windows: torch.Tensor) -> list[np.ndarray]:
    """Per layer, the rows [x_in | y] (float32, [n, 2 d]) of windows [N, T] from ONE forward pass: positions 1..,
    without the rows that are sinks at that layer's input or output."""
    n_layers = lm.adapter.n_layers
    names = [HOOK_IN.format(layer=layer) for layer in range(n_layers)]
    names += [HOOK_OUT.format(layer=layer) for layer in range(n_layers)]
    store: dict[str, torch.Tensor] = {}

    def keeper(name: str):
        def keep(tensor: torch.Tensor) -> None:
            store[name] = tensor.detach()
        return keep

    # the logits of the last position only where the model allows it: Gemma 3's 262k-token unembedding would cost
    # more than its blocks
    last_only = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(type(lm.model).forward).parameters \
        else {}
    with model_lock(lm), torch.no_grad(), hooks(lm.adapter, {name: keeper(name) for name in names}):
        lm.model(input_ids=windows.to(lm.device), use_cache=False, **last_only)
    rows = []
    for layer in range(n_layers):
        x_in = store[HOOK_IN.format(layer=layer)][:, 1:].reshape(-1, lm.adapter.d_model).float().cpu()
        y = store[HOOK_OUT.format(layer=layer)][:, 1:].reshape(-1, lm.adapter.d_model).float().cpu()
        keep = ~(sink_rows(x_in) | sink_rows(y))
        rows.append(torch.cat([x_in, y], -1)[keep].numpy())
    return rows


def _layer_spec(lm, layer: int, n_tokens: int, context_size: int) -> CacheSpec:
    return CacheSpec(model_name=lm.name, hook_name=f"{HOOK_IN.format(layer=layer)}->{HOOK_OUT.format(layer=layer)}",
                     d_in=2 * lm.adapter.d_model, n_tokens=int(n_tokens), split="train",
                     context_size=int(context_size), dtype="float16")


def corpus_windows(lm, context_size: int, n_tokens: int, split: str, bos: bool, source: str | None = None
                   ) -> torch.Tensor:
    """[N, context_size] corpus windows; with bos, each starts with the tokenizer's BOS (then context_size - 1
    corpus tokens), as a person's prompt does where the tokenizer adds it (Gemma): the activations a transcoder is
    trained on then come from the runs it will read. Position 0 is never a training row either way."""
    windows = token_chunks(lm.tokenizer, context_size, n_tokens, source=source, split=split)
    bos_id = getattr(lm.tokenizer, "bos_token_id", None)
    if not bos or bos_id is None:
        return windows
    head = torch.full((windows.shape[0], 1), int(bos_id), dtype=windows.dtype)
    return torch.cat([head, windows[:, :-1]], dim=1)


def cache_all_layers(lm, work: Path, n_tokens: int, *, context_size: int = 128, batch_size: int = 8,
                     source: str | None = None, bos: bool = False) -> list[ActivationCache]:
    """Stage 1 (resumable): every layer's paired cache from one forward pass per batch. Returns the caches; a
    complete cache (meta.json in every layer folder) is returned without running the model."""
    n_layers = lm.adapter.n_layers
    folders = [work / "cache" / layer_folder_name(layer) for layer in range(n_layers)]
    if all((folder / "meta.json").is_file() for folder in folders):
        return [ActivationCache(folder) for folder in folders]
    windows = corpus_windows(lm, context_size, n_tokens, "train", bos, source)
    specs = [_layer_spec(lm, layer, n_tokens, context_size) for layer in range(n_layers)]
    row_bytes = specs[0].d_in * 2
    progress_file = work / "cache" / PROGRESS
    state: dict[str, Any] = {"n_tokens": int(n_tokens), "context_size": int(context_size),
                             "batch_size": int(batch_size), "bos": bool(bos), "n_windows": int(windows.shape[0]),
                             "windows_done": 0,
                             "rows": [0] * n_layers}
    if progress_file.is_file():  # the windows of fewer tokens are a prefix of those of more (token_chunks)
        saved = json.loads(progress_file.read_text(encoding="utf-8"))
        if (all(saved.get(key, False if key == "bos" else None) == state[key]
                for key in ("context_size", "batch_size", "bos"))
                and saved["windows_done"] <= state["n_windows"]):
            state.update(windows_done=saved["windows_done"], rows=saved["rows"])
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    first_done = state["windows_done"]
    for first in range(state["windows_done"], windows.shape[0], batch_size):
        stop = min(first + batch_size, windows.shape[0])
        for layer, rows in enumerate(layer_pairs(lm, windows[first:stop])):
            partial = folders[layer] / "acts.partial"
            with open(partial, "r+b" if partial.exists() else "wb") as handle:
                handle.truncate(state["rows"][layer] * row_bytes)  # cuts off a batch interrupted half-way
                handle.seek(state["rows"][layer] * row_bytes)
                handle.write(rows.astype(np.float16).tobytes())
            state["rows"][layer] += int(rows.shape[0])
        state["windows_done"] = stop
        atomic.write_json(progress_file, state, indent=None)
        rate = (stop - first_done) * context_size / max(1e-9, time.perf_counter() - started)
        log(f"cache: {stop}/{windows.shape[0]} windows ({rate:.0f} tokens/s)")
    for layer, folder in enumerate(folders):
        atomic.replace(folder / "acts.partial", folder / "acts.bin")
        atomic.write_json(folder / "meta.json", {"spec": specs[layer].__dict__, "n_rows": state["rows"][layer],
                                                "excluded_positions": [0], "sink_rows_dropped": True})
    progress_file.unlink(missing_ok=True)
    return [ActivationCache(folder) for folder in folders]


# --- stage 2: train layer after layer ---------------------------------------------------------------------------
@dataclass
class TrainSettings:
    width: int = 768
    l1: float = 1.0  # the architecture's sparsity coefficient: L1 (ReLU transcoder) or L0 (JumpReLU)
    steps_tokens: int = 102_400
    batch_size: int = 1024
    lr: float = 3e-3
    seed: int = 0
    architecture: str = "transcoder"
    skip: bool = False


class _ScaledBuffer(ShuffledBuffer):
    """The shuffled buffer with the input half and the output half of each row scaled separately."""

    def __init__(self, cache: ActivationCache, batch_size: int, scales: torch.Tensor, seed: int):
        super().__init__(cache, batch_size, buffer_rows=65536, block_rows=1024, seed=seed)
        self.scales = scales

    def batches(self):
        for batch in super().batches():
            yield batch * self.scales


def pair_scales(cache: ActivationCache, sample_rows: int = 16384) -> tuple[float, float]:
    """s_in, s_out with E||s x_in||^2 = d and E||s y||^2 = d over a sample of the cache."""
    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(cache.n_rows, size=min(sample_rows, cache.n_rows), replace=False))
    x = torch.from_numpy(np.asarray(cache.array[rows], dtype=np.float32))
    d = x.shape[1] // 2
    return tuple(math.sqrt(d / float(part.pow(2).sum(-1).mean().clamp_min(1e-12)))  # type: ignore[return-value]
                 for part in (x[:, :d], x[:, d:]))


@torch.no_grad()
def unscale(tc: Transcoder, s_in: float, s_out: float) -> None:
    """Fold the training scales back: trained on (s_in x, s_out y), the transcoder then maps raw x to raw y (W_dec
    keeps its unit rows; the features, and a JumpReLU's thresholds with them, are divided by s_out; a skip
    connection maps s_in x to s_out y, so it is scaled by s_in / s_out)."""
    tc.W_enc.mul_(s_in / s_out)
    tc.b_enc.div_(s_out)
    tc.b_dec.div_(s_out)
    threshold = getattr(tc, "threshold", None)
    if threshold is not None:
        threshold.div_(s_out)
    W_skip = getattr(tc, "W_skip", None)
    if W_skip is not None:
        W_skip.mul_(s_in / s_out)


def train_layer(lm, cache: ActivationCache, layer: int, settings: TrainSettings) -> tuple[Transcoder, dict]:
    """One layer's transcoder from its paired cache, mapping raw activations; and its training summary."""
    s_in, s_out = pair_scales(cache)
    tc = new_transcoder(lm, layer, settings.width, seed=settings.seed + layer, architecture=settings.architecture,
                        skip=settings.skip)
    buffer = _ScaledBuffer(cache, settings.batch_size,
                           torch.tensor([s_in] * (cache.d_in // 2) + [s_out] * (cache.d_in // 2)), settings.seed)
    cfg = TrainConfig(total_tokens=settings.steps_tokens, batch_size=settings.batch_size, lr=settings.lr,
                      warmup_steps=20, resample_at=(), log_every=20, seed=settings.seed)
    run = TrainRun(layer_folder_name(layer), tc, sparsity=settings.l1)
    Trainer([run], buffer, cfg).train()
    unscale(tc, s_in, s_out)
    tc.cfg.training_tokens = cfg.total_steps * cfg.batch_size
    last = run.history[-1] if run.history else {}
    return tc, {"scale_in": s_in, "scale_out": s_out, "train_fvu": last.get("fvu"), "train_l0": last.get("l0"),
                "seconds": last.get("seconds")}


def train_all(lm, caches: list[ActivationCache], work: Path, settings: TrainSettings) -> list[Transcoder]:
    """Stage 2 (resumable): a finished layer (work/trained/layer_XX with cfg.json) is loaded, not retrained."""
    transcoders = []
    for layer, cache in enumerate(caches):
        folder = work / "trained" / layer_folder_name(layer)
        if (folder / "summary.json").is_file():
            transcoders.append(load_sae(folder))
            continue
        tc, summary = train_layer(lm, cache, layer, settings)
        save_sae(tc, folder, dtype="float32")
        atomic.write_json(folder / "summary.json", summary)
        log(f"train: layer {layer} fvu {summary['train_fvu']:.3f} l0 {summary['train_l0']:.1f} "
            f"({summary['seconds']:.0f} s)")
        transcoders.append(tc)
    return transcoders  # type: ignore[return-value]


# --- stage 3: evaluate ------------------------------------------------------------------------------------------
def evaluate_layer(lm, tc, ids: torch.Tensor) -> dict:
    """FVU, spliced loss recovered (with the cross-entropies behind it), L0 and dead fraction (no activation on
    these tokens) of one layer's transcoder on the windows ids."""
    ev = evaluate_transcoders(lm, [tc], ids=ids, batch_size=ids.shape[0]).pop()
    return {"fvu": ev.fvu, "loss_recovered": ev.loss_recovered, "l0": ev.l0, "dead_fraction": ev.dead_fraction,
            "ce_clean": ev.ce_clean, "ce_transcoder": ev.ce_sae, "ce_zero_ablated": ev.ce_zero,
            "rows": ev.n_tokens, "sink_rows": ev.sink_tokens}


def evaluate_all(lm, transcoders: list, work: Path, ids: torch.Tensor) -> list[dict]:
    """Stage 3 (resumable): work/eval/layer_XX.json per layer."""
    rows = []
    for layer, tc in enumerate(transcoders):
        file = work / "eval" / f"{layer_folder_name(layer)}.json"
        if file.is_file():
            rows.append(json.loads(file.read_text(encoding="utf-8")))
            continue
        row = {"layer": layer, **evaluate_layer(lm, tc, ids)}
        file.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_json(file, row)
        log(f"eval: layer {layer} {row}")
        rows.append(row)
    return rows


def _rounded(tc: Transcoder, dtype: str) -> Transcoder:
    """The transcoder as it reads back after saving in dtype (float32 arithmetic on the rounded weights)."""
    copy = new_transcoder_like(tc)
    with torch.no_grad():
        for name, tensor in tc.state_dict().items():
            getattr(copy, name).copy_(tensor.to(getattr(torch, dtype)).float())
    return copy


def new_transcoder_like(tc: Transcoder) -> Transcoder:
    return type(tc)(SAEConfig(**{**tc.cfg.__dict__, "extra": dict(tc.cfg.extra)}), seed=None)


def compare_fidelity(lm, cache: ActivationCache, trained: Transcoder, layer: int, settings: TrainSettings,
                     widths: list[int], work: Path, ids: torch.Tensor) -> dict:
    """What the shipped width and precision cost on one layer: the trained transcoder evaluated in float32 and
    rounded to float16, and the same training at other widths (float32). Resumable per entry."""
    folder = work / "compare" / layer_folder_name(layer)
    rows = []
    candidates = [(settings.width, dtype) for dtype in ("float32", "float16")] + [(w, "float32") for w in widths]
    for width, dtype in candidates:
        file = folder / f"width_{width}_{dtype}.json"
        if not file.is_file():
            if width == settings.width:
                tc = trained
            else:
                tc, _ = train_layer(lm, cache, layer, TrainSettings(**{**settings.__dict__, "width": width}))
            row = {"layer": layer, "width": width, "dtype": dtype,
                   "megabytes_per_layer": round(sum(t.numel() for t in tc.state_dict().values())
                                                * (2 if dtype == "float16" else 4) / 1e6, 3),
                   **evaluate_layer(lm, _rounded(tc, dtype), ids)}
            file.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_json(file, row)
            log(f"compare: {row}")
        rows.append(json.loads(file.read_text(encoding="utf-8")))
    return {"layer": layer, "rows": rows}


def rebuild_command(argv: list[str]) -> str:
    """The command that rebuilds the shipped set: this run's arguments without --stages."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--stages":
            skip = True
            continue
        if not arg.startswith("--stages="):
            kept.append(arg)
    return " ".join(["scripts/train_transcoders.sh", *map(shlex.quote, kept)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--work", default="build/transcoders_smollm2")
    parser.add_argument("--out", default=None, help="default assets/transcoders/<model>")
    parser.add_argument("--tokens", type=int, default=81_920, help="train tokens cached")
    parser.add_argument("--heldout-tokens", type=int, default=512)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--l1", "--sparsity", dest="l1", type=float, default=1.0,
                        help="the sparsity coefficient: L1 for the ReLU transcoder, L0 for the JumpReLU one")
    parser.add_argument("--arch", default="transcoder", help="a paired architecture of the registry: transcoder "
                        "(ReLU, L1) or jumprelu_transcoder (JumpReLU, L0)")
    parser.add_argument("--skip", action="store_true", help="train a skip connection x_in W_skip beside the "
                        "features (Gemma Scope 2's affine transcoders)")
    parser.add_argument("--steps-tokens", type=int, default=102_400, help="rows seen per layer while training")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--save-dtype", default="float16", choices=("float16", "float32"))
    parser.add_argument("--stages", default="cache,train,eval,ship",
                        help="add 'compare' to measure width/precision on --compare-layer")
    parser.add_argument("--compare-layer", type=int, default=15)
    parser.add_argument("--compare-widths", default="384,1536")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layout", default="saelens", choices=("saelens", "gemma_scope_2"),
                        help="the shipped folders: SAELens's layer_XX/ or Gemma Scope 2's transcoder_all/layer_L_...")
    parser.add_argument("--hf-model-id", default="", help="the model's Hugging Face id written in Gemma Scope 2 "
                        "config.json files (default: the registry's)")
    parser.add_argument("--bos", default="auto", choices=("auto", "on", "off"),
                        help="start every window with the BOS token (auto: where the tokenizer adds it, Gemma)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from interpscope.models import load_model

    lm = load_model(args.model, device="cpu")
    work = Path(args.work)
    stages = set(args.stages.split(","))
    from interpscope.inputs import tokenizer_adds_bos

    bos = tokenizer_adds_bos(lm.tokenizer) if args.bos == "auto" else args.bos == "on"
    caches = cache_all_layers(lm, work, args.tokens, context_size=args.context, bos=bos)
    log(f"cache complete: {[c.n_rows for c in caches]} rows")
    if not stages & {"train", "eval", "ship"}:
        return 0
    settings = TrainSettings(args.width, args.l1, args.steps_tokens, args.batch_size, args.lr,
                             architecture=args.arch, skip=args.skip)
    transcoders = train_all(lm, caches, work, settings)
    if not stages & {"eval", "ship"}:
        return 0
    heldout = corpus_windows(lm, args.context, args.heldout_tokens, "test", bos)
    layers = evaluate_all(lm, transcoders, work, heldout)
    argv = sys.argv[1:] if argv is None else argv
    fidelity = None
    if "compare" in stages:
        widths = [int(w) for w in args.compare_widths.split(",") if w]
        fidelity = compare_fidelity(lm, caches[args.compare_layer], transcoders[args.compare_layer],
                                    args.compare_layer, settings, widths, work, heldout)
        fidelity["command"] = rebuild_command(argv) + " --stages compare,ship"
    if "ship" not in stages:
        return 0
    out = Path(args.out or REPO_ROOT / "assets" / "transcoders" / args.model)
    label = transcoders[0].label + (" with a skip connection" if args.skip else "")
    manifest = {"architecture": label, "l1" if args.arch == "transcoder" else "l0_coefficient": args.l1,
                "train_tokens": int(args.tokens),
                "train_rows_per_layer": [c.n_rows for c in caches], "rows_seen_per_layer": args.steps_tokens,
                "heldout_tokens": int(heldout.numel()), "heldout_split": "test", "context_size": args.context,
                "bos_first": bos,
                "command": rebuild_command(argv), "layers": layers}
    if fidelity is not None:
        manifest["fidelity"] = fidelity
    from interpscope.models.registry import BUNDLED

    entry = BUNDLED.get(lm.name)
    hf_id = args.hf_model_id or (entry.hub_ids[0] if entry is not None and entry.hub_ids else lm.name)
    mean_l0 = sum(float(row["l0"]) for row in layers) / len(layers)
    tag = "small" if mean_l0 < 20 else "medium" if mean_l0 < 80 else "big"  # Gemma Scope 2's words, our measure
    if args.layout == "gemma_scope_2":
        manifest["mean_l0"] = mean_l0
    save_transcoder_set(TranscoderSet(lm.name, transcoders), out, dtype=args.save_dtype, manifest=manifest,
                        layout=args.layout, hf_model_id=hf_id, l0_tag=tag)
    log(f"shipped {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InterpscopeError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
