"""What one neuron looks like up close, and what chosen neurons do on a person's own text.

Neuron detail: the W_U singular spectrum with the neuron's cosine to each singular direction, its activation
histogram and top activating contexts over the cached corpus sample, and the tokens its direct logit effect
promotes and suppresses. Your text: per-token activation of chosen neurons with the model's entropy and top
prediction at each position.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from backend.capture import capture, model_lock
from backend.neurons.ablation import parse_neurons
from backend.neurons.folding import folded_W_out
from backend.neurons.metrics import entropy_of
from backend.neurons.store import ActivationStore
from backend.neurons.weights import check_k, unembed_basis


@dataclass
class TokenScore:
    token: str
    id: int
    value: float


@dataclass
class Context:
    """A corpus position where the neuron fires: tokens around it, the index of the firing token, activation."""

    tokens: list[str]
    position: int
    activation: float


@dataclass
class NeuronDetail:
    layer: int
    index: int
    k: int
    rho: float
    norm: float
    singular_values: np.ndarray
    cosines: np.ndarray
    promoted: list[TokenScore]
    suppressed: list[TokenScore]
    histogram_counts: np.ndarray | None = None
    histogram_edges: np.ndarray | None = None
    mean_activation: float | None = None
    contexts: list[Context] | None = None


def _token_text(tokenizer, token_id: int) -> str:
    return tokenizer.decode([int(token_id)]) if tokenizer is not None else str(token_id)


def neuron_detail(lm, layer: int, index: int, k: int | None = None, store: ActivationStore | None = None,
                  top_tokens: int = 15, top_contexts: int = 10, window: int = 12, bins: int = 60) -> NeuronDetail:
    """Weight-side detail of one neuron, plus corpus-side detail when its layer's activation store is given."""
    adapter = lm.adapter
    neuron = parse_neurons([(layer, index)], adapter)[0]
    k = check_k(k, adapter.d_model)
    basis = unembed_basis(adapter)
    with torch.no_grad():
        write = folded_W_out(adapter, neuron.layer)[neuron.index].double().to(basis.U.device)
        norm = float(write.norm())
        cosines = (basis.U.T @ write) / max(norm, 1e-30)
        logit_effect = (write.to(basis.W_U.dtype) @ basis.W_U).double().cpu().numpy()
    order = np.argsort(logit_effect)
    tokenizer = lm.tokenizer
    promoted = [TokenScore(_token_text(tokenizer, i), int(i), float(logit_effect[i])) for i in order[::-1][:top_tokens]]
    suppressed = [TokenScore(_token_text(tokenizer, i), int(i), float(logit_effect[i])) for i in order[:top_tokens]]
    detail = NeuronDetail(layer=neuron.layer, index=neuron.index, k=k, rho=float(cosines[-k:].norm()), norm=norm,
                          singular_values=basis.S.cpu().numpy(), cosines=cosines.cpu().numpy(),
                          promoted=promoted, suppressed=suppressed)
    if store is not None:
        acts = np.asarray(store.activations[..., neuron.index], dtype=np.float32)  # [N, T]
        detail.histogram_counts, detail.histogram_edges = np.histogram(acts, bins=bins)
        detail.mean_activation = float(store.mean[neuron.index])
        flat = np.argsort(acts.ravel())[::-1][:top_contexts]
        contexts = []
        for position in flat:
            row, col = divmod(int(position), acts.shape[1])
            lo, hi = max(0, col - window), min(acts.shape[1], col + 4)
            ids = np.asarray(store.tokens[row, lo:hi])
            contexts.append(Context(tokens=[_token_text(tokenizer, i) for i in ids], position=col - lo,
                                    activation=float(acts[row, col])))
        detail.contexts = contexts
    return detail


@dataclass
class TextActivations:
    """Per token of the text: the token strings, each chosen neuron's activation [n_neurons, T], the entropy of
    the prediction made at that token [T], the top predicted next token and its probability."""

    model: str
    tokens: list[str]
    neurons: list[str]
    activation: np.ndarray
    entropy: np.ndarray
    top_prediction: list[str]
    top_probability: np.ndarray


def text_activations(lm, text: str, neurons) -> TextActivations:
    """Run the model on `text` and read the chosen neurons, the entropy and the top prediction per token."""
    chosen = parse_neurons(neurons, lm.adapter)
    ids = lm.encode(text)
    names = sorted({f"blocks.{n.layer}.mlp.hook_post" for n in chosen})
    with model_lock(lm), torch.no_grad():
        run = capture(lm.adapter, ids, names)
    logits = run.logits.float()
    probs = torch.softmax(logits, dim=-1)
    top_probability, top_ids = probs.max(-1)
    activation = np.stack([run.activations[f"blocks.{n.layer}.mlp.hook_post"][:, n.index].float().numpy()
                           for n in chosen])
    return TextActivations(model=lm.name, tokens=lm.token_strings(ids[0]), neurons=[n.label for n in chosen],
                           activation=activation, entropy=entropy_of(logits).numpy(),
                           top_prediction=[_token_text(lm.tokenizer, i) for i in top_ids.tolist()],
                           top_probability=top_probability.numpy())
