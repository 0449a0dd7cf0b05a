"""Per-expert relevance of a mixture-of-experts model: which expert carried how much of the explained value, per token
and per sparse layer.

Under the LRP rules (interpscope.relevance.gates) a sparse block's output is the sum of its slot contributions
w_tk * E_k(x_t) plus, in Qwen2-MoE, the gated shared expert; with the router weights detached the map from those
contributions to the block output is a plain sum, so each contribution's relevance (contribution x its modified
gradient, summed over the hidden dimension) is exactly the share of the block's relevance that expert carried. One
forward and one backward pass give every layer's shares at once, beside the token map of the same pass.

The control beside every share is the router's own weight: if the relevance were split the way the router mixes the
experts, each expert's share of a layer's relevance would equal its share of the routing weight; `routing_share` is
that expectation, and the page's sentences compare the two.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interpscope.capture import model_lock, scoped
from interpscope.config import InterpscopeError
from interpscope.relevance.engine import attribute
from interpscope.relevance.gates import ExpertsRule
from interpscope.relevance.methods import Method, methods_serving
from interpscope.relevance.sinks import report_from, watching
from interpscope.relevance.targets import Target
from interpscope.results import Result
from interpscope.sinks import words

if TYPE_CHECKING:
    from interpscope.adapters.moe import MoEAdapter
    from interpscope.models.loaded import LoadedModel



def expert_methods() -> dict[str, Method]:
    """The registered methods that serve per-expert relevance (LRP rule sets), by name, in registration order."""
    return {m.name: m for m in methods_serving("experts")}


@dataclass
class ExpertRelevance(Result):
    """Per-expert relevance (schema interpscope.expert_relevance). Arrays are [n_sparse_layers, T, n_experts]: an
    expert the router did not choose for a token carried nothing and is NaN there (null in the JSON: not chosen,
    not a measured 0). `shared` [n_sparse_layers, T] is the shared expert's relevance (absent without one);
    `block` [n_sparse_layers, T] the relevance at each sparse block's output, which the experts' shares sum to
    (`closure`: the largest |experts + shared - block| over layers and tokens, relative to |logit|)."""

    SCHEMA = "interpscope.expert_relevance"
    SCHEMA_VERSION = 1

    model: str
    method: str
    tokens: list[str]
    target: Target
    logit: float
    layers: list[int]
    n_experts: int
    top_k: int
    relevance: np.ndarray
    routing_weight: np.ndarray
    block: np.ndarray
    closure: float
    seconds: float
    shared: np.ndarray | None = None
    sink_positions: list[int] = field(default_factory=list)
    sinks: list[dict] = field(default_factory=list)

    def _kept(self) -> np.ndarray:
        keep = np.ones(len(self.tokens), dtype=bool)
        keep[[p for p in self.sink_positions if p < keep.size]] = False
        return keep

    def expert_totals(self) -> np.ndarray:
        """[n_sparse_layers, n_experts]: relevance each expert carried, summed over the non-excluded tokens."""
        return np.nansum(self.relevance[:, self._kept()], axis=1)

    def relevance_share(self) -> np.ndarray:
        """[n_sparse_layers, n_experts]: each expert's share of the layer's total |relevance| through its experts
        (non-excluded tokens)."""
        totals = np.abs(self.expert_totals())
        sums = totals.sum(1, keepdims=True)
        return np.divide(totals, sums, out=np.zeros_like(totals), where=sums > 0)

    def routing_share(self) -> np.ndarray:
        """[n_sparse_layers, n_experts]: the control, each expert's share of the router weight given out in that
        layer (non-excluded tokens): the relevance share expected if relevance followed the router's mixing."""
        weights = np.nansum(self.routing_weight[:, self._kept()], axis=1)
        sums = weights.sum(1, keepdims=True)
        return np.divide(weights, sums, out=np.zeros_like(weights), where=sums > 0)

    def readings(self) -> list[str]:
        """One sentence per sparse layer, computed from the shares beside it."""
        out = []
        relevance_share, routing_share = self.relevance_share(), self.routing_share()
        for row, layer in enumerate(self.layers):
            top = int(np.argmax(relevance_share[row]))
            ratio = relevance_share[row, top] / routing_share[row, top] if routing_share[row, top] > 0 else np.inf
            out.append(f"Layer {layer}: expert {top} carried {relevance_share[row, top]:.0%} of the relevance through "
                       f"the experts, against {routing_share[row, top]:.0%} of the router's weight "
                       f"({ratio:.2f}x what the router's mixing alone would give it).")
        return out

    def tidy(self) -> list[dict]:
        """One row per (sparse layer, token, chosen expert): routing weight and relevance."""
        rows = []
        for row, layer in enumerate(self.layers):
            for position, token in enumerate(self.tokens):
                for expert in np.flatnonzero(~np.isnan(self.relevance[row, position])):
                    rows.append({"layer": layer, "position": position, "token": token, "expert": int(expert),
                                 "routing_weight": float(self.routing_weight[row, position, expert]),
                                 "relevance": float(self.relevance[row, position, expert]),
                                 "sink": position in self.sink_positions, "method": self.method,
                                 "target": self.target.label, "model": self.model})
        return rows

    def figure(self):
        """Experts x tokens heatmaps, one per sparse layer (excluded positions named, outside the colour scale)."""
        from interpscope.figures.relevance.moe import expert_heatmaps

        reasons = {row["position"]: row["reason"] for row in self.sinks}
        return expert_heatmaps(self.tokens, self.layers, self.relevance, self.sink_positions, reasons,
                               f"Per-expert relevance ({self.method}) for {self.target.label} ({self.model})")


def _shared_taps(adapter: MoEAdapter, record: dict[str, torch.Tensor]):
    """Read hooks leaving each shared expert's output (before its sigmoid gate) in `record` as `shared.{layer}`."""
    pairs = []
    for layer in adapter.sparse_layers():
        shared = adapter.shared_expert(layer)
        if shared is not None:
            def keep(module, args, output, layer=layer):
                record[f"shared.{layer}"] = output
            pairs.append((shared, keep))
    return scoped(pairs, role="read")


def _dense(slots: np.ndarray, index: torch.Tensor, values: torch.Tensor | np.ndarray, n_experts: int) -> np.ndarray:
    """[T, K] slot values -> [T, n_experts], NaN for experts not chosen."""
    out = np.full((slots.shape[0], n_experts), np.nan)
    idx = index.cpu().numpy()
    vals = np.asarray(values)
    for k in range(idx.shape[1]):
        chosen = idx[:, k] < n_experts
        out[np.flatnonzero(chosen), idx[chosen, k]] = vals[chosen, k]
    return out


def expert_relevance(lm: LoadedModel, input_ids: torch.Tensor, target: Target, method: str = "attnlrp", *,
                     prepended: int | None = None, tokens: list[str] | None = None) -> ExpertRelevance:
    """Per-expert relevance of every sparse layer for `target` on input_ids [1, T], under AttnLRP or CP-LRP.

    `prepended`: the position of a BOS the caller put first (excluded and named). `tokens`: the tokens' display
    strings (default: the model's tokenizer's). Raises InterpscopeError for a model without experts or an unknown
    method."""
    import time

    adapter: Any = lm.adapter
    if "experts" not in adapter.capabilities():
        raise InterpscopeError(f"{lm.name} has no mixture-of-experts layers: there is no per-expert relevance.")
    methods = expert_methods()
    if method not in methods:
        raise InterpscopeError(f"Per-expert relevance uses an LRP method ({', '.join(methods)}), "
                               f"not {method!r}.")
    record: dict[str, torch.Tensor] = {}
    routing: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    spec = methods[method]
    assert spec.rules is not None  # register_method: a method serving experts has LRP rules
    rules = [rule for rule in spec.rules(adapter) if not isinstance(rule, ExpertsRule)]
    # AttnLRP's rules send relevance through the router's softmax weights as through attention's; CP-LRP's detach them
    rules.append(ExpertsRule(spec.through_softmax, record=record, routing=routing))
    layers = adapter.sparse_layers()
    points = [f"blocks.{layer}.hook_mlp_out" for layer in layers]
    n_tokens, n_experts = int(input_ids.shape[1]), adapter.n_experts
    start = time.perf_counter()
    with model_lock(lm), watching(adapter) as probe, _shared_taps(adapter, record):
        attribution = attribute(adapter, input_ids, target, rules, conservation=False, points=points, extra=record)
    seconds = time.perf_counter() - start
    relevance, weights, shared, block = [], [], [], []
    for layer, point in zip(layers, points, strict=True):
        index, weight = routing[layer]
        slots = attribution.points[f"experts.{layer}"].reshape(n_tokens, index.shape[1], -1).sum(-1)
        relevance.append(_dense(slots, index, slots, n_experts))
        weights.append(_dense(slots, index, weight.double().cpu().numpy(), n_experts))
        if f"shared.{layer}" in attribution.points:
            shared.append(attribution.points[f"shared.{layer}"].reshape(n_tokens, -1).sum(-1))
        block.append(attribution.points[point].reshape(n_tokens, -1).sum(-1))
    relevance_arr, block_arr = np.stack(relevance), np.stack(block)
    shared_arr = np.stack(shared) if shared else None
    carried = np.nansum(relevance_arr, axis=2) + (shared_arr if shared_arr is not None else 0.0)
    scale = abs(attribution.logit) or 1.0
    tokens = lm.token_strings(input_ids[0]) if tokens is None else list(tokens)
    report = report_from(adapter, probe["residual"], prepended)
    return ExpertRelevance(model=lm.name, method=method, tokens=tokens, target=target, logit=attribution.logit,
                           layers=layers, n_experts=n_experts, top_k=adapter.top_k, relevance=relevance_arr,
                           routing_weight=np.stack(weights), block=block_arr,
                           closure=float(np.max(np.abs(carried - block_arr))) / scale, seconds=seconds,
                           shared=shared_arr, sink_positions=report.positions,
                           sinks=report.rows(tokens, words(adapter.capabilities())["sink"]))
