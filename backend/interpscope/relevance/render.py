"""A static PNG/SVG of a signed token heatmap for the command line (matplotlib; no browser, no Streamlit).

Each token is drawn with a background coloured by its relevance: red positive, blue negative, intensity
|R| / max |R|. The interactive page uses components/token_heatmap.py instead.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from interpscope import atomic

CHARS_PER_LINE = 90


def _format(path: str | Path) -> str:
    """matplotlib's format name for the file's suffix (savefig into an open file cannot guess it)."""
    return Path(path).suffix.lower().lstrip(".") or "png"


def _visible(token: str) -> str:
    return token.replace("\n", "⏎").replace("\t", "⇥") or "∅"


def save_heatmap(path: str | Path, tokens: Sequence[str], relevance: Sequence[float] | np.ndarray, title: str,
                 excluded: Sequence[int] = (), reasons: Mapping[int, str] | None = None) -> None:
    """Write the heatmap to `path` (format from its suffix: .png, .svg or .pdf). `excluded` positions (measured
    sinks, a prepended BOS) never set the colour scale: they are drawn grey with a dashed outline and named under
    the map with `reasons` (position -> why)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    values = np.asarray(relevance, dtype=float)
    kept = np.delete(values, [i for i in excluded if i < values.size])
    scale = float(np.max(np.abs(kept))) if kept.size and np.max(np.abs(kept)) > 0 else 1.0
    lines: list[list[tuple[str, float, bool]]] = [[]]
    width = 0
    for index, (token, value) in enumerate(zip(tokens, values, strict=True)):
        text = _visible(token)
        if width + len(text) > CHARS_PER_LINE and lines[-1]:
            lines.append([])
            width = 0
        lines[-1].append((text, value, index in excluded))
        width += len(text)
    char_w, line_h = 10 * 0.6 / 72, 0.3  # 10 pt monospace: 0.6 em per character, in inches
    fig_w = max(6.0, CHARS_PER_LINE * char_w + 0.6)
    fig_h = 0.8 + line_h * len(lines) + 1.0
    fig = plt.figure(figsize=(fig_w, fig_h))
    axes = fig.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, fig_w)
    axes.set_ylim(fig_h, 0)
    axes.axis("off")
    cmap = plt.get_cmap("bwr")
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-scale, vmax=scale)
    axes.text(0.3, 0.35, title, fontsize=11, weight="bold", va="center")
    for row, line in enumerate(lines):
        x = 0.3
        y = 0.8 + row * line_h
        for text, value, sink in line:
            w = len(text) * char_w
            axes.add_patch(plt.Rectangle((x, y - line_h / 2 + 0.03), w, line_h - 0.06,
                                         facecolor="#dddddd" if sink else cmap(norm(value)),
                                         edgecolor="#888888" if sink else "none", linestyle="--",
                                         linewidth=0.8 if sink else 0))
            axes.text(x, y, text, family="monospace", fontsize=10, va="center")
            x += w
    colorbar_axes = fig.add_axes((0.3, 0.5 / fig_h, 0.4, 0.12 / fig_h))
    bar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), cax=colorbar_axes, orientation="horizontal")
    bar.set_label("relevance (red: for the target, blue: against)", fontsize=8)
    if excluded:
        named = "; ".join(f"{i} {tokens[i]!r} ({(reasons or {}).get(i, 'excluded')}; R = {values[i]:+.3g})"
                          for i in excluded if i < len(tokens))
        fig.text(0.72, 0.5 / fig_h, f"grey, not in the colour scale: {named}", fontsize=7,
                 va="bottom", wrap=True)
    try:
        atomic.write_with(path, lambda handle: fig.savefig(handle, dpi=150, format=_format(path)))
    finally:
        plt.close(fig)


def save_bars(path: str | Path, labels: Sequence[str], values: Sequence[float], title: str) -> None:
    """A signed bar chart (red positive, blue negative) to `path`, for the command line's file aggregates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(figsize=(max(6.0, 0.35 * len(labels) + 2), 3.6))
    axes.bar(range(len(labels)), values, color=["#d6604d" if v >= 0 else "#4393c3" for v in values])
    axes.set_xticks(range(len(labels)), [_visible(label) for label in labels], rotation=60, ha="right",
                    fontsize=8, family="monospace")
    axes.axhline(0, color="#888888", linewidth=0.6)
    axes.set_ylabel("mean relevance")
    axes.set_title(title, fontsize=10)
    fig.tight_layout()
    try:
        atomic.write_with(path, lambda handle: fig.savefig(handle, dpi=130, format=_format(path)))
    finally:
        plt.close(fig)
