"""Steering and ablation with one SAE feature, side by side with the clean run.

- add: x <- x + strength * W_dec[i] at the hook, at every position the prompt view does not exclude (also while
  generating);
- ablate: x <- x - f_i(x) W_dec[i], i.e. the feature's own contribution to the SAE's reconstruction is removed
  and the SAE's error term is kept.
The prompt's positions come from interpscope.relevance.api.input_ids_for, as in the prompt view, and the positions
left unedited are exactly the ones the prompt view excludes (`excluded_at_hook`: a prepended BOS and the rows the one
sink helper, interpscope.sinks.measure, measures on the SAE's hook activation), never a position by rule: by default
position 0 is the prepended BOS and the first word is edited like any other; with prepend_bos=False the first word is
edited too unless it is measured to be a sink. Reported: the next-token distribution after the prompt (top tokens,
KL(clean || edited)), the change of log p(actual next token) at every position (the per-token ablation effect), and a
greedy continuation of each run. Clean and edited runs are the two rows of one batch, generated with the KV cache
(interpscope.generation): the edit acts on the edited row only, at every prompt position not excluded and every newly
generated position.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from interpscope.capture import hooks, model_lock
from interpscope.config import InterpscopeError
from interpscope.generation import RowEdit, greedy_generate
from interpscope.models.loaded import decode_text
from interpscope.relevance.api import input_ids_for
from interpscope.sae.arch import SparseAutoencoder
from interpscope.sae.folder import check_compatible
from interpscope.sae.placement import on_device
from interpscope.sae.store.documents import SteeringDocument
from interpscope.sae.store.prompt import excluded_at_hook
from interpscope.token_text import token_text

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

MODES = ("add", "ablate")
MAX_NEW_TOKENS = 32
# The default steering strength, as a multiple of the feature's max activation on its store's corpus. The old 4x
# (28.1 for feature 2407 of blocks.15) broke the continuation ("marriage of of state. marriage of of state."), 2x let
# digits in, 1x read "The marriage of the two of them is a marriage" (bench/steering_strength.py; README, "Steering
# strength").
STRENGTH_MULTIPLE = 1.0


def default_strength(max_activation: float) -> float:
    """The default strength of an `add` edit: STRENGTH_MULTIPLE x the feature's max activation (1 if it never
    fired): strong enough to move the next token, weak enough that the continuation stays text."""
    return STRENGTH_MULTIPLE * (float(max_activation) or 1.0)


@dataclass
class SteeringResult(SteeringDocument):
    """Clean vs edited run of one prompt."""

    feature: int
    mode: str
    strength: float | None  # None in ablate mode: no strength applies
    tokens: list[str]
    clean_top: list[dict]
    edited_top: list[dict]
    kl: float
    logprob_change: np.ndarray
    clean_continuation: str
    edited_continuation: str
    feature_on_prompt: np.ndarray


def _editor(sae: SparseAutoencoder, feature: int, mode: str, strength: float):
    """The edit on activations x [n, t, d] at the positions interpscope.generation.RowEdit picks."""
    direction = sae.W_dec[feature].detach()

    def edit(rest: torch.Tensor) -> torch.Tensor:
        d = direction.to(device=rest.device, dtype=rest.dtype)
        if mode == "add":
            return rest + strength * d
        f = sae.encode(rest.to(sae.W_enc.dtype))[..., feature].to(rest.dtype)
        return rest - f[..., None] * d
    return edit


def _top(probs: torch.Tensor, tokenizer, k: int = 10) -> list[dict]:
    values, ids = probs.topk(k)
    return [{"token": token_text(tokenizer, int(i)), "id": int(i), "prob": float(v)}
            for v, i in zip(values, ids, strict=True)]


@torch.no_grad()
def steer(lm: LoadedModel, sae: SparseAutoencoder, text: str, feature: int, mode: str = "add", strength: float = 10.0,
          n_new: int = 10, progress: Callable[[int, int], None] | None = None,
          prepend_bos: bool | None = None) -> SteeringResult:
    """Run the prompt clean and with the feature added/removed; compare next-token distributions and continuations
    (serves the SAE feature page's Steering view and `interpscope sae steer`); progress(done, n_new) per token."""
    if mode not in MODES:
        raise InterpscopeError(f"Mode must be one of {', '.join(MODES)} (got {mode!r}).")
    if not 0 <= feature < sae.cfg.d_sae:
        raise InterpscopeError(f"Feature id must be 0..{sae.cfg.d_sae - 1} (got {feature}).")
    if not 0 <= n_new <= MAX_NEW_TOKENS:
        raise InterpscopeError(f"Generate between 0 and {MAX_NEW_TOKENS} tokens (asked for {n_new}).")
    if not np.isfinite(float(strength)):
        raise InterpscopeError(f"The steering strength must be a finite number (got {strength}).")
    hook = check_compatible(sae, lm.adapter, None, lm.name)
    sae = on_device(sae, lm.device)
    ids, prepended = input_ids_for(lm, text, prepend_bos, max_tokens=lm.token_cap - n_new)
    captured: dict[str, torch.Tensor] = {}

    def record(tensor: torch.Tensor) -> None:
        captured.setdefault("x", tensor[:1].detach())

    with model_lock(lm):
        _, report = excluded_at_hook(lm, sae, hook, ids, prepended)  # the prompt view's excluded positions
        edit = RowEdit(hook, _editor(sae, feature, mode, float(strength)), rows=[1], start=0, skip=report.positions)
        with hooks(lm.adapter, {hook: record}, role="read"):
            run = greedy_generate(lm.adapter, ids.repeat(2, 1), n_new, [edit], prompt_logits=True,
                                  prefill_rows_apart=True, progress=progress)
    if run.prompt_logits is None:  # asked for above
        raise RuntimeError("the generation kept no prompt logits")
    clean_logits, edited_logits = run.prompt_logits[0].double(), run.prompt_logits[1].double()
    clean_new, edited_new = run.tokens[0].tolist(), run.tokens[1].tolist()
    f_prompt = sae.encode(captured["x"][0].to(sae.W_enc.dtype))[:, feature].float().cpu().numpy()
    clean_logp, edited_logp = F.log_softmax(clean_logits, -1), F.log_softmax(edited_logits, -1)
    kl = float((clean_logp[-1].exp() * (clean_logp[-1] - edited_logp[-1])).sum())
    following = ids[0, 1:].to(clean_logp.device)
    rows = torch.arange(following.numel(), device=clean_logp.device)
    change = (edited_logp[rows, following] - clean_logp[rows, following]).cpu().numpy()
    tokenizer = lm.tokenizer
    return SteeringResult(feature=feature, mode=mode, strength=float(strength) if mode == "add" else None,
                          tokens=lm.token_strings(ids[0]), clean_top=_top(clean_logp[-1].exp(), tokenizer),
                          edited_top=_top(edited_logp[-1].exp(), tokenizer), kl=max(kl, 0.0),
                          logprob_change=change, clean_continuation=decode_text(tokenizer, clean_new),
                          edited_continuation=decode_text(tokenizer, edited_new), feature_on_prompt=f_prompt)
