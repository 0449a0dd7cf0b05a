"""The sweep's table as a Result document: one row per SAE (its settings, then its evaluation on the shared held-out
tokens). Rows keep the figures the Pareto analysis reads (L0, FVU, loss recovered), the shrinkage gamma
(E||x_hat||^2 / E[x . x_hat], METHODS.md section 3), dead and dense fractions, and what it cost (CE increase, KL).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from interpscope.results import Result

ROW_FIGURES = ("l0", "fvu", "explained_variance", "loss_recovered", "ce_increase", "kl", "shrinkage", "cosine",
               "dead_fraction", "dense_fraction", "ce_clean", "ce_zero", "ce_sae", "n_tokens")


def sweep_row(spec: Any, folder: str, evaluation: dict, trained: dict) -> dict:
    """One table row: the grid point (name, architecture, label, width, its knob), training tokens, evaluation."""
    cls = spec.arch_class
    row: dict[str, Any] = {"name": spec.run_name(), "folder": folder, "architecture": cls.short_name,
                           "label": cls.label, "width": spec.width, "knob": cls.knob.kind,
                           "k": spec.k if cls.knob.is_count else None,
                           "sparsity": None if cls.knob.is_count else spec.coefficient,
                           "training_tokens": int(trained.get("training_tokens", 0))}
    row.update({key: evaluation.get(key) for key in ROW_FIGURES})
    return row


def setting_text(row: dict) -> str:
    """'k = 32' or 'L1 coefficient 2': a row's sparsity setting in words."""
    if row.get("k") is not None:
        return f"k = {row['k']}"
    names = {"l1": "L1 coefficient", "l0": "L0 coefficient"}
    return f"{names.get(str(row.get('knob')), 'coefficient')} {row.get('sparsity'):g}"


@dataclass
class SweepTable(Result):
    """Every SAE of a sweep, evaluated on the same held-out tokens (`eval`: how many, which split)."""

    SCHEMA: ClassVar[str] = "interpscope.sae_sweep"
    SCHEMA_VERSION: ClassVar[int] = 1

    model_name: str
    hook_name: str
    width: int
    tokens_per_sae: int
    cache_tokens: int
    eval: dict
    rows: list[dict] = field(default_factory=list)
    target_hook: str | None = None

    @classmethod
    def from_dict(cls, data: dict) -> SweepTable:
        if data.get("schema") != cls.SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}, not {cls.SCHEMA!r}")
        return cls(model_name=data["model_name"], hook_name=data["hook_name"], width=int(data["width"]),
                   tokens_per_sae=int(data["tokens_per_sae"]), cache_tokens=int(data["cache_tokens"]),
                   eval=dict(data["eval"]), rows=[dict(r) for r in data["rows"]], target_hook=data.get("target_hook"))

    @property
    def architectures(self) -> list[str]:
        """Architectures in the order they first appear."""
        return list(dict.fromkeys(row["architecture"] for row in self.rows))

    def tidy(self) -> list[dict]:
        return [{"model": self.model_name, "hook": self.hook_name, "target_hook": self.target_hook, **row}
                for row in self.rows]

    def figure(self):
        from interpscope.sae.pareto import pareto_analysis

        return pareto_analysis(self).figure()
