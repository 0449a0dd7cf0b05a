"""Evaluating transcoders: the same figures as an SAE's (interpscope.sae.evaluation), with the transcoder's output
spliced in place of the MLP's.

Per batch: the clean pass records the transcoder's input (e.g. blocks.L.mlp.hook_in, the MLP's input after its norm,
or blocks.L.hook_resid_mid) and the MLP's output (its target, blocks.L.hook_mlp_out); the zero-ablated pass replaces
the MLP's output by zeros; each transcoder's pass replaces it by the transcoder's prediction from the clean input
(nothing before the MLP changes, so that input is the one the pass computes). Loss recovered = (CE_zero -
CE_transcoder) / (CE_zero - CE_clean) is then the share of the MLP's contribution to the next-token loss the
transcoder reproduces. FVU, shrinkage and cosine compare the prediction with the MLP's true output. Position 0 and
massive-activation rows (of the input or of the output) keep the MLP's own output and are left out of the averages,
as for SAEs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from interpscope.capture import hooks, model_lock
from interpscope.config import InterpscopeError
from interpscope.corpus import token_chunks
from interpscope.sae.architectures import SparseAutoencoder
from interpscope.sae.evaluation import (
    DENSE_THRESHOLD,
    BatchTerms,
    SAEEvaluation,
    _figures,
    _Splice,
    batch_terms,
    run_batches,
)
from interpscope.sae.folder import hook_width
from interpscope.scale.pool import Scale, Shard
from interpscope.sinks import sink_rows

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


class _TranscoderSplice(_Splice):
    """Clean pass recording input and target; spliced passes replace the target hook (positions 1..)."""

    def __init__(self, lm: LoadedModel, hook_in: str, hook_out: str):
        super().__init__(lm, hook_out)
        self.hook_in = hook_in
        self.resume = None  # the MLP output is inside a block: every pass runs whole

    def clean(self, batch: torch.Tensor) -> torch.Tensor:
        def record_in(tensor: torch.Tensor):
            self.state["source"] = tensor[:, 1:].detach()
            return None

        def record_out(tensor: torch.Tensor):
            self.state["first"] = tensor[:, :1].detach()
            self.state["x"] = tensor[:, 1:].detach()
            return None
        with hooks(self.loaded.adapter, {self.hook_in: record_in, self.hook_out_name: record_out}):
            logits = self.loaded.model(input_ids=batch, use_cache=False).logits.cpu()
        self.state["sinks"] = sink_rows(self.state["source"]) | sink_rows(self.state["x"])
        return logits

    @property
    def hook_out_name(self) -> str:
        return self.hook


@dataclass
class TranscoderEvalJob:
    """One shard of a transcoder evaluation: each batch's terms."""

    saes: list[SparseAutoencoder]
    hook_in: str
    hook_out: str
    batch_size: int

    @torch.no_grad()
    def run(self, lm: LoadedModel, shard: Shard) -> list[BatchTerms]:
        passes = _TranscoderSplice(lm, self.hook_in, self.hook_out)
        windows = shard.payload
        with model_lock(lm):
            return [batch_terms(passes, self.saes, windows[k:k + self.batch_size])
                    for k in range(0, windows.shape[0], self.batch_size)]


def transcoder_hooks(saes: list[SparseAutoencoder], lm: LoadedModel) -> tuple[str, str]:
    """The one (input, output) hook pair every transcoder reads and writes; clear errors otherwise."""
    pairs = {(sae.cfg.hook_name, str(sae.cfg.extra.get("hook_name_out") or "")) for sae in saes}
    if len(pairs) != 1:
        raise InterpscopeError(f"evaluate_transcoders needs transcoders on one hook pair; got {sorted(pairs)}.")
    hook_in, hook_out = pairs.pop()
    if not hook_in or not hook_out:
        raise InterpscopeError("A transcoder's cfg.json must name hook_name (input) and hook_name_out (target).")
    for sae in saes:
        if not type(sae).paired:
            raise InterpscopeError(f"{sae.cfg.architecture} is not a transcoder; evaluate it with evaluate_saes.")
        d_out = int(sae.cfg.extra["d_out"])
        if hook_width(lm.adapter, hook_in) != sae.cfg.d_in or hook_width(lm.adapter, hook_out) != d_out:
            raise InterpscopeError(f"Shape mismatch: the transcoder maps {sae.cfg.d_in} -> {d_out}, but this model "
                                   f"has {hook_width(lm.adapter, hook_in)} at {hook_in} and "
                                   f"{hook_width(lm.adapter, hook_out)} at {hook_out}.")
    return hook_in, hook_out


@torch.no_grad()
def evaluate_transcoders(lm: LoadedModel, saes: list[SparseAutoencoder], *, n_tokens: int = 4096,
                         context_size: int = 128, batch_size: int = 4, source: str | None = None,
                         split: str = "test", ids: torch.Tensor | None = None,
                         dense_threshold: float = DENSE_THRESHOLD,
                         progress: Callable[[int, int], None] | None = None,
                         scale: Scale | None = None) -> list[SAEEvaluation]:
    """L0, FVU of the MLP output, loss recovered with the transcoder spliced in place of the MLP, shrinkage,
    density; several transcoders on one hook pair share the clean and zero-ablated passes."""
    hook_in, hook_out = transcoder_hooks(saes, lm)
    if ids is None:
        ids = token_chunks(lm.tokenizer, context_size, n_tokens, source=source, split=split)
    sums = run_batches(lm, saes, TranscoderEvalJob(saes, hook_in, hook_out, batch_size), ids, batch_size, progress,
                       scale, d_out=int(saes[0].cfg.extra["d_out"]))
    return _figures(lm, saes, f"{hook_in}->{hook_out}", sums, dense_threshold)


def evaluate_any(lm: LoadedModel, sae: SparseAutoencoder, **options) -> SAEEvaluation:
    """evaluate_sae for an SAE, evaluate_transcoders for a transcoder (its output spliced in place of the MLP's)."""
    from interpscope.sae.evaluation import evaluate_sae

    if type(sae).paired:
        options.pop("hook_name", None)
        return evaluate_transcoders(lm, [sae], **options)[0]
    return evaluate_sae(lm, sae, **options)
