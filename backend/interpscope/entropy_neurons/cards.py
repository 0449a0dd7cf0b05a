"""What one neuron looks like up close, and what chosen neurons do on a person's own text.

Neuron detail: the W_U singular spectrum with the neuron's cosine to each singular direction, its activation
histogram and top activating contexts over the cached corpus sample, and the tokens its direct logit effect
promotes and suppresses. Your text: per-token activation of chosen neurons with the model's entropy and top
prediction at each position.

Position 0 and massive-activation rows (attention sinks, interpscope.sinks) are never ranked, never counted in a
histogram or mean and never set a colour scale; every view says which positions it left out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.capture import capture, model_lock
from interpscope.entropy_neurons.ablation import parse_neurons
from interpscope.entropy_neurons.documents import DetailDocument
from interpscope.entropy_neurons.folding import folded_W_out
from interpscope.entropy_neurons.metrics import entropy_of
from interpscope.entropy_neurons.page_store import CONTEXT_LEFT, CONTEXT_RIGHT, NeuronStore
from interpscope.entropy_neurons.postnorm import layer_post_scale, typical_scale
from interpscope.entropy_neurons.store import ActivationStore
from interpscope.entropy_neurons.weights import check_k, unembed_basis
from interpscope.results import Result
from interpscope.sinks import (
    SinkReport,
    colour_scale,
    detection_point,
    excluded_positions,
    measure,
    top_positions,
    words,
)
from interpscope.token_text import token_text

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel



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
class NeuronDetail(DetailDocument):
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
    excluded_tokens: int | None = None  # None: no corpus side (weights only)
    sink_positions: list[tuple[int, int]] | None = None
    source: str = "weights only"
    post_scale: float | None = None  # the MLP output norm's typical scale the write was divided by (None: no norm)


def _token_text(tokenizer, token_id: int) -> str:
    return token_text(tokenizer, int(token_id)) if tokenizer is not None else str(token_id)


def weight_detail(lm: LoadedModel, layer: int, index: int, k: int | None = None, top_tokens: int = 15,
                  post_scale: float | None = None) -> NeuronDetail:
    """What the weights say about one neuron: rho, norm, the W_U spectrum with its cosines, promoted and
    suppressed tokens, all on what the neuron writes into the residual (through the MLP's output norm at its
    typical scale `post_scale` where there is one; looked up when not given). The W_U summaries are computed once
    per loaded model."""
    adapter = lm.adapter
    neuron = parse_neurons([(layer, index)], adapter)[0]
    k = check_k(k, adapter.d_model)
    basis = unembed_basis(adapter)
    if post_scale is None and adapter.mlp_output_norm(neuron.layer) is not None:
        post_scale = layer_post_scale(lm, neuron.layer)
    with torch.no_grad():
        write = folded_W_out(adapter, neuron.layer, post_scale=post_scale)[neuron.index].double().to(basis.U.device)
        norm = float(write.norm())
        cosines = (basis.U.T @ write) / max(norm, 1e-30)
        logit_effect = (write.to(basis.W_U.dtype) @ basis.W_U).double().cpu().numpy()
    order = np.argsort(logit_effect)
    tokenizer = lm.tokenizer
    promoted = [TokenScore(_token_text(tokenizer, i), int(i), float(logit_effect[i])) for i in order[::-1][:top_tokens]]
    suppressed = [TokenScore(_token_text(tokenizer, i), int(i), float(logit_effect[i])) for i in order[:top_tokens]]
    return NeuronDetail(layer=neuron.layer, index=neuron.index, k=k, rho=float(cosines[-k:].norm()), norm=norm,
                        singular_values=basis.S.cpu().numpy(), cosines=cosines.cpu().numpy(),
                        promoted=promoted, suppressed=suppressed,
                        post_scale=None if adapter.mlp_output_norm(neuron.layer) is None or post_scale is None
                        else float(post_scale))


def context_windows(values: np.ndarray, excluded: np.ndarray, k: int, left: int = CONTEXT_LEFT,
                    right: int = CONTEXT_RIGHT) -> list[tuple[int, int, int, int]]:
    """The k largest activations [N, T] among positions not excluded, as (row, position, lo, hi): the window
    tokens[row, lo:hi] around each (up to `left` tokens before, `right` after), largest first. Position 0 is always
    excluded, so every firing token has real left context inside its window."""
    width = values.shape[1]
    found = []
    for flat in top_positions(values, excluded, k):
        row, col = divmod(int(flat), width)
        found.append((row, col, max(0, col - left), min(width, col + right)))
    return found


def kept_histogram(values: np.ndarray, excluded: np.ndarray, bins: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Histogram (counts, edges) of one neuron's activations [N, T] over the positions not excluded."""
    kept = np.asarray(values, dtype=np.float32)[~np.asarray(excluded, dtype=bool)]
    return np.histogram(kept, bins=bins)


def neuron_detail(lm: LoadedModel, layer: int, index: int, k: int | None = None, store: ActivationStore | None = None,
                  top_tokens: int = 15, top_contexts: int = 10, window: int = CONTEXT_LEFT,
                  bins: int = 60) -> NeuronDetail:
    """Weight-side detail of one neuron, plus corpus-side detail when its layer's activation store is given
    (histogram, mean and top contexts over the positions the store does not exclude)."""
    post_scale = None
    if store is not None and lm.adapter.mlp_output_norm(store.layer) is not None:
        post_scale = typical_scale(lm.adapter, store.layer, store.activations, store.excluded)
    detail = weight_detail(lm, layer, index, k=k, top_tokens=top_tokens, post_scale=post_scale)
    if store is not None:
        acts = np.asarray(store.activations[..., detail.index], dtype=np.float32)  # [N, T]
        excluded = np.asarray(store.excluded, dtype=bool)
        detail.histogram_counts, detail.histogram_edges = kept_histogram(acts, excluded, bins)
        detail.mean_activation = float(store.mean[detail.index])
        contexts = []
        for row, col, lo, hi in context_windows(acts, excluded, top_contexts, left=window):
            ids = np.asarray(store.tokens[row, lo:hi])
            contexts.append(Context(tokens=[_token_text(lm.tokenizer, i) for i in ids], position=col - lo,
                                    activation=float(acts[row, col])))
        detail.contexts = contexts
        detail.excluded_tokens = int(excluded.sum())
        detail.sink_positions = store.sink_positions()
        detail.source = f"corpus sample of {store.n_tokens} tokens"
    return detail


def stored_detail(store: NeuronStore, lm: LoadedModel, layer: int, index: int, k: int | None = None,
                  top_contexts: int = 10) -> NeuronDetail:
    """The neuron detail card from an entropy-neuron store: weights computed live (cheap), corpus side from the
    store (interpscope.entropy_neurons.page_store)."""
    data = store.layer(layer)
    detail = weight_detail(lm, layer, index, k=k, post_scale=store.post_scale(layer))
    detail.histogram_counts = data["hist_counts"][index].astype(np.int64)
    detail.histogram_edges = data["hist_edges"][index].astype(np.float64)
    detail.mean_activation = float(data["mean"][index])
    contexts = []
    for slot in range(min(top_contexts, store.spec.top_contexts)):
        ids = data["context_ids"][index, slot]
        if ids[store.spec.left] < 0:
            break
        present = ids >= 0
        contexts.append(Context(tokens=[token_text(lm.tokenizer, int(i)) for i in ids[present]],
                                position=int(present[:store.spec.left].sum()),
                                activation=float(data["context_values"][index, slot])))
    detail.contexts = contexts
    detail.excluded_tokens = int(data["excluded_tokens"])
    detail.sink_positions = [(int(r), int(c)) for r, c in data["sink_positions"]]
    detail.source = f"precomputed store ({store.spec.n_tokens} corpus tokens)"
    return detail


@dataclass
class TextActivations(Result):
    """Per token of the text: the token strings, each chosen neuron's activation [n_neurons, T], the entropy of
    the prediction made at that token [T], the top predicted next token and its probability. excluded_positions:
    a prepended BOS and the rows measured to carry a massive activation, which set no colour scale; scale: each
    neuron's max |activation| over the other positions [n_neurons] (what a colour scale should span)."""

    model: str
    tokens: list[str]
    neurons: list[str]
    activation: np.ndarray
    entropy: np.ndarray
    top_prediction: list[str]
    top_probability: np.ndarray
    excluded_positions: list[int] | None = None
    scale: np.ndarray | None = None
    sinks: list[dict] | None = None  # one row per excluded position: token, reason, measured ratio (SinkReport.rows)

    SCHEMA = "interpscope.neurons.text"
    SCHEMA_VERSION = 1

    def reasons(self) -> dict[int, str]:
        """position -> why it is excluded ('prepended BOS', 'measured attention sink, 130x the median norm')."""
        return {row["position"]: row["reason"] for row in self.sinks or []}


def text_activations(lm: LoadedModel, text: str, neurons, prepend_bos: bool | None = None) -> TextActivations:
    """Run the model on `text` and read the chosen neurons, the entropy and the top prediction per token.
    prepend_bos: put the model's BOS first (None: where the tokenizer adds none), so the first word is read like
    any other; the excluded positions are the measured sinks and that BOS."""
    from interpscope.relevance.api import input_ids_for

    chosen = parse_neurons(neurons, lm.adapter)
    ids, prepended = input_ids_for(lm, text, prepend_bos)
    names = sorted({f"blocks.{n.layer}.mlp.hook_post" for n in chosen})
    points = {n.layer: detection_point(lm.adapter, n.layer) for n in chosen}
    with model_lock(lm), torch.no_grad():
        run = capture(lm.adapter, ids, names + sorted(set(points.values()) - set(names)))
    logits = run.require_logits().float()
    probs = torch.softmax(logits, dim=-1)
    top_probability, top_ids = probs.max(-1)
    activation = np.stack([run.activations[f"blocks.{n.layer}.mlp.hook_post"][:, n.index].float().numpy()
                           for n in chosen])
    measured: dict[int, float] = {}  # each position measured as a sink at any detection point: its largest ratio
    for point in sorted(set(points.values())):
        resid = run.activations[point].reshape(-1, run.activations[point].shape[-1])
        for position, ratio in measure(resid, point=point).measured.items():
            measured[position] = max(ratio, measured.get(position, 0.0))
    report = SinkReport(measured=measured, prepended=0 if prepended else None,
                        point=", ".join(sorted(set(points.values()))))
    excluded = np.zeros(ids.shape[1], dtype=bool)
    excluded[report.positions] = True
    scale = np.array([colour_scale(row, excluded) for row in activation])
    tokens = lm.token_strings(ids[0])
    return TextActivations(model=lm.name, tokens=tokens, neurons=[n.label for n in chosen],
                           activation=activation, entropy=entropy_of(logits).numpy(),
                           top_prediction=[_token_text(lm.tokenizer, i) for i in top_ids.tolist()],
                           top_probability=top_probability.numpy(), excluded_positions=excluded_positions(excluded),
                           scale=scale, sinks=report.rows(tokens, words(lm.adapter.capabilities())["sink"]))
