"""`interpscope neurons` (candidate entropy / token-frequency neurons from the weights) and
`interpscope neurons ablate` (mean-ablation total vs direct effects over a corpus sample)."""
from __future__ import annotations

import argparse
import dataclasses
import importlib
from contextlib import contextmanager

from interpscope.cli.argtypes import non_negative_int, positive_int, seed_int, window_int
from interpscope.cli.common import (
    add_model_args,
    add_outputs,
    check_corpus,
    check_outputs,
    json_to_stdout,
    load_from_args,
    write_outputs,
)
from interpscope.config import InterpscopeError

NEURONS_SUBCOMMAND_MODULES = ["interpscope.cli.entropy_neurons_store_cmd"]
SUBCOMMANDS = ("ablate", "detail", "store")


def register(subparsers: argparse._SubParsersAction) -> None:
    neurons = subparsers.add_parser(
        "entropy-neurons", aliases=["neurons"],
        help="entropy and token-frequency neuron candidates (and `entropy-neurons ablate`)",
        description="List a layer's MLP neurons sorted by null-space fraction rho (highest first). "
                    "Use `interpscope neurons ablate --neurons L.I ...` for causal effects.")
    _add_list_args(neurons)
    neurons.set_defaults(func=run_candidates)
    actions = neurons.add_subparsers(dest="neurons_action", metavar="{ablate,detail,store}")
    ablate = actions.add_parser("ablate", help="mean-ablate neurons: total vs direct effect on loss and entropy")
    add_model_args(ablate)
    ablate.add_argument("--neurons", nargs="+", required=True, metavar="L.I", help="neurons as LAYER.INDEX")
    ablate.add_argument("--tokens", type=positive_int, default=2048,
                        help="held-out corpus tokens to ablate over (default 2048)")
    ablate.add_argument("--seq-len", type=window_int, default=128, help="window length in tokens (default 128)")
    ablate.add_argument("--random", type=non_negative_int, default=8,
                        help="random neurons per layer as a baseline (default 8)")
    ablate.add_argument("--seed", type=seed_int, default=0, help="seed for the random neurons (default 0)")
    ablate.add_argument("--k", type=positive_int, default=None,
                        help="bottom singular directions for rho (default ~1%% of d_model)")
    ablate.add_argument("--mean-tokens", type=positive_int, default=None, help="corpus tokens for the mean activations")
    ablate.add_argument("--corpus", default=None, help="a .txt/.md/.jsonl file or folder (default: bundled Austen)")
    from interpscope.entropy_neurons.ablation import AblationResult

    add_outputs(ablate, AblationResult)
    ablate.set_defaults(func=run_ablate)
    for module_name in NEURONS_SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(actions)


def _add_list_args(parser: argparse.ArgumentParser) -> None:
    add_model_args(parser)
    parser.add_argument("--layer", type=int, default=None,
                        help="layer (default: the final layer; negative from the end)")
    parser.add_argument("--k", type=positive_int, default=None,
                        help="bottom singular directions of W_U (default ~1%% of d_model)")
    parser.add_argument("--top", type=non_negative_int, default=20,
                        help="how many neurons to list (default 20; 0 = all)")
    parser.add_argument("--no-unigram", action="store_true", help="skip the unigram cosine (no corpus counting)")
    parser.add_argument("--corpus", default=None, help="corpus for token counts (default: bundled Austen)")
    from interpscope.entropy_neurons.weights import NeuronStats

    add_outputs(parser, NeuronStats, json_help="write the candidates' JSON document to FILE; without FILE or with '-' "
                                               "print it to stdout (a subcommand goes first: `neurons ablate --json`)")


def run_candidates(args: argparse.Namespace) -> int:
    from interpscope.entropy_neurons.ranking import candidates

    if args.top < 0:
        raise InterpscopeError("--top must be 0 (all) or more.")
    if args.json in SUBCOMMANDS:  # `neurons --json ablate`: --json took the subcommand as its FILE
        raise InterpscopeError(f"--json {args.json}: put the subcommand first (`interpscope neurons {args.json} "
                               f"--json`), or give --json a file name that is not a subcommand.")
    check_outputs(args)
    if not args.no_unigram:
        check_corpus(args.corpus)
    lm = load_from_args(args)
    stats = dataclasses.replace(candidates(lm, layer=args.layer, k=args.k, with_unigram=not args.no_unigram,
                                           source=args.corpus), top=args.top or None)
    write_outputs(args, stats)
    if json_to_stdout(args):
        return 0
    rows = stats.rows(stats.top)
    print(f"{lm.name}: layer {stats.layer}, k = {stats.k}, sorted by rho")
    print(f"{'neuron':>10} {'rho':>7} {'norm':>9} {'LogitVar':>10} {'unigram cos':>12}")
    for row in rows:
        uni = "" if row["unigram_cosine"] is None else f"{row['unigram_cosine']:12.3f}"
        print(f"{row['layer']:>5}.{row['index']:<4} {row['rho']:7.3f} {row['norm']:9.3f} {row['logit_var']:10.2e} "
              f"{uni}")
    return 0


@contextmanager
def _tqdm_progress():
    from tqdm import tqdm

    bar = tqdm(total=1000, unit="", bar_format="{desc} {percentage:3.0f}%|{bar}| {elapsed}")

    def update(fraction: float, text: str) -> None:
        bar.set_description_str(text[:60])
        bar.n = int(1000 * min(max(fraction, 0.0), 1.0))
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()


def run_ablate(args: argparse.Namespace) -> int:
    from interpscope.entropy_neurons.ablation import ablate

    if args.tokens < args.seq_len:
        raise InterpscopeError(f"--tokens ({args.tokens}) must be at least --seq-len ({args.seq_len}).")
    if args.random < 0:
        raise InterpscopeError("--random must be 0 or more.")
    check_corpus(args.corpus)
    check_outputs(args)
    lm = load_from_args(args)
    from interpscope.entropy_neurons.ablation import parse_neurons

    parse_neurons(args.neurons, lm.adapter)  # a bad L.I fails before any progress is drawn
    with _tqdm_progress() as progress:
        result = ablate(lm, args.neurons, n_tokens=args.tokens, seq_len=args.seq_len, n_random=args.random,
                        seed=args.seed, k=args.k, source=args.corpus, mean_tokens=args.mean_tokens,
                        progress=progress)
    write_outputs(args, result)
    if json_to_stdout(args):
        return 0
    chosen = [dataclasses.asdict(e) for e in result.chosen()]
    randoms = [dataclasses.asdict(e) for e in result.random()]
    print(f"{result.model}: {result.n_tokens} tokens, clean loss {result.clean_loss:.4f}, "
          f"entropy {result.clean_entropy:.4f}")
    print(f"{'neuron':>10} {'dLoss tot':>10} {'dLoss dir':>10} {'|dL| tot':>9} {'|dL| dir':>9} "
          f"{'dH tot':>9} {'dH dir':>9} {'norm share':>10}")
    for row in chosen + randoms:
        share = "-" if row["norm_share"] is None else f"{row['norm_share']:.2f}"
        label = row["neuron"] + (" (r)" if row["is_random"] else "")
        print(f"{label:>10} {row['loss_total']:10.5f} {row['loss_direct']:10.5f} {row['loss_total_abs']:9.5f} "
              f"{row['loss_direct_abs']:9.5f} {row['entropy_total']:9.5f} {row['entropy_direct']:9.5f} {share:>10}")
    return 0
