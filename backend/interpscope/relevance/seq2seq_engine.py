"""One forward + one backward pass of an encoder-decoder (T5) under LRP rules: relevance of a decoder target over the
source tokens (encoder input) and the decoder input (start token + prefix) at once.

The rules are the decoder-only engine's (interpscope.relevance.rules: norm identity, activation identity, the uniform
rule on gated products, q/k x 1/4 and v x 1/2 for AttnLRP, q/k and the gate detached for CP-LRP); the T5 adapter lists
its cross-attention's q/k/v beside self-attention's, so the cross-attention softmax is treated like self-attention's.
Relevance at a tensor is tensor x modified gradient, summed over the hidden dimension (docs/methods/attnlrp.md).

T5's relative position bias is added to the attention scores and is constant w.r.t. the input. Under AttnLRP the
softmax's Gradient x Input leaves part of the relevance on it: it is tapped as a leaf and booked as its own share
(`position_bias_sum`), beside what the softmaxes drop. CP-LRP detaches it with q and k, so nothing reaches the scores.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import torch

from interpscope.adapters import ModelAdapter
from interpscope.adapters.t5 import T5Adapter
from interpscope.capture import on_output
from interpscope.relevance.engine import _bias_grads, _relevance, _Taps, bias_parameters
from interpscope.relevance.rules import Rule, applied, output_hooks
from interpscope.relevance.targets import PendingTarget, Target


@dataclass
class Seq2SeqConservation:
    """Where the explained value went: source tokens, decoder input tokens, biases, and (AttnLRP only) the
    softmaxes and the relative position bias.

    scores_by_attention: per attention ('encoder.0.self', 'decoder.1.cross', ...) the relevance that reaches its
    output heads but not its q/k/v: what its softmax drops plus what it leaves on the position bias there; these
    sum to softmax_sum + position_bias_sum. relative_error = |parts - y| / |y|, the parts being source + decoder +
    biases (+ softmax + position bias where relevance goes through the softmaxes)."""

    target_logit: float
    source_sum: float
    decoder_sum: float
    input_sum: float
    bias_sum: float | None  # None (absent) for a model without bias parameters (T5)
    relative_error: float
    softmax_sum: float | None = None
    position_bias_sum: float | None = None
    gap_without_softmax: float | None = None
    scores_by_attention: dict[str, float] | None = None


@dataclass
class Seq2SeqAttribution:
    """Relevance [S] over the source and [T] over the decoder input for one target, and what the pass saw."""

    source_relevance: np.ndarray
    decoder_relevance: np.ndarray
    logit: float
    target: Target
    conservation: Seq2SeqConservation | None
    output_logits: torch.Tensor
    encoder_residual: torch.Tensor | None = None
    decoder_residual: torch.Tensor | None = None


class PositionBiasDetached:
    """CP-LRP's rule for the relative position bias: no gradient through it (with q and k detached the attention
    weights are then constants of the backward pass)."""

    name = "position-bias-detached"

    def apply(self, adapter: ModelAdapter):
        def detach(module, args, output):
            return output.detach()
        modules = adapter.position_bias_modules() if isinstance(adapter, T5Adapter) else []
        return output_hooks([(module, detach) for module in modules])


def forward_seq2seq(adapter: T5Adapter, source_embeds: torch.Tensor, decoder_embeds: torch.Tensor,
                    position: int) -> torch.Tensor:
    """Logits [B, vocab] at decoder `position` from source [B, S, d] and decoder input [B, T, d] embeddings."""
    out = adapter.model(inputs_embeds=source_embeds, decoder_inputs_embeds=decoder_embeds, use_cache=False)
    return out.logits[:, position]


def attention_names(adapter: T5Adapter) -> list[tuple[int, str, str]]:
    """(layer, kind, name) of every attention, named 'encoder.<block>.self', 'decoder.<block>.cross', ..."""
    found = []
    for layer in range(adapter.n_layers):
        stack, local = (("decoder", layer - adapter.n_encoder_layers) if adapter.is_decoder_layer(layer)
                        else ("encoder", layer))
        for kind, _ in adapter.attentions(layer):
            found.append((layer, kind, f"{stack}.{local}.{kind}"))
    return found


def keep_residual(seen: dict, name: str) -> Callable:
    """A read hook leaving a block's output residual [T, d] (first in the batch) in seen[name], once."""
    def hook(module, args, output):
        tensor = output[0] if isinstance(output, tuple) else output
        seen.setdefault(name, tensor[0].detach())
    return hook


def attribute_seq2seq(adapter: T5Adapter, source_ids: torch.Tensor, decoder_ids: torch.Tensor,
                      target: Target | PendingTarget, rules: Sequence[Rule], *, through_softmax: bool,
                      conservation: bool = True) -> Seq2SeqAttribution:
    """Relevance of every source and decoder-input token for `target` (at a decoder position) under `rules`
    ([] = plain Gradient x Input). The caller holds the model's lock. through_softmax: the rules send relevance
    through the attention softmaxes (AttnLRP): their drop and the position bias's share are booked; otherwise the
    position bias is detached (CP-LRP) or left alone (no rules). A PendingTarget is resolved from this pass's logits."""
    taps = _Taps()
    seen: dict[str, torch.Tensor] = {}
    biases = bias_parameters(adapter.model) if conservation else []
    names = attention_names(adapter)
    with ExitStack() as stack, torch.enable_grad():
        chosen = list(rules)
        if rules and not through_softmax:
            chosen.append(PositionBiasDetached())
        stack.enter_context(applied(adapter, chosen))
        stack.callback(taps.remove)
        stack.enter_context(_bias_grads(biases))
        for decoder in (False, True):
            handle = on_output(adapter.middle_block(decoder), keep_residual(seen, "decoder" if decoder else "encoder"))
            stack.callback(handle.remove)
        if conservation and through_softmax:
            for i, module in enumerate(adapter.position_bias_modules()):
                taps.output(module, f"posbias.{i}", leaf=True)
        if conservation:
            for layer, kind, name in names:
                attn = dict(adapter.attentions(layer))[kind]
                taps.input(attn.o, f"heads.{name}")
                for part in ("q", "k", "v"):
                    taps.output(getattr(attn, part), f"qkv.{name}.{part}")
        embedding = adapter.embedding()
        source = embedding(source_ids).detach().requires_grad_(True)
        decoder_input = embedding(decoder_ids).detach().requires_grad_(True)
        logits = forward_seq2seq(adapter, source, decoder_input, target.position)[0]
        resolved = target.resolve(logits.detach()) if isinstance(target, PendingTarget) else target
        value = resolved.value(logits)
        tapped = list(taps.tensors)
        grads = torch.autograd.grad(value, [source, decoder_input, *(taps.tensors[n] for n in tapped), *biases],
                                    allow_unused=True)
    y = float(value.detach().double())
    source_relevance = _relevance(source, grads[0])[0].sum(-1)
    decoder_relevance = _relevance(decoder_input, grads[1])[0].sum(-1)
    result = Seq2SeqAttribution(source_relevance=source_relevance.cpu().numpy(),
                                decoder_relevance=decoder_relevance.cpu().numpy(), logit=y, target=resolved,
                                conservation=None, output_logits=logits.detach(),
                                encoder_residual=seen.get("encoder"), decoder_residual=seen.get("decoder"))
    if not conservation:
        return result
    per_tensor = {n: float(_relevance(taps.tensors[n], g).sum())
                  for n, g in zip(tapped, grads[2:2 + len(tapped)], strict=True)}
    bias_sum = float(sum(float(_relevance(b, g).sum()) for b, g in zip(biases, grads[2 + len(tapped):], strict=True)))
    has_biases = bool(biases)  # T5 has none: its bias share does not apply (absent, not 0)
    source_sum, decoder_sum = float(source_relevance.sum()), float(decoder_relevance.sum())
    input_sum = source_sum + decoder_sum
    scale = abs(y) if y != 0 else 1.0
    conserved = Seq2SeqConservation(target_logit=y, source_sum=source_sum, decoder_sum=decoder_sum,
                                    input_sum=input_sum, bias_sum=bias_sum if has_biases else None,
                                    relative_error=abs(input_sum + bias_sum - y) / scale)
    if through_softmax:
        scores = {name: per_tensor[f"heads.{name}"] - sum(per_tensor[f"qkv.{name}.{p}"] for p in ("q", "k", "v"))
                  for _, _, name in names}
        position_bias = sum(v for n, v in per_tensor.items() if n.startswith("posbias."))
        softmax = sum(scores.values()) - position_bias
        conserved.softmax_sum, conserved.position_bias_sum = softmax, position_bias
        conserved.scores_by_attention = scores
        conserved.gap_without_softmax = (y - input_sum - bias_sum) / scale
        conserved.relative_error = abs(input_sum + bias_sum + softmax + position_bias - y) / scale
    result.conservation = conserved
    return result


def integrated_gradients_seq2seq(adapter: T5Adapter, source_ids: torch.Tensor, decoder_ids: torch.Tensor,
                                 target: Target, steps: int, source_reference: torch.Tensor,
                                 decoder_reference: torch.Tensor, progress: Callable[[int, int], None] | None = None,
                                 per_batch: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Integrated Gradients over both inputs' embeddings at once, on the straight path from the references
    (Gauss-Legendre quadrature with `steps` nodes, as captum's default): relevance [S] and [T] (float64), summing to
    f(x) - f(reference) up to the quadrature's gap. progress(done, total) per batch of nodes."""
    embedding = adapter.embedding()
    with torch.no_grad():
        source, decoder_input = embedding(source_ids).detach(), embedding(decoder_ids).detach()
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    alphas, weights = (nodes + 1) / 2, weights / 2
    source_grad = torch.zeros_like(source[0], dtype=torch.float64)
    decoder_grad = torch.zeros_like(decoder_input[0], dtype=torch.float64)
    batches = range(0, steps, per_batch)
    for done, start in enumerate(batches):
        if progress is not None:
            progress(done, len(batches))
        a = torch.tensor(alphas[start:start + per_batch], dtype=source.dtype, device=source.device)[:, None, None]
        w = torch.tensor(weights[start:start + per_batch], dtype=torch.float64, device=source.device)
        with torch.enable_grad():
            path_source = (source_reference + a * (source - source_reference)).requires_grad_(True)
            path_decoder = (decoder_reference + a * (decoder_input - decoder_reference)).requires_grad_(True)
            values = target.value(forward_seq2seq(adapter, path_source, path_decoder, target.position))
            grad_source, grad_decoder = torch.autograd.grad(values.sum(), [path_source, path_decoder])
        source_grad += (grad_source.double() * w[:, None, None]).sum(0)
        decoder_grad += (grad_decoder.double() * w[:, None, None]).sum(0)
    if progress is not None:
        progress(len(batches), len(batches))
    source_relevance = ((source[0] - source_reference[0]).double() * source_grad).sum(-1)
    decoder_relevance = ((decoder_input[0] - decoder_reference[0]).double() * decoder_grad).sum(-1)
    return source_relevance.cpu().numpy(), decoder_relevance.cpu().numpy()
