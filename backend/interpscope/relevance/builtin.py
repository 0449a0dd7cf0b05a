"""The methods Interpscope ships, registered in interpscope.relevance.methods: AttnLRP, CP-LRP, MambaLRP, Gradient x
Input, Integrated Gradients and occlusion. Each names the capabilities it needs and how it computes."""
from __future__ import annotations

import torch

from interpscope.adapters import ModelAdapter
from interpscope.progress import Progress
from interpscope.relevance import baselines
from interpscope.relevance.engine import Attribution, Completeness, attribute, forward_logits
from interpscope.relevance.image import pixels_by_integrated_gradients, pixels_by_occlusion, pixels_by_rules
from interpscope.relevance.mamba.rule import mambalrp_rules
from interpscope.relevance.methods import ImageVariant, Method, MethodOptions, OptionSpec, register_method
from interpscope.relevance.rules import attnlrp_rules, cplrp_rules
from interpscope.relevance.targets import Target

# the options of the baselines (Integrated Gradients, occlusion); flags, URL names and widget keys as they always were
_SHORT = {"zero": "zero embeddings", "pad": "the pad token", "mean": "the mean embedding"}
BASELINE = OptionSpec("baseline", str, "zero", "Baseline",
                      "what IG starts from and occlusion swaps in: zero embeddings, the pad token's, or the mean "
                      "embedding", choices=tuple((kind, _SHORT[kind]) for kind in baselines.BASELINES), noun="baseline")
IG_STEPS = OptionSpec("ig_steps", int, 32, "IG steps", "Integrated Gradients steps", low=1, high=512,
                      url="steps", ceiling="ig_steps")
OCCLUSION_WINDOW = OptionSpec("occlusion_window", int, 1, "Occlusion window (tokens)",
                              "tokens occluded at once, a sliding window", low=1, high=64, noun="The occlusion window",
                              unit="tokens", url="window", key="window", ceiling="occlusion_window")


def _with_rules(rules):
    def compute(adapter: ModelAdapter, ids: torch.Tensor, target: Target, latent: bool,
                options: MethodOptions, progress: Progress | None = None) -> Attribution:
        result = attribute(adapter, ids, target, rules(adapter), latent=latent)
        if progress is not None:
            progress(1, 1)
        return result
    return compute


def _gradient(adapter: ModelAdapter, ids: torch.Tensor, target: Target, latent: bool,
              options: MethodOptions, progress: Progress | None = None) -> Attribution:
    result = attribute(adapter, ids, target, [], latent=latent, conservation=False)
    if progress is not None:
        progress(1, 1)
    return result


def _value(adapter: ModelAdapter, embeds: torch.Tensor, target: Target) -> float:
    with torch.no_grad():
        return float(target.value(forward_logits(adapter.model, embeds, [target.position])[0, 0]))


def _baseline(adapter: ModelAdapter, ids: torch.Tensor, options: MethodOptions) -> tuple[torch.Tensor, torch.Tensor]:
    embeds = baselines.embeds_of(adapter, ids)
    return embeds, baselines.baseline_embeds(adapter, embeds, options.baseline, options.pad_token_id)


def _integrated_gradients(adapter: ModelAdapter, ids: torch.Tensor, target: Target, latent: bool,
                          options: MethodOptions, progress: Progress | None = None) -> Attribution:
    embeds, reference = _baseline(adapter, ids, options)
    steps, half = options.ig_steps, options.ig_steps // 2
    first = baselines.ig_batches(ids.shape[1], steps)[1]
    total = first + (baselines.ig_batches(ids.shape[1], half)[1] if half else 0)

    def part(offset: int):
        return None if progress is None else (lambda done, _: progress(offset + done, total))

    relevance = baselines.integrated_gradients(adapter, ids, target, steps, reference, progress=part(0))
    value, at_baseline = _value(adapter, embeds, target), _value(adapter, reference, target)
    total_sum = float(relevance.sum())
    gap = total_sum - (value - at_baseline)
    half_gap = None
    if half:  # the same integral with half the steps: the page says whether the gap shrinks with more steps
        coarse = baselines.integrated_gradients(adapter, ids, target, half, reference, progress=part(first))
        half_gap = float(coarse.sum()) - (value - at_baseline)
    scale = abs(value - at_baseline) or 1.0
    return Attribution(relevance=relevance.cpu().numpy(), logit=value, conservation=None, latent=None,
                       completeness=Completeness(value=value, baseline_value=at_baseline, relevance_sum=total_sum,
                                                 gap=gap, relative_gap=abs(gap) / scale, steps=steps,
                                                 baseline=options.baseline,
                                                 baseline_label=baselines.BASELINES[options.baseline],
                                                 half_steps=half or None, half_gap=half_gap))


def _occlusion(adapter: ModelAdapter, ids: torch.Tensor, target: Target, latent: bool,
               options: MethodOptions, progress: Progress | None = None) -> Attribution:
    embeds, reference = _baseline(adapter, ids, options)
    relevance = baselines.occlusion(adapter, ids, target, options.occlusion_window,
                                    None if options.baseline == "zero" else reference)
    if progress is not None:
        progress(1, 1)
    return Attribution(relevance=relevance.cpu().numpy(), logit=_value(adapter, embeds, target), conservation=None,
                       latent=None)


TRANSFORMER_LRP = frozenset({"transformer_lrp"})

# What each method explains beyond a decoder's text: the LRP rule sets and plain gradients run unchanged on an
# encoder-decoder (interpscope.relevance.seq2seq) and, with their pixel computation, on a ViT; the LRP rule sets also
# through a mixture of experts' experts (interpscope.relevance.experts).
TEXT_AND_BEYOND = frozenset({"text", "seq2seq", "image"})
register_method(Method("attnlrp", "AttnLRP", "lrp",
                       "LRP for transformers: relevance through attention, softmax kept (Achtibat et al. 2024).",
                       TRANSFORMER_LRP, _with_rules(attnlrp_rules), attnlrp_rules, "conservation",
                       through_softmax=True, inputs=TEXT_AND_BEYOND | {"experts"},
                       image=ImageVariant("LRP for transformers: relevance through attention, softmax kept "
                                          "(Achtibat et al. 2024).", pixels_by_rules)))
register_method(Method("cplrp", "CP-LRP", "lrp",
                       "Conservative propagation: queries, keys and the MLP gate detached; conserves exactly.",
                       TRANSFORMER_LRP, _with_rules(cplrp_rules), cplrp_rules, "conservation",
                       inputs=TEXT_AND_BEYOND | {"experts"},
                       image=ImageVariant("Conservative propagation: queries and keys detached; conserves exactly.",
                                          pixels_by_rules)))
register_method(Method("mambalrp", "MambaLRP", "lrp",
                       "LRP for Mamba: detached RMSNorm normaliser, SiLU identity rule, detached selective-SSM "
                       "parameters, half rule on the gate (Rezaei Jafari et al. 2024).",
                       frozenset({"state_space"}), _with_rules(mambalrp_rules), mambalrp_rules, "conservation",
                       exact_forward=False))
register_method(Method("gradxinput", "Gradient x Input", "gradient",
                       "Plain gradient times input embedding, no rules.", frozenset(), _gradient,
                       inputs=TEXT_AND_BEYOND, gradient_based=True,
                       image=ImageVariant("Plain gradient times input pixels, no rules.", pixels_by_rules)))
register_method(Method("ig", "Integrated Gradients", "perturbation",
                       "captum Integrated Gradients on the token embeddings from a baseline (zero, pad token or "
                       "mean embedding; default zero, 32 steps); relevance sums to f(x) - f(baseline) up to the "
                       "integral's gap (completeness).",
                       frozenset(), _integrated_gradients, law="completeness", options=(BASELINE, IG_STEPS),
                       inputs=TEXT_AND_BEYOND, gradient_based=True,
                       image=ImageVariant("captum Integrated Gradients from the reference image; sums to f(x) - "
                                          "f(reference) up to the integral's gap.", pixels_by_integrated_gradients,
                                          uses_reference=True)))
register_method(Method("occlusion", "Occlusion", "perturbation",
                       "captum occlusion: each token (or a sliding window of tokens) replaced by the baseline in turn; "
                       "the drop in the target.",
                       frozenset(), _occlusion, options=(BASELINE, OCCLUSION_WINDOW), per_token_passes=True,
                       inputs=frozenset({"text", "image"}),
                       image=ImageVariant("Each patch set to the reference in turn: the drop of the logit.",
                                          pixels_by_occlusion, uses_reference=True, label="Occlusion (patches)")))
