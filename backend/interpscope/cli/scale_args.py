"""Command-line options shared by the corpus-scale commands: --workers / --ray-address (interpscope.scale) and
--batch-size N|auto (interpscope.scale.memory)."""
from __future__ import annotations

import argparse

from interpscope.cli.argtypes import positive_int, ray_address, split_address
from interpscope.config import InterpscopeError
from interpscope.scale.memory import batch_size_arg

PROBE_SECONDS = 3.0


def add_scale_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=positive_int, default=1,
                        help="Ray workers on a local cluster started on this machine (needs the scale extra: "
                             "pip install -e .[scale]); 1 = this process (default). Same output either way")
    parser.add_argument("--ray-address", type=ray_address, default=None,
                        help="join a running Ray cluster (started with `ray start --head`), e.g. auto or HOST:6379")


def add_batch_arg(parser: argparse.ArgumentParser, flag: str, default: int, what: str) -> None:
    parser.add_argument(flag, type=batch_size_arg, default=default,
                        help=f"{what} (default {default}); auto: from free memory (GPU memory on CUDA)")


def scale_from_args(args: argparse.Namespace):
    """The Scale the options ask for (None: this process); checks that Ray is installed before any work."""
    if args.workers == 1 and not args.ray_address:
        return None
    from interpscope.scale import Scale
    from interpscope.scale.cluster import require_ray

    require_ray()
    check_workers(args.workers, args.ray_address)
    check_ray_address(args.ray_address)
    return Scale(workers=args.workers, address=args.ray_address)


def check_workers(workers: int, address: str | None) -> None:
    """A local cluster cannot place more workers than this machine has CPU cores: refuse, never shrink silently
    (a joined cluster's CPUs are checked once it is reached, interpscope.scale.cluster.plan_workers)."""
    from interpscope.scale.cluster import local_cores

    if not address and workers > local_cores():
        raise InterpscopeError(f"--workers {workers} is more than the {local_cores()} CPU core(s) here; a local "
                               "cluster runs one worker per core.")


def check_ray_address(address: str | None, timeout: float = PROBE_SECONDS) -> None:
    """Before any work: a TCP connection to HOST:PORT of --ray-address (only that host and port), so a closed
    port or unreachable host is one line at once instead of Ray's minutes of connection retries."""
    import socket

    if not address or address == "auto":
        return
    host, port = split_address(address)
    if host is None:
        raise InterpscopeError(f"--ray-address {address!r} is not auto, HOST:PORT or ray://HOST:PORT.")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as err:
        reason = "timed out" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise InterpscopeError(f"No Ray cluster answers at --ray-address {address} ({reason}); start one with "
                               "`ray start --head` or check the address.") from None
