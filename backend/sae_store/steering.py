"""Steering and ablation with one SAE feature, side by side with the clean run.

- add: x <- x + strength * W_dec[i] at the hook, at every position from 1 on (also while generating);
- ablate: x <- x - f_i(x) W_dec[i], i.e. the feature's own contribution to the SAE's reconstruction is removed
  and the SAE's error term is kept.
Position 0 (the attention sink) is never edited. Reported: the next-token distribution after the prompt (top
tokens, KL(clean || edited)), the change of log p(actual next token) at every position (the per-token ablation
effect), and a greedy continuation of each run.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from backend.capture import hooks, model_lock
from backend.config import InterpscopeError
from backend.sae import SparseAutoencoder, check_compatible

MODES = ("add", "ablate")
MAX_NEW_TOKENS = 32


@dataclass
class SteeringResult:
    """Clean vs edited run of one prompt."""

    feature: int
    mode: str
    strength: float
    tokens: list[str]
    clean_top: list[dict]
    edited_top: list[dict]
    kl: float
    logprob_change: np.ndarray
    clean_continuation: str
    edited_continuation: str
    feature_on_prompt: np.ndarray


def _editor(sae: SparseAutoencoder, feature: int, mode: str, strength: float):
    direction = sae.W_dec[feature].detach()

    def edit(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        rest = out[:, 1:]
        d = direction.to(device=tensor.device, dtype=tensor.dtype)
        if mode == "add":
            out[:, 1:] = rest + strength * d
        else:
            f = sae.encode(rest.to(sae.W_enc.dtype))[..., feature].to(tensor.dtype)
            out[:, 1:] = rest - f[..., None] * d
        return out
    return edit


def _top(probs: torch.Tensor, tokenizer, k: int = 10) -> list[dict]:
    values, ids = probs.topk(k)
    return [{"token": tokenizer.decode([int(i)]), "id": int(i), "prob": float(v)} for v, i in zip(values, ids)]


@torch.no_grad()
def _greedy(loaded, ids: torch.Tensor, n_new: int) -> list[int]:
    sequence = ids
    for _ in range(n_new):
        logits = loaded.model(input_ids=sequence, use_cache=False).logits[0, -1]
        sequence = torch.cat([sequence, logits.argmax().view(1, 1)], dim=1)
    return sequence[0, ids.shape[1]:].tolist()


@torch.no_grad()
def steer(loaded, sae: SparseAutoencoder, text: str, feature: int, mode: str = "add", strength: float = 10.0,
          n_new: int = 10) -> SteeringResult:
    """Run the prompt clean and with the feature added/removed; compare next-token distributions and continuations."""
    if mode not in MODES:
        raise InterpscopeError(f"Mode must be one of {', '.join(MODES)} (got {mode!r}).")
    if not 0 <= feature < sae.cfg.d_sae:
        raise InterpscopeError(f"Feature id must be 0..{sae.cfg.d_sae - 1} (got {feature}).")
    if not 0 <= n_new <= MAX_NEW_TOKENS:
        raise InterpscopeError(f"Generate between 0 and {MAX_NEW_TOKENS} tokens (asked for {n_new}).")
    hook = check_compatible(sae, loaded.adapter, None, loaded.name)
    ids = loaded.encode(text, max_tokens=loaded.token_cap - n_new)
    captured: dict[str, torch.Tensor] = {}

    def record(tensor: torch.Tensor) -> None:
        captured["x"] = tensor.detach()

    edit = _editor(sae, feature, mode, float(strength))
    with model_lock(loaded):
        with hooks(loaded.adapter, {hook: record}):
            clean_logits = loaded.model(input_ids=ids, use_cache=False).logits[0].double()
        with hooks(loaded.adapter, {hook: edit}):
            edited_logits = loaded.model(input_ids=ids, use_cache=False).logits[0].double()
        clean_new = _greedy(loaded, ids, n_new)
        with hooks(loaded.adapter, {hook: edit}):
            edited_new = _greedy(loaded, ids, n_new)
    f_prompt = sae.encode(captured["x"][0].to(sae.W_enc.dtype))[:, feature].float().cpu().numpy()
    clean_logp, edited_logp = F.log_softmax(clean_logits, -1), F.log_softmax(edited_logits, -1)
    kl = float((clean_logp[-1].exp() * (clean_logp[-1] - edited_logp[-1])).sum())
    following = ids[0, 1:].to(clean_logp.device)
    rows = torch.arange(following.numel(), device=clean_logp.device)
    change = (edited_logp[rows, following] - clean_logp[rows, following]).cpu().numpy()
    tokenizer = loaded.tokenizer
    return SteeringResult(feature=feature, mode=mode, strength=float(strength) if mode == "add" else 0.0,
                          tokens=loaded.token_strings(ids[0]), clean_top=_top(clean_logp[-1].exp(), tokenizer),
                          edited_top=_top(edited_logp[-1].exp(), tokenizer), kl=max(kl, 0.0),
                          logprob_change=change, clean_continuation=tokenizer.decode(clean_new),
                          edited_continuation=tokenizer.decode(edited_new), feature_on_prompt=f_prompt)
