"""Logit lens in Fourier space: what each layer's attention and MLP output says about the answer.

L_attn(l) = W_U_num^T Attn_out(l), L_mlp(l) = W_U_num^T MLP_out(l) at the prompt's last token (no final norm,
docs/methods/fourier.md), transformed with the Fourier basis over 0..N-1. Plus the residual-stream logit lens
(through the final norm) scored exact / +-2 / +-10 per layer, and the top-5 Fourier components that rebuild a
prediction.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.capture import Capture, capture, model_lock
from interpscope.config import InterpscopeError
from interpscope.fourier.addition import pad_right, score
from interpscope.fourier.basis import fourier_basis, frequency_magnitude
from interpscope.fourier.data import render
from interpscope.fourier.numbers import NumberTokens, number_unembedding
from interpscope.results import Result

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


@dataclass
class ModuleLens(Result):
    """Per-layer number logits of attention and MLP outputs, and their Fourier magnitudes.

    attn_logits / mlp_logits [P, layers, N]: number logits of each prompt's last token.
    attn_fourier / mlp_fourier [layers, N/2]: magnitude per frequency, averaged over prompts.
    low_share_attn / low_share_mlp [layers]: fraction of the (non-constant) energy at frequencies k < tau.
    lens_accuracy / lens_within_2 / lens_within_10 [layers]: residual logit lens after each block.
    """

    model: str
    template: str
    pairs: np.ndarray
    answers: np.ndarray
    periods: np.ndarray
    tau: int
    attn_logits: np.ndarray
    mlp_logits: np.ndarray
    attn_fourier: np.ndarray
    mlp_fourier: np.ndarray
    low_share_attn: np.ndarray
    low_share_mlp: np.ndarray
    lens_accuracy: np.ndarray
    lens_within_2: np.ndarray
    lens_within_10: np.ndarray
    final_logits: np.ndarray

    SCHEMA = "interpscope.fourier.lens"
    SCHEMA_VERSION = 1


def default_tau(n_numbers: int) -> int:
    """Split so that periods <= 10 are 'high' (k >= N/10), as with the paper's tau = 50 for N = 520."""
    return max(1, int(np.ceil(n_numbers / 10)))


def check_tau(tau: int, n_numbers: int) -> int:
    if not 1 <= tau <= n_numbers // 2:
        raise InterpscopeError(f"tau must lie in 1..{n_numbers // 2} (frequencies k < tau are 'low').")
    return int(tau)


def low_share(basis, logits: np.ndarray, tau: int) -> float:
    """Fraction of the non-constant Fourier energy of logits [N] or [N, P] at frequencies k < tau."""
    energy = frequency_magnitude(basis, logits) ** 2
    total = float(energy.sum())
    return float(energy[: tau - 1].sum() / total) if total > 0 else 0.0


def _at_last(result: Capture, shape: torch.Size, rows: torch.Tensor, last: torch.Tensor, name: str) -> torch.Tensor:
    """Activation `name` of a right-padded batch of `shape` [B, T] at each prompt's last real token."""
    tensor = result.activations[name].reshape(shape[0], shape[1], -1)
    return tensor[rows, last.to(tensor.device)]


def module_lens(lm: LoadedModel, numbers: NumberTokens, pairs: np.ndarray, template: str = "{a}+{b}=",
                tau: int | None = None,
                batch: int = 256) -> ModuleLens:
    """Run the prompts once, read every layer's attention/MLP output and residual stream at the last token."""
    adapter = lm.adapter
    n_numbers, n_layers = numbers.n_numbers, adapter.n_layers
    tau = check_tau(default_tau(n_numbers) if tau is None else tau, n_numbers)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    answers = pairs.sum(axis=1)
    if len(pairs) == 0 or answers.max() >= n_numbers:
        raise InterpscopeError(f"Need at least one prompt whose sum is below {n_numbers}.")
    texts = render(template, pairs)
    unembed = number_unembedding(adapter, numbers)
    names = [f"blocks.{layer}.{point}" for layer in range(n_layers)
             for point in ("hook_attn_out", "hook_mlp_out", "hook_resid_post")]
    attn, mlp, resid, final = [], [], [], []
    with model_lock(lm):
        for start in range(0, len(texts), batch):
            ids, mask, last = pad_right(lm.tokenizer, texts[start:start + batch])
            rows = torch.arange(len(ids))
            result = capture(adapter, ids.to(lm.device), names, attention_mask=mask.to(lm.device), to_cpu=False)
            at_last = partial(_at_last, result, ids.shape, rows, last)
            with torch.no_grad():
                attn.append(torch.stack([at_last(f"blocks.{layer}.hook_attn_out") @ unembed
                                         for layer in range(n_layers)], 1))
                mlp.append(torch.stack([at_last(f"blocks.{layer}.hook_mlp_out") @ unembed
                                        for layer in range(n_layers)], 1))
                norm = adapter.final_norm()
                resid.append(torch.stack([norm(at_last(f"blocks.{layer}.hook_resid_post")) @ unembed
                                          for layer in range(n_layers)], 1))
                logits = result.require_logits()
                logits = logits.reshape(len(ids), ids.shape[1], -1)[rows, last.to(logits.device)]
                final.append(logits[:, torch.as_tensor(numbers.ids, device=logits.device)])
    attn_logits = torch.cat(attn).double().cpu().numpy()
    mlp_logits = torch.cat(mlp).double().cpu().numpy()
    resid_logits = torch.cat(resid).double().cpu().numpy()
    basis = fourier_basis(n_numbers)
    lens = np.array([score(resid_logits[:, layer].argmax(-1), answers) for layer in range(n_layers)])

    def averaged(logits: np.ndarray) -> np.ndarray:
        return np.stack([np.mean([frequency_magnitude(basis, p) for p in logits[:, layer]], axis=0)
                         for layer in range(n_layers)])

    return ModuleLens(
        model=lm.name, template=template, pairs=pairs, answers=answers, periods=basis.periods, tau=tau,
        attn_logits=attn_logits, mlp_logits=mlp_logits, attn_fourier=averaged(attn_logits),
        mlp_fourier=averaged(mlp_logits),
        low_share_attn=np.array([low_share(basis, attn_logits[:, layer].T, tau) for layer in range(n_layers)]),
        low_share_mlp=np.array([low_share(basis, mlp_logits[:, layer].T, tau) for layer in range(n_layers)]),
        lens_accuracy=lens[:, 0], lens_within_2=lens[:, 1], lens_within_10=lens[:, 2],
        final_logits=torch.cat(final).double().cpu().numpy())


@dataclass
class TopComponents:
    """The top Fourier components of one prediction's number logits and the logits they rebuild."""

    labels: list[str]
    periods: np.ndarray
    coefficients: np.ndarray
    logits: np.ndarray
    rebuilt: np.ndarray
    predicted: int
    rebuilt_argmax: int


def top_components(logits: np.ndarray, top: int = 5) -> TopComponents:
    """Keep the `top` non-constant basis rows with the largest |coefficient| and map them back to numbers."""
    logits = np.asarray(logits, dtype=np.float64)
    basis = fourier_basis(len(logits))
    coefficients = basis.matrix @ logits
    order = [int(i) for i in np.argsort(-np.abs(coefficients), kind="stable") if basis.frequency[i] > 0][:top]
    kept = np.zeros_like(coefficients)
    kept[order] = coefficients[order]
    rebuilt = basis.matrix.T @ kept
    labels = basis.row_labels()
    return TopComponents(labels=[labels[i] for i in order],
                         periods=np.array([len(logits) / basis.frequency[i] for i in order]),
                         coefficients=coefficients[order], logits=logits, rebuilt=rebuilt,
                         predicted=int(np.argmax(logits)), rebuilt_argmax=int(np.argmax(rebuilt)))


def prompt_fourier(lens: ModuleLens, index: int) -> tuple[np.ndarray, np.ndarray]:
    """Fourier magnitudes [layers, N/2] of one prompt's attention and MLP number logits."""
    if not 0 <= index < len(lens.answers):
        raise InterpscopeError(f"Prompt {index} out of range 0..{len(lens.answers) - 1}.")
    basis = fourier_basis(lens.attn_logits.shape[2])
    return (np.stack([frequency_magnitude(basis, row) for row in lens.attn_logits[index]]),
            np.stack([frequency_magnitude(basis, row) for row in lens.mlp_logits[index]]))
