"""`interpscope sae circuit`: which upstream SAE features (and input tokens) a downstream feature, or the next-token
logit, draws on, by LRP through the model with the upstream SAE spliced in."""
from __future__ import annotations

import argparse

from interpscope.cli.argtypes import non_negative_int, positive_int
from interpscope.cli.common import add_model_args, add_outputs, check_outputs, load_from_args, sae_folder, write_outputs


def register(sae_sub) -> None:
    circuit = sae_sub.add_parser("circuit", help="feature circuit between two SAEs of one model (AttnLRP/CP-LRP)")
    add_model_args(circuit)
    circuit.set_defaults(model=None)
    circuit.add_argument("--upstream", required=True, type=sae_folder,
                         help="SAE folder at the earlier hook (spliced in), or a run folder holding exactly one")
    circuit.add_argument("--downstream", type=sae_folder,
                         help="SAE folder at the later hook (omit to explain the next-token logit), or a run folder "
                              "holding exactly one")
    circuit.add_argument("--feature", type=non_negative_int, help="downstream feature id")
    circuit.add_argument("--position", type=int, default=-1, help="token position of the feature (default: last)")
    circuit.add_argument("--text", required=True, help="the prompt")
    from interpscope.relevance.methods import rule_methods

    with_rules = [m.name for m in rule_methods()]  # LRP rule sets; the model's adapter narrows them when it runs
    circuit.add_argument("--method", choices=with_rules, default=with_rules[0] if with_rules else None,
                         help=f"the LRP rules to propagate with (default {with_rules[0] if with_rules else 'none'})")
    circuit.add_argument("--features", type=positive_int, default=8, help="upstream feature nodes (default 8)")
    circuit.add_argument("--prepend-bos", action=argparse.BooleanOptionalAction, default=None,
                         help="put the model's BOS token first, as `sae prompt` does, so positions match its output "
                              "(default: on where the tokenizer adds no BOS itself and the model has attention)")
    from interpscope.sae.circuits import FeatureCircuit

    add_outputs(circuit, FeatureCircuit)
    circuit.set_defaults(func=run_circuit)


def run_circuit(args: argparse.Namespace) -> int:
    from interpscope.config import InterpscopeError
    from interpscope.inputs import check_text
    from interpscope.sae import load_sae
    from interpscope.sae.circuits import feature_circuit

    check_text(args.text)
    check_outputs(args)
    if (args.downstream is None) != (args.feature is None):
        raise InterpscopeError("Give --downstream and --feature together (or neither, to explain the next token).")
    upstream = load_sae(args.upstream)
    downstream = load_sae(args.downstream) if args.downstream else None
    if args.model is None:
        args.model = upstream.cfg.model_name or "smollm2-135m"
    lm = load_from_args(args)
    result = feature_circuit(lm, upstream, downstream, args.text, feature=args.feature, position=args.position,
                             method=args.method, n_features=args.features, prepend_bos=args.prepend_bos)
    write_outputs(args, result)
    if args.json != "-":
        c = result.conservation
        print(f"{result.method} circuit to {result.target} on {result.model}: value {result.value:.4f}, "
              f"{result.seconds:.1f} s")
        if c is None:  # sae_circuit always sets it
            raise RuntimeError("the circuit carries no conservation")
        print(f"  upstream features {c.upstream_features:+.4f} · error node {c.error_node:+.4f} · SAE biases "
              f"{c.sae_biases:+.4f}"
              + ("" if c.target_sae_biases is None else f" (target SAE {c.target_sae_biases:+.4f})")
              + f" · input tokens {c.input_tokens:+.4f} · "
              + ("" if c.model_biases is None else f"model biases {c.model_biases:+.4f} · ")
              + ("" if c.softmax is None else f"softmax {c.softmax:+.4f} ")
              + f"(relative error {c.relative_error:.1e})")
        for top in result.top_features(args.features):
            print(f"  #{top['feature']:<6} {top['relevance']:+.4f}  (strongest at token {top['position']})")
    return 0
