"""The typical scale of an MLP output norm (Gemma 3's post_feedforward_layernorm), for weight statistics.

Through an output norm a neuron writes gamma * centre(w_out) / r into the residual, where r is the norm's scale at
that position. The weight statistics (norm, and so the ranking's tie-break) need one r per layer: the mean of r
over the corpus sample's positions, position 0 and massive-activation rows left out (interpscope.sinks), so the
number stands for an ordinary token. It is read from the model's entropy-neuron store when that store has it,
else measured on the cached activation store (computed once per data dir) and kept in memory per loaded model.
Ablations never use it: they compute each position's own scale exactly.
"""
from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.entropy_neurons.folding import mlp_pre_output, output_norm
from interpscope.entropy_neurons.page_store import find_neuron_store
from interpscope.entropy_neurons.store import activation_stores

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

_SCALES: weakref.WeakKeyDictionary[torch.nn.Module, dict] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def typical_scale(adapter, layer: int, activations: np.ndarray, excluded: np.ndarray,
                  chunk: int = 4096) -> float | None:
    """Mean scale of layer's MLP output norm over the positions not excluded, from neuron activations
    [N, T, d_mlp] (the norm's input is their down projection); None when the layer has no output norm."""
    post = output_norm(adapter, layer)
    if post is None:
        return None
    flat = np.asarray(activations).reshape(-1, activations.shape[-1])
    kept = np.flatnonzero(~np.asarray(excluded, dtype=bool).reshape(-1))
    total, count = 0.0, 0
    W_out = adapter.W_out(layer)
    work = torch.float64 if W_out.dtype == torch.float64 else torch.float32
    with torch.no_grad():
        for start in range(0, kept.size, chunk):
            acts = torch.from_numpy(np.asarray(flat[kept[start:start + chunk]], dtype=np.float32)).to(
                device=W_out.device, dtype=work)
            scale = post.scale(mlp_pre_output(adapter, layer, acts).to(work))
            total += float(scale.double().sum())
            count += scale.numel()
    return total / count if count else None


def _version(adapter, layer: int) -> tuple:
    W_out = adapter.W_out(layer)
    gamma = getattr(adapter.mlp_output_norm(layer), "weight", None)
    return (W_out.data_ptr(), W_out._version, None if gamma is None else (gamma.data_ptr(), gamma._version))


def layer_post_scale(lm: LoadedModel, layer: int) -> float | None:
    """The typical scale of layer's MLP output norm on this model (None without one): from its entropy-neuron
    store when it holds the layer, else from the corpus activation store of the default sample."""
    adapter = lm.adapter
    if adapter.mlp_output_norm(layer) is None:
        return None
    version = _version(adapter, layer)
    with _LOCK:
        cached = _SCALES.setdefault(adapter.model, {}).get(layer)
        if cached is not None and cached[0] == version:
            return cached[1]
    store = find_neuron_store(lm)
    scale = store.post_scale(layer) if store is not None and layer in store.layers else None
    if scale is None:
        acts = activation_stores(lm, [layer])[layer]
        scale = typical_scale(adapter, layer, acts.activations, acts.excluded)
    with _LOCK:
        _SCALES.setdefault(adapter.model, {})[layer] = (version, scale)
    return scale
