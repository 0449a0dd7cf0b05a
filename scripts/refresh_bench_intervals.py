"""Give the shipped SAE bench documents (assets/sae_bench/*.json) the bootstrap intervals of schema v2 (issue 45.14)
without re-running the bench: the detection and fuzzing measures are recomputed from the per-feature rows each
document already holds (`details`), with the same function the bench uses (simulator.feature_measure); every other
number is left as it is. Idempotent.

Run: .venv/bin/python scripts/refresh_bench_intervals.py assets/sae_bench/*.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "backend"))


def main(paths: list[Path]) -> None:
    from interpscope.sae.bench import from_dict
    from interpscope.sae.bench.simulator import feature_measure

    for path in paths:
        result = from_dict(json.loads(path.read_text(encoding="utf-8")))
        for name in ("detection", "fuzzing"):
            metric = result.metrics.get(name)
            if metric is None:
                continue
            values = {m.name: m.value for m in metric.measures}
            metric.measures = [feature_measure(metric.details, "AUROC", "auroc"),
                               feature_measure(metric.details, "accuracy", "accuracy")]
            for measure in metric.measures:  # the means are the document's own: only the intervals are new
                if values.get(measure.name) is not None and abs(values[measure.name] - (measure.value or 0)) > 1e-12:
                    raise SystemExit(f"{path}: {name} {measure.name} recomputes to {measure.value}, not "
                                     f"{values[measure.name]}: the rows and the mean disagree")
        path.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
        print(path, [m.sentence() for m in result.metrics["detection"].measures] if "detection" in result.metrics
              else "")


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])
