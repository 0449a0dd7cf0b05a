"""Synthetic ground truth for SAEs: activations built from a known dictionary, so what an SAE learnt can be scored
against the features that are really there (SAELens's SynthSAEBench does the same at 16k features).

The generator (`SynthSpec`, `SynthData`): N unit feature directions in d dimensions (N > d: superposition), each
firing with a Zipf-distributed probability scaled so that the expected number of active features per row is
`target_l0`; the first `n_correlated` features fire in groups of `group_size` through a Gaussian copula of
correlation `correlation`; `n_parents` hierarchical parents each have `children` children, and a child fires only
where its parent fires (at most one child per parent, with probability `child_rate`); magnitudes are
1 + `magnitude_std` * N(0, 1), clipped at 0; isotropic Gaussian noise of expected norm `noise` is added. Every
batch is generated from (seed, batch index), so training reads fresh rows without a cache on disk.

Scores (`score_decoder`, `absorption`): MCC is the mean |cos| between learnt and true decoder directions over a
one-to-one (Hungarian) matching (the definition SAELens uses); recovery is the share of true features that some
learnt decoder row matches at cos > 0.9; absorption of a hierarchical parent is the share of rows where its child
fires on which the SAE's parent latent (the latent whose decoder row is closest to the parent direction) is
silent, relative to how often that latent fires when the parent fires alone. The true dictionary itself is the
reference: its L0 is the generator's and its FVU is the noise's share of the variance; the controls are the true
dictionary (MCC 1) and a random one of the SAE's width (chance MCC).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

RECOVERY_COS = 0.9


@dataclass
class SynthSpec:
    """The known dictionary and how its features fire (see the module docstring)."""

    n_features: int = 512
    d_model: int = 256
    target_l0: float = 12.0
    zipf_exponent: float = 0.5
    n_correlated: int = 128
    group_size: int = 4
    correlation: float = 0.6
    n_parents: int = 16
    children: int = 2
    child_rate: float = 0.5
    magnitude_std: float = 0.15
    noise: float = 0.3
    seed: int = 0

    def check(self) -> None:
        """Raise ValueError naming the first setting that cannot generate data."""
        n_hier = self.n_parents * (1 + self.children)
        if self.n_features < 2 or self.d_model < 2:
            raise ValueError(f"n_features and d_model must be at least 2 (got {self.n_features}, {self.d_model}).")
        if self.n_correlated + n_hier > self.n_features:
            raise ValueError(f"n_correlated ({self.n_correlated}) + hierarchical features ({n_hier}) exceed "
                             f"n_features ({self.n_features}).")
        if not 0 < self.target_l0 < self.n_features / 2:
            raise ValueError(f"target_l0 must lie between 0 and n_features / 2 (got {self.target_l0}).")
        if self.group_size < 1 or not 0 <= self.correlation < 1 or not 0 <= self.child_rate <= 1:
            raise ValueError("group_size must be >= 1, correlation in [0, 1) and child_rate in [0, 1].")
        if not (self.noise >= 0 and self.magnitude_std >= 0 and self.zipf_exponent >= 0):
            raise ValueError("noise, magnitude_std and zipf_exponent must be 0 or more.")


def _normal_icdf(p: np.ndarray) -> np.ndarray:
    """Inverse standard normal CDF (through torch's erfinv: no scipy)."""
    return math.sqrt(2) * torch.erfinv(torch.as_tensor(2 * p - 1, dtype=torch.float64)).numpy()


class SynthData:
    """The dictionary and firing model of a SynthSpec; `batch(i, n)` is a pure function of (seed, i)."""

    def __init__(self, spec: SynthSpec):
        spec.check()
        self.spec = spec
        rng = np.random.default_rng([spec.seed, 1])
        directions = rng.standard_normal((spec.n_features, spec.d_model))
        self.directions = directions / np.linalg.norm(directions, axis=1, keepdims=True)
        n = spec.n_features
        n_hier = spec.n_parents * (1 + spec.children)
        # layout: [correlated groups | parents | children (parent-major) | independent]
        self.parents = np.arange(spec.n_correlated, spec.n_correlated + spec.n_parents)
        first_child = spec.n_correlated + spec.n_parents
        self.child_of = {int(p): list(range(first_child + i * spec.children, first_child + (i + 1) * spec.children))
                         for i, p in enumerate(self.parents)}
        self.is_child = np.zeros(n, bool)
        self.is_child[first_child:spec.n_correlated + n_hier] = True
        rank = rng.permutation(n)
        raw = (rank + 1.0) ** -spec.zipf_exponent
        base = ~self.is_child
        # a child's expected rate is its parent's * child_rate / children; scale the rest to hit target_l0
        child_share = spec.child_rate  # expected children firing per firing parent
        weight = raw.copy()
        weight[self.parents] *= 1 + child_share
        scale = spec.target_l0 / weight[base].sum()
        self.probability = np.where(base, np.minimum(raw * scale, 0.5), 0.0)
        for parent, kids in self.child_of.items():
            self.probability[kids] = self.probability[parent] * spec.child_rate / len(kids)
        self.groups = np.arange(spec.n_correlated) // spec.group_size
        self._threshold = _normal_icdf(1 - self.probability[base])

    @property
    def expected_l0(self) -> float:
        return float(self.probability.sum())

    def codes(self, index: int, n_rows: int) -> np.ndarray:
        """True feature activations [n_rows, n_features] of batch `index`."""
        spec = self.spec
        rng = np.random.default_rng([spec.seed, 2, index])
        n = spec.n_features
        base = ~self.is_child
        z = rng.standard_normal((n_rows, int(base.sum())))
        if spec.n_correlated:
            shared = rng.standard_normal((n_rows, int(self.groups.max()) + 1))[:, self.groups]
            rho = spec.correlation
            z[:, :spec.n_correlated] = math.sqrt(rho) * shared + math.sqrt(1 - rho) * z[:, :spec.n_correlated]
        fired = np.zeros((n_rows, n), bool)
        fired[:, base] = z > self._threshold
        for parent, kids in self.child_of.items():
            on = fired[:, parent] & (rng.random(n_rows) < spec.child_rate)
            pick = rng.integers(0, len(kids), n_rows)
            for j, kid in enumerate(kids):
                fired[:, kid] = on & (pick == j)
        magnitude = np.clip(1 + spec.magnitude_std * rng.standard_normal((n_rows, n)), 0, None)
        return (fired * magnitude).astype(np.float32)

    def activations(self, codes: np.ndarray, index: int) -> np.ndarray:
        """x = codes @ directions + noise (expected noise norm spec.noise)."""
        spec = self.spec
        rng = np.random.default_rng([spec.seed, 3, index])
        noise = rng.standard_normal((codes.shape[0], spec.d_model)) * (spec.noise / math.sqrt(spec.d_model))
        return (codes @ self.directions + noise).astype(np.float32)

    def batch(self, index: int, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
        codes = self.codes(index, n_rows)
        return self.activations(codes, index), codes

    def reference(self, n_rows: int = 8192, index: int = -1) -> dict:
        """What the true dictionary gets on held-out rows: its L0 and FVU (the noise's share of the variance)."""
        x, codes = self.batch(index if index >= 0 else 10**9, n_rows)
        x_hat = codes @ self.directions
        return {"l0": float((codes > 0).sum(1).mean()), "fvu": fvu(x, x_hat)}


def fvu(x: np.ndarray, x_hat: np.ndarray) -> float:
    """sum ||x - x_hat||^2 / sum ||x - mean x||^2 (float64)."""
    x64, x_hat64 = np.asarray(x, np.float64), np.asarray(x_hat, np.float64)
    return float(((x64 - x_hat64) ** 2).sum() / ((x64 - x64.mean(0)) ** 2).sum())


def linear_assignment(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost one-to-one matching of the rows of `cost` [n, m] to its columns (the Hungarian method with
    potentials, O(n^2 m), vectorised over columns); returns (rows, columns) of min(n, m) pairs."""
    cost = np.asarray(cost, np.float64)
    transposed = cost.shape[0] > cost.shape[1]
    if transposed:
        cost = cost.T
    n, m = cost.shape
    u, v = np.zeros(n + 1), np.zeros(m + 1)
    p = np.zeros(m + 1, int)  # p[j]: the row (1-based) matched to column j; 0 = free
    way = np.zeros(m + 1, int)
    for i in range(1, n + 1):
        p[0], j0 = i, 0
        minv = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, bool)
        while True:
            used[j0] = True
            i0 = p[j0]
            free = ~used[1:]
            cur = cost[i0 - 1] - u[i0] - v[1:]
            better = free & (cur < minv[1:])
            minv[1:][better] = cur[better]
            way[1:][better] = j0
            masked = np.where(free, minv[1:], np.inf)
            j1 = int(np.argmin(masked)) + 1
            delta = masked[j1 - 1]
            u[p[used]] += delta
            v[used] -= delta
            minv[~used] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
    cols = np.flatnonzero(p[1:])
    rows = p[1:][cols] - 1
    order = np.argsort(rows)
    rows, cols = rows[order], cols[order]
    return (cols, rows) if transposed else (rows, cols)


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, np.float64)
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


def score_decoder(learnt: np.ndarray, true: np.ndarray, recovery_cos: float = RECOVERY_COS) -> dict:
    """MCC (mean |cos| over the Hungarian matching), recovery (share of true directions that some learnt row
    matches at cos > recovery_cos) and the matching itself (true index per learnt row, -1 unmatched)."""
    cos = unit_rows(learnt) @ unit_rows(true).T
    rows, cols = linear_assignment(-np.abs(cos))
    match = np.full(cos.shape[0], -1)
    match[rows] = cols
    return {"mcc": float(np.abs(cos[rows, cols]).mean()),
            "recovery": float((cos.max(0) > recovery_cos).mean()), "match": match}


def random_dictionary(n_rows: int, d_model: int, seed: int = 0) -> np.ndarray:
    """The chance control: random unit directions."""
    return unit_rows(np.random.default_rng([seed, 4]).standard_normal((n_rows, d_model)))


def absorption(latents: np.ndarray, decoder: np.ndarray, data: SynthData, codes: np.ndarray) -> dict:
    """Per hierarchical (parent, child) pair: the share of rows where the child fires on which the parent's latent
    is silent, relative to its firing rate where the parent fires without a child (absent when the parent never
    fires alone in `codes`). A pair counts as absorbed when that share is 0.5 or more."""
    cos = unit_rows(decoder) @ data.directions.T
    active = latents > 0
    pairs = []
    for parent, kids in data.child_of.items():
        latent = int(np.argmax(cos[:, parent]))
        alone = (codes[:, parent] > 0) & ~(codes[:, kids] > 0).any(1)
        if alone.sum() == 0:
            continue
        rate_alone = float(active[alone, latent].mean())
        for kid in kids:
            with_child = codes[:, kid] > 0
            if with_child.sum() == 0 or rate_alone == 0:
                continue
            rate_child = float(active[with_child, latent].mean())
            share = float(np.clip(1 - rate_child / rate_alone, 0, 1))
            pairs.append({"parent": int(parent), "child": int(kid), "parent_latent": latent,
                          "parent_latent_cos": float(cos[latent, parent]), "fires_alone": rate_alone,
                          "fires_with_child": rate_child, "absorption": share, "absorbed": share >= 0.5})
    mean = float(np.mean([p["absorption"] for p in pairs])) if pairs else None
    return {"pairs": pairs, "absorption": mean,
            "absorbed_pairs": sum(p["absorbed"] for p in pairs), "n_pairs": len(pairs)}
