"""`interpscope sae sweep` (a grid of SAEs on one activation cache, evaluated on the same held-out tokens, one
table) and `interpscope sae pareto` (each architecture's frontiers and L0 ratio to the ReLU baseline)."""
from __future__ import annotations

import argparse
import sys

from interpscope.cli.argtypes import (
    eval_tokens_int,
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
    check_outputs,
    json_to_stdout,
    load_from_args,
    write_outputs,
)
from interpscope.cli.scale_args import add_scale_args, scale_from_args
from interpscope.config import InterpscopeError


def parse_sets(items: list[str] | None) -> dict[str, list[float]]:
    """--set ARCH=v1,v2 (repeatable): per-architecture sparsity settings, by short name."""
    from interpscope.sae.arch import architecture_class

    out: dict[str, list[float]] = {}
    for item in items or []:
        name, sep, values = item.partition("=")
        if not sep or not values.strip():
            raise InterpscopeError(f"--set {item!r}: write ARCH=VALUE,VALUE (e.g. jumprelu=0.1,0.3).")
        try:
            cls = architecture_class(name.strip())
            parsed = [float(v) for v in values.split(",")]
        except ValueError as err:
            raise InterpscopeError(f"--set {item!r}: {err}") from None
        if any(not v >= 0 for v in parsed) or (cls.knob.is_count and any(v != int(v) or v < 1 for v in parsed)):
            raise InterpscopeError(f"--set {item!r}: {cls.knob.label} values must be "
                                   f"{'positive whole numbers' if cls.knob.is_count else '0 or more'}.")
        out[cls.short_name] = parsed
    return out


def _specs(args: argparse.Namespace):
    from interpscope.sae.arch import architecture_class
    from interpscope.sae.sweep import grid

    archs = [a.strip() for a in args.archs.split(",")]
    if not all(archs):
        raise InterpscopeError(f"--archs {args.archs!r} has an empty item; give names such as relu,gated,topk.")
    sets = parse_sets(args.set)
    coefficients = {"*": list(args.sparsity or [])}
    ks = {"*": [int(k) for k in args.k or []]}
    for name, values in sets.items():
        if architecture_class(name).knob.is_count:
            ks[name] = [int(v) for v in values]
        else:
            coefficients[name] = values
    return grid(archs, args.width, coefficients, ks)


def sweep_settings(args: argparse.Namespace):
    """The SweepSettings a command line asks for (`sae sweep`, and `sae train --target-hook`, which trains its
    transcoders through the sweep's machinery)."""
    from interpscope.sae.sweep import SweepSettings

    return SweepSettings(model_name=args.model.strip(), hook_name=args.hook, target_hook=args.target_hook,
                         width=args.width, tokens=args.tokens, cache_tokens=args.cache_tokens,
                         source=str(args.corpus or "austen"), context_size=args.context,
                         batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup_steps,
                         decay_fraction=args.decay_fraction, resample_at=tuple(args.resample_at),
                         dead_window_tokens=args.dead_window_tokens, seed=args.seed, save_dtype=args.save_dtype)


def _sweep(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from interpscope.sae.sweep import check_sweep, run_sweep

    specs = _specs(args)
    if args.tokens < args.batch_size:
        raise InterpscopeError(f"--tokens ({args.tokens}) must be at least one batch ({args.batch_size}).")
    if args.target_hook and args.target_hook == args.hook:
        raise InterpscopeError("--target-hook must differ from --hook (the same hook is an SAE: leave it out).")
    if args.target_hook and any(not spec.arch_class.paired for spec in specs):
        raise InterpscopeError("--target-hook trains transcoders: use --archs transcoder (or jumprelu_transcoder) "
                               "with it.")
    if not args.target_hook and any(spec.arch_class.paired for spec in specs):
        raise InterpscopeError("A transcoder needs --target-hook (the activation it predicts, e.g. "
                               "blocks.L.hook_mlp_out).")
    from interpscope.sae.sweep import check_sweep_memory

    check_sweep_memory(specs, None, args.batch_size)  # before the corpus or the model: a lower bound, as sae train
    check_corpus(args.corpus)
    settings = sweep_settings(args)
    check_sweep(args.out, settings, force=args.force)
    check_outputs(args)
    if args.ray and args.workers == 1 and not args.ray_address:
        from interpscope.scale.cluster import local_cores

        args.workers = max(2, local_cores())
    scale = scale_from_args(args)
    loaded = load_from_args(args)
    settings.model_name = loaded.name
    bars: dict[str, tqdm] = {}

    def cache_progress(done: int, total: int) -> None:
        if "cache" not in bars:  # once: setdefault built (and printed) a bar per call
            bars["cache"] = tqdm(total=total, desc="caching activations", unit="row", file=sys.stderr)
        bar = bars["cache"]
        bar.update(done - bar.n)

    def progress(stage: str, done: int, total: int) -> None:
        if stage not in bars:  # once: setdefault built (and printed) a bar per call
            bars[stage] = tqdm(total=total, desc=f"SAEs {stage}", unit="SAE", file=sys.stderr)
        bar = bars[stage]
        bar.update(done - bar.n)

    table = run_sweep(loaded, specs, settings, args.out, eval_tokens=args.eval_tokens, force=args.force,
                      scale=scale, checkpoint_every=args.checkpoint_every, cache_progress=cache_progress,
                      progress=progress, train=not args.finished_only)
    for bar in bars.values():
        bar.close()
    write_outputs(args, table, document_by_default=True)
    if not json_to_stdout(args, document_by_default=True):
        print(f"{len(table.rows)} SAE(s) in the table of {args.out}; its document in {args.json}")
    return 0


def _pareto(args: argparse.Namespace) -> int:
    from interpscope.sae.pareto import pareto_analysis
    from interpscope.sae.sweep import load_table

    check_outputs(args)
    table = load_table(args.sweep)
    if args.baseline not in table.architectures:
        raise InterpscopeError(f"--baseline {args.baseline} is not in this sweep (it has "
                               f"{', '.join(table.architectures) or 'no SAEs'}).")
    analysis = pareto_analysis(table, baseline=args.baseline)
    write_outputs(args, analysis, document_by_default=True)
    if json_to_stdout(args, document_by_default=True) and not args.quiet:
        for metric in ("loss_recovered", "fvu"):
            for arch, names in analysis.frontiers[metric].items():
                print(f"frontier {metric} {arch}: {', '.join(names)}", file=sys.stderr)
        for sentence in analysis.sentences("loss_recovered") + analysis.sentences("fvu"):
            print(sentence, file=sys.stderr)
    return 0


def register(sae_sub) -> None:
    sweep = sae_sub.add_parser("sweep", help="train a grid of SAEs on one activation cache, evaluate them on the "
                               "same held-out tokens and write one table")
    add_model_args(sweep)
    sweep.add_argument("--hook", required=True, help="hook point the SAEs read (a transcoder's input)")
    sweep.add_argument("--target-hook", default=None, help="a transcoder's output hook, e.g. blocks.L.hook_mlp_out "
                       "with --hook blocks.L.hook_resid_mid")
    sweep.add_argument("--archs", default="relu,gated,topk", help="comma list of architectures")
    sweep.add_argument("--sparsity", type=list_of(non_negative_float),
                       help="coefficients (L1 / L0) for every architecture whose knob is one")
    sweep.add_argument("--k", type=list_of(positive_int), help="k values for every architecture whose knob is k")
    sweep.add_argument("--set", action="append", help="ARCH=v1,v2: this architecture's own settings (repeatable)")
    sweep.add_argument("--width", type=positive_int, default=1152, help="features per SAE (d_sae)")
    sweep.add_argument("--tokens", type=positive_int, default=1_000_000, help="training tokens per SAE")
    sweep.add_argument("--cache-tokens", type=positive_int, default=300_000,
                       help="corpus tokens to cache activations for (passes over the cache repeat)")
    sweep.add_argument("--eval-tokens", type=eval_tokens_int, default=8192,
                       help="held-out (test split) tokens every SAE is evaluated on")
    sweep.add_argument("--corpus", default=None, help="'austen' (bundled), a .txt/.jsonl file or a folder")
    sweep.add_argument("--context", type=window_int, default=128)
    sweep.add_argument("--batch-size", type=positive_int, default=4096)
    sweep.add_argument("--lr", type=positive_float, default=7e-4)
    sweep.add_argument("--warmup-steps", type=non_negative_int, default=20)
    sweep.add_argument("--decay-fraction", type=fraction, default=0.2)
    sweep.add_argument("--resample-at", type=list_of(open_fraction, allow_empty=True), default=[0.3, 0.5])
    sweep.add_argument("--dead-window-tokens", type=positive_int, default=250_000)
    sweep.add_argument("--checkpoint-every", type=non_negative_int, default=25, help="steps between checkpoints")
    sweep.add_argument("--save-dtype", default="float32", choices=["float32", "float16"])
    sweep.add_argument("--seed", type=seed_int, default=0)
    sweep.add_argument("--out", required=True, help="sweep folder (resumable: rerun the same command)")
    sweep.add_argument("--force", action="store_true", help="write into a folder holding other files (kept)")
    sweep.add_argument("--finished-only", action="store_true", help="train nothing: evaluate and tabulate the "
                       "grid points already trained (e.g. to stop a long sweep early)")
    add_scale_args(sweep)
    sweep.add_argument("--ray", action="store_true", help="shard the SAEs on a local Ray cluster, one worker per "
                       "core (or use --workers / --ray-address)")
    from interpscope.sae.sweep_docs import SweepTable

    add_outputs(sweep, SweepTable, document_by_default=True,
                json_help="write the table's JSON document to FILE instead of stdout; without FILE or with '-' print "
                          "it (the default)")
    sweep.set_defaults(func=_sweep)

    pareto = sae_sub.add_parser("pareto", help="frontiers of a sweep and each architecture's L0 ratio to a "
                                "baseline at matched loss recovered / FVU")
    pareto.add_argument("--sweep", required=True, help="sweep folder (or its sweep_table.json)")
    pareto.add_argument("--baseline", default="relu", help="architecture the ratios are relative to")
    pareto.add_argument("--quiet", action="store_true", help="no frontier/ratio lines on stderr")
    from interpscope.sae.pareto import ParetoAnalysis

    add_outputs(pareto, ParetoAnalysis, document_by_default=True,
                json_help="write the JSON document to FILE instead of stdout; without FILE or with '-' print it (the "
                          "default)")
    pareto.set_defaults(func=_pareto)
