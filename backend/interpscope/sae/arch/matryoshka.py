"""Matryoshka BatchTopK SAE (Bussmann et al. 2025, "Learning Multi-Level Features with Matryoshka SAEs").

The dictionary is read as nested prefixes of widths m_1 < m_2 < ... < m_n = d_sae. Features are chosen as in
BatchTopK (the k x batch largest ReLU'd pre-activations of the whole batch); each prefix j then reconstructs on its
own, x_hat_j = f[:, :m_j] W_dec[:m_j] + b_dec, and the loss is the SUM of the prefix losses
sum_j ||x - x_hat_j||^2 (plus AuxK for dead latents, as BatchTopK). The first features must therefore carry the
coarse, frequent directions by themselves, which keeps a general feature from being absorbed into specific ones.
The selection is made once over the whole dictionary and each prefix keeps its own part of it (the paper's
choice; SAELens re-selects within each prefix). Inference is BatchTopK's: a JumpReLU with one global threshold.

Prefix widths: cfg.extra["matryoshka_widths"] (strictly increasing, the last equal to d_sae, the first at least
k); by default d_sae/8, d_sae/4, d_sae/2, d_sae (those below k dropped).

Folders: as SAELens saves a trained Matryoshka BatchTopK SAE, i.e. as a JumpReLU (`"architecture": "jumprelu"`,
`threshold` = theta for every feature) with its training fields under their SAELens names (`k`,
`matryoshka_widths`); `metadata.interpscope.architecture = "matryoshka_batchtopk"` records the provenance. SAELens
training checkpoints (`"architecture": "matryoshka_batchtopk"`, a scalar `topk_threshold`) are read too.
"""
from __future__ import annotations

from typing import Any

import torch

from interpscope.sae.arch.base import Knob, LossTerms, SAEConfig, squared_error
from interpscope.sae.arch.batchtopk import BatchTopKSAE

WIDTHS_FIELD = "matryoshka_widths"


def default_widths(d_sae: int, k: int) -> list[int]:
    """d_sae/8, d_sae/4, d_sae/2, d_sae, keeping only prefixes of at least k features."""
    widths = sorted({max(1, d_sae // 8), max(1, d_sae // 4), max(1, d_sae // 2), d_sae})
    return [w for w in widths if w >= k] or [d_sae]


def check_widths(widths: Any, d_sae: int, k: int) -> list[int]:
    """The prefix widths as ints, or ValueError naming what is wrong (SAELens's rules)."""
    if not isinstance(widths, (list, tuple)) or not widths:
        raise ValueError(f"{WIDTHS_FIELD} must be a non-empty list of widths (got {widths!r}).")
    if not all(isinstance(w, int) and not isinstance(w, bool) for w in widths):
        raise ValueError(f"{WIDTHS_FIELD} must hold whole numbers (got {widths!r}).")
    out = [int(w) for w in widths]
    if any(b <= a for a, b in zip(out, out[1:], strict=False)):
        raise ValueError(f"{WIDTHS_FIELD} must be strictly increasing (got {out}).")
    if out[-1] != d_sae:
        raise ValueError(f"The last of {WIDTHS_FIELD} must be d_sae = {d_sae} (got {out}).")
    if out[0] < k:
        raise ValueError(f"The smallest of {WIDTHS_FIELD} ({out[0]}) must be at least k = {k}.")
    return out


class MatryoshkaBatchTopKSAE(BatchTopKSAE):
    """BatchTopK whose nested dictionary prefixes each reconstruct the input; the loss sums the prefix losses."""

    architecture = "matryoshka_batchtopk"
    aliases = ("matryoshka_batchtopk", "matryoshka")
    short_name = "matryoshka"
    label = "Matryoshka BatchTopK"
    knob = Knob("k", "k (features per token, batch average)", 32)

    @classmethod
    def check_config(cls, cfg: SAEConfig) -> None:
        super().check_config(cfg)
        if WIDTHS_FIELD in cfg.extra:
            check_widths(cfg.extra[WIDTHS_FIELD], cfg.d_sae, int(cfg.k or 1))

    @classmethod
    def read_fields(cls, raw: dict) -> dict:
        fields = super().read_fields(raw)
        widths = raw.get(WIDTHS_FIELD)
        if widths is not None:
            fields["extra"] = {WIDTHS_FIELD: widths}
        return fields

    @classmethod
    def write_fields(cls, cfg: SAEConfig) -> dict:
        fields = super().write_fields(cfg)
        fields[WIDTHS_FIELD] = cfg.extra.get(WIDTHS_FIELD) or default_widths(cfg.d_sae, int(cfg.k or 1))
        return fields

    @property
    def widths(self) -> list[int]:
        """The prefix widths this SAE trains (its config's, or the default)."""
        given = self.cfg.extra.get(WIDTHS_FIELD)
        return check_widths(given, self.cfg.d_sae, self.top_k) if given else default_widths(self.cfg.d_sae,
                                                                                               self.top_k)

    def prefix_reconstructions(self, f: torch.Tensor) -> list[torch.Tensor]:
        """x_hat of each prefix: f[:, :m] W_dec[:m] + b_dec, built up one group of features at a time."""
        outs: list[torch.Tensor] = []
        partial: torch.Tensor = self.b_dec
        start = 0
        for width in self.widths:
            partial = partial + self._decode_rows(f[..., start:width], self.W_dec[start:width])
            outs.append(partial)
            start = width
        return outs

    def training_loss(self, x: torch.Tensor, coefficient: float) -> LossTerms:
        pre = self.pre_activations(x)
        f = self.keep_top_in_training(pre)
        recons = self.prefix_reconstructions(f)
        terms = {f"recon_{width}": squared_error(x, x_hat) for width, x_hat in zip(self.widths, recons, strict=True)}
        x_hat = recons[-1]
        total = sum(terms.values(), torch.zeros((), dtype=x.dtype))
        terms["recon"] = terms[f"recon_{self.widths[-1]}"]
        n_dead = int(self.dead_mask.sum())
        if n_dead > 0:
            k_aux = min(self.aux_k, n_dead)
            values, index = pre.masked_fill(~self.dead_mask, float("-inf")).topk(k_aux, dim=-1)
            f_aux = torch.zeros_like(pre).scatter(-1, index, torch.relu(values))
            aux = self.aux_coefficient * squared_error((x - x_hat).detach(), self._decode_rows(f_aux))
            terms["auxk"] = aux
            total = total + aux
        return LossTerms(total, terms, f, x_hat)
