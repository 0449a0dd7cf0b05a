"""`interpscope sae train` and `interpscope sae eval`. Other `sae` subcommands (store, feature) register themselves
from their own modules through `SAE_SUBCOMMAND_MODULES`; they are skipped while they do not exist.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from interpscope.cli.argtypes import (
    eval_tokens_int,
    eval_window_int,
    fraction,
    list_of,
    non_negative_float,
    non_negative_int,
    open_fraction,
    positive_float,
    positive_int,
    seed_int,
    window_int,
)
from interpscope.cli.common import (
    add_model_args,
    add_outputs,
    check_corpus,
    check_json_out,
    check_outputs,
    emit_json,
    json_to_stdout,
    load_from_args,
    load_model_for_sae,
    sae_folder,
    write_outputs,
)
from interpscope.cli.scale_args import add_batch_arg, add_scale_args, scale_from_args
from interpscope.config import InterpscopeError

SAE_SUBCOMMAND_MODULES = ["interpscope.cli.sae_store_cmd", "interpscope.cli.sae_live_cmd",
                          "interpscope.cli.sae_circuit_cmd", "interpscope.cli.sae_explain_cmd",
                          "interpscope.cli.sae_sweep_cmd", "interpscope.cli.sae_bench_cmd",
                          "interpscope.cli.sae_synth_cmd"]


def _per_arch(values: list | None, n: int, what: str) -> list:
    if not values:
        return [None] * n
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise InterpscopeError(f"Give one {what} or one per architecture ({n}); got {len(values)}.")
    return values


def _knobs(archs: list[str], values: list | None, flag: str, counted: bool) -> list:
    """Per architecture, the --k (counted) or --l1 value it trains with; one value goes to every architecture
    that takes it. A value no architecture in the list takes is refused, never ignored."""
    from interpscope.sae.pipeline import architecture_class

    takes = []
    for arch in archs:
        try:
            takes.append(architecture_class(arch).knob.is_count == counted)
        except ValueError as err:
            raise InterpscopeError(str(err)) from None
    if values and not any(takes):
        raise InterpscopeError(f"{flag} does not apply to --arch {','.join(archs)} "
                               f"({'none of them takes a k' if counted else 'none of them takes an L1 coefficient'}); "
                               f"leave it out or choose an architecture that uses it.")
    per = _per_arch(values, len(archs), flag)
    if values and len(values) == len(archs) > 1:
        for arch, value, use in zip(archs, per, takes, strict=True):
            if not use:
                raise InterpscopeError(f"{flag} gives {value} for {arch}, which does not take it.")
    return [value if use else None for value, use in zip(per, takes, strict=True)]


def _train(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from interpscope.sae.arch import choices_text
    from interpscope.sae.pipeline import (
        SAESpec,
        check_resume,
        check_specs,
        check_training_memory,
        train_saes,
        train_settings,
    )

    archs = [a.strip() for a in args.arch.split(",")]
    if not any(archs):
        raise InterpscopeError(f"--arch needs at least one of {choices_text()}.")
    if not all(archs):
        raise InterpscopeError(f"--arch {args.arch!r} has an empty item (a stray comma); give names such as "
                               "relu,topk.")
    l1s = _knobs(archs, args.l1, "--l1", counted=False)
    ks = _knobs(archs, args.k, "--k", counted=True)
    specs = [SAESpec(a, args.width, l1, k) for a, l1, k in zip(archs, l1s, ks, strict=True)]
    check_specs(specs)
    from interpscope.cli.sae_train_transcoder import check_target_hook

    transcoders = check_target_hook(args, specs)
    check_outputs(args)
    check_training_memory(specs, None, args.batch_size)  # a lower bound: the model gives the activation width
    if args.tokens < args.batch_size:
        raise InterpscopeError(f"--tokens ({args.tokens}) must be at least one batch ({args.batch_size}).")
    if args.cache_tokens < args.context:
        raise InterpscopeError(f"--cache-tokens ({args.cache_tokens}) must be at least one window of --context "
                               f"({args.context}) tokens.")
    options = dict(tokens=args.tokens, cache_tokens=args.cache_tokens, source=args.corpus, context_size=args.context,
                   batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup_steps,
                   decay_fraction=args.decay_fraction, resample_at=tuple(args.resample_at),
                   dead_window_tokens=args.dead_window_tokens, seed=args.seed)
    check_corpus(args.corpus)
    bars: dict[str, tqdm] = {}

    def cache_progress(done: int, total: int) -> None:
        if "cache" not in bars:  # once: setdefault built (and printed) a bar per call
            bars["cache"] = tqdm(total=total, desc="caching activations", unit="tok", file=sys.stderr)
        bar = bars["cache"]
        bar.update(done - bar.n)

    def progress(step: int, total: int, logs: dict) -> None:
        if "train" not in bars:  # once: setdefault built (and printed) a bar per call
            bars["train"] = tqdm(total=total, desc="training", unit="step", file=sys.stderr)
        bar = bars["train"]
        bar.update(step - bar.n)
        bar.set_postfix({name: f"L0 {log['l0']:.0f} FVU {log['fvu']:.3f}" for name, log in logs.items()})

    if transcoders:  # trained as `sae sweep --archs transcoder --target-hook` trains them
        from interpscope.cli.sae_train_transcoder import train_transcoders

        report = train_transcoders(args, specs, cache_progress=cache_progress, progress=progress)
        for bar in bars.values():
            bar.close()
        return _report(args, report)
    check_resume(args.out, train_settings(args.model.strip(), args.hook, specs, **options), force=args.force)
    scale = scale_from_args(args)
    loaded = load_from_args(args)
    from interpscope.scale.memory import resolve_batch_size

    cache_batch = resolve_batch_size(args.cache_batch_size, loaded, context=args.context, default=8)
    saved = train_saes(loaded, args.hook, specs, args.out, checkpoint_every=args.checkpoint_every,
                       save_dtype=args.save_dtype, force=args.force, cache_progress=cache_progress,
                       progress=progress, cache_batch_size=cache_batch, scale=scale, **options)
    for bar in bars.values():
        bar.close()
    evaluations = None
    if args.eval_tokens > 0:
        from interpscope.sae.evaluation import evaluate_sae
        from interpscope.sae.folder import load_sae

        evaluations = {name: evaluate_sae(loaded, load_sae(path), n_tokens=args.eval_tokens,
                                          context_size=min(128, args.eval_tokens), scale=scale).summary()
                       for name, path in saved.items()}
    from interpscope.sae.documents import training_report

    return _report(args, training_report(loaded.name, args.hook, saved, evaluations))  # the training page's export


def _report(args: argparse.Namespace, report) -> int:
    """The training report: printed (the default, or --json / --json -) or written to --json FILE, with --csv and
    the figure files asked for."""
    write_outputs(args, report, document_by_default=True)
    if not json_to_stdout(args, document_by_default=True):
        print(f"{len(report.saved)} SAE(s) trained on {report.model} at {report.hook}: "
              + ", ".join(report.saved.values()) + f"; report in {args.json}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from interpscope.sae.folder import load_sae
    from interpscope.sae.transcoder_eval import evaluate_any as evaluate_sae

    check_json_out(args)
    check_outputs(args)
    if not args.text_file and args.tokens < args.context:
        raise InterpscopeError(f"--tokens ({args.tokens}) must be at least one window of --context ({args.context}) "
                               "tokens.")
    check_corpus(args.corpus)
    text = None
    if args.text_file:
        from interpscope.cli.common import read_text_file

        text = read_text_file(args.text_file, "--text-file")
    scale = scale_from_args(args)
    sae = load_sae(args.sae)
    loaded = load_model_for_sae(args, sae, load_from_args)
    from interpscope.scale.memory import resolve_batch_size

    batch_size = resolve_batch_size(args.batch_size, loaded, context=args.context, default=4, logits=True)
    text_ids = None
    if text is not None:
        from interpscope.corpus import token_stream

        stream = token_stream(loaded.tokenizer, [text], max_tokens=args.tokens)
        n = stream.numel() // args.context
        if n == 0:
            raise InterpscopeError(f"{args.text_file} has fewer than {args.context} tokens; lower --context.")
        text_ids = stream[: n * args.context].view(n, args.context)
    result = evaluate_sae(loaded, sae, hook_name=args.hook, n_tokens=args.tokens, context_size=args.context,
                          source=args.corpus, split=args.split, ids=text_ids, batch_size=batch_size, scale=scale)
    write_outputs(args, result, skip=("json",))
    if args.json:
        emit_json(result, args.out or args.json)
    if not args.out and not json_to_stdout(args):
        for key, value in result.summary().items():
            print(f"{key:>20}: {value:.4f}" if isinstance(value, float) else f"{key:>20}: {value}")
        print(result.loss_sentence())
    return 0


SAE_HELP = ("SAE folder (cfg.json + sae_weights.safetensors), or a run folder holding exactly one (e.g. what "
            "`sae train --out` wrote)")


def _knob_help() -> tuple[str, str, str]:
    """--arch, --l1 and --k help, from the registered architectures."""
    from interpscope.sae.arch import choices_text, registered

    counted = [cls for cls in registered() if cls.knob.is_count]
    weighted = [cls for cls in registered() if not cls.knob.is_count]
    l1 = "sparsity coefficient(s), one per --arch: " + "; ".join(
        f"{cls.knob.label} for {cls.short_name} (default {cls.knob.default:g})" for cls in weighted)
    k = "k, one per --arch: " + "; ".join(f"{cls.knob.label} for {cls.short_name}" for cls in counted)
    return f"{choices_text()}; a comma list trains several from one buffer", l1, k


def register(subparsers) -> None:
    arch_help, l1_help, k_help = _knob_help()
    parser = subparsers.add_parser("sae", help="train, evaluate and manage sparse autoencoders")
    sae_sub = parser.add_subparsers(dest="sae_command", required=True)

    train = sae_sub.add_parser("train", help="cache activations and train one or more SAEs from one pass")
    add_model_args(train)
    train.add_argument("--hook", required=True, help="hook point, e.g. blocks.15.hook_resid_post (a transcoder's "
                       "input)")
    train.add_argument("--target-hook", default=None, help="--arch transcoder: the output hook it predicts, e.g. "
                       "blocks.L.hook_mlp_out with --hook blocks.L.hook_resid_mid (as `sae sweep --target-hook`)")
    train.add_argument("--arch", default="relu", help=arch_help)
    train.add_argument("--width", type=positive_int, default=4608, help="number of features (d_sae)")
    train.add_argument("--l1", type=list_of(non_negative_float), help=l1_help)
    train.add_argument("--k", type=list_of(positive_int), help=k_help)
    train.add_argument("--tokens", type=positive_int, default=1_000_000,
                       help="training tokens (passes over the cache repeat)")
    train.add_argument("--cache-tokens", type=positive_int, default=200_000,
                       help="corpus tokens to cache activations for")
    train.add_argument("--corpus", default=None, help="'austen' (bundled), a .txt/.jsonl file or a folder")
    train.add_argument("--context", type=window_int, default=128)
    train.add_argument("--batch-size", type=positive_int, default=4096)
    train.add_argument("--lr", type=positive_float, default=3e-4)
    train.add_argument("--warmup-steps", type=non_negative_int, default=20)
    train.add_argument("--decay-fraction", type=fraction, default=0.2, help="linear lr decay over this last fraction")
    train.add_argument("--resample-at", type=list_of(open_fraction, allow_empty=True), default=[0.25, 0.5],
                       help="fractions of training at which dead features are resampled")
    train.add_argument("--dead-window-tokens", type=positive_int, default=1_000_000)
    train.add_argument("--checkpoint-every", type=non_negative_int, default=50,
                       help="steps between checkpoints (resumable; 0 = only at the end)")
    train.add_argument("--save-dtype", default="float32", choices=["float32", "float16"])
    train.add_argument("--seed", type=seed_int, default=0, help="random seed (0 to 2^32 - 1)")
    train.add_argument("--eval-tokens", type=eval_tokens_int, default=0,
                       help="evaluate each SAE on this many test tokens")
    train.add_argument("--out", required=True, help="output folder (one sub-folder per SAE); a folder holding "
                       "files Interpscope did not write is refused unless --force")
    train.add_argument("--force", action="store_true", help="write into a folder that holds other files (they are "
                       "kept), or start afresh when the checkpoint there was made with other settings")
    add_batch_arg(train, "--cache-batch-size", 8, "windows per model call while caching activations")
    add_scale_args(train)
    from interpscope.sae.documents import TrainingReport

    add_outputs(train, TrainingReport, document_by_default=True,
                json_help="write the training report (JSON) to FILE instead of stdout; without FILE or with '-' "
                          "print it (the default)")
    train.set_defaults(func=_train)

    evaluate = sae_sub.add_parser("eval", help="L0, FVU, loss recovered, shrinkage, density of an SAE")
    add_model_args(evaluate)
    evaluate.set_defaults(model=None)
    evaluate.add_argument("--sae", required=True, type=sae_folder, help=SAE_HELP)
    evaluate.add_argument("--hook", default=None, help="override the SAE's hook_name")
    evaluate.add_argument("--tokens", type=positive_int, default=4096)
    evaluate.add_argument("--context", type=eval_window_int, default=128)
    evaluate.add_argument("--corpus", default=None, help="'austen' (bundled), a file or a folder")
    evaluate.add_argument("--split", default="test", choices=["train", "valid", "test", "all"])
    evaluate.add_argument("--text-file", default=None, help="evaluate on this text file instead of the corpus")
    evaluate.add_argument("--out", default=None, help="with a bare --json: write the JSON here instead of stdout "
                          "(the same as --json FILE)")
    add_batch_arg(evaluate, "--batch-size", 4, "windows per model call")
    add_scale_args(evaluate)
    from interpscope.sae.documents import EvaluationDocument

    add_outputs(evaluate, EvaluationDocument)
    evaluate.set_defaults(func=_eval)

    for module_name in SAE_SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name == module_name:
                continue
            raise
        module.register(sae_sub)
