"""Head ablation: what chosen heads do for in-context repetition, against as many random heads.

A head is ablated by replacing its slice of the attention output projection's input (the heads' outputs,
concatenated head by head) with zero or with its mean over every position of the clean run on the same sequences.
The edit is a scoped input hook registered through interpscope.capture (it acts on this run's forward passes only
and is removed on exit). Repetition accuracy: on [start, x_1..x_n, x_1..x_n], how often the model's top prediction
at positions n + 1 .. 2n - 1 is the next token of the second copy (x_2 .. x_n), which only copying from the first
copy can get right; the mean loss on those tokens is given too.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.adapters.base import weight_of
from interpscope.capture import capture, model_lock, scoped

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

Head = tuple[int, int]


def _slices(lm: LoadedModel, layer: int) -> tuple[torch.nn.Module, int]:
    out_proj = lm.adapter.attention_out_proj(layer)
    if out_proj is None:
        raise RuntimeError(f"{lm.family} models expose no attention output projection to ablate heads at")
    width = int(weight_of(out_proj).shape[1]) // lm.adapter.n_heads
    return out_proj, width


def head_means(lm: LoadedModel, tokens: torch.Tensor, heads: list[Head]) -> dict[Head, torch.Tensor]:
    """Each head's mean output (its slice of the out-projection input) over every position of tokens [B, T]."""
    found: dict[Head, torch.Tensor] = {}
    layers = sorted({layer for layer, _ in heads})
    seen: dict[int, torch.Tensor] = {}

    def keeper(layer: int):
        def keep(module, args, kwargs):
            seen[layer] = args[0].detach().reshape(-1, args[0].shape[-1]).float().mean(0)
        return keep

    with torch.no_grad(), scoped([(_slices(lm, layer)[0], keeper(layer)) for layer in layers], role="read",
                                 kind="input"):
        lm.model(input_ids=tokens.to(lm.device), use_cache=False)
    for layer, head in heads:
        width = _slices(lm, layer)[1]
        found[(layer, head)] = seen[layer][head * width:(head + 1) * width]
    return found


@contextmanager
def ablated(lm: LoadedModel, heads: list[Head], means: dict[Head, torch.Tensor] | None = None) -> Iterator[None]:
    """Inside the block, this run's forward passes see `heads` zeroed (or set to `means`)."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def editor(layer: int, chosen: list[int], width: int):
        def edit(module, args, kwargs):
            x = args[0].clone()
            for head in chosen:
                part = slice(head * width, (head + 1) * width)
                x[..., part] = 0.0 if means is None else means[(layer, head)].to(x.dtype).to(x.device)
            return (x, *args[1:]), kwargs
        return edit

    hooks = []
    for layer, chosen in by_layer.items():
        module, width = _slices(lm, layer)
        hooks.append((module, editor(layer, chosen, width)))
    with scoped(hooks, role="edit", kind="input"):
        yield


def repetition(lm: LoadedModel, tokens: torch.Tensor) -> tuple[float, float]:
    """(accuracy, mean loss) of predicting the second copy's tokens x_2..x_n of tokens [B, 1 + 2n]."""
    half = (tokens.shape[1] - 1) // 2
    logits = capture(lm.adapter, tokens.to(lm.device), []).require_logits().float()
    logits = logits.reshape(tokens.shape[0], tokens.shape[1], -1)
    predicting = logits[:, half + 1:2 * half]  # positions n+1 .. 2n-1
    targets = tokens[:, half + 2:].to(predicting.device)
    accuracy = float((predicting.argmax(-1) == targets).float().mean())
    loss = float(torch.nn.functional.cross_entropy(predicting.reshape(-1, predicting.shape[-1]), targets.reshape(-1)))
    return accuracy, loss


def random_heads(n_layers: int, n_heads: int, k: int, avoid: list[Head], rng: np.random.Generator) -> list[Head]:
    """k distinct random heads, none of `avoid`."""
    pool = [(layer, head) for layer in range(n_layers) for head in range(n_heads) if (layer, head) not in avoid]
    picks = rng.choice(len(pool), size=min(k, len(pool)), replace=False)
    return sorted(pool[int(i)] for i in picks)


def induction_ablation(lm: LoadedModel, tokens: torch.Tensor, heads: list[Head], *, mode: str = "zero",
                       n_random: int = 5, seed: int = 0, progress=None) -> dict:
    """Repetition accuracy and loss clean, with `heads` ablated, and with as many random heads ablated (n_random
    draws, the control). A plain dict, part of the head finder's document."""
    rng = np.random.default_rng(seed + 1)
    draws = [random_heads(lm.adapter.n_layers, lm.adapter.n_heads, len(heads), heads, rng) for _ in range(n_random)]
    runs = [heads, *draws]
    out: dict = {"mode": mode, "k": len(heads), "heads": [f"{layer}.{head}" for layer, head in heads]}
    with model_lock(lm), torch.no_grad():
        means = head_means(lm, tokens, sorted({h for run in runs for h in run})) if mode == "mean" else None
        out["clean_accuracy"], out["clean_loss"] = repetition(lm, tokens)
        results = []
        for i, run in enumerate(runs):
            if progress:
                progress((i + 1) / (len(runs) + 1), f"ablation {i + 1} / {len(runs)}")
            with ablated(lm, run, means):
                results.append(repetition(lm, tokens))
    out["ablated_accuracy"], out["ablated_loss"] = results[0]
    out["random"] = [{"heads": [f"{layer}.{head}" for layer, head in run], "accuracy": acc, "loss": loss}
                     for run, (acc, loss) in zip(draws, results[1:], strict=True)]
    accs = np.array([acc for acc, _ in results[1:]])
    out["random_accuracy_mean"] = float(accs.mean()) if accs.size else None
    out["random_accuracy_min"] = float(accs.min()) if accs.size else None
    return out
