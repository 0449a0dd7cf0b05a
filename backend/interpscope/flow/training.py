"""Fitting a tuned lens (used by scripts/train_tuned_lens.py): collect residuals on the bundled corpus, train every
layer's translator against the final layer's distribution, measure held-out KL of both lenses.

What it costs on a CPU: the KL needs the lens's logits over the vocabulary at every layer for every token of a
batch. Training therefore reads the KL over a fixed subset of the vocabulary (the `vocab_subset` tokens carrying the
most final-layer probability on the training text, renormalised on both sides); the held-out KL that the manifest
reports, and that the flow page shows, is always over the full vocabulary. Position 0 of every window and every
measured sink row (interpscope.sinks.excluded_mask) are left out of both fit and evaluation, and so are rows whose
residual overflows float16 somewhere (the cache's type; Gemma 3 grows a few massive rows after its middle block).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from interpscope.capture import capture
from interpscope.corpus import token_chunks
from interpscope.flow.tuned import kl_to_final, lens_logits, step_points
from interpscope.sinks import excluded_mask


@dataclass
class Residuals:
    """Residuals X [n_steps, N, d] (float16) at every lens step for N kept tokens (last step = final layer)."""

    X: torch.Tensor


def collect(lm, n_tokens: int, split: str, seq_len: int = 128, batch: int = 8,
            report: Callable[[int, int], None] | None = None) -> Residuals:
    """Residuals of about n_tokens corpus tokens of `split` (sink rows and window starts dropped)."""
    adapter = lm.adapter
    chunks = token_chunks(lm.tokenizer, seq_len, n_tokens + n_tokens // seq_len + seq_len, split=split)
    names = step_points(adapter)
    middle = f"blocks.{adapter.n_layers // 2}.hook_resid_pre"
    kept: list[torch.Tensor] = []
    total = 0
    for start in range(0, chunks.shape[0], batch):
        ids = chunks[start:start + batch].to(lm.device)
        acts = capture(adapter, ids, [*names, middle] if middle not in names else names).activations
        stacked = torch.stack([acts[name].reshape(ids.shape[0], seq_len, -1) for name in names])  # [S, B, T, d]
        mask = ~excluded_mask(acts[middle].reshape(ids.shape[0], seq_len, -1), window_start=True)
        kept.append(stacked[:, mask].half())
        total += int(mask.sum())
        if report is not None:
            report(min(total, n_tokens), n_tokens)
        if total >= n_tokens:
            break
    return Residuals(X=torch.cat(kept, dim=1)[:, :n_tokens])


def vocab_subset(adapter, final: torch.Tensor, size: int, batch: int = 256) -> torch.Tensor:
    """The `size` token ids carrying the most final-layer probability over the residuals `final` [N, d]."""
    mass = torch.zeros(adapter.vocab_size)
    with torch.no_grad():
        for start in range(0, final.shape[0], batch):
            mass += torch.softmax(lens_logits(adapter, final[start:start + batch]), -1).sum(0)
    return mass.topk(min(size, mass.numel())).indices.sort().values


class Translators(torch.nn.Module):
    """Trainable identity + rank-r + bias translators for n lens steps (U starts at zero: the logit lens)."""

    def __init__(self, n: int, d: int, rank: int, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.U = torch.nn.Parameter(torch.zeros(n, d, rank))
        self.V = torch.nn.Parameter(torch.randn(n, d, rank, generator=generator) / d ** 0.5)
        self.bias = torch.nn.Parameter(torch.zeros(n, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [n, B, d] -> translated [n, B, d]."""
        return x + torch.einsum("nbr,ndr->nbd", torch.einsum("nbd,ndr->nbr", x, self.V), self.U) + self.bias[:, None]


def subset_logits(adapter, x: torch.Tensor, W_sub: torch.Tensor) -> torch.Tensor:
    """Logits over the vocabulary subset (columns W_sub [d, K] of the unembedding) of residuals x [..., d]."""
    norm = adapter.folded_norm()
    x = x.float()
    normed = norm.gamma.float() * norm.centre(x) / torch.sqrt(norm.centre(x).pow(2).mean(-1, keepdim=True) + norm.eps)
    if norm.beta is not None:
        normed = normed + norm.beta.float()
    return normed @ W_sub


def train_step(adapter, model: Translators, X: torch.Tensor, index: torch.Tensor, subset: torch.Tensor,
               W_sub: torch.Tensor, b_sub: torch.Tensor | None) -> torch.Tensor:
    """The subset KL(final || tuned), summed over lens steps and averaged over the batch `index`."""
    batch = X[:, index].float()
    with torch.no_grad():
        target = subset_logits(adapter, batch[-1], W_sub)
        if b_sub is not None:
            target = target + b_sub
        log_p = torch.log_softmax(target, -1)
    loss = torch.zeros(())
    translated = model(batch[:-1])
    for step in range(translated.shape[0]):
        logits = subset_logits(adapter, translated[step], W_sub)
        if b_sub is not None:
            logits = logits + b_sub
        log_q = torch.log_softmax(logits, -1)
        loss = loss + (log_p.exp() * (log_p - log_q)).sum(-1).mean()
    return loss


def heldout_kl(adapter, X: torch.Tensor, model: Translators | None, batch: int = 128) -> list[float]:
    """Mean full-vocabulary KL(final || lens) per lens step on held-out residuals X (logit lens when model is
    None; the last step is 0 by construction)."""
    n_steps, n_tokens = X.shape[0], X.shape[1]
    sums = torch.zeros(n_steps)
    with torch.no_grad():
        for start in range(0, n_tokens, batch):
            chunk = X[:, start:start + batch].float()
            final = lens_logits(adapter, chunk[-1])
            shown = model(chunk[:-1]) if model is not None else chunk[:-1]
            for step in range(n_steps - 1):
                sums[step] += kl_to_final(final, lens_logits(adapter, shown[step])).sum()
    return [float(v) for v in sums / n_tokens]
