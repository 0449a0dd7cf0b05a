"""Statistics of a faithfulness study: seeded bootstrap intervals over prompts, rank correlation, the ABPC table and
the sentence that reads it (interpscope.relevance.heldout computes the per-prompt numbers)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

RANDOM = "random"
BOOTSTRAP = 2000


def bootstrap_mean(values: Sequence[float] | np.ndarray, n_boot: int = BOOTSTRAP, seed: int = 0,
                   level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its percentile bootstrap interval, resampling the values (prompts) with
    replacement `n_boot` times from a generator seeded with `seed`."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("No values to bootstrap.")
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(n_boot, data.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(data.mean()), float(low), float(high)


def ranks(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties averaged."""
    data = np.asarray(values, dtype=np.float64)
    order = np.argsort(data, kind="stable")
    out = np.empty(data.size)
    out[order] = np.arange(1, data.size + 1)
    for value in np.unique(data):
        tied = data == value
        out[tied] = out[tied].mean()
    return out


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | None:
    """Spearman's rank correlation (None when either side is constant)."""
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def spearman_interval(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, n_boot: int = BOOTSTRAP,
                      seed: int = 0) -> dict | None:
    """Spearman's rho with a percentile bootstrap interval over the pairs (None for fewer than 4 pairs)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rho = spearman(a, b) if a.size >= 4 else None
    if rho is None:
        return None
    rng = np.random.default_rng(seed)
    draws = [spearman(a[i], b[i]) for i in rng.integers(0, a.size, size=(n_boot, a.size))]
    low, high = np.percentile([d for d in draws if d is not None], [2.5, 97.5])
    return {"rho": rho, "ci_low": float(low), "ci_high": float(high), "n": int(a.size)}


def abpc_table(abpc: Mapping[str, Mapping[str, Sequence[float]]], labels: Mapping[str, str], seed: int,
               n_boot: int = BOOTSTRAP) -> list[dict]:
    """One row per (baseline, method): mean ABPC with its 95% interval, the number of prompts and the method's
    rank under that baseline (1 = highest mean; the random control is ranked too, so a method below it reads so)."""
    rows: list[dict] = []
    for baseline, by_method in abpc.items():
        group: list[dict] = []
        for method, values in by_method.items():
            mean, low, high = bootstrap_mean(values, n_boot, seed)
            group.append({"baseline": baseline, "method": method, "label": labels.get(method, method),
                          "mean_abpc": mean, "ci_low": low, "ci_high": high, "n": len(values)})
        for rank, row in enumerate(sorted(group, key=lambda r: -r["mean_abpc"]), 1):
            row["rank"] = rank
        rows += group
    return rows


def paired_differences(abpc: Mapping[str, Sequence[float]], reference: str, seed: int,
                       n_boot: int = BOOTSTRAP) -> dict[str, dict]:
    """ABPC(reference) - ABPC(other) per prompt, as a mean with a 95% interval and the share of prompts where the
    reference is higher, for every other method under one baseline."""
    if reference not in abpc:
        return {}
    mine = np.asarray(abpc[reference], dtype=np.float64)
    out: dict[str, dict] = {}
    for method, values in abpc.items():
        if method == reference:
            continue
        diff = mine - np.asarray(values, dtype=np.float64)
        mean, low, high = bootstrap_mean(diff, n_boot, seed)
        out[method] = {"mean": mean, "ci_low": low, "ci_high": high, "reference_higher": float(np.mean(diff > 0))}
    return out


def ranking(table: Sequence[dict], baseline: str) -> list[str]:
    """Methods under one baseline from the highest mean ABPC down."""
    rows = sorted((r for r in table if r["baseline"] == baseline), key=lambda r: r["rank"])
    return [r["method"] for r in rows]


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def diagnosis_sentence(table: Sequence[dict], fixed_table: Sequence[dict], correlation: dict | None,
                       gap_correlation: dict | None, softmax_share: float | None, labels: Mapping[str, str],
                       method: str = "attnlrp") -> str:
    """What the numbers say about `method`'s rank: under each baseline, with position 0 (and any measured sink)
    kept in place, and against the share of the target its softmaxes absorb. Every figure comes from the
    arguments."""
    name = labels.get(method, method)
    parts = []
    baselines = list(dict.fromkeys(r["baseline"] for r in table))
    for baseline in baselines:
        rows = [r for r in table if r["baseline"] == baseline]
        mine = next((r for r in rows if r["method"] == method), None)
        if mine is None:
            return f"{name} was not run."
        best = min(rows, key=lambda r: r["rank"])
        where = (f"{name} leads at mean ABPC {mine['mean_abpc']:.2f} [{mine['ci_low']:.2f}, {mine['ci_high']:.2f}]"
                 if mine["rank"] == 1 else
                 f"{name} ranks {_ordinal(mine['rank'])} of {len(rows)} (random control included) at mean ABPC "
                 f"{mine['mean_abpc']:.2f} [{mine['ci_low']:.2f}, {mine['ci_high']:.2f}], behind {best['label']} at "
                 f"{best['mean_abpc']:.2f} [{best['ci_low']:.2f}, {best['ci_high']:.2f}]")
        parts.append(f"with the {baseline} baseline {where}")
    sentence = "Over these prompts, " + "; ".join(parts) + "."
    ranks_by = {b: [r["method"] for r in sorted((r for r in table if r["baseline"] == b),
                                               key=lambda r: r["rank"])] for b in baselines}
    if len(baselines) > 1:
        mine_ranks = {b: ranks_by[b].index(method) + 1 for b in baselines}
        leaders = {b: ranks_by[b][0] for b in baselines}
        if all(order == ranks_by[baselines[0]] for order in ranks_by.values()):
            sentence += " The whole ranking is the same under every deletion baseline."
        else:
            sentence += (f" {name}'s rank is " + (f"{_ordinal(mine_ranks[baselines[0]])} under every deletion baseline"
                                                  if len(set(mine_ranks.values())) == 1 else
                                                  "baseline-dependent (" + ", ".join(
                                                      f"{b} {_ordinal(r)}" for b, r in mine_ranks.items()) + ")")
                         + "; the leader is " + (labels.get(leaders[baselines[0]], leaders[baselines[0]])
                                                 + " under every baseline" if len(set(leaders.values())) == 1 else
                                                 ", ".join(f"{labels.get(m, m)} ({b})" for b, m in leaders.items()))
                         + ".")
    mine_fixed = next((r for r in fixed_table if r["method"] == method), None)
    if mine_fixed is not None:
        before = next(r for r in table if r["method"] == method and r["baseline"] == mine_fixed["baseline"])
        moved = ("does not change its rank" if mine_fixed["rank"] == before["rank"] else
                 f"moves it from {_ordinal(before['rank'])} to {_ordinal(mine_fixed['rank'])}")
        sentence += (f" Keeping position 0 (and any measured sink) in place "
                     f"{moved} ({mine_fixed['mean_abpc']:.2f} [{mine_fixed['ci_low']:.2f}, "
                     f"{mine_fixed['ci_high']:.2f}] with the {mine_fixed['baseline']} baseline).")
    if softmax_share is not None:
        sentence += f" Its softmaxes absorb {softmax_share:.0%} of the target on average"
        if correlation is not None:
            sign = ("lower" if correlation["ci_high"] < 0 else "higher" if correlation["ci_low"] > 0 else None)
            sentence += (f"; across prompts its ABPC has Spearman rho {correlation['rho']:+.2f} "
                         f"[{correlation['ci_low']:+.2f}, {correlation['ci_high']:+.2f}] with that share"
                         + (f" (a larger share goes with {sign} ABPC)" if sign else
                            " (an interval that includes 0: no clear link)"))
        if gap_correlation is not None:
            sentence += (f", and its ABPC minus CP-LRP's has rho {gap_correlation['rho']:+.2f} "
                         f"[{gap_correlation['ci_low']:+.2f}, {gap_correlation['ci_high']:+.2f}]")
        sentence += "."
    return sentence
