"""`interpscope neurons store` (build the entropy-neuron store the page opens from) and `interpscope neurons
detail` (one neuron's card, as the page's Neuron detail tab shows it). Registered inside the `neurons` group by
backend/interpscope/cli/entropy_neurons_cmd.py (NEURONS_SUBCOMMAND_MODULES)."""
from __future__ import annotations

import argparse
import sys
import time

from interpscope.cli.argtypes import positive_int, window_int
from interpscope.cli.common import (
    add_model_args,
    add_outputs,
    check_out_folder,
    check_outputs,
    json_to_stdout,
    load_from_args,
    write_outputs,
)
from interpscope.cli.scale_args import add_batch_arg, add_scale_args, scale_from_args
from interpscope.config import InterpscopeError


def _layers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    parts = [part.strip() for part in text.split(",")]
    try:
        if not all(parts):
            raise ValueError
        return [int(part) for part in parts]
    except ValueError:
        raise InterpscopeError(f"--layers takes comma-separated layer numbers, e.g. 29 or 28,29 (got {text!r}).") \
            from None


def _store(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from interpscope.cli.sae_store_cmd import folder_size
    from interpscope.entropy_neurons.page_store import StoreSpec
    from interpscope.entropy_neurons.store_build import build_neuron_store

    if args.tokens < args.seq_len:
        raise InterpscopeError(f"--tokens ({args.tokens}) must be at least --seq-len ({args.seq_len}).")
    layers = _layers(args.layers)
    check_out_folder(args.out, "--out", force=True)  # a file or a missing parent; the store's own rule next
    from pathlib import Path

    from interpscope.entropy_neurons.page_store import NEURON_STORES

    NEURON_STORES.owned(Path(args.out).expanduser())  # new, empty or an entropy-neuron store
    check_outputs(args)
    scale = scale_from_args(args)
    lm = load_from_args(args)
    from interpscope.scale.memory import resolve_batch_size

    batch_size = resolve_batch_size(args.batch_size, lm, context=args.seq_len, default=8)
    spec = StoreSpec(n_tokens=args.tokens, seq_len=args.seq_len, source=f"austen-{args.split}")
    bar = tqdm(total=1, desc="layers", unit="layer", file=sys.stderr)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    started = time.perf_counter()
    out = build_neuron_store(lm, args.out, layers=layers, spec=spec, progress=progress,
                             batch_size=batch_size, scale=scale)
    bar.close()
    from interpscope.entropy_neurons.page_store import NeuronStore

    store = NeuronStore(out)
    from interpscope.cli.sae_store_cmd import print_build
    from interpscope.stores import StoreBuild

    return print_build(args, StoreBuild(kind="neuron_store", store=str(out), bytes=folder_size(out), model=lm.name,
                                        details={"layers": store.layers, "spec": store.manifest["spec"],
                                                 "seconds_this_run": round(time.perf_counter() - started, 1)}))


def _detail(args: argparse.Namespace) -> int:
    from interpscope.entropy_neurons.ablation import parse_neurons
    from interpscope.entropy_neurons.page import neuron_card

    check_outputs(args)
    lm = load_from_args(args)
    neuron = parse_neurons([args.neuron], lm.adapter)[0]
    card = neuron_card(lm, neuron.layer, neuron.index, k=args.k, compute=args.compute)
    if not card.contexts and not args.weights_only:
        raise InterpscopeError(f"No neuron store or cached activations cover layer {neuron.layer} of {lm.name}, so "
                               "there are no top contexts or histogram: pass --compute to run the corpus, build a "
                               "store with `interpscope neurons store`, or pass --weights-only for the weight side.")
    write_outputs(args, card)
    if json_to_stdout(args):
        return 0
    print(f"{neuron.label}: rho {card.rho:.3f}, norm {card.norm:.3f} ({card.source})")
    print("promotes:   " + ", ".join(f"{t.token!r} {t.value:+.3f}" for t in card.promoted[:8]))
    print("suppresses: " + ", ".join(f"{t.token!r} {t.value:+.3f}" for t in card.suppressed[:8]))
    if card.contexts:
        print(f"mean activation {card.mean_activation:.4f}; {card.excluded_tokens} positions left out "
              f"(position 0 of every window, {len(card.sink_positions or [])} massive-activation rows)")
        for ctx in card.contexts:
            text = "".join(f"[[{t}]]" if i == ctx.position else t for i, t in enumerate(ctx.tokens))
            print(f"  {ctx.activation:8.3f}  {text!r}")
    return 0


def register(actions) -> None:
    store = actions.add_parser("store", help="precompute the entropy-neuron store the page opens from")
    add_model_args(store)
    store.add_argument("--out", required=True, help="store folder (new, empty, or a store of the same settings)")
    store.add_argument("--layers", default=None, help="comma-separated layers (default: the final layer)")
    store.add_argument("--tokens", type=positive_int, default=8192, help="corpus tokens (default 8192, as the page)")
    store.add_argument("--seq-len", type=window_int, default=128, help="window length in tokens (default 128)")
    store.add_argument("--split", default="train", choices=["train", "valid", "test"],
                       help="split of the bundled corpus (default train, as the page's means)")
    add_batch_arg(store, "--batch-size", 8, "windows per model call")
    add_scale_args(store)
    from interpscope.stores import StoreBuild

    add_outputs(store, StoreBuild, document_by_default=True,
                json_help="write the build's summary (JSON) to FILE instead of stdout; without FILE or with '-' "
                          "print it (the default)")
    store.set_defaults(func=_store)

    detail = actions.add_parser("detail", help="one neuron's card: weights, histogram, top contexts")
    add_model_args(detail)
    detail.add_argument("--neuron", required=True, metavar="L.I", help="the neuron as LAYER.INDEX")
    detail.add_argument("--k", type=positive_int, default=None, help="bottom singular directions for rho")
    detail.add_argument("--compute", action="store_true",
                        help="run the corpus when neither a store nor cached activations cover the layer")
    detail.add_argument("--weights-only", action="store_true",
                        help="print the weight side only when no store or cached activations cover the layer")
    from interpscope.entropy_neurons.cards import NeuronDetail

    add_outputs(detail, NeuronDetail)
    detail.set_defaults(func=_detail)
