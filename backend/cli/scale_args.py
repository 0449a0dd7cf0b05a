"""Command-line options shared by the corpus-scale commands: --workers / --ray-address (backend.scale) and
--batch-size N|auto (backend.scale.memory)."""
from __future__ import annotations

import argparse

from backend.cli.argtypes import positive_int
from backend.scale.memory import batch_size_arg


def add_scale_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=positive_int, default=1,
                        help="Ray workers on a local cluster started on this machine (needs the scale extra: "
                             "pip install -e .[scale]); 1 = this process (default). Same output either way")
    parser.add_argument("--ray-address", default=None,
                        help="join a running Ray cluster (started with `ray start --head`), e.g. auto or HOST:6379")


def add_batch_arg(parser: argparse.ArgumentParser, flag: str, default: int, what: str) -> None:
    parser.add_argument(flag, type=batch_size_arg, default=default,
                        help=f"{what} (default {default}); auto: from free memory (GPU memory on CUDA)")


def scale_from_args(args: argparse.Namespace):
    """The Scale the options ask for (None: this process); checks that Ray is installed before any work."""
    if args.workers == 1 and not args.ray_address:
        return None
    from backend.scale import Scale
    from backend.scale.cluster import require_ray

    require_ray()
    return Scale(workers=args.workers, address=args.ray_address)
