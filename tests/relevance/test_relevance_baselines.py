"""Baselines, targets, faithfulness curves and continuation matrices on tiny float64 models."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interpscope.adapters import get_adapter
from interpscope.config import InterpscopeError
from interpscope.models.tokenizers import gpt2_tokenizer
from interpscope.relevance import attnlrp_rules, attribute, cplrp_rules, get_method, methods_for
from interpscope.relevance.baselines import integrated_gradients, occlusion
from interpscope.relevance.continuation import continuation_relevance
from interpscope.relevance.faithfulness import perturbation_curves, removal_counts
from interpscope.relevance.targets import Target, resolve_target, token_id_of
from tests.tiny import relevance_model, tiny_ids


def setup(family: str = "llama", seed: int = 0, length: int = 10):
    model = relevance_model(family, seed=seed)
    ids = tiny_ids(length=length, seed=seed + 1)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1]
    return model, get_adapter(model), ids, Target(length - 1, int(logits.argmax()))


def value_with_embeds(model, embeds, target):
    with torch.no_grad():
        return float(target.value(model(inputs_embeds=embeds).logits[0, target.position]))


def test_gradient_x_input_matches_captum():
    from captum.attr import InputXGradient

    model, adapter, ids, target = setup("gpt2")
    ours = attribute(adapter, ids, target, [], conservation=False).relevance
    embeds = adapter.embedding()(ids).detach()
    theirs = InputXGradient(lambda e: target.value(model(inputs_embeds=e).logits[:, target.position])).attribute(embeds)
    np.testing.assert_allclose(ours, theirs[0].sum(-1).detach().numpy(), rtol=1e-10, atol=1e-12)


def test_integrated_gradients_completeness():
    # GPT-2: with learned positions the straight path from the zero baseline is smooth. (On RMSNorm/LayerNorm
    # models without them, f(alpha * x) jumps near alpha = 0 because the first norm removes the scale, so a
    # finite-step IG misses part of f(x) - f(0); bench/relevance.py reports that gap on the bundled model.)
    model, adapter, ids, target = setup("gpt2")
    embeds = adapter.embedding()(ids).detach()
    expected = value_with_embeds(model, embeds, target) - value_with_embeds(model, torch.zeros_like(embeds), target)
    relevance = integrated_gradients(adapter, ids, target, steps=128)
    assert relevance.shape == (ids.shape[1],)
    assert abs(float(relevance.sum()) - expected) < 0.01 * abs(expected)


def test_occlusion_is_the_drop_when_a_token_is_zeroed():
    model, adapter, ids, target = setup("gpt2")
    relevance = occlusion(adapter, ids, target)
    embeds = adapter.embedding()(ids).detach()
    full = value_with_embeds(model, embeds, target)
    for position in (0, 4, ids.shape[1] - 1):
        ablated = embeds.clone()
        ablated[0, position] = 0
        assert float(relevance[position]) == pytest.approx(full - value_with_embeds(model, ablated, target), abs=1e-10)


@pytest.mark.parametrize("rules", [attnlrp_rules, cplrp_rules], ids=["attnlrp", "cplrp"])
def test_contrast_target_is_the_difference_of_two_maps(rules):
    model, adapter, ids, target = setup("gpt2", seed=3)  # (eager Llama's float32 softmax would round the AttnLRP maps)
    other = (target.token_id + 5) % 64
    chosen = attribute(adapter, ids, target, rules(adapter)).relevance
    second = attribute(adapter, ids, Target(target.position, other), rules(adapter)).relevance
    contrast = attribute(adapter, ids, Target(target.position, target.token_id, contrast_id=other), rules(adapter))
    np.testing.assert_allclose(contrast.relevance, chosen - second, rtol=1e-9, atol=1e-12)
    assert contrast.conservation.relative_error < 1e-10


def test_target_resolution_and_messages():
    tokenizer = gpt2_tokenizer()
    logits = torch.zeros(50257)
    logits[464] = 5.0
    assert resolve_target(tokenizer, logits, 3).token_id == 464
    assert resolve_target(tokenizer, logits, 3, token=" the").token_id == tokenizer.encode(" the")[0]
    assert resolve_target(tokenizer, logits, 3, token="#17").token_id == 17
    pair = resolve_target(tokenizer, logits, 3, contrast=(" he", " she"))
    assert (pair.token_id, pair.contrast_id) == (tokenizer.encode(" he")[0], tokenizer.encode(" she")[0])
    assert float(pair.value(logits)) == float(logits[pair.token_id] - logits[pair.contrast_id])
    with pytest.raises(InterpscopeError, match="3 tokens"):
        token_id_of(tokenizer, " Pemberley")
    with pytest.raises(InterpscopeError, match="outside the vocabulary"):
        token_id_of(tokenizer, "#99999", 50257)
    with pytest.raises(InterpscopeError, match="same token"):
        resolve_target(tokenizer, logits, 3, contrast=(" he", " he"))
    with pytest.raises(InterpscopeError, match="empty"):
        token_id_of(tokenizer, "")


def test_method_registry_is_driven_by_capabilities():
    from interpscope.adapters import get_adapter
    from tests.tiny import tiny_llama, tiny_mamba

    llama, mamba = get_adapter(tiny_llama()), get_adapter(tiny_mamba())
    transformer = [m.name for m in methods_for(llama)]
    assert transformer[:2] == ["attnlrp", "cplrp"] and {"gradxinput", "ig", "occlusion"} <= set(transformer)
    ssm = [m.name for m in methods_for(mamba)]
    assert "attnlrp" not in ssm and "gradxinput" in ssm and ssm[0] == "mambalrp"
    with pytest.raises(InterpscopeError, match="transformer_lrp"):
        get_method("attnlrp", mamba)
    llama.lrp_exact = False  # a family computing something no rule covers offers no LRP method
    assert [m.kind for m in methods_for(llama)].count("lrp") == 0
    with pytest.raises(InterpscopeError, match="Unknown method"):
        get_method("saliency")


def test_perturbation_curves():
    model, adapter, ids, target = setup("gpt_neox", seed=5, length=12)
    relevance = occlusion(adapter, ids, target).numpy()
    curves = perturbation_curves(adapter, ids, target, relevance, steps=4)
    embeds = adapter.embedding()(ids).detach()
    full = value_with_embeds(model, embeds, target)
    empty = value_with_embeds(model, torch.zeros_like(embeds), target)
    assert removal_counts(12, 4) == [0, 3, 6, 9, 12]
    np.testing.assert_allclose(curves.fractions, [0, 0.25, 0.5, 0.75, 1.0])
    assert curves.morf[0] == pytest.approx(full) and curves.lerf[0] == pytest.approx(full)
    assert curves.morf[-1] == pytest.approx(empty) and curves.lerf[-1] == pytest.approx(empty)
    removed = embeds.clone()
    removed[0, np.argsort(-relevance, kind="stable")[:3]] = 0
    assert curves.morf[1] == pytest.approx(value_with_embeds(model, removed, target))
    reversed_curves = perturbation_curves(adapter, ids, target, -relevance, steps=4)
    assert reversed_curves.abpc == pytest.approx(-curves.abpc)
    assert curves.abpc > 0  # occlusion ranks single-token effects: removing its top tokens first hurts more


def test_continuation_rows_match_single_explanations():
    model, adapter, ids, _ = setup("gpt2", seed=8, length=7)
    rules = attnlrp_rules(adapter)
    result = continuation_relevance(adapter, ids, 3, rules)
    assert result.matrix.shape == (3, 7 + 2)
    sequence = torch.tensor([result.sequence_ids])
    for row, token_id in enumerate(result.generated_ids):
        length = 7 + row
        single = attribute(adapter, sequence[:, :length], Target(length - 1, token_id), rules, conservation=False)
        np.testing.assert_allclose(result.matrix[row, :length], single.relevance, rtol=1e-9, atol=1e-12)
        assert np.all(result.matrix[row, length:] == 0)


@pytest.mark.parametrize("baseline", ["zero", "pad", "mean"])
def test_ig_completeness_holds_from_every_baseline_and_the_gap_shrinks_with_steps(baseline):
    from interpscope.relevance.api import run_method
    from interpscope.relevance.methods import MethodOptions

    model, adapter, ids, target = setup("llama", seed=4)
    gaps = []
    for steps in (4, 64):
        result, _ = run_method(model, ids, "ig", target, options=MethodOptions(ig_steps=steps, baseline=baseline,
                                                                               pad_token_id=3))
        k = result.completeness
        assert k.steps == steps and k.baseline == baseline
        assert k.relevance_sum == pytest.approx(float(result.relevance.sum()))
        assert k.gap == pytest.approx(k.relevance_sum - (k.value - k.baseline_value))
        gaps.append(abs(k.gap))
    assert gaps[1] < gaps[0]
    embeds = adapter.embedding()(ids).detach()
    expected = {"zero": torch.zeros_like(embeds), "pad": adapter.embedding()(torch.tensor([[3]])).expand_as(embeds),
                "mean": adapter.W_E().detach().mean(0).expand_as(embeds)}[baseline]
    assert result.completeness.baseline_value == pytest.approx(value_with_embeds(model, expected, target))


def test_occlusion_window_is_the_mean_drop_of_the_windows_covering_each_token():
    model, adapter, ids, target = setup("gpt2", seed=6, length=6)
    embeds = adapter.embedding()(ids).detach()
    full = value_with_embeds(model, embeds, target)
    window = 2
    drops = np.zeros(6)
    covers = np.zeros(6)
    for start in range(0, 6 - window + 1):
        occluded = embeds.clone()
        occluded[0, start:start + window] = 0
        drops[start:start + window] += full - value_with_embeds(model, occluded, target)
        covers[start:start + window] += 1
    ours = occlusion(adapter, ids, target, window=window).numpy()
    np.testing.assert_allclose(ours, drops / covers, rtol=1e-6, atol=1e-9)
    with pytest.raises(InterpscopeError, match="window"):
        occlusion(adapter, ids, target, window=7)


def test_bad_method_options_are_refused():
    from interpscope.relevance.methods import MethodOptions

    for bad in (MethodOptions(ig_steps=0), MethodOptions(baseline="noise"), MethodOptions(occlusion_window=0)):
        with pytest.raises(InterpscopeError):
            bad.checked()


def test_integrated_gradients_reports_progress_per_internal_batch():
    from interpscope.adapters import get_adapter
    from interpscope.relevance.baselines import IG_STEPS, ig_batches, integrated_gradients
    from interpscope.relevance.targets import Target
    from tests.tiny import tiny_llama

    model = tiny_llama(seed=3)
    adapter = get_adapter(model)
    ids = torch.randint(3, 120, (1, 64))
    per_batch, total = ig_batches(64)
    assert per_batch * total >= IG_STEPS and total >= 4, "a 64-token input must report several steps"
    seen: list[tuple[int, int]] = []
    target = Target(63, 5)
    with_progress = integrated_gradients(adapter, ids, target, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(i, total) for i in range(total)] + [(total, total)]
    torch.testing.assert_close(with_progress, integrated_gradients(adapter, ids, target))


@pytest.mark.parametrize("family", ["llama", "gemma3"])
@pytest.mark.parametrize("baseline", ["zero", "pad"])
def test_our_integrated_gradients_equal_captums_layer_ig_on_the_embedding_layer(family, baseline):
    """Same baseline, steps and quadrature: our IG (embeddings, our baseline, forward_logits) against captum's
    LayerIntegratedGradients on the embedding layer driven by token ids (Gemma scales its embeddings inside the
    module: the path must start from the scaled embedding)."""
    from captum.attr import LayerIntegratedGradients

    from interpscope.relevance.api import run_method
    from interpscope.relevance.methods import MethodOptions

    model, adapter, ids, target = setup(family, seed=5)
    steps = 24
    result, _ = run_method(model, ids, "ig", target, options=MethodOptions(ig_steps=steps, baseline=baseline,
                                                                           pad_token_id=3))

    def forward(input_ids: torch.Tensor) -> torch.Tensor:
        return target.value(model(input_ids=input_ids).logits[:, target.position])

    layer = adapter.embedding()
    if baseline == "pad":
        captum = LayerIntegratedGradients(forward, layer).attribute(ids, baselines=torch.full_like(ids, 3),
                                                                    n_steps=steps, method="gausslegendre")
    else:  # a zero embedding is no token: captum's IntegratedGradients on the layer's output, full logits
        from captum.attr import IntegratedGradients

        embeds = layer(ids).detach()
        captum = IntegratedGradients(lambda e: target.value(model(inputs_embeds=e).logits[:, target.position])
                                     ).attribute(embeds, baselines=torch.zeros_like(embeds), n_steps=steps,
                                                 method="gausslegendre")
    np.testing.assert_allclose(result.relevance, captum[0].sum(-1).detach().double().numpy(), rtol=1e-6, atol=1e-9)
    assert result.completeness.steps == steps and result.completeness.half_steps == steps // 2


def test_the_ig_sentence_names_the_baseline_used_and_whether_the_gap_shrinks():
    from interpscope.figures.relevance.readout import readout
    from interpscope.relevance.api import explain
    from interpscope.relevance.baselines import BASELINES
    from interpscope.relevance.methods import MethodOptions
    from tests.sae_store_tiny import tiny_lm

    lm = tiny_lm(seed=4)
    for baseline in ("zero", "pad", "mean"):
        result = explain(lm, "Paris is the capital of", "ig", options=MethodOptions(ig_steps=16, baseline=baseline))
        sentence = readout(result).sentence
        assert f"(baseline: {BASELINES[baseline]})" in sentence
        others = [label for name, label in BASELINES.items() if name != baseline]
        assert not any(label in sentence for label in others)
        k = result.completeness
        assert f"At 8 steps the gap was {k.half_gap:+.3g}" in sentence and f"a gap of {k.gap:+.3g}" in sentence
        share = abs(k.gap) / (abs(k.value - k.baseline_value) or 1.0)
        if abs(k.gap) <= 0.5 * abs(k.half_gap) and 0.01 <= share < 0.05:
            assert "shrinks with more steps" in sentence
        elif abs(k.gap) <= 0.5 * abs(k.half_gap) and share >= 0.05:  # halved once is not convergence
            assert "it halved from 8 to 16 steps but is still" in sentence and "shrinks with more steps" not in sentence
        elif k.relative_gap >= 0.01:
            assert "does not shrink" in sentence
