"""The tuned lens: one affine translator per layer that maps that layer's residual stream onto what the final layer
would make of it, read through the model's own final norm and unembedding (Belrose et al., 2023).

The logit lens reads a middle residual as if it were the last one; early layers speak a different basis, so it
is far from the model's final distribution there. A translator h -> h + (h V) U^T + b (identity plus a rank-r
correction plus a bias: the identity is the logit lens, so an untrained translator is exactly the logit lens) is
fitted per layer to minimise KL(final || lens) on the bundled corpus by scripts/train_tuned_lens.py. Lens step 0 is
the embeddings, step i the output of block i - 1; the last block's output needs no translator (the lens there is
the model's own prediction).

Files: assets/tuned_lens/<model>/translators.safetensors (U [n, d, r], V [n, d, r], bias [n, d], float16) and
manifest.json (how to rebuild, the fit, per-layer held-out KL of both lenses). Loading checks shapes and that the
file was fitted on this model (its name, sizes and a fingerprint of the unembedding), and refuses otherwise.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from interpscope.config import ASSETS_DIR, InterpscopeError, artefact_hint

if TYPE_CHECKING:
    from interpscope.adapters import ModelAdapter
    from interpscope.models.loaded import LoadedModel

LENS_DIR = ASSETS_DIR / "tuned_lens"
WEIGHTS = "translators.safetensors"
MANIFEST = "manifest.json"
FINGERPRINT_COLUMNS = 16


def fingerprint(adapter: ModelAdapter) -> list[float]:
    """A dtype-robust trace of the model's unembedding: the norms of its first columns (token vectors)."""
    W_U = adapter.W_U().detach().float().cpu()
    return [float(v) for v in W_U[:, :FINGERPRINT_COLUMNS].norm(dim=0)]


def lens_steps(adapter: ModelAdapter) -> list[str]:
    """The names of the lens steps, as the flow page shows them: the embeddings, then every block."""
    return ["embeddings", *(f"block {layer}" for layer in range(adapter.n_layers))]


def step_points(adapter: ModelAdapter) -> list[str]:
    """The residual hook point read at each lens step."""
    return ["blocks.0.hook_resid_pre", *(f"blocks.{layer}.hook_resid_post" for layer in range(adapter.n_layers))]


def lens_logits(adapter: ModelAdapter, residual: torch.Tensor) -> torch.Tensor:
    """Logits [..., vocab] of residuals [..., d] read through the final norm and the unembedding (float32): the
    logit lens. After the last block this is the model's own output."""
    norm = adapter.folded_norm()
    x = residual.float()
    gamma = norm.gamma.float().to(x.device)
    normed = gamma * norm.centre(x) / torch.sqrt(norm.centre(x).pow(2).mean(-1, keepdim=True) + norm.eps)
    if norm.beta is not None:
        normed = normed + norm.beta.float().to(x.device)
    logits = normed @ adapter.W_U().detach().float().to(x.device)
    b_U = adapter.b_U()
    return logits + b_U.detach().float().to(x.device) if b_U is not None else logits


def kl_to_final(final_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(final || lens) per position [...], in nats, over the whole vocabulary."""
    log_p = torch.log_softmax(final_logits.float(), -1)
    log_q = torch.log_softmax(logits.float(), -1)
    return (log_p.exp() * (log_p - log_q)).sum(-1)


@dataclass
class TunedLens:
    """Fitted translators of one model: U, V [n_steps - 1, d, rank] and bias [n_steps - 1, d] (float32 in memory),
    for lens steps 0 .. n_layers - 1 (the embeddings and every block but the last), plus the manifest."""

    model: str
    U: torch.Tensor
    V: torch.Tensor
    bias: torch.Tensor
    manifest: dict

    @property
    def rank(self) -> int:
        return int(self.U.shape[-1])

    def translate(self, step: int, residual: torch.Tensor) -> torch.Tensor:
        """The translated residual [..., d] of lens step `step` (the last step is returned unchanged)."""
        if step >= self.U.shape[0]:
            return residual.float()
        x = residual.float()
        U, V, b = (t.to(x.device) for t in (self.U[step], self.V[step], self.bias[step]))
        return x + (x @ V) @ U.T + b

    def logits(self, adapter: ModelAdapter, step: int, residual: torch.Tensor) -> torch.Tensor:
        """The tuned lens's logits at lens step `step`."""
        return lens_logits(adapter, self.translate(step, residual))

    @property
    def heldout_kl(self) -> dict[str, list[float]]:
        """Per-step held-out KL of the tuned and of the logit lens measured when the lens was fitted (manifest)."""
        return self.manifest.get("heldout_kl", {})


def folder_for(model_name: str) -> Path:
    return LENS_DIR / Path(str(model_name)).name


def available(model_name: str) -> bool:
    """Whether a tuned lens ships for this model name."""
    return (folder_for(model_name) / WEIGHTS).is_file()


def check_lens(lens: TunedLens, adapter: ModelAdapter, model_name: str) -> None:
    """Refuse translators that do not fit this model: wrong name, wrong sizes, or another model's unembedding."""
    meta = lens.manifest
    n, d = adapter.n_layers, adapter.d_model
    if meta.get("model") != model_name:
        raise InterpscopeError(f"This tuned lens was fitted on {meta.get('model')!r}, not {model_name!r}.")
    want = (n, d, lens.rank)
    for name, tensor in (("U", lens.U), ("V", lens.V)):
        if tuple(tensor.shape) != want:
            raise InterpscopeError(f"Tuned lens {name} has shape {tuple(tensor.shape)}; {model_name} needs {want} "
                                   f"({n} translators of d_model {d}).")
    if tuple(lens.bias.shape) != (n, d):
        raise InterpscopeError(f"Tuned lens bias has shape {tuple(lens.bias.shape)}; {model_name} needs {(n, d)}.")
    stored = torch.tensor(meta.get("fingerprint", []), dtype=torch.float32)
    here = torch.tensor(fingerprint(adapter), dtype=torch.float32)
    if stored.shape != here.shape or not torch.allclose(stored, here, rtol=2e-2, atol=1e-3):
        raise InterpscopeError(f"This tuned lens was fitted on a model with other unembedding weights than the "
                               f"loaded {model_name}: refit it (scripts/train_tuned_lens.py --model {model_name}).")
    if not all(torch.isfinite(t).all() for t in (lens.U, lens.V, lens.bias)):
        raise InterpscopeError("The tuned lens file holds non-finite numbers.")


def read_lens(folder: Path) -> TunedLens:
    """The translators and manifest in `folder` (unchecked)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights, manifest = folder / WEIGHTS, folder / MANIFEST
    if not weights.is_file() or not manifest.is_file():
        raise InterpscopeError(f"No tuned lens in {folder.name}/ (expected {WEIGHTS} and {MANIFEST}).")
    try:
        tensors = load_file(str(weights))
        meta = json.loads(manifest.read_text(encoding="utf-8"))
    except (SafetensorError, OSError, ValueError) as err:
        raise InterpscopeError(f"The tuned lens in {folder.name}/ is not readable ({err}).") from None
    missing = {"U", "V", "bias"} - tensors.keys()
    if missing:
        raise InterpscopeError(f"The tuned lens file lacks {sorted(missing)}.")
    return TunedLens(model=str(meta.get("model")), U=tensors["U"].float(), V=tensors["V"].float(),
                     bias=tensors["bias"].float(), manifest=meta)


_CACHE: dict[tuple, TunedLens] = {}


def load_tuned_lens(lm: LoadedModel, folder: str | Path | None = None) -> TunedLens:
    """The shipped (or `folder`'s) tuned lens of `lm`, checked against the model; InterpscopeError when none ships
    or it was fitted on another model."""
    path = Path(folder) if folder is not None else folder_for(lm.name)
    key = (str(path.resolve()), str(lm.name), tuple(fingerprint(lm.adapter)))  # checked once per model and file
    if key not in _CACHE:
        if folder is None and not available(lm.name):
            shipped = sorted(p.name for p in LENS_DIR.iterdir() if p.is_dir()) if LENS_DIR.is_dir() else []
            how = (f"fit one with scripts/train_tuned_lens.py --model {lm.name}" if LENS_DIR.parent.is_dir()
                   else artefact_hint())
            raise InterpscopeError(f"No tuned lens ships for {lm.name} (shipped: {', '.join(shipped) or 'none'}; "
                                   f"{how}).")
        lens = read_lens(path)
        check_lens(lens, lm.adapter, str(lm.name))
        _CACHE[key] = lens
    return _CACHE[key]


def save_lens(folder: Path, U: torch.Tensor, V: torch.Tensor, bias: torch.Tensor, manifest: dict) -> None:
    """Write translators (float16) and the manifest atomically."""
    from safetensors.torch import save

    from interpscope import atomic

    folder.mkdir(parents=True, exist_ok=True)
    data = save({"U": U.half().contiguous(), "V": V.half().contiguous(), "bias": bias.half().contiguous()})
    atomic.write_bytes(folder / WEIGHTS, data)
    atomic.write_json(folder / MANIFEST, manifest)
