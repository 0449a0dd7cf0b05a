"""A pure-PyTorch Mamba forward on the Hugging Face modules' own parameters, with the MambaLRP fixes switchable.

Transformers 5.x runs the HF MambaMixer through kernel-fallback functions that cannot be given LRP rules, so this
module recomputes a mixer from its parameters (in_proj, conv1d, x_proj, dt_proj, A_log, D, out_proj) step by step.
Each fix of docs/methods/mamba-lrp.md (Rezaei Jafari et al. 2024) changes only the backward pass:

- ``norm``: RMSNorm with the normaliser rsqrt(mean x^2 + eps) detached;
- ``silu``: both SiLUs (after conv1d, on the gate z) as y = x * stopgrad(SiLU(x) / x), stabilised denominator;
- ``ssm``: Delta, B and C (and so A_bar, B_bar) detached, which makes the scan linear in its input;
- ``gate``: half rule on y * SiLU(z): out = (y g)/2 + stopgrad((y g)/2).

Forward values stay those of the plain model (the rewrites are "same value, other gradient").
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from transformers.models.mamba.modeling_mamba import MambaMixer, MambaRMSNorm

FIX_NAMES = ("norm", "silu", "ssm", "gate")
SILU_STABILISER = 1e-9


@dataclass(frozen=True)
class Fixes:
    """Which MambaLRP fixes are on. All off = plain Gradient x Input through the same forward."""

    norm: bool = True
    silu: bool = True
    ssm: bool = True
    gate: bool = True

    @classmethod
    def none(cls) -> Fixes:
        return cls(False, False, False, False)

    def without(self, name: str) -> Fixes:
        """These fixes with one switched off (for the per-fix conservation chart)."""
        if name not in FIX_NAMES:
            raise ValueError(f"unknown fix {name!r}; one of {FIX_NAMES}")
        return replace(self, **{name: False})

    def active(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name)]


ALL_FIXES = Fixes()  # the defaults below: Fixes is frozen, so one shared instance is safe
NO_FIXES = Fixes.none()


def stabilise(x: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """x + (1[x=0] + sign x) * eps: a denominator that is never zero and keeps the sign of x."""
    eps = SILU_STABILISER if eps is None else eps
    return x + ((x == 0).to(x.dtype) + torch.sign(x)) * eps


def same_value(value: torch.Tensor, surrogate: torch.Tensor) -> torch.Tensor:
    """`value` bit for bit in the forward, the gradient of `surrogate` in the backward."""
    return value.detach() + (surrogate - surrogate.detach())


def rmsnorm(norm: MambaRMSNorm, x: torch.Tensor, detach_normaliser: bool) -> torch.Tensor:
    """HF MambaRMSNorm in the input's dtype; optionally with the normaliser detached (identity rule)."""
    eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
    source = x.detach() if detach_normaliser else x
    scale = torch.rsqrt(source.pow(2).mean(-1, keepdim=True) + eps)
    return norm.weight * (x * scale)


def silu(x: torch.Tensor, identity_rule: bool) -> torch.Tensor:
    """SiLU; with the identity rule its gradient is SiLU(x) / stabilise(x) (a constant factor per element)."""
    value = F.silu(x)
    if not identity_rule:
        return value
    return same_value(value, x * (value / stabilise(x)).detach())


def gate_product(y: torch.Tensor, g: torch.Tensor, half_rule: bool) -> torch.Tensor:
    """y * g; the half rule gives each factor half of the product's relevance."""
    out = y * g
    if not half_rule:
        return out
    return 0.5 * out + (0.5 * out).detach()


def causal_depthwise_conv(mixer: MambaMixer, x: torch.Tensor) -> torch.Tensor:
    """The mixer's conv1d over time on x [B, D, T], causal (left padding), with its bias if any."""
    conv = mixer.conv1d
    out = F.conv1d(x, conv.weight, conv.bias, padding=conv.kernel_size[0] - 1, groups=x.shape[1])
    return out[..., : x.shape[-1]]


def selective_scan_sequential(x: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                              C: torch.Tensor) -> torch.Tensor:
    """y_t = C_t h_t with h_t = exp(Delta_t A) h_{t-1} + Delta_t B_t x_t. x, delta [Bt, T, D]; B, C [Bt, T, N]."""
    A_bar = torch.exp(delta.unsqueeze(-1) * A)                      # [Bt, T, D, N]
    Bx = (delta * x).unsqueeze(-1) * B.unsqueeze(2)                 # [Bt, T, D, N]
    h = torch.zeros_like(Bx[:, 0])
    outputs = []
    for t in range(x.shape[1]):
        h = A_bar[:, t] * h + Bx[:, t]
        outputs.append(torch.einsum("bdn,bn->bd", h, C[:, t]))
    return torch.stack(outputs, dim=1)


def selective_scan_chunked(x: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                           C: torch.Tensor, chunk: int = 8) -> torch.Tensor:
    """The same scan, vectorised inside chunks of `chunk` steps (for training on a CPU).

    Within a chunk h_t = exp(S_t) (h_0 + sum_{s<=t} exp(-S_s) u_s) with S the running sum of Delta A. The per-step
    decay log is clamped at -60/chunk so exp(-S) cannot overflow; a decay below exp(-60/chunk) (about 5e-4 for
    chunk 8) already erases the state, so the values differ from the exact scan only negligibly.
    """
    batch, steps, width = x.shape
    log_decay = (delta.unsqueeze(-1) * A).clamp(min=-60.0 / chunk)  # [Bt, T, D, N]
    u = (delta * x).unsqueeze(-1) * B.unsqueeze(2)
    h = x.new_zeros(batch, width, A.shape[-1])
    outputs = []
    for start in range(0, steps, chunk):
        sl = slice(start, start + chunk)
        running = torch.cumsum(log_decay[:, sl], dim=1)
        states = torch.exp(running) * (h.unsqueeze(1) + torch.cumsum(torch.exp(-running) * u[:, sl], dim=1))
        outputs.append(torch.einsum("btdn,btn->btd", states, C[:, sl]))
        h = states[:, -1]
    return torch.cat(outputs, dim=1)


def mixer_forward(mixer: MambaMixer, hidden: torch.Tensor, fixes: Fixes = NO_FIXES,
                  chunked_scan: bool = False) -> torch.Tensor:
    """One HF MambaMixer on hidden [B, T, d_model] -> [B, T, d_model], from the module's own parameters."""
    d_inner = mixer.intermediate_size
    rank, n_state = mixer.time_step_rank, mixer.ssm_state_size
    projected = mixer.in_proj(hidden)                                # [B, T, 2 D]
    x, z = projected[..., :d_inner], projected[..., d_inner:]
    x = causal_depthwise_conv(mixer, x.transpose(1, 2)).transpose(1, 2)
    x = silu(x, fixes.silu)
    params = mixer.x_proj(x)
    dt, B, C = torch.split(params, [rank, n_state, n_state], dim=-1)
    delta = F.softplus(mixer.dt_proj(dt))
    if fixes.ssm:
        delta, B, C = delta.detach(), B.detach(), C.detach()
    A = -torch.exp(mixer.A_log.to(x.dtype))
    scan = selective_scan_chunked if chunked_scan else selective_scan_sequential
    y = scan(x, delta, A, B, C) + x * mixer.D.to(x.dtype)
    y = gate_product(y, silu(z, fixes.silu), fixes.gate)
    return mixer.out_proj(y)


def backbone_forward(adapter, inputs_embeds: torch.Tensor, fixes: Fixes = NO_FIXES,
                     chunked_scan: bool = False) -> torch.Tensor:
    """Logits [B, T, V] of a MambaForCausalLM from input embeddings, through `mixer_forward` and `rmsnorm`."""
    hidden = inputs_embeds
    for layer in range(adapter.n_layers):
        normed = rmsnorm(adapter.attention_norm(layer), hidden, fixes.norm)
        hidden = hidden + mixer_forward(adapter.mixer(layer), normed, fixes, chunked_scan)
    return adapter.unembedding()(rmsnorm(adapter.final_norm(), hidden, fixes.norm))
