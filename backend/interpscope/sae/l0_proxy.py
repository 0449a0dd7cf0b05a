"""A proxy for the correct L0 of an SAE on activations whose true features are unknown (Chanin & Garriga-Alonso,
"Sparse but Wrong: Incorrect L0 Leads to Incorrect Features in Sparse Autoencoders", arXiv:2508.16560, 2025).

Their decoder-cosine statistic c_dec is the mean absolute cosine between pairs of decoder rows. Below the correct
L0 an SAE merges correlated features into shared latents, whose decoder rows then overlap; above it the SAE finds
degenerate solutions that mix features too; near the correct L0 the rows are closest to the (nearly orthogonal)
true features and c_dec is lowest. The proxy L0 of an architecture is the L0 of the sweep SAE with the lowest
c_dec: a reading of the sweep's own grid, no finer than its points. Dead latents keep their random initial rows
and would lower c_dec, so rows listed as dead are left out when a liveness mask is given.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


def decoder_cosine(W_dec: np.ndarray, live: np.ndarray | None = None) -> float:
    """c_dec: mean |cos| over pairs of distinct (live) decoder rows."""
    rows = np.asarray(W_dec, np.float64)
    if live is not None:
        rows = rows[np.asarray(live, bool)]
    if rows.shape[0] < 2:
        return math.nan
    unit = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    cos = np.abs(unit @ unit.T)
    n = rows.shape[0]
    return float((cos.sum() - np.trace(cos)) / (n * (n - 1)))


@dataclass
class ProxyL0:
    """One architecture's proxy: the SAE with the lowest c_dec, and every SAE's c_dec beside its L0."""

    architecture: str
    proxy_l0: float | None = None
    proxy_name: str | None = None
    points: list[dict] = field(default_factory=list)  # {"name", "l0", "c_dec"} by L0
    below: list[str] = field(default_factory=list)  # SAEs whose L0 is below the proxy's
    at_edge: bool = False  # the lowest c_dec is the grid's lowest or highest L0: the minimum may lie beyond it
    reason: str | None = None


def proxy_l0(points: list[dict], architecture: str) -> ProxyL0:
    """The proxy from one architecture's SAEs ({"name", "l0", "c_dec"}); absent (with a reason) with fewer than
    three SAEs with a c_dec, since a minimum needs a point on each side."""
    usable = sorted((p for p in points if _finite(p.get("c_dec")) and _finite(p.get("l0"))), key=lambda p: p["l0"])
    out = ProxyL0(architecture=architecture, points=usable)
    if len(usable) < 3:
        out.reason = f"{len(usable)} SAE(s) with a decoder cosine; a minimum needs at least 3"
        return out
    best = min(range(len(usable)), key=lambda i: usable[i]["c_dec"])
    out.proxy_l0, out.proxy_name = float(usable[best]["l0"]), str(usable[best]["name"])
    out.at_edge = best in (0, len(usable) - 1)
    out.below = [str(p["name"]) for p in usable if p["l0"] < out.proxy_l0]
    return out


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def proxy_sentence(proxy: ProxyL0, label: str) -> str:
    """The page's sentence for one architecture, computed from its points."""
    if proxy.proxy_l0 is None:
        return f"{label}: no proxy L0 ({proxy.reason})."
    values = ", ".join(f"{p['c_dec']:.3f} at L0 {p['l0']:.1f}" for p in proxy.points)
    edge = (" It is at the edge of the grid, so the correct L0 may lie beyond it." if proxy.at_edge else "")
    below = (f" {len(proxy.below)} of its {len(proxy.points)} SAEs sit below it ({', '.join(proxy.below)})."
             if proxy.below else f" None of its {len(proxy.points)} SAEs sits below it.")
    return (f"{label}: decoder cosine c_dec is lowest at L0 {proxy.proxy_l0:.1f} ({proxy.proxy_name}; c_dec "
            f"{values}).{below}{edge}")


PROXY_FILE = "decoder_cosine.json"  # per SAE of a sweep folder: c_dec of its live latents (scripts/sweep_l0_proxy.py)


def live_latents(sae, rows) -> np.ndarray:
    """Which latents fire at least once on `rows` (a float array or tensor of the SAE's input activations)."""
    import torch

    with torch.no_grad():
        return (sae.encode(torch.as_tensor(np.asarray(rows), dtype=torch.float32)) > 0).any(0).numpy()


def sweep_points(table, folder) -> tuple[dict[str, list[dict]], str]:
    """Each architecture's {"name", "l0", "c_dec"} points for a sweep table, and where c_dec comes from, per SAE: the
    sweep folder's decoder_cosine.json (live latents only), else its weights (every latent: the dead ones' random rows
    lower c_dec, so the page says how many), else none (its weights are not in the folder)."""
    import json
    from pathlib import Path

    from safetensors.numpy import load_file

    folder = Path(folder)
    saved: dict = {}
    try:
        saved = json.loads((folder / PROXY_FILE).read_text(encoding="utf-8")).get("c_dec", {})
    except (OSError, ValueError, AttributeError):
        saved = {}
    points: dict[str, list[dict]] = {}
    counts = {"live": 0, "rows": 0, "none": 0}
    for row in table.rows:
        value = saved.get(row["name"])
        if value is not None:
            counts["live"] += 1
        else:
            weights = folder / str(row.get("folder") or row["name"]) / "sae_weights.safetensors"
            try:
                value = decoder_cosine(load_file(str(weights))["W_dec"])
                counts["rows"] += 1
            except (OSError, KeyError, ValueError):
                counts["none"] += 1  # weights not shipped (a shipped sweep's extra seeds)
        points.setdefault(row["architecture"], []).append({"name": row["name"], "l0": row["l0"], "c_dec": value})
    parts = []
    if counts["live"]:
        parts.append(f"the decoder rows of the latents that fired on held-out activations for {counts['live']} SAEs "
                     f"({PROXY_FILE})")
    if counts["rows"]:
        parts.append(f"every decoder row, dead latents included, for {counts['rows']} SAEs (not in {PROXY_FILE})")
    if counts["none"]:
        parts.append(f"none for {counts['none']} SAEs whose weights are not in the folder")
    return points, "; ".join(parts)
