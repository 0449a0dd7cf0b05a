"""The tuned lens beside the logit lens on one text: per lens step, the KL from the final layer's distribution to
each lens's (mean over the positions that are not excluded), and each lens's top token at the last position.

The control is the logit lens itself (the tuned lens starts as it), and the per-step held-out KL measured when the
lens was fitted (from its manifest), so a reader sees whether this text behaves like the held-out corpus.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interpscope.capture import capture
from interpscope.flow.tuned import kl_to_final, lens_logits, lens_steps, load_tuned_lens, step_points
from interpscope.results import Result, to_plain

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

# Rows (step x position) unembedded in one product: ~100 MB of float32 logits at a 49k vocabulary.
ROWS_PER_PRODUCT = 512


@dataclass
class LensComparison(Result):
    """Tuned vs logit lens on one text (schema interpscope.lens_comparison; inside the flow document under
    `tuned_lens` when the flow was asked for it).

    kl_logit / kl_tuned [n_steps]: mean KL(final || lens) in nats over the kept positions; top_logit / top_tuned: each
    lens's top token at the last position per step; heldout_*: the fit's held-out KL per step (manifest)."""

    SCHEMA = "interpscope.lens_comparison"
    SCHEMA_VERSION = 1

    model: str
    steps: list[str]
    positions: list[int]
    kl_logit: np.ndarray
    kl_tuned: np.ndarray
    top_logit: list[str]
    top_tuned: list[str]
    heldout_logit: list[float] = field(default_factory=list)
    heldout_tuned: list[float] = field(default_factory=list)
    rank: int = 0
    rebuild: str = ""

    def tidy(self) -> list[dict]:
        """One row per lens step."""
        rows = []
        for i, step in enumerate(self.steps):
            row = {"step": step, "kl_logit": float(self.kl_logit[i]), "kl_tuned": float(self.kl_tuned[i]),
                   "top_logit": self.top_logit[i], "top_tuned": self.top_tuned[i]}
            if self.heldout_logit:
                row.update(heldout_kl_logit=self.heldout_logit[i], heldout_kl_tuned=self.heldout_tuned[i])
            rows.append(row)
        return rows

    def payload(self) -> dict[str, Any]:
        return to_plain({"model": self.model, "positions": self.positions, "rank": self.rank,
                         "rebuild": self.rebuild, "steps": self.tidy()})

    def figure(self):
        from interpscope.figures.flow import kl_figure

        return kl_figure(self.steps, self.kl_logit, self.kl_tuned, self.heldout_logit, self.heldout_tuned)

    def sentence(self) -> str:
        """What the numbers say, computed from them."""
        inner = range(1, len(self.steps) - 1)
        better = [i for i in inner if self.kl_tuned[i] < self.kl_logit[i]]
        ratio = float(np.median([self.kl_tuned[i] / max(self.kl_logit[i], 1e-12) for i in inner])) if inner else 1.0
        return (f"On this text the tuned lens is closer to the final distribution than the logit lens after "
                f"{len(better)} of {len(inner)} intermediate steps (median KL ratio tuned / logit {ratio:.2f}; KL "
                f"averaged over {len(self.positions)} positions).")


def compare_lenses(lm: LoadedModel, ids: torch.Tensor, excluded: list[int]) -> LensComparison:
    """Both lenses on input_ids [1, T], averaged over the positions not in `excluded`."""
    lens = load_tuned_lens(lm)
    adapter = lm.adapter
    points = step_points(adapter)
    acts = capture(adapter, ids, points).activations
    keep = [p for p in range(ids.shape[1]) if p not in set(excluded)] or [ids.shape[1] - 1]
    residuals = torch.stack([acts[point].reshape(ids.shape[1], -1)[keep].float() for point in points])  # [S, P, d]
    final = lens_logits(adapter, residuals[-1])
    with torch.no_grad():
        # Both lenses' residuals of every step, unembedded in a few large products rather than one per step and
        # lens: reading the [d, vocab] unembedding once per chunk instead of 2 x n_steps times (memory-bound here).
        shown = torch.cat([residuals, torch.stack([lens.translate(s, r) for s, r in enumerate(residuals)])])
        per_chunk = max(1, ROWS_PER_PRODUCT // len(keep))
        kl, top = [], []
        for start in range(0, len(shown), per_chunk):
            logits = lens_logits(adapter, shown[start:start + per_chunk])  # [k, P, vocab]
            kl.append(kl_to_final(final, logits).mean(-1))  # final [P, vocab] broadcasts over the k steps
            top.append(logits[:, -1].argmax(-1))
        kls, tops = torch.cat(kl).tolist(), lm.token_strings([int(t) for t in torch.cat(top)])
    n = len(points)
    kl_logit, kl_tuned, top_logit, top_tuned = kls[:n], kls[n:], tops[:n], tops[n:]
    held = lens.heldout_kl
    return LensComparison(model=lm.name, steps=lens_steps(adapter), positions=keep, kl_logit=np.array(kl_logit),
                          kl_tuned=np.array(kl_tuned), top_logit=top_logit, top_tuned=top_tuned,
                          heldout_logit=list(held.get("logit", [])), heldout_tuned=list(held.get("tuned", [])),
                          rank=lens.rank, rebuild=str(lens.manifest.get("rebuild", "")))
