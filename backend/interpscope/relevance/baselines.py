"""captum baselines on the same target: Integrated Gradients and occlusion (feature ablation) on token embeddings.

Both work on the input embeddings [1, T, d] from a baseline (all-zero embeddings by default, the pad token's, or the
mean embedding: BASELINES), and return one relevance per token. `convergence` measures IG's completeness gap per
step count and the explained value along the path: on the bundled SmolLM2 the target jumps along the straight path
from the zero baseline (RMSNorm's epsilon and the forming massive activation), so the gap does not shrink with steps.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from interpscope.adapters import ModelAdapter
from interpscope.config import InterpscopeError
from interpscope.relevance.engine import forward_logits
from interpscope.relevance.targets import Target
from interpscope.results import Result

IG_STEPS = 32
TOKENS_PER_BATCH = 2048
IG_TOKENS_PER_BATCH = 512  # several internal batches even for short inputs: progress and its ETA move


def _target_function(adapter: ModelAdapter, target: Target):
    """embeds [B, T, d] -> explained values [B] (logits only at the target position)."""

    def forward(embeds: torch.Tensor) -> torch.Tensor:
        return target.value(forward_logits(adapter.model, embeds, [target.position])[:, 0])
    return forward


def embeds_of(adapter: ModelAdapter, input_ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return adapter.embedding()(input_ids).detach()


BASELINES = {"zero": "all-zero embeddings", "pad": "the padding token's embedding at every position",
             "mean": "the mean token embedding at every position"}


def baseline_embeds(adapter: ModelAdapter, embeds: torch.Tensor, kind: str = "zero",
                    pad_token_id: int | None = None) -> torch.Tensor:
    """The reference input [1, T, d] that IG integrates from and occlusion swaps in (see BASELINES)."""
    if kind == "zero":
        return torch.zeros_like(embeds)
    if kind == "pad":
        if pad_token_id is None:
            raise InterpscopeError("This model's tokenizer has no padding token: choose the zero or mean baseline.")
        with torch.no_grad():
            row = adapter.embedding()(torch.tensor([[pad_token_id]], device=embeds.device))
        return row.expand_as(embeds).to(embeds.dtype).clone()
    if kind == "mean":  # through the embedding module, so a family's embedding scale (Gemma: sqrt d) is included
        vocab = adapter.vocab_size
        total = torch.zeros(embeds.shape[-1], dtype=torch.float64, device=embeds.device)
        with torch.no_grad():
            for start in range(0, vocab, 8192):
                ids = torch.arange(start, min(vocab, start + 8192), device=embeds.device)[None]
                total += adapter.embedding()(ids)[0].double().sum(0)
        return (total / vocab).to(embeds.dtype).expand_as(embeds).clone()
    raise InterpscopeError(f"Unknown baseline {kind!r}: choose one of {', '.join(BASELINES)}.")


def ig_batches(n_tokens: int, steps: int = IG_STEPS) -> tuple[int, int]:
    """(steps per internal batch, number of internal batches) for an input of n_tokens (captum runs at least 2
    steps per batch)."""
    per_batch = min(steps, max(2, IG_TOKENS_PER_BATCH // max(1, n_tokens)))
    return per_batch, -(-steps // per_batch)


def integrated_gradients(adapter: ModelAdapter, input_ids: torch.Tensor, target: Target, steps: int = IG_STEPS,
                         baseline: torch.Tensor | None = None,
                         progress: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """captum IntegratedGradients on the embeddings from `baseline` (default all zeros), summed over d: relevance
    [T] (float64).

    progress(done, total) is called before each internal batch of steps and once at the end (done == total), so
    a page can show a bar with an ETA (interpscope.progress.with_eta)."""
    from captum.attr import IntegratedGradients

    embeds = embeds_of(adapter, input_ids)
    per_batch, total = ig_batches(input_ids.shape[1], steps)
    forward = _target_function(adapter, target)
    calls = [0]

    def counted(batch_embeds: torch.Tensor) -> torch.Tensor:
        if progress is not None:
            progress(min(calls[0], total), total)
        calls[0] += 1
        return forward(batch_embeds)

    with torch.enable_grad():
        attributions = IntegratedGradients(counted).attribute(
            embeds, baselines=torch.zeros_like(embeds) if baseline is None else baseline, n_steps=steps,
            internal_batch_size=per_batch)
    if progress is not None:
        progress(total, total)
    return attributions[0].detach().double().sum(-1)


def occlusion(adapter: ModelAdapter, input_ids: torch.Tensor, target: Target, window: int = 1,
              baseline: torch.Tensor | None = None) -> torch.Tensor:
    """The target's drop when tokens are replaced by the baseline (default all zeros): one token at a time (captum
    FeatureAblation), or a sliding window of `window` tokens, each token getting the mean drop of the windows that
    cover it (captum Occlusion). Relevance [T]."""
    from captum.attr import FeatureAblation, Occlusion

    embeds = embeds_of(adapter, input_ids)
    n_tokens, width = input_ids.shape[1], embeds.shape[-1]
    reference = 0.0 if baseline is None else baseline
    if not 1 <= window <= n_tokens:
        raise InterpscopeError(f"The occlusion window must be 1..{n_tokens} tokens for this text (got {window}).")
    per_eval = max(1, min(n_tokens, TOKENS_PER_BATCH // n_tokens))
    with torch.no_grad():
        if window == 1:
            mask = torch.arange(n_tokens, device=embeds.device).reshape(1, n_tokens, 1).expand_as(embeds)
            attributions = FeatureAblation(_target_function(adapter, target)).attribute(
                embeds, baselines=reference, feature_mask=mask, perturbations_per_eval=per_eval)
        else:
            attributions = Occlusion(_target_function(adapter, target)).attribute(
                embeds, sliding_window_shapes=(window, width), strides=(1, width), baselines=reference,
                perturbations_per_eval=per_eval)
    return attributions[0, :, 0].detach().double()


CONVERGENCE_STEPS = (8, 16, 32, 64, 128)


@dataclass
class IGConvergence(Result):
    """Integrated Gradients' completeness gap per step count on one input, and the explained value along the
    straight path from the baseline (what makes a gap that does not shrink: a target that jumps along the path).

    rows: one per step count {steps, relevance_sum, gap, relative_gap, relevance (per token)}; alphas / path_values:
    f(baseline + alpha (x - baseline)) on a grid of alphas in [0, 1]; steepest: where f changes most between two
    neighbouring grid points {alpha_from, alpha_to, value_from, value_to}; shrinks: |gap| never grows from one step
    count to the next and ends at most half its first value (or every gap is under 1% of f(x) - f(baseline))."""

    tokens: list[str]
    target: str
    baseline: str
    baseline_label: str
    value: float
    baseline_value: float
    rows: list[dict]
    alphas: list[float]
    path_values: list[float]
    steepest: dict
    shrinks: bool
    quadrature: str = "gausslegendre"

    SCHEMA = "interpscope.ig_convergence"
    SCHEMA_VERSION = 1

    def tidy(self) -> list[dict]:
        """One row per step count: the relevance sum and the completeness gap (absolute and relative)."""
        return [{k: row[k] for k in ("steps", "relevance_sum", "gap", "relative_gap") if k in row} |
                {"target": self.target, "baseline": self.baseline} for row in self.rows]

    def figure(self):
        """The relevance page's figure: the gap per step count, and the target along the path from the baseline."""
        from interpscope.figures.relevance.ig import convergence_figure

        return convergence_figure(self.rows, self.alphas, self.path_values, self.baseline_label)


def path_values(adapter: ModelAdapter, embeds: torch.Tensor, reference: torch.Tensor, target: Target,
                alphas: Sequence[float], batch: int = 32) -> list[float]:
    """f(reference + alpha (embeds - reference)) for each alpha (forward passes only)."""
    forward = _target_function(adapter, target)
    out: list[float] = []
    with torch.no_grad():
        for start in range(0, len(alphas), batch):
            a = torch.tensor(list(alphas[start:start + batch]), dtype=embeds.dtype, device=embeds.device)
            out += [float(v) for v in forward(reference + a[:, None, None] * (embeds - reference))]
    return out


def path_grid(n: int = 120) -> list[float]:
    """Alphas in [0, 1], denser near 0 (where a norm's epsilon makes the path change fastest from a zero baseline)."""
    return sorted(set(float(a) for a in np.concatenate([np.linspace(0.0, 0.1, n // 2 + 1),
                                                        np.linspace(0.1, 1.0, n // 2 + 1)])))


def convergence(adapter: ModelAdapter, input_ids: torch.Tensor, target: Target, tokens: list[str],
                baseline: str = "zero", pad_token_id: int | None = None,
                steps: Sequence[int] = CONVERGENCE_STEPS,
                progress: Callable[[int, int], None] | None = None) -> IGConvergence:
    """IG at each step count in `steps` (captum, Gauss-Legendre) and the path profile; progress(done, total) per
    step count and once for the profile."""
    embeds = embeds_of(adapter, input_ids)
    reference = baseline_embeds(adapter, embeds, baseline, pad_token_id)
    value, at_baseline = path_values(adapter, embeds, reference, target, [1.0, 0.0])
    difference = value - at_baseline
    rows = []
    for done, n in enumerate(steps):
        if progress is not None:
            progress(done, len(steps) + 1)
        relevance = integrated_gradients(adapter, input_ids, target, int(n), reference).cpu().numpy()
        gap = float(relevance.sum()) - difference
        rows.append({"steps": int(n), "relevance_sum": float(relevance.sum()), "gap": gap,
                     "relative_gap": abs(gap) / (abs(difference) or 1.0), "relevance": relevance.tolist()})
    alphas = path_grid()
    profile = path_values(adapter, embeds, reference, target, alphas)
    jumps = np.abs(np.diff(profile))
    i = int(np.argmax(jumps)) if jumps.size else 0
    steepest = {"alpha_from": alphas[i], "alpha_to": alphas[min(i + 1, len(alphas) - 1)],
                "value_from": profile[i], "value_to": profile[min(i + 1, len(profile) - 1)]}
    gaps = [abs(r["gap"]) for r in rows]
    small = max(gaps) / (abs(difference) or 1.0) < 0.01
    steady = all(later <= earlier * 1.05 for earlier, later in zip(gaps, gaps[1:], strict=False))
    if progress is not None:
        progress(len(steps) + 1, len(steps) + 1)
    return IGConvergence(tokens=tokens, target=target.label, baseline=baseline, baseline_label=BASELINES[baseline],
                         value=value, baseline_value=at_baseline, rows=rows, alphas=alphas, path_values=profile,
                         steepest=steepest, shrinks=small or (steady and gaps[-1] <= 0.5 * gaps[0]))
