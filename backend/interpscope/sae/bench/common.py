"""What every SAEBench-style metric shares: the run's inputs, the SAE as an encoder, a random control SAE, linear
probes (logistic regression in torch: no scikit-learn here), AUROC, and an on-disk cache of model activations.

- Encoder: encode(x [N, d_in]) -> latents [N, d_sae] and W_dec [d_sae, d_in]: what the metrics read of an SAE. A
  loaded SAE is one (`sae_encoder`); so is the control `random_encoder`: the same shape, random unit decoder rows,
  encoder = decoder transposed, each latent's threshold set so it fires on the real SAE's mean density (L0 / d_sae)
  of the given activations. It is what an SAE with no learned structure scores.
- Probes: `fit_logistic` trains multinomial (or binary, two classes) logistic regression with an L2 penalty by
  L-BFGS on inputs centred and scaled by one number (directions keep the activation space's geometry).
- Activations are model-only facts (no SAE in them), so `cached_array` keeps them under data_dir()/sae_bench/ keyed
  by model, hook and task; a second SAE on the same hook, or a rerun, reads them back.
"""
from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interpscope import atomic
from interpscope.capture import StopForward, hooks, model_lock
from interpscope.config import data_dir
from interpscope.generation import _cache_kwarg

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

StageProgress = Callable[[float, str], None]


@dataclass
class Encoder:
    """What the metrics read of an SAE: its encoder as a function and its decoder rows."""

    encode: Callable[[torch.Tensor], torch.Tensor]
    W_dec: torch.Tensor
    label: str = "SAE"

    @property
    def d_sae(self) -> int:
        return int(self.W_dec.shape[0])


def sae_encoder(sae) -> Encoder:
    """A loaded SparseAutoencoder as an Encoder (float32, no gradients)."""
    sae.eval()
    dtype = sae.W_enc.dtype

    @torch.no_grad()
    def encode(x: torch.Tensor) -> torch.Tensor:
        return sae.encode(x.to(dtype)).float()
    return Encoder(encode, sae.W_dec.detach().float(), label=f"{sae.cfg.architecture} SAE")


def random_encoder(d_in: int, d_sae: int, x: torch.Tensor, density: float, seed: int = 0) -> Encoder:
    """The control SAE: random unit decoder rows, encoder = their transpose, per-latent thresholds at the
    (1 - density) quantile of its pre-activations on x (so it fires as often as the SAE it stands beside)."""
    generator = torch.Generator().manual_seed(seed)
    W_dec = torch.randn(d_sae, d_in, generator=generator)
    W_dec = W_dec / W_dec.norm(dim=1, keepdim=True)
    sample = x[torch.randperm(x.shape[0], generator=generator)[:2048]].float()
    mean = sample.mean(0)
    pre = (sample - mean) @ W_dec.T
    density = float(min(max(density, 1.0 / max(sample.shape[0], 1)), 0.5))
    threshold = torch.quantile(pre, 1.0 - density, dim=0)

    @torch.no_grad()
    def encode(rows: torch.Tensor) -> torch.Tensor:
        return torch.relu((rows.float() - mean) @ W_dec.T - threshold)
    return Encoder(encode, W_dec, label="random SAE (same shape, random decoder)")


@contextmanager
def few_threads(n: int = 1) -> Iterator[None]:
    """Run small tensor work (thousands of probe fits on [N, k] inputs) on n threads, then restore the count: on
    small operands thread hand-offs cost more than they save (measured 20x on a busy 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(min(n, before))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass
class Probe:
    """A fitted logistic regression: weight [d, C] and bias [C] on inputs (x - shift) / scale."""

    weight: torch.Tensor
    bias: torch.Tensor
    shift: torch.Tensor
    scale: float

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return ((x.float() - self.shift) / self.scale) @ self.weight + self.bias

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(x).argmax(-1)

    def direction(self, cls: int) -> torch.Tensor:
        """Unit direction in the input space along which class cls's logit grows (one scale, so no distortion)."""
        w = self.weight[:, cls] if self.weight.shape[1] > 1 else self.weight[:, 0]
        return w / w.norm().clamp_min(1e-12)


def fit_logistic(x: torch.Tensor, y: torch.Tensor, n_classes: int, l2: float = 1e-3, steps: int = 100,
                 standardise: bool = False) -> Probe:
    """Multinomial logistic regression (n_classes >= 2) with penalty l2 * ||W||^2, by L-BFGS, deterministic.
    standardise: scale each input column to unit variance (for latents of very different sizes)."""
    x = x.float()
    shift = x.mean(0)
    centred = x - shift
    if standardise:
        per_column = centred.std(0).clamp_min(1e-6)
        centred = centred / per_column
    scale = float(centred.pow(2).sum(1).mean().sqrt().clamp_min(1e-6)) / max(x.shape[1], 1) ** 0.5
    inputs = centred / scale
    weight = torch.zeros(x.shape[1], n_classes, requires_grad=True)
    bias = torch.zeros(n_classes, requires_grad=True)
    optimiser = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")
    target = y.long()

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        loss = torch.nn.functional.cross_entropy(inputs @ weight + bias, target) + l2 * weight.pow(2).sum()
        loss.backward()
        return loss
    with torch.enable_grad():
        optimiser.step(closure)
    w = weight.detach()
    if standardise:
        w = w / per_column[:, None]
    return Probe(w, bias.detach(), shift, scale)


def binary_f1(predicted: np.ndarray, truth: np.ndarray) -> float:
    """F1 of boolean predictions (0 when nothing is predicted or nothing is true)."""
    tp = float(np.sum(predicted & truth))
    denominator = float(np.sum(predicted) + np.sum(truth))
    return 2 * tp / denominator if denominator else 0.0


def auroc(positive: np.ndarray, negative: np.ndarray) -> float | None:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties counted half (None without
    both kinds)."""
    positive, negative = np.asarray(positive, float), np.asarray(negative, float)
    if positive.size == 0 or negative.size == 0:
        return None
    greater = (positive[:, None] > negative[None, :]).mean()
    ties = (positive[:, None] == negative[None, :]).mean()
    return float(greater + ties / 2)


def median_accuracy(positive: np.ndarray, negative: np.ndarray) -> float | None:
    """Accuracy of 'positive when above the median of all scores' on a balanced set (0.5 for a constant judge)."""
    if len(positive) == 0 or len(negative) == 0:
        return None
    cut = float(np.median(np.concatenate([positive, negative])))
    hits = np.concatenate([np.asarray(positive) > cut, np.asarray(negative) <= cut])
    return float(hits.mean())


@torch.no_grad()
def hook_rows(lm: LoadedModel, hook_name: str, windows: torch.Tensor, batch_size: int = 32,
              progress: Callable[[int, int], None] | None = None, prefix: list[int] | None = None) -> torch.Tensor:
    """Activations at hook_name of token windows [N, T] (all their positions), float32 [N, T, d]; the forward pass
    stops at the hook when the hook ends a block. With `prefix`, every window follows those tokens: the prefix runs
    once and its key/value cache is shared by every batch (only the windows' own positions are returned). Runs
    under the model's lock through interpscope.capture."""
    stop_early = lm.adapter.resolve(hook_name).kind == "post" and hook_name.startswith("blocks.")
    captured: dict[str, torch.Tensor] = {}

    def grab(tensor: torch.Tensor):
        captured["x"] = tensor.detach().float().cpu()
        if stop_early:
            raise StopForward
        return None

    pieces = []
    with model_lock(lm):
        for first in range(0, windows.shape[0], batch_size):
            batch = windows[first:first + batch_size].to(lm.device)
            batch, extra, offset = after_prefix(lm, prefix or [], batch)
            try:
                with hooks(lm.adapter, {hook_name: grab}, role="read"):
                    lm.model(input_ids=batch, **extra)
            except StopForward:
                pass
            pieces.append(captured.pop("x")[:, offset:])
            if progress:
                progress(min(first + batch_size, windows.shape[0]), windows.shape[0])
    return torch.cat(pieces)


def after_prefix(lm: LoadedModel, prefix: list[int], batch: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any], int]:
    """How to run token rows `batch` [B, T] after the same `prefix`: (input ids, forward kwargs, offset of the
    batch's first position in the outputs). With a key/value cache the prefix runs once and its cache is repeated
    over the batch; a model without one (Mamba) gets the prefix prepended to every row."""
    if not prefix:
        return batch, {"use_cache": False}, 0
    name = _cache_kwarg(lm.model)
    head = torch.tensor([prefix], device=batch.device)
    if name is None:
        return torch.cat([head.expand(batch.shape[0], -1), batch], 1), {"use_cache": False}, len(prefix)
    cache = getattr(lm.model(input_ids=head, use_cache=True), name)
    cache.batch_repeat_interleave(batch.shape[0])
    return batch, {"use_cache": True, name: cache}, 0


def cache_key(parts: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cached_array(parts: dict[str, Any], compute: Callable[[], np.ndarray], use_cache: bool = True) -> np.ndarray:
    """compute() once per `parts` (model, hook, task spec): kept as .npy under data_dir()/sae_bench/, atomically,
    so an interrupted bench resumes from the arrays already made."""
    if not use_cache:
        return compute()
    path = data_dir() / "sae_bench" / f"{cache_key(parts)}.npy"
    if path.is_file():
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            pass  # a damaged file is recomputed
    array = compute()
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(path, buffer.getvalue())
    return array


@dataclass
class BenchInputs:
    """What one metric run reads: the model, the SAE (as an encoder, and the loaded SAE), its hook, its feature
    store (or None), the seed, whether to use the activation cache, a staged progress callback, per-metric options
    (sizes, a judge) and a memo the metrics of one run share (sampled features, the negative pool)."""

    lm: Any
    encoder: Encoder
    hook_name: str
    sae: Any = None
    store: Any = None
    seed: int = 0
    use_cache: bool = True
    progress: StageProgress | None = None
    options: dict[str, Any] = field(default_factory=dict)
    memo: dict[str, Any] = field(default_factory=dict)

    def report(self, fraction: float, text: str) -> None:
        if self.progress is not None:
            self.progress(min(max(fraction, 0.0), 1.0), text)
