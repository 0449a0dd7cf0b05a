"""`interpscope fourier store`: precompute what the Fourier page shows on first open (spectra, default probe).
Registered inside the `fourier` group by backend/cli/fourier_cmd.py (FOURIER_SUBCOMMAND_MODULES)."""
from __future__ import annotations

import argparse
import time

from backend.cli.common import add_model_args, emit_json, load_from_args


def _store(args: argparse.Namespace) -> int:
    from backend.cli.sae_store_cmd import folder_size
    from backend.fourier.precomputed import MANIFEST, build_fourier_store

    lm = load_from_args(args)
    started = time.perf_counter()
    out = build_fourier_store(lm, args.out)
    import json

    entries = sorted(json.loads((out / MANIFEST).read_text(encoding="utf-8"))["entries"])
    emit_json({"store": str(out), "model": lm.name, "entries": entries, "bytes": folder_size(out),
               "seconds": round(time.perf_counter() - started, 1)})
    return 0


def register(commands) -> None:
    store = commands.add_parser("store", help="precompute the spectra and probe the Fourier page opens with")
    add_model_args(store)
    store.add_argument("--out", required=True, help="store folder (new, empty, or this model's Fourier store)")
    store.set_defaults(func=_store)
