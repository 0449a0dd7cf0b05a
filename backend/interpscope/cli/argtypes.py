"""argparse types for numbers: a bad count, width, rate or fraction fails while the arguments are parsed, before
any model is loaded, with a message that names the rule."""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable

INT_MAX = 2**63 - 1  # what a tensor index or size can hold; a larger count is a typo, never a request


def _int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if abs(value) > INT_MAX:
        raise argparse.ArgumentTypeError(f"{text[:30]}{'...' if len(text) > 30 else ''} is too large")
    return value


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def int_at_least(low: int) -> Callable[[str], int]:
    """An int type that refuses values below `low`."""
    def parse(text: str) -> int:
        value = _int(text)
        if value < low:
            rule = "positive" if low == 1 else "0 or more" if low == 0 else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {rule}, got {value}")
        return value

    parse.__name__ = f"int>={low}"
    return parse


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An int type that refuses values outside low..high."""
    def parse(text: str) -> int:
        value = _int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    parse.__name__ = f"int{low}..{high}"
    return parse


def zero_or_at_least(low: int) -> Callable[[str], int]:
    """An int type for 'how many (0 = skip)': 0, or at least `low`."""
    def parse(text: str) -> int:
        value = _int(text)
        if value != 0 and value < low:
            raise argparse.ArgumentTypeError(f"must be 0 (skip) or at least {low}, got {value}")
        return value

    parse.__name__ = f"0|int>={low}"
    return parse


positive_int = int_at_least(1)
# torch CPU threads: torch.set_num_threads(100000) crashes the process (segfault); far past the cores it only slows
THREADS_MAX = 256
thread_count = int_between(1, THREADS_MAX)
non_negative_int = int_at_least(0)
window_int = int_at_least(2)  # a context window needs a sink position and at least one more token
eval_window_int = int_at_least(3)  # evaluation predicts from a window with the sink left out: 3 tokens at least
eval_tokens_int = zero_or_at_least(3)


def positive_float(text: str) -> float:
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def fraction(text: str) -> float:
    """A number from 0 to 1."""
    value = _float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {text}")
    return value


def list_of(item: Callable[[str], float | int], allow_empty: bool = False) -> Callable[[str], list]:
    """A comma-separated list whose items all pass `item`."""
    def parse(text: str) -> list:
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts and not allow_empty:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        return [item(part) for part in parts]

    parse.__name__ = "list"
    return parse


def positive_fraction(text: str) -> float:
    """A number above 0 and at most 1 (a probability mass to cover)."""
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, got {text}")
    return value


def unit_fraction(text: str) -> float:
    """A number from 0 to 1, both included (a share of influence to keep)."""
    value = _float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {text}")
    return value


def open_fraction(text: str) -> float:
    """A number strictly between 0 and 1."""
    value = _float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


def finite_float(text: str) -> float:
    """Any finite number (NaN, inf and values that overflow a float, such as 1e309, are refused)."""
    return _float(text)


SEED_MAX = 2**32 - 1


def seed_int(text: str) -> int:
    """A random seed: a whole number from 0 to 2^32 - 1 (what numpy and torch both take)."""
    value = _int(text)
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be from 0 to {SEED_MAX} (2^32 - 1), got {value}")
    return value


def ray_address(text: str) -> str:
    """`auto`, HOST:PORT or ray://HOST:PORT (port 1-65535); the cluster is probed before any work
    (interpscope.cli.scale_args.check_ray_address)."""
    value = text.strip()
    if value == "auto":
        return value
    host, port = split_address(value)
    if host is None:
        raise argparse.ArgumentTypeError(f"expected auto, HOST:PORT or ray://HOST:PORT, got {text!r}")
    return value


def split_address(value: str) -> tuple[str | None, int | None]:
    """(host, port) of HOST:PORT or ray://HOST:PORT; (None, None) when it is neither."""
    import re

    rest = value.removeprefix("ray://")
    found = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):(\d{1,5})", rest)
    if not found or not 1 <= int(found.group(2)) <= 65535:
        return None, None
    return found.group(1).strip("[]"), int(found.group(2))
