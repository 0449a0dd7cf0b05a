"""Relevance maps for encoder-decoders (T5, Flan-T5): which source tokens and which decoder-prefix tokens made the
model predict its next decoder token.

The target is the next decoder token after an optional decoder prefix: the decoder input is the decoder start token
(position 0, put there by the model, not by the person) followed by the prefix's tokens, and the target is read at
its last position (without a prefix, the first decoder token). Methods: AttnLRP and CP-LRP (the decoder-only rules,
cross-attention treated like self-attention: interpscope.relevance.seq2seq_engine), Gradient x Input, and Integrated
Gradients over both inputs' embeddings. Excluded positions (never setting the shared colour scale, always named):
rows measured to carry a massive activation at the middle block of their stack (interpscope.sinks.measure), and the
decoder start token.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.adapters.t5 import T5Adapter
from interpscope.capture import model_lock, on_output
from interpscope.config import InterpscopeError
from interpscope.inputs import check_text, check_token_count
from interpscope.predict import TokenProb, top_predictions
from interpscope.progress import Progress
from interpscope.relevance.baselines import BASELINES, baseline_embeds
from interpscope.relevance.engine import Completeness
from interpscope.relevance.methods import METHODS, MethodOptions, methods_serving
from interpscope.relevance.seq2seq_engine import (
    Seq2SeqConservation,
    attribute_seq2seq,
    forward_seq2seq,
    integrated_gradients_seq2seq,
    keep_residual,
)
from interpscope.relevance.targets import PendingTarget, Target, chosen_target, resolve_target
from interpscope.results import Result
from interpscope.sinks import SinkReport, measure

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

START_REASON = "decoder start token"


def seq2seq_methods() -> dict[str, str]:
    """name -> label of the registered methods that serve encoder-decoders, in registration order (LRP first)."""
    return {m.name: m.label for m in methods_serving("seq2seq")}


@dataclass
class Seq2SeqRelevance(Result):
    """One encoder-decoder relevance map (schema interpscope.relevance_seq2seq): relevance of the next decoder token
    over the source tokens and over the decoder input (start token + prefix), with the conservation readout of LRP
    methods (source + decoder + biases [+ softmax + position bias] == the explained value), IG's completeness, the
    excluded positions of each part with their reasons, and the model's top next decoder tokens."""

    SCHEMA = "interpscope.relevance_seq2seq"
    SCHEMA_VERSION = 1

    model: str
    method: str
    method_label: str
    source_tokens: list[str]
    source_ids: list[int]
    source_relevance: np.ndarray
    decoder_tokens: list[str]
    decoder_ids: list[int]
    decoder_relevance: np.ndarray
    decoder_text: str
    target: Target
    logit: float
    seconds: float
    law: str = "none"
    through_softmax: bool = False
    conservation: Seq2SeqConservation | None = None
    completeness: Completeness | None = None
    source_sinks: list[dict] = field(default_factory=list)
    decoder_sinks: list[dict] = field(default_factory=list)
    top: list[TokenProb] | None = None

    @property
    def source_excluded(self) -> list[int]:
        return [row["position"] for row in self.source_sinks]

    @property
    def decoder_excluded(self) -> list[int]:
        return [row["position"] for row in self.decoder_sinks]

    @property
    def colour_scale(self) -> float:
        """max |R| over both parts' positions that are not excluded: the one scale of both heatmaps."""
        kept = [np.delete(np.asarray(values, dtype=float), excluded) for values, excluded in
                ((self.source_relevance, self.source_excluded), (self.decoder_relevance, self.decoder_excluded))]
        flat = np.concatenate(kept)
        return float(np.max(np.abs(flat))) if flat.size else 0.0

    @property
    def title(self) -> str:
        return f"{self.method_label}: relevance for the next decoder token {self.target.label} ({self.model})"

    def figure(self):
        """The page's two aligned heatmaps (source; decoder input) on one shared colour scale."""
        from interpscope.figures.relevance.seq2seq import seq2seq_figure

        return seq2seq_figure(self.source_tokens, self.source_relevance, self.decoder_tokens, self.decoder_relevance,
                              self.title, self.colour_scale, self.source_sinks, self.decoder_sinks)

    def tidy(self) -> list[dict]:
        """One row per token of both parts: part ('source' or 'decoder'), position, token, relevance, its share of the
        shared colour scale, whether it is excluded, and what was explained."""
        scale = self.colour_scale
        rows = []
        for part, tokens, ids, values, excluded in (
                ("source", self.source_tokens, self.source_ids, self.source_relevance, self.source_excluded),
                ("decoder", self.decoder_tokens, self.decoder_ids, self.decoder_relevance, self.decoder_excluded)):
            for i, (token, token_id, value) in enumerate(zip(tokens, ids, values, strict=True)):
                rows.append({"part": part, "position": i, "token": token, "token_id": token_id,
                             "relevance": float(value), "relevance_scaled": float(value) / scale if scale else 0.0,
                             "sink": i in excluded, "method": self.method, "target": self.target.label,
                             "explained": self.target.kind, "value": self.logit, "model": self.model})
        return rows


def _rows(report: SinkReport, tokens: list[str]) -> list[dict]:
    rows = report.rows(tokens)
    for row in rows:
        if row["prepended"]:
            row["reason"] = row["reason"].replace("prepended BOS", START_REASON)
    return rows


def _adapter(lm: LoadedModel) -> T5Adapter:
    if not isinstance(lm.adapter, T5Adapter):
        raise InterpscopeError(f"{lm.name} is a decoder-only {lm.family} model: a decoder prefix and source/decoder "
                               "relevance need an encoder-decoder (T5, Flan-T5). Explain its text without one.")
    return lm.adapter


def decoder_input_ids(lm: LoadedModel, decoder_text: str | None) -> torch.Tensor:
    """[1, 1 + P]: the decoder start token, then the prefix's tokens (no end-of-sequence token after them)."""
    adapter = _adapter(lm)
    ids = [adapter.decoder_start_token_id]
    if decoder_text:
        check_text(decoder_text)
        ids += list(lm.tokenizer(decoder_text, add_special_tokens=False).input_ids)
        check_token_count(len(ids), lm.token_cap)
    return torch.tensor([ids], device=lm.device)


def _plain_pass(adapter: T5Adapter, source_ids: torch.Tensor, decoder_ids: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits row at the last decoder position, encoder and decoder middle residuals) of one plain pass."""
    seen: dict[str, torch.Tensor] = {}
    handles = [on_output(adapter.middle_block(decoder), keep_residual(seen, "decoder" if decoder else "encoder"))
               for decoder in (False, True)]
    try:
        with torch.no_grad():
            embedding = adapter.embedding()
            row = forward_seq2seq(adapter, embedding(source_ids), embedding(decoder_ids), decoder_ids.shape[1] - 1)[0]
    finally:
        for handle in handles:
            handle.remove()
    return row, seen["encoder"], seen["decoder"]


def next_decoder_tokens(lm: LoadedModel, text: str, decoder_text: str | None = None, top: int = 10
                        ) -> list[TokenProb]:
    """The `top` most likely next decoder tokens after the prefix, for source `text` (one plain pass)."""
    adapter = _adapter(lm)
    source_ids, decoder_ids = lm.encode(text), decoder_input_ids(lm, decoder_text)
    row = _plain_pass(adapter, source_ids, decoder_ids)[0]
    return top_predictions(row, lm.tokenizer, top)[0]


def explain_seq2seq(lm: LoadedModel, text: str, decoder_text: str | None = None, method: str = "attnlrp", *,
                    token: str | int | None = None, contrast: tuple[str | int, str | int] | None = None,
                    options: MethodOptions | None = None, top: int = 10,
                    progress: Progress | None = None) -> Seq2SeqRelevance:
    """Relevance of the source `text` and the decoder prefix `decoder_text` for the next decoder token (the predicted
    one unless `token` or a `contrast` (A, B) is given), with one of seq2seq_methods(). LRP methods and Gradient x
    Input take one forward and one backward pass; Integrated Gradients (options: ig_steps, baseline) one plain pass
    for the target and the sinks, then its path."""
    adapter = _adapter(lm)
    name = (method or "").strip().lower()
    if name not in seq2seq_methods():
        raise InterpscopeError(f"{method!r} does not run on encoder-decoders here. Choose one of: "
                               f"{', '.join(seq2seq_methods())}.")
    spec = METHODS[name]
    options = (options or MethodOptions()).checked()
    source_ids = lm.encode(text)
    decoder_ids = decoder_input_ids(lm, decoder_text)
    position = int(decoder_ids.shape[1]) - 1
    vocab = adapter.vocab_size
    target: Target | PendingTarget
    if token is not None or contrast is not None:
        target = chosen_target(lm.tokenizer, vocab, position, token=token, contrast=contrast)
    else:
        target = PendingTarget(position, lambda row: resolve_target(lm.tokenizer, row, position))
    completeness = None
    encoder_residual: torch.Tensor | None
    decoder_residual: torch.Tensor | None
    with model_lock(lm):
        start = time.perf_counter()
        if spec.law == "completeness":  # the path integral (Integrated Gradients), from the baseline to the input
            row, encoder_residual, decoder_residual = _plain_pass(adapter, source_ids, decoder_ids)
            if isinstance(target, PendingTarget):
                target = target.resolve(row)
            embedding = adapter.embedding()
            pad = getattr(lm.tokenizer, "pad_token_id", None)
            with torch.no_grad():
                source_embeds, decoder_embeds = embedding(source_ids), embedding(decoder_ids)
            source_ref = baseline_embeds(adapter, source_embeds, options.baseline, pad)
            decoder_ref = baseline_embeds(adapter, decoder_embeds, options.baseline, pad)
            source_relevance, decoder_relevance = integrated_gradients_seq2seq(
                adapter, source_ids, decoder_ids, target, options.ig_steps, source_ref, decoder_ref, progress)
            with torch.no_grad():
                logit = float(target.value(row))
                at_baseline = float(target.value(forward_seq2seq(adapter, source_ref, decoder_ref, position)[0]))
            total = float(source_relevance.sum() + decoder_relevance.sum())
            gap = total - (logit - at_baseline)
            completeness = Completeness(value=logit, baseline_value=at_baseline, relevance_sum=total, gap=gap,
                                        relative_gap=abs(gap) / (abs(logit - at_baseline) or 1.0),
                                        steps=options.ig_steps, baseline=options.baseline,
                                        baseline_label=BASELINES[options.baseline])
            conservation = None
        else:
            rules = spec.rules  # an LRP rule set, or none: plain Gradient x Input
            attribution = attribute_seq2seq(adapter, source_ids, decoder_ids, target,
                                            rules(adapter) if rules else [], through_softmax=spec.through_softmax,
                                            conservation=rules is not None)
            if progress is not None:
                progress(1, 1)
            target, row, logit = attribution.target, attribution.output_logits, attribution.logit
            source_relevance, decoder_relevance = attribution.source_relevance, attribution.decoder_relevance
            encoder_residual, decoder_residual = attribution.encoder_residual, attribution.decoder_residual
            conservation = attribution.conservation
        seconds = time.perf_counter() - start
    if encoder_residual is None or decoder_residual is None:
        raise InterpscopeError("The pass did not reach the middle blocks; no sinks could be measured.")
    source_tokens, decoder_tokens = lm.token_strings(source_ids[0]), lm.token_strings(decoder_ids[0])
    encoder_report = measure(encoder_residual, point=f"encoder.blocks.{adapter.n_encoder_layers // 2}.output")
    decoder_report = measure(decoder_residual, prepended=0,
                             point=f"decoder.blocks.{adapter.n_decoder_layers // 2}.output")
    predictions = top_predictions(row, lm.tokenizer, top)[0] if top else None
    return Seq2SeqRelevance(
        model=lm.name, method=spec.name, method_label=spec.label, source_tokens=source_tokens,
        source_ids=source_ids[0].tolist(), source_relevance=np.asarray(source_relevance, dtype=np.float64),
        decoder_tokens=decoder_tokens, decoder_ids=decoder_ids[0].tolist(),
        decoder_relevance=np.asarray(decoder_relevance, dtype=np.float64), decoder_text=decoder_text or "",
        target=target, logit=logit, seconds=seconds, law=spec.law, through_softmax=spec.through_softmax,
        conservation=conservation, completeness=completeness, source_sinks=_rows(encoder_report, source_tokens),
        decoder_sinks=_rows(decoder_report, decoder_tokens), top=predictions)
