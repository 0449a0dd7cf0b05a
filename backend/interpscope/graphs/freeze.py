"""Diagnostic readouts of an intervention: the real model run with parts of the replacement model's assumptions
imposed, so the gap between an attribution graph's predicted logit change and the real one can be split by cause.

The graph predicts with attention patterns and norm scales frozen at the clean run's, the MLPs replaced by their
transcoders plus a constant error node, and every active feature linear in its pre-activation. Each of those can
be imposed on a real forward pass separately, through interpscope.capture's scoped hooks (they act on the caller's
passes only, and nothing here is kept after the pass):

- "final_norm": the final RMSNorm divides by the clean run's rms per position (its scale frozen);
- "norms": the same for every block's attention and MLP norm (and Gemma 3's norms on their outputs);
- "attention": every attention pattern is the clean run's (the query and key projections return the clean run's
  outputs, so the scores and softmax are the clean ones; values still flow from the edited residual stream);
- "mlps": every MLP (with its output norm, where there is one: the transcoder predicts `hook_mlp_out`) is its
  transcoder plus the clean run's error (mlp_out - sum_i a_i W_dec[i] - a skip connection's mlp_in W_skip) at each
  position, so features downstream of an edit respond through their ReLU (and the skip) and nothing else does.

With all four, the forward pass IS the local replacement model; it differs from the graph's prediction only where
a feature crosses its threshold (the prediction keeps the clean run's active set and lets active features go
negative). READOUTS names the combinations the ablation check can report beside the real forward pass. These are
labelled diagnostics: the issue's figure of merit is always the real forward pass ("real").
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

import torch

from interpscope.capture import scoped
from interpscope.config import InterpscopeError

if TYPE_CHECKING:
    from interpscope.graphs.dictionary import Dictionary
    from interpscope.graphs.replay import FrozenRun
    from interpscope.models.loaded import LoadedModel

PARTS = ("final_norm", "norms", "attention", "mlps")
READOUTS: dict[str, tuple[str, ...]] = {
    "final_norm_frozen": ("final_norm",),
    "norms_frozen": ("final_norm", "norms"),
    "attention_frozen": ("attention",),
    "attention_norms_frozen": ("final_norm", "norms", "attention"),  # circuit-tracer's freeze, real MLPs
    "transcoder_mlps": ("mlps",),
    "replacement": PARTS,  # the local replacement model itself, ReLUs live
}
READOUT_LABELS = {
    "final_norm_frozen": "final norm's scale frozen",
    "norms_frozen": "every norm's scale frozen",
    "attention_frozen": "attention patterns frozen",
    "attention_norms_frozen": "attention patterns and norm scales frozen (circuit-tracer's convention)",
    "transcoder_mlps": "MLPs replaced by transcoders + constant error",
    "replacement": "the local replacement model (all frozen, transcoders + constant error)",
}

OutputHook = Callable[[Any, tuple, torch.Tensor], torch.Tensor]


def check_parts(parts: Collection[str]) -> None:
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise InterpscopeError(f"Unknown part to freeze: {', '.join(unknown)}; choose from {', '.join(PARTS)}.")


def readout_parts(names: Collection[str]) -> dict[str, tuple[str, ...]]:
    """The parts each named readout freezes, refusing unknown names."""
    unknown = [n for n in names if n not in READOUTS]
    if unknown:
        raise InterpscopeError(f"Unknown readout {', '.join(unknown)}; choose from {', '.join(READOUTS)}.")
    return {n: READOUTS[n] for n in names}


def _computing(x: torch.Tensor) -> torch.dtype:
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def _frozen_norm(scale: torch.Tensor, gamma: torch.Tensor) -> OutputHook:
    """An RMSNorm output computed with a fixed 1/rms per position (scale [T]) instead of the input's own."""
    def hook(module: Any, args: tuple, output: torch.Tensor) -> torch.Tensor:
        x = args[0]
        dtype = _computing(x)
        s = scale[: x.shape[-2]].to(device=x.device, dtype=dtype)[:, None]
        return ((x.to(dtype) * s) * gamma.to(device=x.device, dtype=dtype)).to(output.dtype)
    return hook


def _constant(value: torch.Tensor) -> OutputHook:
    """Return the clean run's output of a projection (value [T, out]) for every row of the batch."""
    def hook(module: Any, args: tuple, output: torch.Tensor) -> torch.Tensor:
        clean = value[: output.shape[-2]].to(device=output.device, dtype=output.dtype)
        return clean.expand_as(output).contiguous()
    return hook


def _keep_features(parts: Dictionary, layer: int, live: dict[int, torch.Tensor]
                   ) -> Callable[[Any, tuple, dict], None]:
    """Read an MLP's input (a pre-read: the MLP's forward still runs) and keep its source layer's live features
    (ReLU / JumpReLU live, differentiable for a linearisation) and the input itself (for a skip connection)."""
    def read(module: Any, args: tuple, kwargs: dict) -> None:
        x = args[0]
        source = parts.layers[layer]
        live[layer] = source.encode(x.to(source.W_enc.dtype))
        live[-1 - layer] = x
    return read


def _dictionary_mlp(parts: Dictionary, layer: int, error: torch.Tensor, live: dict[int, torch.Tensor]
                    ) -> OutputHook:
    """Block `layer`'s MLP output (after its output norm, where there is one: what a transcoder predicts) replaced by
    what the dictionary writes there from the live features of every source layer that writes to it (one for
    per-layer transcoders, all at or below for a CLT), its skip connection, plus the clean run's error node."""
    def hook(module: Any, args: tuple, output: torch.Tensor) -> torch.Tensor:
        dtype = error.dtype
        rebuilt = error[: output.shape[-2]].to(device=output.device)
        for source, W in parts.writes_to(layer):
            rebuilt = rebuilt + live[source].to(dtype) @ W.to(device=output.device)
        skip = parts.skips[layer]
        if skip is not None:
            rebuilt = rebuilt + live[-1 - layer].to(dtype) @ skip.to(device=output.device)
        return rebuilt.to(output.dtype).expand_as(output).contiguous()
    return hook


def clean_projections(lm: LoadedModel, ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The query and key projections' outputs [T, out] per block in a clean pass of ids [1, T] (read hooks only):
    what "attention" freezing returns in later passes."""
    adapter: Any = lm.adapter  # a Llama-style adapter (replay.check_architecture): it has attention_projections
    seen: dict[tuple[int, str], torch.Tensor] = {}

    def keep(layer: int, which: str) -> Callable[[Any, tuple, torch.Tensor], None]:
        def read(module: Any, args: tuple, output: torch.Tensor) -> None:
            seen[(layer, which)] = output.detach()[0].cpu()
        return read

    pairs = [(adapter.attention_projections(L)[which], keep(L, which)) for L in range(adapter.n_layers)
             for which in ("q", "k")]
    with torch.no_grad(), scoped(pairs, role="read"):
        adapter.model(input_ids=ids, use_cache=False)
    return [(seen[(L, "q")], seen[(L, "k")]) for L in range(adapter.n_layers)]


@contextmanager
def frozen(lm: LoadedModel, run: FrozenRun, parts: Collection[str], *, errors: list[torch.Tensor] | None = None,
           dictionary: Dictionary | None = None,
           projections: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> Iterator[None]:
    """Impose `parts` (of PARTS) on this run's forward passes of lm for the `with` block. "mlps" needs the
    dictionary (per-layer transcoders or a CLT, in the run's dtype: interpscope.graphs.dictionary) and the clean
    error per layer [T, d]; "attention" the clean query/key outputs (clean_projections). Register this BEFORE any
    edit on hook_mlp_out: forward hooks run in registration order, so an edit then acts on the transcoder's
    output."""
    check_parts(parts)
    adapter: Any = lm.adapter
    pairs: list[tuple[Any, Callable[[Any, tuple, torch.Tensor], Any]]] = []
    pre_reads: list[tuple[Any, Callable[[Any, tuple, dict], None]]] = []
    live: dict[int, torch.Tensor] = {}  # per source layer its live features; at -1 - layer its MLP input
    if "final_norm" in parts:
        pairs.append((adapter.final_norm(), _frozen_norm(run.final_scale, run.gamma_final)))
    for layer in range(run.n_layers):
        if "norms" in parts:
            pairs.append((adapter.attention_norm(layer), _frozen_norm(run.attn_scale[layer], run.gamma_attn[layer])))
            pairs.append((adapter.mlp_norm(layer), _frozen_norm(run.mlp_scale[layer], run.gamma_mlp[layer])))
            if run.attn_out_scale is not None and run.gamma_attn_out is not None:
                pairs.append((adapter.attention_output_norm(layer),
                              _frozen_norm(run.attn_out_scale[layer], run.gamma_attn_out[layer])))
            if run.mlp_out_scale is not None and run.gamma_mlp_out is not None and "mlps" not in parts:
                pairs.append((adapter.mlp_output_norm(layer),
                              _frozen_norm(run.mlp_out_scale[layer], run.gamma_mlp_out[layer])))
        if "attention" in parts:
            if projections is None:
                raise InterpscopeError("Freezing attention needs the clean run's query and key projections.")
            q, k = projections[layer]
            found = adapter.attention_projections(layer)
            pairs += [(found["q"], _constant(q)), (found["k"], _constant(k))]
        if "mlps" in parts:
            if dictionary is None or errors is None:
                raise InterpscopeError("Replacing the MLPs needs the dictionary and the clean run's error nodes.")
            pre_reads.append((adapter.mlp(layer), _keep_features(dictionary, layer, live)))
            # the dictionary predicts hook_mlp_out: the MLP's output norm's output where there is one (Gemma 3)
            pairs.append((adapter.mlp_output_norm(layer) or adapter.mlp(layer),
                          _dictionary_mlp(dictionary, layer, errors[layer], live)))
    with ExitStack() as stack:
        if pre_reads:
            stack.enter_context(scoped(pre_reads, role="read", kind="input"))
        if pairs:
            stack.enter_context(scoped(pairs, role="edit"))
        yield
