"""Train the registry's SAE architectures on synthetic ground truth (interpscope.sae.synth) with the sweep's
machinery, and score them: `interpscope sae synth` and the Pareto page's ground-truth section.

Every grid point is built as the sweep builds it (interpscope.sae.sweep.grid and build_point, seeded from its
name) and trained by the sweep's Trainer with the sweep's schedule; all points read the same generated batches
(one Trainer, several runs, each batch generated once). Activations are scaled to E||s x||^2 = d_in as a sweep
scales its cache, and the scale is folded back into the SAE afterwards. The transcoder is not trained here: it maps
one activation to another, and the synthetic task has one activation (its short-run check is in the tests).

Scored on held-out rows (a batch index training never reads): L0, FVU, dead fraction, MCC and recovery against the
true dictionary, absorption of the hierarchical pairs, and the decoder cosine c_dec (interpscope.sae.l0_proxy).
Beside them: the true dictionary's own L0 and FVU (the reference point), its MCC (1, the upper control) and a random
dictionary's of the SAEs' width (chance). At matched L0, each architecture's MCC, recovery and absorption are read at
the true L0 by interpolating linearly in log L0 between its two grid points around it (absent when its points do
not bracket the true L0).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from interpscope.results import Result
from interpscope.sae.activations import ShuffledBuffer
from interpscope.sae.l0_proxy import decoder_cosine, proxy_l0
from interpscope.sae.pipeline import SAESpec
from interpscope.sae.synth import SynthData, SynthSpec, absorption, random_dictionary, score_decoder
from interpscope.sae.training import TrainConfig, Trainer

HELD_OUT = 10**9  # batch index of the evaluation rows (training reads 0, 1, 2, ...)
SYNTH_ARCHS = ("relu", "gated", "topk", "jumprelu", "batchtopk", "matryoshka")


class SynthBuffer(ShuffledBuffer):
    """Batches generated on the fly from a SynthData (batch i is a pure function of the seed and i), scaled by
    `scale`; the Trainer reads it as it reads a cache's shuffled buffer."""

    def __init__(self, data: SynthData, batch_size: int, scale: float = 1.0):  # noqa: D107 (no cache to read)
        self.data = data
        self.batch_size = batch_size
        self.scale = scale
        self.batches_served = 0
        self.rows_dropped = 0

    def batches(self) -> Iterator[torch.Tensor]:
        while True:
            x, _ = self.data.batch(self.batches_served, self.batch_size)
            self.batches_served += 1
            yield torch.from_numpy(x).mul_(self.scale)


@dataclass
class SynthSettings:
    """What a synthetic run trains with (the sweep's schedule; tokens per SAE; held-out rows)."""

    tokens: int = 614_400
    batch_size: int = 2048
    lr: float = 3e-3
    warmup_steps: int = 20
    decay_fraction: float = 0.2
    resample_at: tuple[float, ...] = (0.3, 0.5)
    dead_window_tokens: int = 250_000
    eval_rows: int = 8192
    seed: int = 0


@dataclass
class SynthResult(Result):
    """Every SAE trained on the synthetic data, scored against the true dictionary, beside its controls."""

    SCHEMA: ClassVar[str] = "interpscope.sae_synth"
    SCHEMA_VERSION: ClassVar[int] = 1

    spec: dict
    settings: dict
    reference: dict  # the true dictionary: l0, fvu, mcc (1), recovery
    chance: dict  # a random dictionary of the SAEs' width: mcc, recovery
    rows: list[dict] = field(default_factory=list)  # one per SAE
    matched: list[dict] = field(default_factory=list)  # per architecture, read at the true L0
    l0_proxy: list[dict] = field(default_factory=list)  # per architecture: c_dec's minimum vs the true L0
    seconds: float = 0.0

    def tidy(self) -> list[dict]:
        return [{k: v for k, v in row.items() if k != "pairs"} for row in self.rows]

    def figure(self):
        from interpscope.figures.sae_synth import synth_figure

        return synth_figure(self)

    def sentences(self) -> list[str]:
        """What the table says, computed from it."""
        ref, chance = self.reference, self.chance
        out = [f"The true dictionary gets L0 {ref['l0']:.2f} and FVU {ref['fvu']:.4f} (the noise) and MCC "
               f"{ref['mcc']:.3f}; a random dictionary of the SAEs' width gets MCC {chance['mcc']:.3f} (chance)."]
        for m in self.matched:
            if m.get("mcc") is None:
                out.append(f"{m['label']}: its L0s ({m['l0_range']}) neither bracket the true L0 nor lie within 10% "
                           "of it; no matched reading.")
                continue
            absorbed = ("" if m.get("absorption") is None else f", absorption {m['absorption']:.2f}")
            out.append(f"{m['label']} at the true L0: MCC {m['mcc']:.3f} ({m['mcc'] - chance['mcc']:+.3f} over "
                       f"chance), recovery {m['recovery']:.2f}{absorbed}.")
        for p in self.l0_proxy:
            if p.get("proxy_l0") is not None:
                best = p["best_mcc_l0"]
                out.append(f"{p['label']}: c_dec is lowest at L0 {p['proxy_l0']:.1f}, MCC highest at L0 {best:.1f}; "
                           f"the true L0 is {ref['l0']:.1f}.")
        return out


LADDER = (0.25, 0.5, 1.0, 2.0, 4.0)  # the L0 ladder: BatchTopK's k as multiples of the true L0
COEFFICIENTS = {"relu": [2.0, 5.0], "gated": [3.0, 6.0], "jumprelu": [1.0, 4.0]}  # bracket L0 12 at the doc size


def default_grid(true_l0: float, width: int, archs: tuple[str, ...] = SYNTH_ARCHS,
                 coefficients: dict[str, list[float]] | None = None, ladder: str = "batchtopk",
                 ks: dict[str, list[int]] | None = None) -> list[SAESpec]:
    """k = the true L0 for count architectures, and for `ladder` (default BatchTopK, the architecture of "Sparse
    but Wrong") k at LADDER multiples of it, to see where MCC peaks and where c_dec is lowest; for coefficient
    architectures the coefficients given (by short name) or COEFFICIENTS, measured to bracket L0 12 at the
    documented size (the matched reading interpolates between them)."""
    from interpscope.sae.arch import architecture_class
    from interpscope.sae.sweep import grid

    counts: dict[str, list[int]] = {"*": [max(1, round(true_l0))]}
    if ladder in archs:
        counts[architecture_class(ladder).short_name] = sorted({max(1, round(m * true_l0)) for m in LADDER})
    return grid(list(archs), width, {**COEFFICIENTS, **(coefficients or {})}, {**counts, **(ks or {})})


NEAR = 0.1  # a point within 10% of the true L0 is read as it is when no pair of points brackets it


def _interp(points: list[dict], key: str, target: float) -> float | None:
    """points' `key` at L0 = target, linear in log L0 between the two points around it, else the nearest point's
    when its L0 is within NEAR of the target (a k = true L0 SAE), else None."""
    usable = sorted((p for p in points if p.get(key) is not None and p["l0"] > 0), key=lambda p: p["l0"])
    near = [p for p in usable if abs(p["l0"] / target - 1) <= NEAR]
    for a, b in zip(usable, usable[1:], strict=False):
        if a["l0"] <= target <= b["l0"]:
            if b["l0"] == a["l0"]:
                return float(a[key])
            t = (math.log(target) - math.log(a["l0"])) / (math.log(b["l0"]) - math.log(a["l0"]))
            return float(a[key] + t * (b[key] - a[key]))
    if near:
        return float(min(near, key=lambda p: abs(p["l0"] - target))[key])
    return None


@torch.no_grad()
def score_sae(sae, data: SynthData, x: np.ndarray, codes: np.ndarray) -> dict:
    """An SAE against the truth on held-out rows (x raw, the SAE reading raw activations)."""
    xt = torch.from_numpy(x)
    latents = sae.encode(xt)
    x_hat = sae.decode(latents, xt).numpy()
    f = latents.numpy()
    W_dec = sae.W_dec.detach().double().numpy()
    live = (f > 0).any(0)
    scored = score_decoder(W_dec, data.directions)  # every latent: a dead one is a direction the SAE did not find
    absorbed = absorption(f, W_dec, data, codes)
    from interpscope.sae.synth import fvu

    return {"l0": float((f > 0).sum(1).mean()), "fvu": fvu(x, x_hat), "dead_fraction": float(1 - live.mean()),
            "mcc": scored["mcc"], "recovery": scored["recovery"], "absorption": absorbed["absorption"],
            "absorbed_pairs": absorbed["absorbed_pairs"], "n_pairs": absorbed["n_pairs"],
            "c_dec": decoder_cosine(W_dec, live)}


def run_synth(spec: SynthSpec, specs: list[SAESpec], settings: SynthSettings,
              progress: Callable[[int, int], None] | None = None) -> SynthResult:
    """Train every SAESpec on data from `spec` (one Trainer, shared batches) and score them (module docstring)."""
    from interpscope.sae.sweep import SweepSettings, build_point

    started = time.perf_counter()
    data = SynthData(spec)
    if any(s.arch_class.paired for s in specs):
        raise ValueError("The synthetic task has one activation: a transcoder (paired) cannot be trained on it.")
    sample, _ = data.batch(HELD_OUT + 1, 4096)
    scale = math.sqrt(spec.d_model / float((sample.astype(np.float64) ** 2).sum(1).mean()))
    sweep = SweepSettings(model_name="synthetic", hook_name="synthetic", width=specs[0].width, tokens=settings.tokens,
                          batch_size=settings.batch_size, lr=settings.lr, warmup_steps=settings.warmup_steps,
                          decay_fraction=settings.decay_fraction, resample_at=settings.resample_at,
                          dead_window_tokens=settings.dead_window_tokens, seed=settings.seed, source="synthetic")
    runs = [build_point(s, s.run_name(), spec.d_model, sweep) for s in specs]
    cfg = TrainConfig(total_tokens=settings.tokens, batch_size=settings.batch_size, lr=settings.lr,
                      warmup_steps=settings.warmup_steps, decay_fraction=settings.decay_fraction,
                      resample_at=settings.resample_at, dead_window_tokens=settings.dead_window_tokens,
                      seed=settings.seed, log_every=max(1, cfg_steps(settings) // 20))
    trainer = Trainer(runs, SynthBuffer(data, settings.batch_size, scale), cfg)
    trainer.train(progress=(lambda step, total, logs: progress(step, total)) if progress else None)
    x, codes = data.batch(HELD_OUT, settings.eval_rows)
    rows = []
    for s, run in zip(specs, runs, strict=True):
        run.sae.fold_input_scale(scale)
        cls = s.arch_class
        rows.append({"name": s.run_name(), "architecture": cls.short_name, "label": cls.label,
                     "width": s.width, **s.knob_setting(), **score_sae(run.sae, data, x, codes)})
    reference = data.reference(settings.eval_rows, HELD_OUT)
    reference.update({"mcc": score_decoder(data.directions, data.directions)["mcc"], "recovery": 1.0})
    chance = score_decoder(random_dictionary(specs[0].width, spec.d_model, settings.seed), data.directions)
    result = SynthResult(spec=asdict(spec), settings={**asdict(settings), "archs": list(dict.fromkeys(
        r["architecture"] for r in rows)), "scale": scale}, reference=reference,
        chance={"mcc": chance["mcc"], "recovery": chance["recovery"]}, rows=rows)
    result.matched, result.l0_proxy = matched_rows(rows, reference["l0"]), proxy_rows(rows, reference["l0"])
    result.seconds = time.perf_counter() - started
    return result


def cfg_steps(settings: SynthSettings) -> int:
    return max(1, -(-settings.tokens // settings.batch_size))


def matched_rows(rows: list[dict], true_l0: float) -> list[dict]:
    """Per architecture: MCC, recovery and absorption read at the true L0 (absent where its L0s do not bracket it)."""
    out = []
    for arch in dict.fromkeys(r["architecture"] for r in rows):
        points = [r for r in rows if r["architecture"] == arch]
        l0s = sorted(p["l0"] for p in points)
        entry: dict[str, Any] = {"architecture": arch, "label": points[0]["label"],
                                 "l0_range": f"{l0s[0]:.1f}-{l0s[-1]:.1f}"}
        for key in ("mcc", "recovery", "absorption", "fvu"):
            entry[key] = _interp(points, key, true_l0)
        out.append(entry)
    return out


def proxy_rows(rows: list[dict], true_l0: float) -> list[dict]:
    """Per architecture with 3+ SAEs: where c_dec is lowest beside where MCC is highest and the true L0."""
    out = []
    for arch in dict.fromkeys(r["architecture"] for r in rows):
        points = [r for r in rows if r["architecture"] == arch]
        proxy = proxy_l0(points, arch)
        if proxy.proxy_l0 is None:
            continue
        best = max(points, key=lambda p: p["mcc"])
        out.append({"architecture": arch, "label": points[0]["label"], "proxy_l0": proxy.proxy_l0,
                    "proxy_name": proxy.proxy_name, "best_mcc_l0": best["l0"], "best_mcc_name": best["name"],
                    "true_l0": true_l0, "at_edge": proxy.at_edge})
    return out
