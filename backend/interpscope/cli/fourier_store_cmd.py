"""`interpscope fourier store`: precompute what the Fourier page shows on first open (spectra, default probe).
Registered inside the `fourier` group by backend/interpscope/cli/fourier_cmd.py (FOURIER_SUBCOMMAND_MODULES)."""
from __future__ import annotations

import argparse
import time

from interpscope.cli.common import add_model_args, add_outputs, check_out_folder, check_outputs, load_from_args


def _check_store_folder(out: str) -> None:
    """Before the model loads: --out can be written and is new, empty or a Fourier store (its model is checked
    once the model is loaded)."""
    from pathlib import Path

    from interpscope.fourier.precomputed import FOURIER_STORES

    check_out_folder(out, "--out", force=True)
    FOURIER_STORES.owned(Path(out).expanduser(), flag="--out")


def _store(args: argparse.Namespace) -> int:
    from interpscope.cli.sae_store_cmd import folder_size
    from interpscope.fourier.precomputed import FOURIER_STORES
    from interpscope.fourier.store_build import build_fourier_store

    _check_store_folder(args.out)
    check_outputs(args)
    lm = load_from_args(args)
    started = time.perf_counter()
    out = build_fourier_store(lm, args.out)
    entries = sorted(FOURIER_STORES.read_manifest(out)["entries"])
    from interpscope.cli.sae_store_cmd import print_build
    from interpscope.stores import StoreBuild

    return print_build(args, StoreBuild(kind="fourier_store", store=str(out), bytes=folder_size(out), model=lm.name,
                                        details={"entries": entries, "seconds": round(time.perf_counter() - started,
                                                                                       1)}))


def register(commands) -> None:
    store = commands.add_parser("store", help="precompute the spectra and probe the Fourier page opens with")
    add_model_args(store)
    store.add_argument("--out", required=True, help="store folder (new, empty, or this model's Fourier store)")
    from interpscope.stores import StoreBuild

    add_outputs(store, StoreBuild, document_by_default=True,
                json_help="write the build's summary (JSON) to FILE instead of stdout; without FILE or with '-' "
                          "print it (the default)")
    store.set_defaults(func=_store)
