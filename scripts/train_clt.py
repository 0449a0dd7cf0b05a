"""Train a cross-layer transcoder (CLT; interpscope.sae.clt) for a model and ship it in circuit-tracer's CLT layout.

    scripts/train_clt.sh --model smollm2-135m --width 40          (the shipped one: the command is in its manifest)

Layer l's features read block l's MLP input (`blocks.l.mlp.hook_in`) and write to the MLP output
(`blocks.t.hook_mlp_out`) of block l and every later block t. ReLU features; the loss is the squared error summed
over every block's output plus an L1 penalty on each feature's activation times the norm of everything it writes
(its decoder rows to all later blocks), as the CLTs of "Circuit Tracing" (Ameisen et al. 2025) are trained.

Stages, each resumable in --work (build/clt_<model>):
1. cache: every block's (input, output) pair for positions 1.. of corpus windows (train split), one fixed-size slot
   per window in one float16 file [windows, T - 1, L, 2, d] with a sink mask beside it (rows that are an attention
   sink at any block are never trained on); the windows are cut into shards run through interpscope.scale's
   map_shards, so `--workers N` (or `--address`) caches on Ray workers and a rerun fills only the missing shards.
2. train: Adam on random rows, every block's input and output scaled to E||x||^2 = d (folded back before saving);
   a checkpoint every --save-every steps (a rerun continues from it).
3. ship: the CLT in circuit-tracer's layout (W_enc_i / W_dec_i safetensors + config.yaml) in float16 under --out,
   with manifest.json: the command, the data, the training curve's end, and per block the FVU of the CLT's
   prediction on held-out windows (test split).
Everything runs `nice`d by the .sh wrapper with one torch thread (two on a quiet machine).
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

from interpscope import atomic
from interpscope.config import REPO_ROOT, InterpscopeError

HOOK_IN = "blocks.{layer}.mlp.hook_in"
HOOK_OUT = "blocks.{layer}.hook_mlp_out"


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, flush=True)


# --- stage 1: cache ---------------------------------------------------------------------------------------------
class CLTCacheJob:
    """One shard of windows: every block's (input, output) at positions 1.. and the rows that are sinks anywhere."""

    def run(self, lm, shard) -> tuple[np.ndarray, np.ndarray]:
        import inspect

        from interpscope.capture import hooks, model_lock
        from interpscope.sinks import sink_rows

        n = lm.adapter.n_layers
        names = [HOOK_IN.format(layer=i) for i in range(n)] + [HOOK_OUT.format(layer=i) for i in range(n)]
        store: dict[str, torch.Tensor] = {}

        def keeper(name: str):
            def keep(tensor: torch.Tensor) -> None:
                store[name] = tensor.detach()
            return keep

        last_only = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(type(lm.model).forward).parameters \
            else {}
        windows = shard.payload
        with model_lock(lm), torch.no_grad(), hooks(lm.adapter, {name: keeper(name) for name in names}):
            lm.model(input_ids=windows.to(lm.device), use_cache=False, **last_only)
        B, T = windows.shape
        d = lm.adapter.d_model
        rows = torch.empty(B, T - 1, n, 2, d, dtype=torch.float16)
        sinks = torch.zeros(B, T - 1, dtype=torch.bool)
        for layer in range(n):
            x = store[HOOK_IN.format(layer=layer)][:, 1:].float().cpu()
            y = store[HOOK_OUT.format(layer=layer)][:, 1:].float().cpu()
            rows[:, :, layer, 0], rows[:, :, layer, 1] = x.half(), y.half()
            sinks |= (sink_rows(x.reshape(-1, d)) | sink_rows(y.reshape(-1, d))).view(B, T - 1)
        return rows.numpy(), sinks.numpy()


def cache(lm, work: Path, n_tokens: int, context: int, batch: int, scale) -> tuple[np.memmap, np.ndarray]:
    from interpscope.corpus import token_chunks
    from interpscope.scale import Shard, map_shards

    windows = token_chunks(lm.tokenizer, context, n_tokens, split="train")
    n, d = lm.adapter.n_layers, lm.adapter.d_model
    shape = (windows.shape[0], context - 1, n, 2, d)
    folder = work / "cache"
    folder.mkdir(parents=True, exist_ok=True)
    meta_file, data_file, mask_file = folder / "meta.json", folder / "rows.f16", folder / "sinks.npy"
    meta = {"shape": list(shape), "tokens": n_tokens, "context": context, "batch": batch, "done": []}
    if meta_file.is_file():
        saved = json.loads(meta_file.read_text())
        if saved["shape"] == list(shape) and saved["batch"] == batch:
            meta = saved
    data = np.memmap(data_file, dtype=np.float16, mode="r+" if data_file.exists() else "w+", shape=shape)
    mask = np.load(mask_file) if mask_file.exists() else np.zeros(shape[:2], dtype=bool)
    done = {tuple(r) for r in meta["done"]}
    shards = [Shard(i, first, min(first + batch, shape[0]), windows[first:first + batch])
              for i, first in enumerate(range(0, shape[0], batch)) if (first, min(first + batch, shape[0])) not in done]
    started = time.perf_counter()

    def write(shard, result) -> None:
        rows, sinks = result
        data[shard.first:shard.stop] = rows
        mask[shard.first:shard.stop] = sinks
        data.flush()
        np.save(mask_file, mask)
        meta["done"].append([shard.first, shard.stop])
        atomic.write_json(meta_file, meta)
        rate = len(meta["done"]) * batch * context / max(1e-9, time.perf_counter() - started)
        log(f"cache: {len(meta['done'])} of {math.ceil(shape[0] / batch)} shards ({rate:.0f} tokens/s this run)")

    if shards:
        map_shards(CLTCacheJob(), shards, write, lm=lm, scale=scale)
    return data, mask


# --- stage 2: train ---------------------------------------------------------------------------------------------
def scales(data: np.memmap, mask: np.ndarray, sample: int = 4096, seed: int = 0) -> torch.Tensor:
    """[L, 2] factors with E||s x||^2 = d for every block's input and output (a sample of the non-sink rows)."""
    keep = np.flatnonzero(~mask.reshape(-1))
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(keep, size=min(sample, keep.size), replace=False))
    rows = torch.from_numpy(np.asarray(data.reshape(-1, *data.shape[2:])[picked], dtype=np.float32))  # [S, L, 2, d]
    d = rows.shape[-1]
    return torch.sqrt(d / rows.pow(2).sum(-1).mean(0).clamp_min(1e-12))


def batches(data: np.memmap, mask: np.ndarray, batch: int, seed: int, s: torch.Tensor):
    """Endless random batches [B, L, 2, d] of non-sink rows, scaled."""
    flat = data.reshape(-1, *data.shape[2:])
    keep = np.flatnonzero(~mask.reshape(-1))
    rng = np.random.default_rng(seed)
    while True:
        picked = np.sort(rng.choice(keep, size=min(batch, keep.size), replace=False))
        yield torch.from_numpy(np.asarray(flat[picked], dtype=np.float32)) * s[None, :, :, None]


def clt_loss(clt, rows: torch.Tensor, l1: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Squared error summed over every block's output (averaged over rows) + l1 * sum_l,f f_lf * ||W_dec[l][f]||."""
    x, y = rows[:, :, 0], rows[:, :, 1]  # [B, L, d]
    L = clt.n_layers
    feats = [torch.relu(x[:, i] @ clt.W_enc[i] + clt.b_enc[i]) for i in range(L)]
    recon = torch.zeros((), dtype=rows.dtype)
    explained = torch.zeros((), dtype=rows.dtype)
    for t in range(L):
        stacked = torch.cat(feats[:t + 1], dim=-1)  # [B, (t + 1) k]
        W = torch.cat([clt.W_dec[i][:, t - i] for i in range(t + 1)], dim=0)  # [(t + 1) k, d]
        y_hat = stacked @ W + clt.b_dec[t]
        recon = recon + (y[:, t] - y_hat).pow(2).sum(-1).mean()
        explained = explained + (y[:, t] - y[:, t].mean(0)).pow(2).sum(-1).mean()
    sparsity = sum((f * clt.W_dec[i].norm(dim=-1).sum(-1)).sum(-1).mean() for i, f in enumerate(feats))
    l0 = sum(float((f > 0).float().sum(-1).mean()) for f in feats) / L
    return recon + l1 * sparsity, {"fvu": float(recon / explained.clamp_min(1e-12)), "l0": l0}


def train(lm, data, mask, work: Path, width: int, steps: int, batch: int, lr: float, l1: float, save_every: int):
    from interpscope.sae.clt import CrossLayerTranscoder

    n, d = lm.adapter.n_layers, lm.adapter.d_model
    s = scales(data, mask)
    checkpoint = work / "train" / "checkpoint.pt"
    clt = CrossLayerTranscoder(n, d, width, jumprelu=False, model_name=lm.name)
    optimiser = torch.optim.Adam(clt.parameters(), lr=lr)
    step, history = 0, []
    if checkpoint.is_file():
        saved = torch.load(checkpoint, weights_only=True)
        clt.load_state_dict(saved["clt"])
        optimiser.load_state_dict(saved["optimiser"])
        step, history = int(saved["step"]), json.loads(saved["history"])
        log(f"train: resumed at step {step}")
    else:
        generator = torch.Generator().manual_seed(0)
        first = next(batches(data, mask, 2048, 1, s))
        with torch.no_grad():
            for i in range(n):
                W = torch.randn(d, width, generator=generator) / math.sqrt(d)
                clt.W_enc[i].copy_(W)
                pre = first[:, i, 0] @ W
                clt.b_enc[i].copy_(-torch.quantile(pre, 0.97, dim=0))  # each feature starts firing on ~3% of rows
                clt.W_dec[i].copy_(torch.randn(clt.W_dec[i].shape, generator=generator) * 0.1 / math.sqrt(width))
                clt.b_dec[i].copy_(first[:, i, 1].mean(0))
    stream = batches(data, mask, batch, 100 + step, s)
    started = time.perf_counter()
    while step < steps:
        loss, figures = clt_loss(clt, next(stream), l1)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        step += 1
        if step % 10 == 0 or step == steps:
            history.append({"step": step, "loss": float(loss), **figures,
                            "seconds": time.perf_counter() - started})
            log(f"train: step {step} loss {float(loss):.1f} fvu {figures['fvu']:.3f} l0 {figures['l0']:.1f}")
        if step % save_every == 0 or step == steps:
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"clt": clt.state_dict(), "optimiser": optimiser.state_dict(), "step": step,
                        "history": json.dumps(history)}, checkpoint)
    with torch.no_grad():  # fold the scales: trained on (s_in x, s_out y), it then maps raw x to raw y
        for i in range(n):
            clt.W_enc[i].mul_(s[i, 0])
        for i in range(n):
            for j in range(n - i):
                clt.W_dec[i][:, j].div_(s[i + j, 1])
        for t in range(n):
            clt.b_dec[t].div_(s[t, 1])
    return clt, history


# --- stage 3: evaluate and ship -------------------------------------------------------------------------------
@torch.no_grad()
def heldout_fvu(lm, clt, n_tokens: int, context: int) -> list[float]:
    """Per block, the FVU of the CLT's prediction of its MLP output from the clean inputs of blocks 0..t (sink rows
    left out), on held-out windows."""
    from interpscope.corpus import token_chunks
    from interpscope.scale import Shard

    windows = token_chunks(lm.tokenizer, context, n_tokens, split="test")
    rows, sinks = CLTCacheJob().run(lm, Shard(0, 0, windows.shape[0], windows))
    keep = ~torch.from_numpy(sinks).reshape(-1)
    x = torch.from_numpy(rows.astype(np.float32)).reshape(-1, clt.n_layers, 2, clt.d_in)[keep]
    feats = [clt.encode_layer(x[:, i, 0], i) for i in range(clt.n_layers)]
    out = []
    for t in range(clt.n_layers):
        y = x[:, t, 1]
        y_hat = clt.decode_layer(feats, t)
        out.append(float((y - y_hat).pow(2).sum() / (y - y.mean(0)).pow(2).sum()))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--work", default=None)
    parser.add_argument("--out", default=None, help="default assets/clt/<model>")
    parser.add_argument("--tokens", type=int, default=32_768)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--cache-batch", type=int, default=8, help="windows per forward pass (and shard)")
    parser.add_argument("--width", type=int, default=40, help="features per layer")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--l1", type=float, default=3e-3)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--heldout-tokens", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=1, help="Ray workers for the cache (1: this process)")
    parser.add_argument("--address", default=None, help="a Ray cluster for the cache")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from interpscope.models import load_model
    from interpscope.sae.clt import save_clt
    from interpscope.scale import Scale

    lm = load_model(args.model, device="cpu")
    work = Path(args.work or f"build/clt_{lm.name}")
    data, mask = cache(lm, work, args.tokens, args.context, args.cache_batch,
                       Scale(workers=args.workers, address=args.address))
    log(f"cache complete: {int((~mask).sum())} rows ({int(mask.sum())} sink rows left out)")
    clt, history = train(lm, data, mask, work, args.width, args.steps, args.batch_size, args.lr, args.l1,
                         args.save_every)
    fvu = heldout_fvu(lm, clt, args.heldout_tokens, args.context)
    out = Path(args.out or REPO_ROOT / "assets" / "clt" / lm.name)
    clt_half = clt.half()
    save_clt(clt_half, out)
    argv = sys.argv[1:] if argv is None else argv
    manifest = {"model": lm.name, "kind": "cross-layer transcoder (ReLU, L1 x decoder norm)", "width": args.width,
                "n_layers": clt.n_layers, "dtype": "float16", "train_tokens": args.tokens, "steps": args.steps,
                "batch_size": args.batch_size, "lr": args.lr, "l1": args.l1, "heldout_tokens": args.heldout_tokens,
                "heldout_fvu_per_layer": fvu, "train_end": history[-1] if history else {},
                "command": " ".join(["scripts/train_clt.sh", *map(shlex.quote, argv)])}
    atomic.write_json(out / "manifest.json", manifest, indent=1)
    log(f"shipped {out}: held-out FVU per layer {[round(v, 3) for v in fvu]}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InterpscopeError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
