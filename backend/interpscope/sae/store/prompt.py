"""Live views on a person's own text: which features fire on which tokens, and which tokens drive one feature.

Prompt view: every feature's activation on every token [T, d_sae]; the heatmap shows the `n_top` features with the
largest activation anywhere in the prompt. Which positions are left out is MEASURED, never assumed, through the one
helper (interpscope.sinks.measure on the SAE's own hook activation: a row more than SINK_FACTOR x the median norm of
the other rows; the SAE never saw such inputs, so they read as no feature), plus a BOS the caller prepended. The text's
positions are made in one place, interpscope.relevance.api.input_ids_for (the model's BOS first where the tokenizer
adds none and the model has attention, unless prepend_bos says otherwise), and every live view (prompt view,
attribution, steering, circuits) takes its positions from it, so a position picked in one view means the same token in
the others.

Attribution: relevance of each input token for one feature's activation f_i(x_p) at position p, through the
relevance engine (AttnLRP / CP-LRP rules, or plain Gradient x Input). The explained scalar is read at the SAE's
hook; the relevance that reaches the hook activation x_p is x_p . grad, and what the SAE's own biases absorb is
f_i - that sum (the encoder is affine + ReLU, so the split is exact).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.capture import model_lock
from interpscope.config import InterpscopeError
from interpscope.relevance import attribute, get_method, methods_for
from interpscope.relevance.api import input_ids_for
from interpscope.results import Result
from interpscope.sae.arch import SparseAutoencoder
from interpscope.sae.folder import check_compatible
from interpscope.sae.placement import on_device
from interpscope.sae.store.documents import PromptFeaturesDocument
from interpscope.sae.store.encode import hook_activations
from interpscope.sinks import SinkReport, measure, words

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


@dataclass
class PromptFeatures(PromptFeaturesDocument):
    """Feature activations on a prompt: all of them, and the top features' columns for the heatmap."""

    tokens: list[str]
    token_ids: list[int]
    activations: np.ndarray
    top_features: list[int]
    top_values: np.ndarray
    sink_positions: list[int]
    sinks: list[dict] = field(default_factory=list)
    bos_prepended: bool = False
    sink_word: str = "attention sink"
    model: str | None = None
    hook: str | None = None
    per_token_limit: int = 10  # active features listed per token in the document

    @property
    def excluded_positions(self) -> list[int]:
        """Positions never ranked: the measured sinks (interpscope.sinks.measure) and a prepended BOS."""
        return [row["position"] for row in self.sinks]

    def reasons(self) -> dict[int, str]:
        """position -> why it is excluded ('prepended BOS', 'measured attention sink, 142x the median norm')."""
        return {row["position"]: row["reason"] for row in self.sinks}

    def active_at(self, position: int, limit: int = 50) -> list[dict]:
        """Features active at one token, largest first: [{feature, activation}]."""
        if not 0 <= position < len(self.tokens):
            raise InterpscopeError(f"Position must be 0..{len(self.tokens) - 1} (got {position}).")
        row = self.activations[position]
        active = np.flatnonzero(row > 0)
        order = active[np.argsort(-row[active], kind="stable")][:limit]
        return [{"feature": int(i), "activation": float(row[i])} for i in order]

    def heatmap_data(self) -> dict:
        """The figure's data for export: tokens x top features."""
        return {"tokens": self.tokens, "features": self.top_features, "activations": self.top_values}


@torch.no_grad()
def excluded_at_hook(lm: LoadedModel, sae: SparseAutoencoder, hook: str, ids: torch.Tensor,
                     prepended: bool) -> tuple[torch.Tensor, SinkReport]:
    """The hook activation x [1, T, d] of ids (in the SAE's dtype) and the positions the SAE views exclude there,
    with why: the one sink helper (interpscope.sinks.measure) on x, plus a prepended BOS at 0. The prompt view,
    steering and (on its splice's own x) the circuit view leave exactly these positions out. The caller holds
    model_lock(lm)."""
    x = hook_activations(lm, hook, ids).to(device=sae.W_enc.device, dtype=sae.W_enc.dtype)
    return x, measure(x[0], prepended=0 if prepended else None, point=hook)


@torch.no_grad()
def prompt_features(lm: LoadedModel, sae: SparseAutoencoder, text: str, n_top: int = 20,
                    prepend_bos: bool | None = None, per_token: int = 10) -> PromptFeatures:
    """Encode a text at the SAE's hook; pick the n_top features with the largest activation over the positions
    that are neither a measured sink nor a prepended BOS (those are named, with their reason, in `sinks`)."""
    ids, prepended = input_ids_for(lm, text, prepend_bos)
    hook = check_compatible(sae, lm.adapter, None, lm.name)
    with model_lock(lm):
        x, report = excluded_at_hook(lm, sae, hook, ids, prepended)
    acts = sae.encode(x)[0].float().cpu().numpy()
    acts[sorted(report.measured)] = 0.0  # a massive row is outside what the SAE was trained on: no feature
    excluded = np.zeros(acts.shape[0], dtype=bool)
    excluded[report.positions] = True
    ranked = acts[~excluded]
    peak = ranked.max(axis=0) if ranked.size else np.zeros(acts.shape[1], np.float32)
    alive = np.flatnonzero(peak > 0)
    top = alive[np.argsort(-peak[alive], kind="stable")][:n_top]
    tokens = lm.token_strings(ids[0])
    sink_word = words(lm.adapter.capabilities())["sink"]
    return PromptFeatures(tokens=tokens, token_ids=ids[0].tolist(), activations=acts,
                          top_features=[int(i) for i in top], top_values=acts[:, top],
                          sink_positions=sorted(report.measured), sinks=report.rows(tokens, sink_word),
                          bos_prepended=prepended, sink_word=sink_word, model=lm.name, hook=hook,
                          per_token_limit=per_token)


def attribution_methods(adapter) -> list:
    """The registered methods that explain one scalar in one backward pass (LRP rules, Gradient x Input)."""
    return [m for m in methods_for(adapter) if m.one_backward_pass]


class _FeatureTarget:
    """Duck-typed relevance target: the engine asks for `position` and `value(logits)`; the value is the
    feature's activation read at the hook during the same forward pass (logits are ignored)."""

    def __init__(self, position: int):
        self.position = position
        self.captured: torch.Tensor | None = None

    def value(self, logits: torch.Tensor) -> torch.Tensor:
        if self.captured is None:
            raise RuntimeError("the SAE hook did not run")
        return self.captured


@dataclass
class FeatureAttribution(Result):
    """Relevance of each input token for feature `feature` at `position` (`interpscope.sae.feature_attribution`:
    the SAE page's Attribution export; its table is one row per token)."""

    SCHEMA = "interpscope.sae.feature_attribution"
    SCHEMA_VERSION = 1

    feature: int
    position: int
    method: str
    tokens: list[str]
    relevance: np.ndarray
    activation: float
    at_hook: float
    sae_bias_share: float
    input_sum: float

    def tidy(self) -> list[dict]:
        return [{"position": i, "token": token, "relevance": float(value)}
                for i, (token, value) in enumerate(zip(self.tokens, self.relevance, strict=True))]


def feature_attribution(lm: LoadedModel, sae: SparseAutoencoder, text: str, feature: int, position: int,
                        method: str = "attnlrp", prepend_bos: bool | None = None) -> FeatureAttribution:
    """Which input tokens drive f_feature at `position` (-1 = last token), positions as the prompt view's
    (input_ids_for with the same prepend_bos)."""
    spec = get_method(method, lm.adapter)
    if not spec.one_backward_pass:
        usable = ", ".join(m.name for m in attribution_methods(lm.adapter))
        raise InterpscopeError(f"Feature attribution needs one backward pass per feature ({usable}), not {spec.label}.")
    hook = check_compatible(sae, lm.adapter, None, lm.name)
    if not 0 <= feature < sae.cfg.d_sae:
        raise InterpscopeError(f"Feature id must be 0..{sae.cfg.d_sae - 1} (got {feature}).")
    ids, _ = input_ids_for(lm, text, prepend_bos)
    n_tokens = ids.shape[1]
    position = n_tokens + position if position < 0 else position
    if not 0 <= position < n_tokens:
        raise InterpscopeError(f"Position must be 0..{n_tokens - 1} for this text (got {position}).")
    target = _FeatureTarget(position)
    sae = on_device(sae, lm.device)

    def read_feature(tensor: torch.Tensor) -> None:
        x = tensor[0, position].to(sae.W_enc.dtype)
        target.captured = sae.encode(x[None])[0, feature]

    from interpscope.capture import hooks

    rules = spec.rules(lm.adapter) if spec.rules else []
    with model_lock(lm), hooks(lm.adapter, {hook: read_feature}):
        result = attribute(lm.adapter, ids, target, rules, conservation=False, points=[hook])
    at_hook = float(result.points[hook].sum())
    return FeatureAttribution(feature=feature, position=position, method=spec.label,
                              tokens=lm.token_strings(ids[0]), relevance=result.relevance,
                              activation=result.logit, at_hook=at_hook, sae_bias_share=result.logit - at_hook,
                              input_sum=float(result.relevance.sum()))
