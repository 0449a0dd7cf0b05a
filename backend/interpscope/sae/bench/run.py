"""Run the bench on one SAE, and read the results shipped beside the bundled SAEs.

`bench_sae(lm, folder)` runs the chosen metrics (default every registered one; those needing a feature store are
skipped, with the reason, when the SAE has none) and returns an SAEBenchResult. The shipped results live in
assets/sae_bench/<SAE folder name>.json; `shipped_bench(folder)` returns one only when it was measured on exactly
these weights (sha256 of the weights file), so the overview page shows it without recomputing.

Rebuild a shipped result (one SAE, ~5-15 min on 2 CPU cores):
    interpscope sae bench --sae assets/saes/NAME --json assets/sae_bench/NAME.json
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from interpscope.config import ASSETS_DIR, InterpscopeError
from interpscope.sae.bench.common import BenchInputs, StageProgress, sae_encoder
from interpscope.sae.bench.registry import metrics, parse_metrics
from interpscope.sae.bench.result import Measure, MetricResult, SAEBenchResult
from interpscope.sae.folder import check_compatible, load_sae
from interpscope.sae.store.layout import weights_sha256

SHIPPED_DIR = ASSETS_DIR / "sae_bench"


def bench_sae(lm, folder: str | Path, *, metric_names: str | list[str] | None = None, seed: int = 0,
              use_cache: bool = True, options: dict[str, Any] | None = None,
              progress: StageProgress | None = None) -> SAEBenchResult:
    """SAEBench-style metrics of the SAE folder on the loaded model `lm`: absorption, probing, detection, fuzzing
    (or `metric_names`), each number beside its control. options: per-metric sizes, e.g. {"absorption":
    {"n_words": 800}, "explanations": {"n_features": 4}, "judge": a simulator function}."""
    from interpscope.sae.store import FeatureStore

    started = time.perf_counter()
    folder = Path(folder).expanduser()
    sae = load_sae(folder)
    hook = check_compatible(sae, lm.adapter, model_name=lm.name)
    asked = parse_metrics(metric_names if isinstance(metric_names, str) or metric_names is None
                          else ",".join(metric_names))
    registry = metrics()
    store, store_error = None, ""
    if any(registry[name].needs_store for name in asked):
        try:
            store = FeatureStore.for_sae(folder)
        except InterpscopeError as err:
            store_error = str(err)
    explicit = metric_names is not None
    skipped: dict[str, str] = {}
    results: dict[str, MetricResult] = {}
    inputs = BenchInputs(lm=lm, encoder=sae_encoder(sae), hook_name=hook, sae=sae, store=store, seed=seed,
                         use_cache=use_cache, options=dict(options or {}))
    for index, name in enumerate(asked):
        metric = registry[name]
        if metric.needs_store and store is None:
            if explicit:
                raise InterpscopeError(f"The {name} metric reads the SAE's feature store: {store_error}")
            skipped[name] = f"needs the SAE's feature store: {store_error}"
            continue

        def report(fraction: float, text: str, index: int = index) -> None:
            if progress is not None:
                progress((index + fraction) / len(asked), text)
        inputs.progress = report
        results[name] = metric.run(inputs)
    if progress is not None:
        progress(1.0, "done")
    return SAEBenchResult(sae=folder.resolve().name, sae_weights_sha256=weights_sha256(folder),
                          architecture=sae.cfg.architecture, model_name=lm.name, hook_name=hook,
                          d_sae=sae.cfg.d_sae, metrics=results, skipped=skipped,
                          seconds=time.perf_counter() - started)


def from_dict(document: dict) -> SAEBenchResult:
    """An SAEBenchResult from its JSON document (the inverse of to_dict, absent values back to None)."""
    if document.get("schema") != SAEBenchResult.SCHEMA:
        raise InterpscopeError(f"Not an SAE bench document (schema {document.get('schema')!r}).")
    if document.get("schema_version") not in (1, SAEBenchResult.SCHEMA_VERSION):  # 1: the same, without intervals
        raise InterpscopeError(f"SAE bench document version {document.get('schema_version')} is not "
                               f"{SAEBenchResult.SCHEMA_VERSION}; rerun the bench.")
    metrics_ = {}
    for name, body in document.get("metrics", {}).items():
        measures = [Measure(m["name"], m.get("value"), m.get("control"), m.get("control_name", ""),
                            m.get("higher_is_better", True), low=m.get("low"), high=m.get("high"),
                            control_low=m.get("control_low"), control_high=m.get("control_high"), over=m.get("over"))
                    for m in body.get("measures", [])]
        metrics_[name] = MetricResult(body.get("metric", name), body.get("meaning", ""), measures,
                                      body.get("settings", {}), body.get("details", []), body.get("seconds"))
    return SAEBenchResult(sae=document["sae"], sae_weights_sha256=document.get("sae_weights_sha256"),
                          architecture=document["architecture"], model_name=document["model_name"],
                          hook_name=document["hook_name"], d_sae=int(document["d_sae"]), metrics=metrics_,
                          skipped=document.get("skipped", {}), seconds=document.get("seconds"))


def shipped_path(folder: str | Path) -> Path:
    return SHIPPED_DIR / f"{Path(folder).resolve().name}.json"


def shipped_bench(folder: str | Path) -> SAEBenchResult | None:
    """The shipped bench result of this SAE folder, when one was measured on exactly these weights."""
    path = shipped_path(folder)
    if not path.is_file():
        return None
    try:
        result = from_dict(json.loads(path.read_text(encoding="utf-8")))
        if result.sae_weights_sha256 != weights_sha256(folder):
            return None
    except (OSError, ValueError, KeyError, TypeError, InterpscopeError):
        return None
    return result
