"""`interpscope sae store`, `sae feature` and `sae search`: build a feature store, print a feature card or search.

Registered inside the `sae` group by backend/interpscope/cli/sae_cmd.py (SAE_SUBCOMMAND_MODULES).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from interpscope.cli.argtypes import eval_tokens_int, non_negative_int, positive_int, window_int
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

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel


def _check_store_target(args: argparse.Namespace) -> None:
    """Before the model loads: the store folder and its unfinished-build folder may be written."""
    from interpscope.outputs import check_output_folder, check_own_folder, refuse_foreign_files
    from interpscope.sae.store.build import partial_folder
    from interpscope.sae.store.layout import MANIFEST, STORE_FILES, default_store_dir

    out = Path(args.out).expanduser() if args.out else default_store_dir(args.sae)
    if not (out / MANIFEST).is_file():  # a finished store there: kept if built the same way, else needs --force
        check_output_folder(out, args.force)
        refuse_foreign_files(out, STORE_FILES)  # not a store: a person's labels.json there is not replaced
    check_own_folder(partial_folder(out), "The unfinished build folder")  # refused even with --force unless ours


def _model_for_sae(args: argparse.Namespace):
    from interpscope.sae import load_sae

    if args.tokens < args.context:
        raise InterpscopeError(f"--tokens ({args.tokens}) must be at least one window of --context ({args.context}) "
                               "tokens.")
    sae = load_sae(args.sae)
    _check_store_target(args)
    check_outputs(args)
    check_corpus(args.corpus)
    return load_model_for_sae(args, sae, load_from_args)


def _batch_size(args: argparse.Namespace, lm: LoadedModel) -> int:
    """--batch-size: a number, or auto: the batch of an unfinished build of this store (its chunks are batches,
    so a resume keeps them), else one from the free memory."""
    import json

    from interpscope.sae.store.build import PROGRESS_FILE, partial_folder
    from interpscope.sae.store.layout import default_store_dir
    from interpscope.scale.memory import resolve_batch_size

    if args.batch_size == "auto":
        out = Path(args.out).expanduser() if args.out else default_store_dir(args.sae)
        try:
            saved = json.loads((partial_folder(out) / PROGRESS_FILE).read_text(encoding="utf-8"))
            return int(saved["spec"]["batch_size"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return resolve_batch_size(args.batch_size, lm, context=args.context, default=8)


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _store(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from interpscope.sae.store import build_store

    scale = scale_from_args(args)
    loaded = _model_for_sae(args)
    batch_size = _batch_size(args, loaded)
    bars: dict[str, tqdm] = {}

    def progress(stage: str, done: int, total: int) -> None:
        if stage not in bars:
            bars[stage] = tqdm(total=total, desc=stage, unit="tok" if stage == "activations" else "feat",
                               file=sys.stderr)
        bars[stage].update(done - bars[stage].n)

    started = time.perf_counter()
    out = build_store(loaded, args.sae, args.out, corpus=args.corpus, split=args.split, n_tokens=args.tokens,
                      context_size=args.context, batch_size=batch_size, eval_tokens=args.eval_tokens,
                      force=args.force, progress=progress, use_cache=args.from_cache, scale=scale)
    for bar in bars.values():
        bar.close()
    from interpscope.sae.store import read_manifest

    manifest = read_manifest(out)
    n_tokens = manifest["n_seqs"] * manifest["spec"]["context_size"]
    build = manifest.get("build_seconds", {})
    from interpscope.stores import StoreBuild

    return print_build(args, StoreBuild(
        kind="sae_feature_store", store=str(out), bytes=folder_size(out), model=manifest["spec"].get("model_name"),
        details={"tokens": n_tokens, "features": manifest["spec"]["d_sae"],
                 "seconds_this_run": time.perf_counter() - started, "build_seconds": build,
                 "tokens_per_second": n_tokens / build["activations"] if build.get("activations") else None}))


def print_build(args: argparse.Namespace, build) -> int:
    """A store build's summary document (interpscope.store_build): printed (the default, --json or --json -), or
    written to --json FILE with one line on stdout saying what was built."""
    write_outputs(args, build, document_by_default=True)
    if not json_to_stdout(args, document_by_default=True):
        print(f"{build.kind.replace('_', ' ')} in {build.store} ({build.bytes / 2**20:.1f} MiB); summary in "
              f"{args.json}")
    return 0


def _open_store(args: argparse.Namespace):
    from interpscope.sae.store import FeatureStore

    if bool(args.store) == bool(args.sae):
        raise InterpscopeError("Give exactly one of --store STORE or --sae DIR.")
    return FeatureStore(args.store) if args.store else FeatureStore.for_sae(args.sae)


def _feature(args: argparse.Namespace) -> int:
    check_json_out(args)
    check_outputs(args)
    store = _open_store(args)
    card = store.card(args.id)
    write_outputs(args, card, skip=("json",))
    if args.json:
        emit_json(card, args.out or args.json)
    if args.out or json_to_stdout(args):
        return 0
    print(f"feature {card.id}: density {card.density:.3g} ({card.fire_count} of {card.n_tokens} tokens), "
          f"max activation {card.max_activation:.4g}")
    print(f"label:        {card.label}")
    if card.explanation:
        print(f"explanation:  {card.explanation.get('explanation')} (score {card.explanation.get('score')})")
    print("top logits:   " + ", ".join(f"{r.token!r} {r.weight:+.3f}" for r in card.top_logits))
    print("bottom logits: " + ", ".join(f"{r.token!r} {r.weight:+.3f}" for r in card.bottom_logits))
    print("neighbours:   " + ", ".join(f"#{n.feature} ({n.cosine:.3f})" for n in card.neighbours))
    for ctx in card.top_contexts[:10]:
        text = "".join(f"[[{t}]]" if k == ctx.centre else t for k, t in enumerate(ctx.tokens))
        print(f"  {ctx.max:8.4g}  {text!r}")
    return 0


def _search(args: argparse.Namespace) -> int:
    from interpscope.sae.store.search import no_match_reason, search

    if args.query is None:
        if args.json in (None, "-"):
            raise InterpscopeError("sae search needs a QUERY (an id, a token or a word).")
        # `--json QUERY`: argparse gave the query to --json's optional FILE; nothing else can be meant, since a
        # search without a query is no search: the document goes to stdout as a bare --json says
        args.query, args.json = args.json, "-"
    check_outputs(args)
    store = _open_store(args)
    results = search(store, args.query, args.kind)
    from interpscope.sae.store.documents import FeatureSearch

    found = FeatureSearch(store=store.name, query=args.query, kind=args.kind, results=results[: args.limit],
                          total=len(results), reason=None if results else no_match_reason(store, args.query, args.kind))
    write_outputs(args, found, document_by_default=True)
    if not json_to_stdout(args, document_by_default=True):
        print(f"{found.total} feature(s) found for {args.query!r} ({args.kind}); "
              f"{min(found.total, args.limit)} in {args.json}")
    return 0


SAE_HELP = "SAE folder (cfg.json + sae_weights.safetensors), or a run folder holding exactly one"


def register(sae_sub) -> None:
    store = sae_sub.add_parser("store", help="precompute a feature store (dashboards) for an SAE over a corpus")
    add_model_args(store)
    store.set_defaults(model=None)
    store.add_argument("--sae", required=True, type=sae_folder, help=SAE_HELP)
    store.add_argument("--corpus", default=None, help="'austen' (bundled), a .txt/.jsonl file or a folder")
    store.add_argument("--split", default="train", choices=["train", "valid", "test", "all"])
    store.add_argument("--tokens", type=positive_int, default=65536, help="corpus tokens to run (default 65536)")
    store.add_argument("--context", type=window_int, default=128, help="tokens per window")
    add_batch_arg(store, "--batch-size", 8, "windows per model call (one resumable chunk)")
    store.add_argument("--eval-tokens", type=eval_tokens_int, default=2048, help="evaluate the SAE on this many "
                       "test tokens for the overview's metrics (0 = skip)")
    store.add_argument("--out", default=None, help="store folder (default: the SAE's store in the data dir); a "
                       "folder holding files Interpscope did not write is refused unless --force")
    store.add_argument("--force", action="store_true",
                       help="replace an existing store built with other settings (only its own files; one built "
                            "with the same is kept), write into a folder holding other files (they are kept), or "
                            "restart an unfinished build that was started with other settings")
    store.add_argument("--from-cache", action="store_true",
                       help="encode a matching SAE-training activation cache instead of running the model, when one "
                            "covers the corpus windows (checked against one live window)")
    add_scale_args(store)
    from interpscope.stores import StoreBuild

    add_outputs(store, StoreBuild, document_by_default=True,
                json_help="write the build's summary (JSON) to FILE instead of stdout; without FILE or with '-' "
                          "print it (the default)")
    store.set_defaults(func=_store)

    feature = sae_sub.add_parser("feature", help="print one feature's card from a store")
    group = feature.add_mutually_exclusive_group(required=True)
    group.add_argument("--store", help="store folder")
    group.add_argument("--sae", type=sae_folder, help=f"{SAE_HELP}; uses its default store")
    feature.add_argument("--id", type=non_negative_int, required=True, help="feature id")
    feature.add_argument("--out", default=None, help="with a bare --json: write the JSON here instead of stdout "
                         "(the same as --json FILE)")
    from interpscope.sae.store.documents import FeatureCardDocument

    add_outputs(feature, FeatureCardDocument)
    feature.set_defaults(func=_feature)

    finder = sae_sub.add_parser("search", help="find features by id, top-logit token or word in top contexts")
    group = finder.add_mutually_exclusive_group(required=True)
    group.add_argument("--store", help="store folder")
    group.add_argument("--sae", type=sae_folder, help=f"{SAE_HELP}; uses its default store")
    finder.add_argument("--kind", choices=["id", "logit", "context", "label"], default="context",
                        help="id, a token among the top logits, a word in the top contexts, or words of the "
                             "label/explanation (default context)")
    finder.add_argument("--limit", type=positive_int, default=50, help="most results to print (default 50)")
    finder.add_argument("query", nargs="?", help="an id, a token or a word (put it before a bare --json, or write "
                        "--json -, so --json does not take it as its FILE)")
    from interpscope.sae.store.documents import FeatureSearch

    add_outputs(finder, FeatureSearch, document_by_default=True,
                json_help="write the results (JSON) to FILE instead of stdout; without FILE or with '-' print them "
                          "(the default)")
    finder.set_defaults(func=_search)
