"""`interpscope fourier store`: precompute what the Fourier page shows on first open (spectra, default probe).
Registered inside the `fourier` group by backend/cli/fourier_cmd.py (FOURIER_SUBCOMMAND_MODULES)."""
from __future__ import annotations

import argparse
import time

from interpscope.cli.common import add_model_args, check_out_folder, emit_json, load_from_args


def _check_store_folder(out: str) -> None:
    """Before the model loads: --out can be written and is new, empty or a Fourier store (its model is checked
    once the model is loaded)."""
    import json
    from pathlib import Path

    from interpscope.config import InterpscopeError
    from interpscope.fourier.precomputed import KIND, MANIFEST

    check_out_folder(out, "--out", force=True)
    folder = Path(out).expanduser()
    if folder.is_dir() and any(folder.iterdir()):
        try:
            kind = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("kind")
        except (OSError, ValueError, AttributeError):
            kind = None
        if kind != KIND:
            raise InterpscopeError(f"--out {folder} exists and is not a Fourier store; choose a new or empty folder.")


def _store(args: argparse.Namespace) -> int:
    from interpscope.cli.sae_store_cmd import folder_size
    from interpscope.fourier.precomputed import MANIFEST
    from interpscope.fourier.store_build import build_fourier_store

    _check_store_folder(args.out)
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
