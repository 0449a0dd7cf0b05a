"""`interpscope sae steer` and `interpscope sae prompt`: the SAE pages' live views from the command line (steering
or ablating one feature with clean and edited continuations; the features on a text). Registered inside the `sae`
group by backend/interpscope/cli/sae_cmd.py (SAE_SUBCOMMAND_MODULES)."""
from __future__ import annotations

import argparse

from interpscope.cli.argtypes import finite_float, int_between, non_negative_int, positive_int
from interpscope.cli.common import (
    add_model_args,
    add_outputs,
    check_json_out,
    check_outputs,
    emit_json,
    json_to_stdout,
    load_from_args,
    sae_folder,
    write_outputs,
)
from interpscope.config import InterpscopeError


def _sae_and_model(args: argparse.Namespace):
    """The SAE and its model, after every input and output was checked (nothing is computed on bad input)."""
    from interpscope.sae import load_sae

    check_json_out(args)
    check_outputs(args)
    sae = load_sae(args.sae)
    if args.model is None:
        args.model = sae.cfg.model_name or "smollm2-135m"
    return sae, load_from_args(args)


def _text(args: argparse.Namespace) -> str:
    if bool(args.text) == bool(args.text_file):
        raise InterpscopeError("Give exactly one of --text TEXT or --text-file FILE.")
    if args.text_file:
        from interpscope.cli.common import read_text_file

        return read_text_file(args.text_file, "--text-file")
    return args.text


def _steer(args: argparse.Namespace) -> int:
    from interpscope.sae.store.steering import steer

    text = _text(args)
    sae, lm = _sae_and_model(args)
    result = steer(lm, sae, text, args.feature, mode=args.mode, strength=args.strength, n_new=args.tokens,
                   prepend_bos=args.prepend_bos)
    if _outputs(args, result):
        return 0
    print(f"feature {result.feature} {result.mode}" + (f" x {result.strength:g}" if result.mode == "add" else "")
          + f": KL(clean || edited) after the prompt = {result.kl:.4g}")
    print("clean top:  " + ", ".join(f"{t['token']!r} {t['prob']:.3f}" for t in result.clean_top[:5]))
    print("edited top: " + ", ".join(f"{t['token']!r} {t['prob']:.3f}" for t in result.edited_top[:5]))
    print(f"clean:  {result.clean_continuation!r}")
    print(f"edited: {result.edited_continuation!r}")
    return 0


def _prompt(args: argparse.Namespace) -> int:
    from interpscope.sae.store.prompt import prompt_features

    text = _text(args)
    sae, lm = _sae_and_model(args)
    view = prompt_features(lm, sae, text, n_top=args.top, prepend_bos=args.prepend_bos, per_token=args.per_token)
    if _outputs(args, view):
        return 0
    named = "; ".join(f"{row['position']} {row['token']!r} ({row['reason']})" for row in view.sinks) or "none"
    print(f"{len(view.tokens)} tokens; left out of the ranking: {named}")
    for row in view.to_dict()["top_features"]:
        print(f"  feature {row['feature']:>6}  max {row['max_activation']:.4g}")
    return 0


def _outputs(args: argparse.Namespace, result) -> bool:
    """Write the outputs asked for; True when stdout holds the JSON (or --out took it): no text after it."""
    write_outputs(args, result, skip=("json",))
    if args.json:
        emit_json(result, args.out or args.json)
    return bool(args.out) or json_to_stdout(args)


def _common(parser: argparse.ArgumentParser, result: type) -> None:
    add_model_args(parser)
    parser.set_defaults(model=None)
    parser.add_argument("--sae", required=True, type=sae_folder,
                        help="SAE folder (cfg.json + sae_weights.safetensors), or a run folder holding exactly one")
    parser.add_argument("--text", default=None, help="the prompt")
    parser.add_argument("--text-file", default=None, help="read the prompt from this file instead")
    parser.add_argument("--out", default=None, help="with a bare --json: write the JSON here instead of stdout (the "
                        "same as --json FILE)")
    add_outputs(parser, result)
    parser.add_argument("--prepend-bos", action=argparse.BooleanOptionalAction, default=None,
                        help="put the model's BOS token before the text so the first word is read like any other "
                             "(default: on where the tokenizer adds no BOS itself and the model has attention)")


def register(sae_sub) -> None:
    steer = sae_sub.add_parser("steer", help="add or ablate one feature: next-token change and two continuations")
    from interpscope.sae.store.steering import SteeringResult

    _common(steer, SteeringResult)
    steer.add_argument("--feature", type=non_negative_int, required=True, help="feature id")
    steer.add_argument("--mode", choices=["add", "ablate"], default="add")
    steer.add_argument("--strength", type=finite_float, default=10.0,
                       help="multiple of the decoder row added (add mode)")
    steer.add_argument("--tokens", type=int_between(0, 32), default=10,
                       help="tokens to generate for each continuation (0..32)")
    steer.set_defaults(func=_steer)

    prompt = sae_sub.add_parser("prompt", help="features on a text: top features, active features per token, sinks")
    from interpscope.sae.store.prompt import PromptFeatures

    _common(prompt, PromptFeatures)
    prompt.add_argument("--top", type=positive_int, default=20, help="how many top features (default 20)")
    prompt.add_argument("--per-token", type=non_negative_int, default=10,
                        help="active features listed per token (default 10)")
    prompt.set_defaults(func=_prompt)
