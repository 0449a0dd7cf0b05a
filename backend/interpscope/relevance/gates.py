"""LRP rules for the parts of a family that the per-module rules in interpscope.relevance.rules do not reach:
mixtures of experts (router weights times expert outputs), multiplicative side gates, and soft-capped logits.

All three keep every forward value bit for bit: a hook returns `value.detach() + (lrp - lrp.detach())`, which adds
an exact zero to the module's own output while the gradient flows only through `lrp`, a re-computation of the same
function written with the rule's stop-gradients. Hooks go through interpscope.capture (scoped to the caller's run).

Mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE): a sparse block computes
    y_t = sum_{e in topk(t)} w_te(x_t) * E_e(x_t),
with w_te the (renormalised) top-k softmax of the router's logits. Two multiplicative structures meet here:
- the router weight w_te multiplies the expert output E_e: a multiplicative gate. The weights are detached in both
  AttnLRP and CP-LRP, which is CP-LRP's treatment of a gate (it detaches the activated gate of a gated MLP) applied
  under both methods; it is a deliberate departure from AttnLRP's uniform rule for a product of two inputs, which
  AttnLRP keeps for the dense gated MLP. That rule would send half of each expert's relevance into the router,
  through a softmax whose Gradient x Input is not conservative and through the top-k renormalisation; none of it
  would reach the tokens or be booked as a share, so the conservation readout could no longer balance, and the
  router's half would say which experts were picked rather than what they computed. With the weights detached, the
  weighted sum is linear in the expert outputs, the top-k selection
  is a fixed mask (piecewise constant: it has no gradient anyway), and every expert's share of the relevance is
  exactly w_te * E_e(x_t) . grad_y: what the per-expert view (interpscope.relevance.experts) reads;
- inside each expert, act(gate) * up is the gated MLP of every Llama-like family: identity rule on the activation
  and the uniform rule on the product under AttnLRP, the activated gate detached under CP-LRP.
The router receives no relevance: which experts were chosen is part of the input's fixed routing, not a path
relevance travels.

Qwen2-MoE's shared expert is scaled by sigmoid(shared_expert_gate(x)): a multiplicative side gate, detached by both
methods (GateDetachRule) for the same reason; the shared expert itself is a gated MLP the per-module rules cover.

Soft-capped logits (Gemma 2): logits = c * tanh(raw / c). Identity rule of an elementwise nonlinearity: the raw logit
receives the capped logit as relevance. The native backward multiplies by sech^2(raw / c), so the raw logit's
gradient is scaled by (tanh(u) / u) / sech^2(u) = sinh(2u) / 2u, u = raw / c, computed without a graph.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from interpscope.adapters import ModelAdapter
from interpscope.capture import scoped
from interpscope.config import InterpscopeError


def _same_value(value: torch.Tensor, lrp: torch.Tensor) -> torch.Tensor:
    """`value`'s numbers (bit for bit) with `lrp`'s gradient."""
    lrp = lrp.to(value.dtype)
    return value.detach() + (lrp - lrp.detach())


def _first(output) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def _replace_first(output, new: torch.Tensor):
    return (new, *output[1:]) if isinstance(output, tuple) else new


def _check_layout(experts: Any) -> None:
    """The fused layout the re-computation reads: [gate; up] concatenated on dim 1, not transposed, no biases."""
    if (getattr(experts, "is_transposed", False) or not getattr(experts, "is_concatenated", True)
            or getattr(experts, "has_bias", False) or not getattr(experts, "has_gate", True)):
        raise InterpscopeError(f"{type(experts).__name__}: this experts layout (transposed, interleaved, biased or "
                               "ungated) is not covered by the LRP rules.")


def expert_slots(experts: Any, x: torch.Tensor, index: torch.Tensor, weights: torch.Tensor, *,
                 attnlrp: bool) -> torch.Tensor:
    """Each token's top-k expert contributions [N, K, d] = w_tk * E_{index[t, k]}(x_t), written with the rules'
    stop-gradients (router weights detached; activation identity rule with the uniform rule on act * up under
    AttnLRP, the activated gate detached under CP-LRP). Their sum over K is the block's output."""
    n_tokens, k = index.shape
    n_experts, d_expert = experts.gate_up_proj.shape[0], experts.down_proj.shape[-1]
    weights = weights.detach().to(x.dtype)
    rows, slots, parts = [], [], []
    for expert in torch.unique(index).tolist():
        if expert >= n_experts:  # the padding id of expert-parallel routing
            continue
        token_idx, slot_idx = torch.where(index == expert)
        gate_up = nn.functional.linear(x[token_idx], experts.gate_up_proj[expert])
        gate, up = gate_up[..., :d_expert], gate_up[..., d_expert:]
        activated = experts.act_fn(gate)
        if attnlrp:
            with torch.no_grad():
                ratio = activated / torch.where(gate == 0, torch.ones_like(gate), gate)
            hidden = 0.5 * (gate * ratio * up.detach() + activated.detach() * up)
        else:
            hidden = activated.detach() * up
        out = nn.functional.linear(hidden, experts.down_proj[expert])
        rows.append(token_idx)
        slots.append(slot_idx)
        parts.append(out * weights[token_idx, slot_idx, None])
    slot_out = x.new_zeros(n_tokens, k, x.shape[-1])
    if parts:
        slot_out = slot_out.index_put((torch.cat(rows), torch.cat(slots)), torch.cat(parts))
    return slot_out


class ExpertsRule:
    """LRP through every sparse block's experts (see the module docstring). `record`, when given, receives each
    layer's slot contributions as `experts.{layer}` [N, K, d] (in the graph: their relevance is the per-expert
    relevance) and `routing` receives the layer's expert ids [N, K] and router weights [N, K] (plain tensors)."""

    name = "experts-lrp"

    def __init__(self, attnlrp: bool, record: dict[str, torch.Tensor] | None = None,
                 routing: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None):
        self.attnlrp = attnlrp
        self.record = record
        self.routing = routing

    def _hook(self, layer: int) -> Callable:
        def hook(module, args, output):
            if len(args) < 3:
                raise InterpscopeError(f"{type(module).__name__}: expected (hidden, top_k_index, top_k_weights).")
            x, index, weights = args[0], args[1], args[2]
            out = _first(output)
            slot_out = expert_slots(module, x, index, weights, attnlrp=self.attnlrp)
            if self.record is not None:
                self.record[f"experts.{layer}"] = slot_out
            if self.routing is not None:
                self.routing[layer] = (index.detach(), weights.detach())
            return _replace_first(output, _same_value(out, slot_out.sum(1)))
        return hook

    def apply(self, adapter: ModelAdapter):
        pairs = []
        for layer in range(adapter.n_layers):
            experts = adapter.experts(layer)
            if experts is not None:
                _check_layout(experts)
                pairs.append((experts, self._hook(layer)))
        return scoped(pairs, role="rule")


class GateDetachRule:
    """Detach modules whose output only gates another branch by multiplication (adapter.multiplicative_gates)."""

    name = "gate-detach"

    @staticmethod
    def _hook(module, args, output):
        return _replace_first(output, _first(output).detach())

    def apply(self, adapter: ModelAdapter):
        gates = [gate for layer in range(adapter.n_layers) for gate in adapter.multiplicative_gates(layer)]
        return scoped([(gate, self._hook) for gate in gates], role="rule")


class LogitSoftcapRule:
    """Identity rule on the tanh soft-cap the model applies after its unembedding (adapter.final_logit_softcap)."""

    name = "logit-softcap-identity"

    def __init__(self, cap: float):
        self.cap = cap

    def _hook(self, module, args, output):
        raw = _first(output)
        if not raw.requires_grad:
            return None
        with torch.no_grad():
            u = raw.double() / self.cap
            factor = torch.where(u == 0, torch.ones_like(u), torch.sinh(2 * u) / torch.where(u == 0, 1.0, 2 * u))
        return _replace_first(output, _same_value(raw, raw * factor.to(raw.dtype)))

    def apply(self, adapter: ModelAdapter):
        return scoped([(adapter.unembedding(), self._hook)], role="rule")


def gate_rules(adapter: ModelAdapter, *, attnlrp: bool) -> list:
    """The rules a family needs beyond the per-module ones, as its adapter declares its parts."""
    found: list = []
    if any(adapter.experts(layer) is not None for layer in range(adapter.n_layers)):
        found.append(ExpertsRule(attnlrp))
    if any(adapter.multiplicative_gates(layer) for layer in range(adapter.n_layers)):
        found.append(GateDetachRule())
    if adapter.final_logit_softcap:
        found.append(LogitSoftcapRule(adapter.final_logit_softcap))
    return found
