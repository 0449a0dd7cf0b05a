"""How close a run in another precision or on another device must come to the float32 CPU reference: every
tolerance in one place, per dtype, for relevance maps, conservation, SAE metrics and cached activations.

The figures come from runs of the same model in each dtype on the CPU (the bundled SmolLM2-135M and a tiny GPT-2):
AttnLRP relevance maps in bfloat16 differ from float32 by a relative L2 error of 0.2-0.7% and float16 by
0.01-0.16%; conservation errors grow from ~1e-7 to 0.06-0.3% (bf16) and 0.01-0.05% (fp16); SAE metrics move by
<0.1% except loss recovered (a ratio of small gaps: ~1% in bf16). The tolerances leave ~5-10x headroom for deeper
models. float32 on a GPU may reorder sums (and TF32 must stay off): 1e-4 relative. Plain-gradient maps (Gradient x
Input, Integrated Gradients) have no LRP stabiliser and move more in half precision: on an H200 (bench/cuda_check.py,
SmolLM2-135M's architecture with seeded weights) Gradient x Input differed from the float32 CPU map by 2.8% / 7.4%
in bfloat16 and 0.5% / 2.5% in float16 at 64 / 512 tokens, while AttnLRP and CP-LRP stayed within 0.4-1.9% (bf16)
and 0.07-0.4% (fp16) and float32 on CUDA within 5e-6; the real SmolLM2 weights on the CPU in bf16 / fp16 gave the
same picture (`bench/cuda_check.py --device cpu --parts agreement`: Gradient x Input 4.9% / 7.3% in bf16 and 0.5% /
0.9% in fp16; AttnLRP and CP-LRP 0.7-1.6% and 0.1-0.3%); `gradient_relevance` holds their tolerance. Accumulation is
float64 everywhere (relevance: interpscope.relevance.engine; evaluation sums; neuron means), so only the forward pass's
rounding shows in these figures.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Tolerance:
    """relevance: relative L2 error of a relevance map; conservation: absolute difference of the conservation
    relative error; sae_rtol/sae_atol: |a - b| <= rtol |b| + atol per SAE metric; activations: relative L2 error of
    cached activations."""

    relevance: float
    gradient_relevance: float
    conservation: float
    sae_rtol: float
    sae_atol: float
    activations: float


TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(relevance=1e-4, gradient_relevance=1e-4, conservation=1e-4, sae_rtol=1e-5,
                             sae_atol=1e-6, activations=1e-5),
    torch.float16: Tolerance(relevance=1e-2, gradient_relevance=5e-2, conservation=5e-3, sae_rtol=5e-3,
                             sae_atol=5e-3, activations=5e-3),
    torch.bfloat16: Tolerance(relevance=5e-2, gradient_relevance=0.15, conservation=2e-2, sae_rtol=2e-2,
                              sae_atol=2e-2, activations=3e-2),
}


def tolerance(dtype: torch.dtype) -> Tolerance:
    """The tolerance of a run in `dtype` (float64 counts as float32)."""
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def relative_error(value: np.ndarray, reference: np.ndarray) -> float:
    """||value - reference|| / ||reference|| (float64; 0 when both are zero)."""
    value, reference = np.asarray(value, np.float64), np.asarray(reference, np.float64)
    scale = np.linalg.norm(reference)
    diff = np.linalg.norm(value - reference)
    return float(diff / scale) if scale > 0 else float(diff)


def relevance_tolerance(dtype: torch.dtype, method: str = "attnlrp") -> float:
    """The relative L2 tolerance of a relevance map by `method` in `dtype` (methods the registry marks
    gradient_based, plain gradients times inputs: looser)."""
    from interpscope.relevance.methods import METHODS

    tol = tolerance(dtype)
    return tol.gradient_relevance if METHODS[method].gradient_based else tol.relevance


def relevance_close(value: np.ndarray, reference: np.ndarray, dtype: torch.dtype, method: str = "attnlrp") -> bool:
    return relative_error(value, reference) <= relevance_tolerance(dtype, method)


def conservation_close(value: float, reference: float, dtype: torch.dtype) -> bool:
    return abs(float(value) - float(reference)) <= tolerance(dtype).conservation


def activations_close(value: np.ndarray, reference: np.ndarray, dtype: torch.dtype) -> bool:
    return relative_error(value, reference) <= tolerance(dtype).activations


def sae_metrics_far(value: dict, reference: dict, dtype: torch.dtype) -> list[str]:
    """The float metrics of an SAE evaluation summary outside the tolerance (empty: all close)."""
    tol = tolerance(dtype)
    far = []
    for key, ref in reference.items():
        if isinstance(ref, float) and not (np.isnan(ref) and np.isnan(value[key])):
            if abs(value[key] - ref) > tol.sae_rtol * abs(ref) + tol.sae_atol:
                far.append(key)
    return far
