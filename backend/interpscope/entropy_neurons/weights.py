"""Weight statistics of MLP neurons against the unembedding: norm, LogitVar, null-space fraction rho.

Everything is computed from d_model x d_model summaries of the folded W_U (its Gram matrix and the covariance
of its normalised columns), so a whole layer costs two small matrix products once the summaries exist; the
summaries are computed once per loaded model and kept in memory.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from interpscope.adapters import ModelAdapter
from interpscope.config import InterpscopeError
from interpscope.entropy_neurons.documents import CandidatesDocument
from interpscope.entropy_neurons.folding import folded_unembedding, folded_W_out


@dataclass
class UnembedBasis:
    """Summaries of the folded, centred W_U [d, V]: singular values S (descending) and left singular vectors U
    (columns, same order) within the directions the final norm lets through, Gram = W W^T, and col_cov =
    covariance over vocab of the unit-normalised columns."""

    W_U: torch.Tensor
    S: torch.Tensor
    U: torch.Tensor
    gram: torch.Tensor
    col_cov: torch.Tensor

    def bottom(self, k: int) -> torch.Tensor:
        """The k bottom singular directions as columns [d, k]."""
        return self.U[:, -k:]


_BASES: weakref.WeakKeyDictionary[torch.nn.Module, tuple[tuple, UnembedBasis]] = weakref.WeakKeyDictionary()
_BASES_LOCK = threading.Lock()


def _weights_version(adapter: ModelAdapter) -> tuple:
    W_U = adapter.W_U()
    gamma = getattr(adapter.final_norm(), "weight", None)
    return (W_U.data_ptr(), W_U._version, None if gamma is None else (gamma.data_ptr(), gamma._version))


def _writable_space(adapter: ModelAdapter, gram: torch.Tensor) -> torch.Tensor:
    """Orthonormal basis [d, d'] of the residual directions the final norm lets through: everything for RMSNorm,
    the complement of the all-ones vector for LayerNorm (whose centring makes that direction trivially null, so
    it must not take one of the k bottom slots)."""
    d_model = gram.shape[0]
    identity = torch.eye(d_model, dtype=gram.dtype, device=gram.device)
    if not adapter.norm.centred:
        return identity
    ones = torch.ones(d_model, 1, dtype=gram.dtype, device=gram.device) / d_model ** 0.5
    basis, _ = torch.linalg.qr(torch.cat([ones, identity[:, : d_model - 1]], dim=1))
    return basis[:, 1:]


def unembed_basis(adapter: ModelAdapter) -> UnembedBasis:
    """The model's UnembedBasis, computed once and reused until the weights change."""
    with _BASES_LOCK:
        version = _weights_version(adapter)
        cached = _BASES.get(adapter.model)
        if cached is not None and cached[0] == version:
            return cached[1]
        with torch.no_grad():
            W_U = folded_unembedding(adapter)
            gram = (W_U @ W_U.T).double()
            space = _writable_space(adapter, gram)
            eigvals, eigvecs = torch.linalg.eigh(space.T @ gram @ space)
            order = torch.argsort(eigvals, descending=True)
            S = eigvals[order].clamp_min(0).sqrt()
            U = space @ eigvecs[:, order]
            unit_cols = W_U / W_U.norm(dim=0, keepdim=True).clamp_min(1e-30)
            mean_col = unit_cols.mean(1).double()
            col_cov = (unit_cols @ unit_cols.T).double() / unit_cols.shape[1] - torch.outer(mean_col, mean_col)
        basis = UnembedBasis(W_U=W_U, S=S, U=U, gram=gram, col_cov=col_cov)
        _BASES[adapter.model] = (version, basis)
        return basis


def default_k(d_model: int) -> int:
    """k, the number of bottom singular directions: about 1% of d_model (Stolfo et al.), at least 1."""
    return max(1, round(0.01 * d_model))


def check_k(k: int | None, d_model: int) -> int:
    k = default_k(d_model) if k is None else int(k)
    if not 1 <= k < d_model:
        raise InterpscopeError(f"k must be between 1 and {d_model - 1} (d_model is {d_model}); got {k}.")
    return k


def check_layer(adapter: ModelAdapter, layer: int | None) -> int:
    """A layer index (None = the final layer; negative counts from the end), checked against the model."""
    if not adapter.has_mlp:
        raise InterpscopeError(f"{adapter.family} models have no MLP neurons to analyse.")
    n_layers = adapter.n_layers
    layer = n_layers - 1 if layer is None else int(layer)
    if layer < 0:
        layer += n_layers
    if not 0 <= layer < n_layers:
        raise InterpscopeError(f"Layer {layer} is out of range: this model has layers 0..{n_layers - 1}.")
    return layer


@dataclass
class NeuronStats(CandidatesDocument):
    """Per-neuron weight statistics of one layer (arrays of length d_mlp), on what each neuron writes into the
    residual (through the MLP's output norm at its typical scale `post_scale` where the model has one)."""

    layer: int
    k: int
    norm: np.ndarray
    logit_var: np.ndarray
    rho: np.ndarray
    unigram_cosine: np.ndarray | None
    post_scale: float | None = None  # the MLP output norm's typical scale the writes were divided by (None: no norm)
    model: str | None = None  # the loaded model's name, when known
    top: int | None = None  # how many neurons (highest rho first) the document and table list; None: all

    def ranking(self) -> np.ndarray:
        """Neuron indices sorted by rho, highest first (ties broken by norm)."""
        return np.lexsort((-self.norm, -self.rho))

    def rows(self, top: int | None = None) -> list[dict]:
        order = self.ranking()[: top or len(self.rho)]
        uni = self.unigram_cosine
        return [{"layer": self.layer, "index": int(n), "norm": float(self.norm[n]),
                 "logit_var": float(self.logit_var[n]), "rho": float(self.rho[n]),
                 "unigram_cosine": None if uni is None else float(uni[n])} for n in order]


def stats_for_vectors(basis: UnembedBasis, vectors: torch.Tensor, k: int,
                      unigram: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """norm, LogitVar, rho (and the cosine of each vector's logit effect with the unit unigram direction
    `unigram` [V], when given) for write directions `vectors` [n, d] already folded like W_out."""
    vectors = vectors.double().to(basis.gram.device)
    norm = vectors.norm(dim=1)
    unit = vectors / norm.clamp_min(1e-30)[:, None]
    logit_var = ((unit @ basis.col_cov) * unit).sum(1).clamp_min(0)
    rho = (unit @ basis.bottom(k)).norm(dim=1)
    out = {"norm": norm, "logit_var": logit_var, "rho": rho}
    if unigram is not None:
        along_u = (basis.W_U @ unigram.to(device=basis.W_U.device, dtype=basis.W_U.dtype)).double()
        logit_norm = ((vectors @ basis.gram) * vectors).sum(1).clamp_min(0).sqrt()
        out["unigram_cosine"] = (vectors @ along_u) / logit_norm.clamp_min(1e-30)
    return {name: value.cpu().numpy() for name, value in out.items()}


def neuron_stats(adapter: ModelAdapter, layer: int | None = None, k: int | None = None,
                 unigram: torch.Tensor | None = None, post_scale: float | None = None) -> NeuronStats:
    """Weight statistics of every MLP neuron of `layer` (default: the final layer), on what each neuron writes
    into the residual: through the MLP's output norm when the adapter declares one, at that norm's typical scale
    `post_scale` (interpscope.entropy_neurons.postnorm.layer_post_scale; required then)."""
    layer = check_layer(adapter, layer)
    k = check_k(k, adapter.d_model)
    basis = unembed_basis(adapter)
    with torch.no_grad():
        stats = stats_for_vectors(basis, folded_W_out(adapter, layer, post_scale=post_scale), k, unigram)
    return NeuronStats(layer=layer, k=k, norm=stats["norm"], logit_var=stats["logit_var"], rho=stats["rho"],
                       unigram_cosine=stats.get("unigram_cosine"),
                       post_scale=None if adapter.mlp_output_norm(layer) is None or post_scale is None
                       else float(post_scale))
