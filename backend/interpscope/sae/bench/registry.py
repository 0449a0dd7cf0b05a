"""The bench's metrics, a registry by name: adding one is a module with NAME, NEEDS_STORE, MEANING and
run(BenchInputs) -> MetricResult, plus one `register` line below."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from interpscope.config import InterpscopeError
from interpscope.sae.bench import absorption, detection, fuzzing, probing
from interpscope.sae.bench.common import BenchInputs
from interpscope.sae.bench.result import MetricResult


@dataclass(frozen=True)
class BenchMetric:
    """A registered metric: its name, what it means, whether it needs the SAE's feature store, and its run."""

    name: str
    meaning: str
    needs_store: bool
    run: Callable[[BenchInputs], MetricResult]


_METRICS: dict[str, BenchMetric] = {}


def register(module: ModuleType) -> None:
    _METRICS[module.NAME] = BenchMetric(module.NAME, module.MEANING, module.NEEDS_STORE, module.run)


def metrics() -> dict[str, BenchMetric]:
    """Every registered metric by name, in the order registered."""
    return dict(_METRICS)


def parse_metrics(text: str | None) -> list[str]:
    """'absorption,probing' -> names, checked (None or '' -> all)."""
    if not text:
        return list(_METRICS)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in _METRICS]
    if unknown or not names:
        raise InterpscopeError(f"Unknown metric(s) {', '.join(unknown) or repr(text)}; choose from "
                               f"{', '.join(_METRICS)}.")
    return list(dict.fromkeys(names))


register(absorption)
register(probing)
register(detection)
register(fuzzing)
