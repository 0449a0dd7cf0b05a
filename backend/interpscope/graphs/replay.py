"""The frozen replay of one real forward pass: the replacement model's linear part, and its batched backward.

`record` runs the model once (read hooks only, through interpscope.capture) and keeps, per block L: the residual
stream before it (`resid_pre`), after attention (`resid_mid`), the MLP's normed input (`mlp_in`) and output
(`mlp_out`), the attention probabilities per head, and the RMSNorm factors 1/rms per position of the attention
norm, the MLP norm and the final norm. With those frozen and the MLP outputs taken as constants (transcoder features
and error nodes), everything from the residual stream to a feature's pre-activation or to the target logit is
LINEAR:

    resid_mid[L] = resid_pre[L] + W_O (P_L (gamma_a * s_a[L] * resid_pre[L]) W_V) + c_L
    resid_pre[L + 1] = resid_mid[L] + mlp_out[L]          (a constant: features + error node)
    pre(f at L, p) = (s_m[L, p] * gamma_m * resid_mid[L, p]) . W_enc[:, f] + b_enc[f]
    logit = (s_f[T-1] * gamma_f * resid_final[T-1]) . W_U[:, token] (+ b_U[token])

where c_L is the attention's constant bias (a value or output bias, Qwen2; none for Llama). Gemma 3's sandwich
norms are frozen the same way: a norm on the attention's output multiplies it by s_o[L, p] * gamma_o (its 1/rms from
the real run), and a norm on the MLP's output is part of what a transcoder predicts (`hook_mlp_out` is the norm's
output). Scaled token embeddings (Gemma: sqrt(d_model)) enter as embed_scale * W_E[token]. A transcoder with a skip
connection (W_skip, Gemma Scope 2's affine transcoders) adds mlp_in[L] W_skip: a LINEAR path from resid_mid[L] to
resid_pre[L + 1] through the frozen MLP norm, which the replay carries (`skips`) instead of folding it into the error.
`linear_backward` runs
the transpose of that map for a batch of read directions at once ([B, T, d] gradients, GQA aware) over the
model's weights, calling back at each layer with the gradient at the point where that layer's MLP writes; an edge
from a source written at (layer, position) with vector v is v . g there. `replay_forward` is the same model run
forwards (autograd checks the backward against it; it also proves the replay reproduces the real logits).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from interpscope.capture import hooks
from interpscope.config import InterpscopeError


@dataclass
class FrozenRun:
    """What one real forward pass leaves for the replay (all [T, d] rows of one sequence, compute dtype)."""

    ids: torch.Tensor  # [T]
    resid_pre: list[torch.Tensor]  # per block: its input
    resid_mid: list[torch.Tensor]  # per block: after attention (the MLP norm's input)
    mlp_in: list[torch.Tensor]  # per block: the MLP's normed input (a transcoder's input)
    mlp_out: list[torch.Tensor]  # per block: the MLP's output
    resid_final: torch.Tensor  # the final norm's input
    patterns: list[torch.Tensor]  # per block: [H, T, T] attention probabilities
    attn_scale: torch.Tensor  # [L, T] 1/rms of resid_pre (attention norm)
    mlp_scale: torch.Tensor  # [L, T] 1/rms of resid_mid (MLP norm)
    final_scale: torch.Tensor  # [T] 1/rms of resid_final
    gamma_attn: list[torch.Tensor]
    gamma_mlp: list[torch.Tensor]
    gamma_final: torch.Tensor
    W_V: list[torch.Tensor]  # v_proj.weight [KV * dh, d]
    W_O: list[torch.Tensor]  # o_proj.weight [d, H * dh]
    attn_bias: list[torch.Tensor | None]  # per block: the constant the attention adds at every position, or None
    W_E: torch.Tensor  # [vocab, d]
    W_U: torch.Tensor  # [d, vocab]
    b_U: torch.Tensor | None
    logits: torch.Tensor  # [vocab] the real model's next-token logits (last position)
    n_heads: int
    n_kv_heads: int
    d_head: int
    embed_scale: float = 1.0  # the residual stream starts at embed_scale * W_E[token] (Gemma: sqrt(d_model))
    attn_out_scale: torch.Tensor | None = None  # [L, T] 1/rms of the attention's raw output (sandwich norm)
    gamma_attn_out: list[torch.Tensor] | None = None
    mlp_out_scale: torch.Tensor | None = None  # [L, T] 1/rms of the MLP's raw output (sandwich norm; freeze only)
    gamma_mlp_out: list[torch.Tensor] | None = None

    @property
    def n_layers(self) -> int:
        return len(self.resid_pre)

    @property
    def n_tokens(self) -> int:
        return int(self.ids.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        return self.resid_final.dtype

    def embedding_rows(self, positions: int | None = None) -> torch.Tensor:
        """What each position's token embedding writes into the residual stream [P, d] (embed_scale folded in)."""
        rows = self.W_E[self.ids[:positions]]
        return rows if self.embed_scale == 1.0 else rows * self.embed_scale

    def logit_direction(self, token_id: int) -> torch.Tensor:
        """The read direction of a logit at the final residual of the last position: s_f * gamma_f * W_U[:, t]."""
        return self.final_scale[-1] * self.gamma_final * self.W_U[:, token_id]


def check_architecture(adapter) -> None:
    """Refuse what the linear replay does not model: the adapter must declare 'linear_replay' (a Llama- or Gemma-
    style block: RMSNorm before attention and MLP, optional sandwich norms, sequential residual, separate q/k/v/o,
    no soft-capped logits; see ModelAdapter.capabilities)."""
    if "linear_replay" not in adapter.capabilities():
        why = ("its logits are soft-capped (cap * tanh(logit / cap)), which no linear graph reproduces"
               if getattr(adapter, "final_logit_softcap", None)
               else "its blocks are not Llama-style (RMSNorm, gated MLP, sequential residual, separate q/k/v/o)")
        raise InterpscopeError(f"Attribution graphs need a Llama- or Gemma-3-style model (RMSNorm, gated MLP, "
                               f"sequential residual); {adapter.family} models are not supported: {why}.")


def _scale(adapter, module, x: torch.Tensor) -> torch.Tensor:
    """1/rms per row, as the family's RMSNorm computes it (in float32 for half-precision models)."""
    source = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return torch.rsqrt(source.pow(2).mean(-1) + adapter.norm_eps(module))


def _gamma(adapter, module, d: int, dtype: torch.dtype) -> torch.Tensor:
    gamma = adapter.norm_gamma(module)
    return torch.ones(d, dtype=dtype) if gamma is None else gamma.detach().to(dtype)


def _attention_bias(adapter, layer: int, dtype: torch.dtype) -> torch.Tensor | None:
    """The constant an attention block adds at every position under frozen patterns (rows of P sum to 1): its value
    bias through the output projection, plus the output bias."""
    parts = adapter.attention_projections(layer)
    v_bias, o_bias = getattr(parts["v"], "bias", None), getattr(parts["o"], "bias", None)
    if v_bias is None and o_bias is None:
        return None
    W_O = parts["o"].weight.detach().to(dtype)
    total = torch.zeros(W_O.shape[0], dtype=dtype)
    if v_bias is not None:
        group = adapter.n_heads // _kv_heads(adapter)
        per_head = v_bias.detach().to(dtype).view(-1, adapter.d_head).repeat_interleave(group, dim=0).reshape(-1)
        total = total + W_O @ per_head
    if o_bias is not None:
        total = total + o_bias.detach().to(dtype)
    return total


def _kv_heads(adapter) -> int:
    return int(getattr(adapter.config, "num_key_value_heads", None) or adapter.n_heads)


def record(lm, ids: torch.Tensor) -> FrozenRun:
    """One real forward pass of ids [1, T] with read hooks (the caller holds the model's lock)."""
    from interpscope.capture import scoped

    adapter = lm.adapter
    check_architecture(adapter)
    n = adapter.n_layers
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def read(x: torch.Tensor) -> None:
            seen[name] = x.detach()[0]
        return read

    def keep_input(name: str):
        def read(module, args, output) -> None:
            seen[name] = args[0].detach()[0]
        return read

    names = [f"blocks.{L}.{point}" for L in range(n)
             for point in ("hook_resid_pre", "hook_resid_mid", "mlp.hook_in", "hook_mlp_out")]
    names.append(f"blocks.{n - 1}.hook_resid_post")
    sandwich = adapter.attention_output_norm(0) is not None
    # the raw sub-layer outputs, read where their output norms take them (sandwich norms only)
    raw = [(norm, keep_input(f"{which}.{L}")) for L in range(n) if sandwich
           for which, norm in (("attn_raw", adapter.attention_output_norm(L)), ("mlp_raw", adapter.mlp_output_norm(L)))
           if norm is not None]
    with torch.no_grad(), hooks(adapter, {name: keep(name) for name in names}, role="read"), \
            scoped(raw, role="read"):
        out = adapter.model(input_ids=ids, output_attentions=True, use_cache=False)
    attentions = getattr(out, "attentions", None)
    if not attentions or any(a is None for a in attentions):
        raise InterpscopeError("This model does not return its attention probabilities (load it with eager "
                               "attention); attribution graphs freeze them.")
    dtype = torch.float32 if lm.dtype in (torch.float16, torch.bfloat16) else lm.dtype

    def rows(point: str) -> list[torch.Tensor]:
        return [seen[f"blocks.{L}.{point}"].to("cpu", dtype) for L in range(n)]

    resid_pre, resid_mid = rows("hook_resid_pre"), rows("hook_resid_mid")
    resid_final = seen[f"blocks.{n - 1}.hook_resid_post"].to("cpu", dtype)
    d = adapter.d_model
    W_E = adapter.W_E().detach().to("cpu", dtype)
    embed_scale = _embed_scale(W_E[ids[0].cpu()], resid_pre[0])
    projections = [adapter.attention_projections(L) for L in range(n)]
    b_U = adapter.b_U()

    def output_norm(which: str, module_of) -> tuple[torch.Tensor | None, list[torch.Tensor] | None]:
        if not sandwich or module_of(0) is None:
            return None, None
        scales = torch.stack([_scale(adapter, module_of(L), seen[f"{which}.{L}"].to("cpu", dtype)) for L in range(n)])
        return scales, [_gamma(adapter, module_of(L), d, dtype) for L in range(n)]

    attn_out_scale, gamma_attn_out = output_norm("attn_raw", adapter.attention_output_norm)
    mlp_out_scale, gamma_mlp_out = output_norm("mlp_raw", adapter.mlp_output_norm)
    return FrozenRun(
        ids=ids[0].cpu(), resid_pre=resid_pre, resid_mid=resid_mid, mlp_in=rows("mlp.hook_in"),
        mlp_out=rows("hook_mlp_out"), resid_final=resid_final,
        patterns=[a[0].detach().to("cpu", dtype) for a in attentions],
        attn_scale=torch.stack([_scale(adapter, adapter.attention_norm(L), resid_pre[L]) for L in range(n)]),
        mlp_scale=torch.stack([_scale(adapter, adapter.mlp_norm(L), resid_mid[L]) for L in range(n)]),
        final_scale=_scale(adapter, adapter.final_norm(), resid_final),
        gamma_attn=[_gamma(adapter, adapter.attention_norm(L), d, dtype) for L in range(n)],
        gamma_mlp=[_gamma(adapter, adapter.mlp_norm(L), d, dtype) for L in range(n)],
        gamma_final=_gamma(adapter, adapter.final_norm(), d, dtype),
        W_V=[p["v"].weight.detach().to("cpu", dtype) for p in projections],
        W_O=[p["o"].weight.detach().to("cpu", dtype) for p in projections],
        attn_bias=[_attention_bias(adapter, L, dtype) for L in range(n)],
        W_E=W_E, W_U=adapter.W_U().detach().to("cpu", dtype),
        b_U=None if b_U is None else b_U.detach().to("cpu", dtype),
        logits=out.logits[0, -1].detach().to("cpu", dtype), n_heads=adapter.n_heads, n_kv_heads=_kv_heads(adapter),
        d_head=adapter.d_head, embed_scale=embed_scale, attn_out_scale=attn_out_scale, gamma_attn_out=gamma_attn_out,
        mlp_out_scale=mlp_out_scale, gamma_mlp_out=gamma_mlp_out)


def _embed_scale(rows: torch.Tensor, first: torch.Tensor) -> float:
    """The constant the model multiplies its token embeddings by (1 for most; sqrt(d_model) for Gemma), measured
    from the run (the least-squares factor, then checked row by row); refuse anything that is not one constant."""
    scale = float((rows * first).sum() / rows.pow(2).sum().clamp_min(1e-30))
    if not torch.allclose(first, rows * scale, rtol=1e-4, atol=1e-6 * max(1.0, abs(scale))):
        raise InterpscopeError("This model shifts its token embeddings or mixes other inputs into the first residual "
                               "stream; attribution graphs need the embedding rows (times a constant at most).")
    return 1.0 if abs(scale - 1.0) < 1e-6 else scale


# --- the linear map and its transpose -------------------------------------------------------------------------------
def attention_forward(run: FrozenRun, layer: int, x: torch.Tensor) -> torch.Tensor:
    """The attention block's output for residual rows x [..., P, d] under the frozen pattern and norm scale
    (without its constant bias)."""
    P = x.shape[-2]
    normed = x * (run.attn_scale[layer, :P, None] * run.gamma_attn[layer])
    v = (normed @ run.W_V[layer].T).unflatten(-1, (run.n_kv_heads, run.d_head))  # [..., P, KV, dh]
    v = v.repeat_interleave(run.n_heads // run.n_kv_heads, dim=-2)  # [..., P, H, dh]
    z = torch.einsum("hqk,...khd->...qhd", run.patterns[layer][:, :P, :P], v)
    out = z.flatten(-2) @ run.W_O[layer].T
    if run.attn_out_scale is not None and run.gamma_attn_out is not None:  # the sandwich norm, frozen
        out = out * (run.attn_out_scale[layer, :P, None] * run.gamma_attn_out[layer])
    return out


def attention_backward(run: FrozenRun, layer: int, grad: torch.Tensor) -> torch.Tensor:
    """The transpose of attention_forward: grad [B, P, d] at its output -> the gradient at its input x."""
    B, P, _ = grad.shape
    if run.attn_out_scale is not None and run.gamma_attn_out is not None:  # the sandwich norm, frozen
        grad = grad * (run.attn_out_scale[layer, :P, None] * run.gamma_attn_out[layer])
    dz = (grad @ run.W_O[layer]).view(B, P, run.n_heads, run.d_head)
    dv = torch.einsum("hqk,bqhd->bkhd", run.patterns[layer][:, :P, :P], dz)
    group = run.n_heads // run.n_kv_heads
    dv = dv.view(B, P, run.n_kv_heads, group, run.d_head).sum(3).reshape(B, P, -1)
    return (dv @ run.W_V[layer]) * (run.attn_scale[layer, :P, None] * run.gamma_attn[layer])


@dataclass
class Reads:
    """A batch of B read directions: row b reads `directions[b]` [d] at `positions[b]` of the residual stream at
    `layers[b]` (a block index L: resid_mid[L], where transcoder L reads; n_layers: the final residual)."""

    layers: list[int]
    positions: list[int]
    directions: torch.Tensor  # [B, d]

    @property
    def size(self) -> int:
        return len(self.layers)


SourceFn = Callable[[int, torch.Tensor], None]


def skip_backward(run: FrozenRun, layer: int, grad: torch.Tensor, W_skip: torch.Tensor) -> torch.Tensor:
    """The transpose of a skip connection mlp_in[L] W_skip (mlp_in = frozen MLP norm of resid_mid[L]): the gradient
    at resid_post[L] [B, P, d] -> its part at resid_mid[L] through the skip."""
    P = grad.shape[1]
    return (grad @ W_skip.T.to(grad.dtype)) * (run.mlp_scale[layer, :P, None] * run.gamma_mlp[layer])


def linear_backward(run: FrozenRun, reads: Reads, at_post: SourceFn, at_embed: Callable[[torch.Tensor], None],
                    at_mid: SourceFn | None = None, skips: Sequence[torch.Tensor | None] | None = None) -> None:
    """The gradient of every read w.r.t. the residual stream, one pass for the batch, top block down.

    at_post(L, G): G [B, P, d] is the gradient at resid_post[L] (where block L's MLP writes: its features and error
    node), before the reads of block L are injected; at_mid(L, G): at resid_mid[L] (where block L's attention writes
    its constant bias); at_embed(G): at the embeddings. P = 1 + the largest read position (causality: nothing later
    moves a read). MLP paths are cut: their outputs are constants of the replacement model, except a
    transcoder's skip connection (skips[L]: W_skip [d, d] or None), a linear path the gradient follows."""
    n = run.n_layers
    P = max(reads.positions) + 1
    top = max(reads.layers)
    G = torch.zeros(reads.size, P, run.W_E.shape[1], dtype=run.dtype)
    index = torch.arange(reads.size)
    layers = torch.tensor(reads.layers)
    positions = torch.tensor(reads.positions)

    def inject(layer: int) -> None:
        chosen = layers == layer
        if bool(chosen.any()):
            G[index[chosen], positions[chosen]] += reads.directions[chosen].to(run.dtype)

    inject(n)
    for layer in range(min(top, n - 1), -1, -1):
        at_post(layer, G)
        skip = None if skips is None else skips[layer]
        if skip is not None:
            G = G + skip_backward(run, layer, G, skip)
        inject(layer)
        if at_mid is not None:
            at_mid(layer, G)
        G = G + attention_backward(run, layer, G)
    at_embed(G)


def replay_forward(run: FrozenRun, embeds: torch.Tensor, mlp_out: list[torch.Tensor],
                   skips: Sequence[torch.Tensor | None] | None = None) -> list[torch.Tensor]:
    """The replacement model forwards from residual rows embeds [T, d] with the MLP outputs given as constants
    (plus each skip connection's mlp_in W_skip, linear in the residual stream): the residual stream at every
    point, [resid_pre[0], resid_mid[0], resid_pre[1], ..., resid_final]."""
    points = [embeds]
    x = embeds
    for layer in range(run.n_layers):
        bias = run.attn_bias[layer]
        x = x + attention_forward(run, layer, x) + (0 if bias is None else bias)
        points.append(x)
        skip = None if skips is None else skips[layer]
        if skip is not None:
            P = x.shape[-2]
            x = x + (x * (run.mlp_scale[layer, :P, None] * run.gamma_mlp[layer])) @ skip.to(x.dtype)
        x = x + mlp_out[layer]
        points.append(x)
    return points


def final_logits(run: FrozenRun, resid_final: torch.Tensor) -> torch.Tensor:
    """Next-token logits [vocab] from the last row of a final residual under the frozen final norm."""
    logits = (resid_final[-1] * run.final_scale[-1] * run.gamma_final) @ run.W_U
    return logits if run.b_U is None else logits + run.b_U
