"""`interpscope sae bench`: SAEBench-style metrics of one SAE, each beside its control (backend/interpscope/sae/bench/).
Registered inside the `sae` group by backend/interpscope/cli/sae_cmd.py (SAE_SUBCOMMAND_MODULES)."""
from __future__ import annotations

import argparse
import sys

from interpscope.cli.argtypes import int_between, positive_int, seed_int, thread_count
from interpscope.cli.common import (
    add_model_args,
    add_outputs,
    check_outputs,
    load_from_args,
    load_model_for_sae,
    sae_folder,
    write_outputs,
)

# absorption reads each word in one model pass: 20,000 words (8x the default) take minutes on a CPU; a larger count
# is a typo that would silently run over the whole vocabulary
WORDS_MAX = 20_000


def register(sae_sub) -> None:
    bench = sae_sub.add_parser("bench", help="feature absorption, sparse probing, detection and fuzzing scores of "
                                             "an SAE, each beside its control")
    add_model_args(bench)
    bench.set_defaults(model=None)
    bench.add_argument("--sae", required=True, type=sae_folder,
                       help="SAE folder (cfg.json + sae_weights.safetensors), or a run folder holding exactly one")
    bench.add_argument("--metrics", default=None,
                       help="comma list of absorption, probing, detection, fuzzing (default: all; detection and "
                            "fuzzing need the SAE's feature store and are skipped without one)")
    bench.add_argument("--words", type=int_between(1, WORDS_MAX), default=None,
                       help=f"absorption: tokenizer words (default 2400, at most {WORDS_MAX:,})")
    bench.add_argument("--passages", type=positive_int, default=None,
                       help="probing: train passages per novel (default 40; half as many test passages)")
    bench.add_argument("--features", type=positive_int, default=None,
                       help="detection/fuzzing: sampled features (default 6)")
    bench.add_argument("--examples", type=positive_int, default=None,
                       help="detection/fuzzing: positive examples per feature (default 4)")
    bench.add_argument("--seed", type=seed_int, default=0)
    bench.add_argument("--threads", type=thread_count, default=None,
                       help="torch CPU threads (default torch's own); 1 is several times faster on a busy machine")
    bench.add_argument("--no-cache", action="store_true", help="recompute the model activations instead of reusing "
                       "those kept under the data directory")
    from interpscope.sae.bench.result import SAEBenchResult

    add_outputs(bench, SAEBenchResult)
    bench.set_defaults(func=run_bench)


def bench_options(args: argparse.Namespace) -> dict:
    """Per-metric sizes from the flags given (absent flags keep the metric's defaults)."""
    options: dict[str, dict] = {}
    if args.words:
        options["absorption"] = {"n_words": args.words}
    if args.passages:
        options["probing"] = {"per_novel": args.passages, "per_novel_test": max(2, args.passages // 2)}
    explained = {k: v for k, v in (("n_features", args.features), ("n_examples", args.examples)) if v}
    if explained:
        options["explanations"] = explained
    return options


def run_bench(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from interpscope.sae.bench import bench_sae, parse_metrics
    from interpscope.sae.folder import load_sae

    check_outputs(args)
    parse_metrics(args.metrics)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    sae = load_sae(args.sae)
    loaded = load_model_for_sae(args, sae, load_from_args)
    bar = tqdm(total=1000, desc="bench", file=sys.stderr, bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}")

    def progress(fraction: float, text: str) -> None:
        bar.set_description_str(text[:60])
        bar.update(int(fraction * 1000) - bar.n)

    try:
        result = bench_sae(loaded, args.sae, metric_names=args.metrics, seed=args.seed, use_cache=not args.no_cache,
                           options=bench_options(args), progress=progress)
    finally:
        bar.close()
    write_outputs(args, result)
    for name, metric in result.metrics.items():
        if metric.settings.get("note"):  # e.g. fewer words than asked for: said even when the document goes to stdout
            print(f"{name}: {metric.settings['note']}", file=sys.stderr)
    if args.json != "-":
        for name, metric in result.metrics.items():
            print(f"{name}: {metric.meaning}")
            for measure in metric.measures:
                print(f"  {measure.sentence()}")
        for name, why in result.skipped.items():
            print(f"{name}: skipped ({why})")
    return 0
