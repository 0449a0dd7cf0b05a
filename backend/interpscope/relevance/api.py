"""What pages, the command line and benchmarks call: explain a text with one method, compare, check faithfulness.

Every call holds the model's lock for the whole attribution (rules are hooks on the shared model instance).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from interpscope.adapters import ModelAdapter, get_adapter
from interpscope.capture import editing, model_lock
from interpscope.config import InterpscopeError
from interpscope.inputs import input_ids_for
from interpscope.predict import TokenProb, cached_next_logits, next_logits, remember_next_logits, top_predictions
from interpscope.progress import Progress
from interpscope.relevance.baselines import CONVERGENCE_STEPS, IGConvergence, convergence
from interpscope.relevance.continuation import ContinuationRelevance, continuation_relevance
from interpscope.relevance.engine import Attribution, Completeness, Conservation, LatentRelevance, forward_logits
from interpscope.relevance.faithfulness import DEFAULT_STEPS, PerturbationCurves, perturbation_curves
from interpscope.relevance.methods import MethodOptions, get_method
from interpscope.relevance.sinks import report_from, sink_report, watching
from interpscope.relevance.targets import PendingTarget, Target, chosen_target, resolve_target
from interpscope.results import Result
from interpscope.sinks import words

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

MAX_NEW_TOKENS = 64
MODEL_KIND = ("attention", "position_embedding", "state_space")


def model_kind(adapter: ModelAdapter) -> list[str]:
    """The capabilities that decide a page's wording (interpscope.sinks.words)."""
    return sorted(set(MODEL_KIND) & set(adapter.capabilities()))


@dataclass
class RelevanceResult(Result):
    """One relevance map (schema interpscope.relevance): per-token relevance for one target, with the conservation
    readout of LRP methods, and the model's top next-token predictions after the text (`top`, from the same forward
    pass when possible). What does not apply is absent from the document: `conservation` for a method without that
    law, its softmax share for a model without attention (Mamba), `completeness` outside Integrated Gradients,
    `latent` unless asked for, `top` when top=0."""

    SCHEMA = "interpscope.relevance"
    SCHEMA_VERSION = 2  # 2: settings (the method's option values) for methods that take options

    model: str
    method: str
    method_label: str
    tokens: list[str]
    token_ids: list[int]
    relevance: np.ndarray
    target: Target
    logit: float
    conservation: Conservation | None
    seconds: float
    latent: LatentRelevance | None = None
    completeness: Completeness | None = None
    law: str = "none"
    through_softmax: bool = False
    sink_positions: list[int] = field(default_factory=list)
    top: list[TokenProb] | None = None
    sinks: list[dict] = field(default_factory=list)
    bos_prepended: bool = False
    model_kind: list[str] = field(default_factory=list)
    settings: dict | None = None

    @property
    def sink_word(self) -> str:
        """What an excluded massive row is called on this kind of model ('attention sink' needs attention)."""
        return words(self.model_kind)["sink"]

    def sink_reasons(self) -> dict[int, str]:
        """position -> why it is excluded (prepended BOS, measured ratio), for the heatmap's naming."""
        return {row["position"]: row["reason"] for row in self.sinks}

    @property
    def title(self) -> str:
        return f"{self.method_label}: relevance for {self.target.label} ({self.model})"

    def figure(self):
        """The relevance page's token heatmap (excluded positions named, outside the colour scale)."""
        from interpscope.figures.tokens import heatmap_figure

        return heatmap_figure(self.tokens, self.relevance, self.title, self.sink_positions,
                              reasons=self.sink_reasons())

    def tidy(self) -> list[dict]:
        """One row per input token (the CSV export): position, token, relevance, its share of the colour scale
        (R / max |R| over the non-excluded tokens), whether it is excluded (a measured sink or a prepended BOS), and
        what was explained."""
        values = np.asarray(self.relevance, dtype=float)
        kept = np.delete(values, [i for i in self.sink_positions if i < values.size])
        scale = float(np.max(np.abs(kept))) if kept.size else 0.0
        return [{"position": i, "token": token, "token_id": token_id, "relevance": float(value),
                 "relevance_scaled": float(value / scale) if scale else 0.0, "sink": i in self.sink_positions,
                 "method": self.method, "target": self.target.label, "explained": self.target.kind,
                 "value": self.logit, "model": self.model}
                for i, (token, token_id, value) in enumerate(zip(self.tokens, self.token_ids, values, strict=True))]


def _adapter(model_or_lm: nn.Module | LoadedModel) -> ModelAdapter:
    if isinstance(model_or_lm, nn.Module):  # a bare model (HF models have a `.model` submodule of their own)
        return get_adapter(model_or_lm)
    return model_or_lm.adapter


def next_token_logits(model_or_lm: nn.Module | LoadedModel, input_ids: torch.Tensor,
                      position: int | None = None) -> torch.Tensor:
    """Logits [vocab] predicting the token after `position` (default: the last input token); the last position's
    logits come from the per-process cache shared with predict_next (interpscope.predict)."""
    adapter = _adapter(model_or_lm)
    last = input_ids.shape[1] - 1
    position = last if position is None else position
    if position == last and not editing(adapter.model):
        return next_logits(adapter.model, input_ids)
    with model_lock(model_or_lm), torch.no_grad():
        return forward_logits(adapter.model, adapter.embedding()(input_ids), [position])[0, 0]


def run_method(model_or_lm: nn.Module | LoadedModel, input_ids: torch.Tensor, method: str,
               target: Target | PendingTarget, latent: bool = False, options: MethodOptions | None = None,
               progress: Progress | None = None) -> tuple[Attribution, float]:
    """(attribution, seconds of the attribution itself) for one method on input_ids [1, T]; progress(done, total)
    per internal batch (Integrated Gradients) or once at the end (one-pass methods)."""
    adapter = _adapter(model_or_lm)
    spec = get_method(method, adapter)
    options = (options or MethodOptions()).checked()
    if options.pad_token_id is None and not isinstance(model_or_lm, nn.Module):
        options = options.replace(pad_token_id=getattr(model_or_lm.tokenizer, "pad_token_id", None))
    extra = {} if progress is None else {"progress": progress}
    with model_lock(model_or_lm):
        start = time.perf_counter()
        result = spec.compute(adapter, input_ids, target, latent, options, **extra)
        seconds = time.perf_counter() - start
    return result, seconds


def make_target(lm: LoadedModel, input_ids: torch.Tensor, token: str | int | None = None,
                contrast: tuple[str | int, str | int] | None = None, vs_rest: bool = False) -> Target:
    """The target at the last position: predicted token unless a token or a contrast (A, B) is given."""
    position = int(input_ids.shape[1]) - 1
    if token is not None or contrast is not None:
        return chosen_target(lm.tokenizer, lm.adapter.vocab_size, position, token=token, contrast=contrast,
                             vs_rest=vs_rest)
    return resolve_target(lm.tokenizer, next_token_logits(lm, input_ids, position), position, vs_rest=vs_rest)


def explain(lm: LoadedModel, text: str | None = None, method: str = "attnlrp", *, token: str | int | None = None,
            contrast: tuple[str | int, str | int] | None = None, vs_rest: bool = False, latent: bool = False,
            input_ids: torch.Tensor | None = None, target: Target | None = None, top: int = 10,
            options: MethodOptions | None = None, progress: Progress | None = None,
            prepend_bos: bool | None = None) -> RelevanceResult:
    """Relevance of each token of `text` (or input_ids) for the next-token target, with one method (serves the
    relevance page's map; its `top` list is the page's top-10 next tokens).

    One forward and one backward pass in all: the predicted-token target and the top-`top` list are read off the
    attribution's own forward pass (LRP rules change no forward value), or off the logits a prediction of the same
    text already left in the per-process cache; only methods that need the target before they start (IG,
    occlusion) or recompute the model another way (MambaLRP) run a plain forward pass first when nothing is cached.
    progress(done, total): per internal batch for Integrated Gradients (with_eta gives the page its ETA).
    options: IG steps and baseline, occlusion window (interpscope.relevance.methods.MethodOptions). prepend_bos: put
    the model's BOS before `text` (None: where the tokenizer adds none; ignored with input_ids). Excluded positions
    (rows measured to carry a massive activation, and a prepended BOS: interpscope.relevance.sinks) are the result's
    sink_positions, each with its reason and measured ratio in `sinks`.
    """
    if input_ids is None:
        if text is None:
            raise InterpscopeError("explain needs a text or input_ids.")
        ids, prepended = input_ids_for(lm, text, prepend_bos)
    else:
        ids, prepended = input_ids, False
    spec = get_method(method, lm.adapter)
    position = int(ids.shape[1]) - 1
    cached = None if editing(lm.model) else cached_next_logits(lm.model, ids)
    if target is None and (token is not None or contrast is not None):
        target = make_target(lm, ids, token=token, contrast=contrast, vs_rest=vs_rest)
    elif target is None and (cached is not None or not spec.one_backward_pass or not spec.exact_forward):
        next_row = cached if cached is not None else next_token_logits(lm, ids, position)
        target = resolve_target(lm.tokenizer, next_row, position, vs_rest=vs_rest)
    pending = target or PendingTarget(position, lambda row: resolve_target(lm.tokenizer, row, position,
                                                                           vs_rest=vs_rest))
    with watching(lm.adapter) as probe:
        attribution, seconds = run_method(lm, ids, method, pending, latent=latent, options=options,
                                          progress=progress)
    target = attribution.target or target
    if target is None:
        raise InterpscopeError(f"{method} resolved no target for this text.")
    row = cached
    if row is None and spec.exact_forward and attribution.output_logits is not None and target.position == position:
        row = attribution.output_logits
        remember_next_logits(lm.model, ids, row)
    if row is None and top:
        row = next_token_logits(lm, ids, position)
    predictions = top_predictions(row, lm.tokenizer, top)[0] if top and row is not None else None  # set if top
    # one-pass methods ran exactly this input: their pass shows the sinks; perturbation methods saw other inputs
    first = 0 if prepended else None
    report = (report_from(lm.adapter, probe["residual"], first) if spec.one_backward_pass and "residual" in probe
              else sink_report(lm.adapter, ids, first))
    kind = model_kind(lm.adapter)
    tokens = lm.token_strings(ids[0])
    return RelevanceResult(model=lm.name, method=spec.name, method_label=spec.label, tokens=tokens,
                           token_ids=ids[0].tolist(), relevance=attribution.relevance, target=target,
                           logit=attribution.logit, conservation=attribution.conservation, seconds=seconds,
                           latent=attribution.latent, completeness=attribution.completeness, law=spec.law,
                           through_softmax=spec.through_softmax, sink_positions=report.positions, top=predictions,
                           sinks=report.rows(tokens, words(kind)["sink"]), bos_prepended=prepended, model_kind=kind,
                           settings=method_settings(spec, options))


def method_settings(spec, options: MethodOptions | None) -> dict | None:
    """The values of the options this method takes (its registration's OptionSpecs) that the map was computed
    with, by option name; None for a method that takes none (the document's `settings` is then absent)."""
    if not spec.options:
        return None
    chosen = options or MethodOptions()
    return {option.name: chosen[option.name] for option in spec.options}


def faithfulness(lm: LoadedModel, result: RelevanceResult, steps: int = DEFAULT_STEPS) -> PerturbationCurves:
    """MoRF / LeRF curves and ABPC of a relevance map on its own input."""
    ids = torch.tensor([result.token_ids], device=lm.device)
    with model_lock(lm):
        return perturbation_curves(lm.adapter, ids, result.target, result.relevance, steps=steps)


@dataclass
class FaithfulnessSummary(Result):
    """ABPC per method over a set of texts, each explained for its predicted next token (schema
    interpscope.faithfulness_batch; the relevance page's batch export). seconds: attribution time per method."""

    SCHEMA = "interpscope.faithfulness_batch"
    SCHEMA_VERSION = 1

    methods: list[str]
    abpc: dict[str, list[float]]
    mean_abpc: dict[str, float]
    std_abpc: dict[str, float]
    n_texts: int
    seconds: dict[str, float]

    def tidy(self) -> list[dict]:
        """One row per method: mean and standard deviation of ABPC over the texts."""
        return [{"method": m, "mean_abpc": self.mean_abpc[m], "std_abpc": self.std_abpc[m], "texts": self.n_texts}
                for m in self.methods]

    def figure(self):
        """The page's bar chart of mean ABPC per method (error bars: one standard deviation)."""
        from interpscope.figures.relevance import abpc_bar
        from interpscope.relevance.methods import METHODS

        labels = [METHODS[m].label if m in METHODS else m for m in self.methods]
        return abpc_bar(labels, [self.mean_abpc[m] for m in self.methods], [self.std_abpc[m] for m in self.methods],
                        f"Mean ABPC over {self.n_texts} texts")


def faithfulness_batch(lm: LoadedModel, texts: Sequence[str], methods: Sequence[str], steps: int = DEFAULT_STEPS,
                       progress: Callable[[int, int], None] | None = None) -> FaithfulnessSummary:
    """ABPC of every method on every text; `progress(done, total)` is called after each text."""
    scores: dict[str, list[float]] = {m: [] for m in methods}
    seconds: dict[str, float] = {m: 0.0 for m in methods}
    for index, text in enumerate(texts):
        ids, _ = input_ids_for(lm, text)
        target = make_target(lm, ids)
        for method in methods:
            result = explain(lm, method=method, input_ids=ids, target=target)
            seconds[method] += result.seconds
            scores[method].append(faithfulness(lm, result, steps=steps).abpc)
        if progress:
            progress(index + 1, len(texts))
    return FaithfulnessSummary(methods=list(methods), abpc=scores,
                               mean_abpc={m: float(np.mean(v)) for m, v in scores.items()},
                               std_abpc={m: float(np.std(v)) for m, v in scores.items()},
                               n_texts=len(texts), seconds=seconds)


def explain_continuation(lm: LoadedModel, text: str, n_new: int, method: str = "attnlrp",
                         progress: Progress | None = None) -> tuple[ContinuationRelevance, list[str]]:
    """Generate `n_new` tokens and the output x input relevance matrix; also the sequence's token strings
    (serves the relevance page's 'A continuation'); progress(done, n_new) per explained token."""
    spec = get_method(method, lm.adapter)
    if not spec.one_backward_pass:
        raise InterpscopeError(f"Continuation matrices use one backward pass per token: choose an LRP method or "
                               f"Gradient x Input, not {spec.label}.")
    if not 1 <= n_new <= MAX_NEW_TOKENS:
        raise InterpscopeError(f"Generate between 1 and {MAX_NEW_TOKENS} tokens (asked for {n_new}).")
    ids = lm.encode(text, max_tokens=lm.token_cap - n_new)
    rules = spec.rules(lm.adapter) if spec.rules else []
    with model_lock(lm):
        matrix = continuation_relevance(lm.adapter, ids, n_new, rules, progress=progress)
    return matrix, lm.token_strings(matrix.sequence_ids)


def top_heads(latent: LatentRelevance, k: int = 10) -> list[dict]:
    """The k attention heads with the largest |relevance| for this target."""
    if latent.heads is None:
        return []
    flat = np.argsort(-np.abs(latent.heads), axis=None)[:k]
    layers, heads = np.unravel_index(flat, latent.heads.shape)
    return [{"layer": int(layer), "head": int(h), "relevance": float(latent.heads[layer, h])}
            for layer, h in zip(layers, heads, strict=True)]


def top_neurons(latent: LatentRelevance, k: int = 10) -> list[dict]:
    """The k MLP neurons with the largest |relevance| for this target."""
    if latent.neurons is None:
        return []
    flat = np.argsort(-np.abs(latent.neurons), axis=None)[:k]
    layers, neurons = np.unravel_index(flat, latent.neurons.shape)
    return [{"layer": int(layer), "neuron": int(n), "relevance": float(latent.neurons[layer, n])}
            for layer, n in zip(layers, neurons, strict=True)]


def ig_convergence(lm: LoadedModel, text: str, *, token: str | int | None = None, contrast: tuple | None = None,
                   options: MethodOptions | None = None, prepend_bos: bool | None = None,
                   steps: Sequence[int] = CONVERGENCE_STEPS,
                   progress: Progress | None = None) -> IGConvergence:
    """Integrated Gradients' completeness gap at each step count in `steps`, and the target along the path from
    the baseline (interpscope.relevance.baselines.convergence), on the same input and target as explain() would use.
    Expensive (sum(steps) gradient passes): the page runs it on an explicit Run."""
    options = (options or MethodOptions()).checked()
    ids, _ = input_ids_for(lm, text, prepend_bos)
    target = make_target(lm, ids, token=token, contrast=contrast)
    pad = options.pad_token_id if options.pad_token_id is not None else getattr(lm.tokenizer, "pad_token_id", None)
    with model_lock(lm):
        return convergence(lm.adapter, ids, target, lm.token_strings(ids[0]), options.baseline, pad, steps,
                           progress=progress)
