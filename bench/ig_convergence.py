"""Integrated Gradients on one prompt: ours against captum's, and the completeness gap per step count.

    nice -n 10 .venv/bin/python bench/ig_convergence.py --text "The chemical symbol for gold is" [--baseline pad]
        [--no-prepend-bos]

Prints JSON: tokens, target, our relevance and captum's (IntegratedGradients on the embeddings through the model's
own forward, or LayerIntegratedGradients on the embedding layer from pad tokens) at 32 steps and their largest
difference, then the gap at 8..128 steps, each step count's relevance of every token, and the steepest step of the
target along the path (interpscope.relevance.api.ig_convergence).
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--text", default="The chemical symbol for gold is")
    parser.add_argument("--baseline", choices=["zero", "pad"], default="zero")
    parser.add_argument("--prepend-bos", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    from captum.attr import IntegratedGradients, LayerIntegratedGradients

    from interpscope.models import load_model
    from interpscope.relevance.api import explain, ig_convergence, input_ids_for, make_target
    from interpscope.relevance.methods import MethodOptions

    lm = load_model(args.model)
    options = MethodOptions(ig_steps=args.steps, baseline=args.baseline)
    ours = explain(lm, args.text, "ig", options=options, prepend_bos=args.prepend_bos)
    ids, _ = input_ids_for(lm, args.text, args.prepend_bos)
    target = make_target(lm, ids)
    layer = lm.adapter.embedding()
    if args.baseline == "pad":
        captum = LayerIntegratedGradients(
            lambda x: target.value(lm.model(input_ids=x, use_cache=False).logits[:, target.position]), layer
        ).attribute(ids, baselines=torch.full_like(ids, lm.tokenizer.pad_token_id), n_steps=args.steps,
                    method="gausslegendre", internal_batch_size=16)
    else:
        embeds = layer(ids).detach()
        captum = IntegratedGradients(
            lambda e: target.value(lm.model(inputs_embeds=e, use_cache=False).logits[:, target.position])
        ).attribute(embeds, baselines=torch.zeros_like(embeds), n_steps=args.steps, method="gausslegendre",
                    internal_batch_size=16)
    captum = captum[0].sum(-1).detach().double().numpy()
    check = ig_convergence(lm, args.text, options=options, prepend_bos=args.prepend_bos)
    print(json.dumps({
        "model": lm.name, "tokens": ours.tokens, "target": ours.target.label, "baseline": args.baseline,
        "prepended_bos": ours.bos_prepended, "steps": args.steps, "ours": ours.relevance.tolist(),
        "captum": captum.tolist(), "max_abs_difference": float(np.abs(ours.relevance - captum).max()),
        "f_x": check.value, "f_baseline": check.baseline_value, "gaps": check.rows, "steepest": check.steepest,
        "shrinks": check.shrinks}, indent=1))


if __name__ == "__main__":
    main()
