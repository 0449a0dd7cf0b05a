"""`interpscope sae train` and `interpscope sae eval`. Other `sae` subcommands (store, feature) register themselves
from their own modules through `SAE_SUBCOMMAND_MODULES`; they are skipped while they do not exist.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from backend.cli.common import add_model_args, emit_json, load_from_args
from backend.config import InterpscopeError

SAE_SUBCOMMAND_MODULES = ["backend.cli.sae_store_cmd", "backend.cli.sae_live_cmd"]


def _float_list(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _per_arch(values: list | None, n: int, what: str) -> list:
    if not values:
        return [None] * n
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise InterpscopeError(f"Give one {what} or one per architecture ({n}); got {len(values)}.")
    return values


def _train(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from backend.sae.pipeline import SAESpec, train_saes

    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    if not archs:
        raise InterpscopeError("--arch needs at least one of relu, gated, topk, jumprelu.")
    l1s = _per_arch(args.l1, len(archs), "--l1")
    ks = _per_arch(args.k, len(archs), "--k")
    specs = [SAESpec(a, args.width, l1, k) for a, l1, k in zip(archs, l1s, ks)]
    if args.tokens < args.batch_size:
        raise InterpscopeError(f"--tokens ({args.tokens}) must be at least one batch ({args.batch_size}).")
    loaded = load_from_args(args)
    bars: dict[str, tqdm] = {}

    def cache_progress(done: int, total: int) -> None:
        bar = bars.setdefault("cache", tqdm(total=total, desc="caching activations", unit="tok", file=sys.stderr))
        bar.update(done - bar.n)

    def progress(step: int, total: int, logs: dict) -> None:
        bar = bars.setdefault("train", tqdm(total=total, desc="training", unit="step", file=sys.stderr))
        bar.update(step - bar.n)
        bar.set_postfix({name: f"L0 {log['l0']:.0f} FVU {log['fvu']:.3f}" for name, log in logs.items()})

    saved = train_saes(loaded, args.hook, specs, args.out, tokens=args.tokens, cache_tokens=args.cache_tokens,
                       source=args.corpus, context_size=args.context, batch_size=args.batch_size, lr=args.lr,
                       warmup_steps=args.warmup_steps, decay_fraction=args.decay_fraction,
                       resample_at=tuple(args.resample_at), dead_window_tokens=args.dead_window_tokens,
                       checkpoint_every=args.checkpoint_every, save_dtype=args.save_dtype, seed=args.seed,
                       cache_progress=cache_progress, progress=progress)
    for bar in bars.values():
        bar.close()
    report = {"saved": {name: str(path) for name, path in saved.items()}}
    if args.eval_tokens > 0:
        from backend.sae.evaluation import evaluate_sae
        from backend.sae.folder import load_sae

        report["eval"] = {name: evaluate_sae(loaded, load_sae(path), n_tokens=args.eval_tokens).summary()
                          for name, path in saved.items()}
    emit_json(report)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from backend.sae.evaluation import evaluate_sae
    from backend.sae.folder import load_sae

    sae = load_sae(args.sae)
    if args.model is None:
        args.model = sae.cfg.model_name or "smollm2-135m"
    loaded = load_from_args(args)
    text_ids = None
    if args.text_file:
        from backend.cli.common import read_text_file
        from backend.corpus import token_stream

        stream = token_stream(loaded.tokenizer, [read_text_file(args.text_file)], max_tokens=args.tokens)
        n = stream.numel() // args.context
        if n == 0:
            raise InterpscopeError(f"{args.text_file} has fewer than {args.context} tokens; lower --context.")
        text_ids = stream[: n * args.context].view(n, args.context)
    result = evaluate_sae(loaded, sae, hook_name=args.hook, n_tokens=args.tokens, context_size=args.context,
                          source=args.corpus, split=args.split, ids=text_ids)
    summary = result.summary()
    if args.json:
        summary["log10_density_histogram"] = {"counts": result.log10_density_counts,
                                               "edges": result.log10_density_edges}
        emit_json(summary, args.out)
    else:
        for key, value in summary.items():
            print(f"{key:>20}: {value:.4f}" if isinstance(value, float) else f"{key:>20}: {value}")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("sae", help="train, evaluate and manage sparse autoencoders")
    sae_sub = parser.add_subparsers(dest="sae_command", required=True)

    train = sae_sub.add_parser("train", help="cache activations and train one or more SAEs from one pass")
    add_model_args(train)
    train.add_argument("--hook", required=True, help="hook point, e.g. blocks.15.hook_resid_post")
    train.add_argument("--arch", default="relu",
                       help="relu, gated, topk or jumprelu; a comma list trains several from one buffer")
    train.add_argument("--width", type=int, default=4608, help="number of features (d_sae)")
    train.add_argument("--l1", type=_float_list, help="sparsity coefficient(s), one per --arch (L0 weight for jumprelu)")
    train.add_argument("--k", type=_int_list, help="k for topk")
    train.add_argument("--tokens", type=int, default=1_000_000, help="training tokens (passes over the cache repeat)")
    train.add_argument("--cache-tokens", type=int, default=200_000, help="corpus tokens to cache activations for")
    train.add_argument("--corpus", default=None, help="'austen' (bundled), a .txt/.jsonl file or a folder")
    train.add_argument("--context", type=int, default=128)
    train.add_argument("--batch-size", type=int, default=4096)
    train.add_argument("--lr", type=float, default=3e-4)
    train.add_argument("--warmup-steps", type=int, default=20)
    train.add_argument("--decay-fraction", type=float, default=0.2, help="linear lr decay over this last fraction")
    train.add_argument("--resample-at", type=_float_list, default=[0.25, 0.5],
                       help="fractions of training at which dead features are resampled")
    train.add_argument("--dead-window-tokens", type=int, default=1_000_000)
    train.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints (resumable)")
    train.add_argument("--save-dtype", default="float32", choices=["float32", "float16"])
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--eval-tokens", type=int, default=0, help="evaluate each SAE on this many test tokens")
    train.add_argument("--out", required=True, help="output folder (one sub-folder per SAE)")
    train.set_defaults(func=_train)

    evaluate = sae_sub.add_parser("eval", help="L0, FVU, loss recovered, shrinkage, density of an SAE")
    add_model_args(evaluate)
    evaluate.set_defaults(model=None)
    evaluate.add_argument("--sae", required=True, help="SAE folder (cfg.json + sae_weights.safetensors)")
    evaluate.add_argument("--hook", default=None, help="override the SAE's hook_name")
    evaluate.add_argument("--tokens", type=int, default=4096)
    evaluate.add_argument("--context", type=int, default=128)
    evaluate.add_argument("--corpus", default=None, help="'austen' (bundled), a file or a folder")
    evaluate.add_argument("--split", default="test", choices=["train", "valid", "test", "all"])
    evaluate.add_argument("--text-file", default=None, help="evaluate on this text file instead of the corpus")
    evaluate.add_argument("--json", action="store_true", help="print JSON")
    evaluate.add_argument("--out", default=None, help="write the JSON here instead of stdout")
    evaluate.set_defaults(func=_eval)

    for module_name in SAE_SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name == module_name:
                continue
            raise
        module.register(sae_sub)
