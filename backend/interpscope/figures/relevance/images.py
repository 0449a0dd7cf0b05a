"""Figures of image relevance: the image, its relevance over it at pixel and patch resolution, patch flipping.

Plain data in (numpy arrays, result dataclasses), Plotly figures out; nothing here runs a model. Relevance is signed:
red adds to the class logit, blue takes from it, one scale centred on zero per map (its largest |relevance|).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

SIGNED = "RdBu_r"
PALETTE = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def _scale(values: np.ndarray) -> float:
    top = float(np.nanmax(np.abs(values))) if values.size else 0.0
    return top if top > 0 else 1.0


def _grey(image: np.ndarray) -> np.ndarray:
    """uint8 [H, W] or [H, W, 3] -> uint8 RGB [H, W, 3] for go.Image."""
    return np.repeat(image[..., None], 3, axis=2) if image.ndim == 2 else image


def _heat(values: np.ndarray, scale: float, show_scale: bool, opacity: float = 1.0,
          label: str = "relevance") -> go.Heatmap:
    return go.Heatmap(z=values, zmin=-scale, zmax=scale, zmid=0, colorscale=SIGNED, opacity=opacity,
                      showscale=show_scale, colorbar={"title": {"text": label}, "len": 0.9},
                      hovertemplate="row %{y}, col %{x}: %{z:.4g}<extra></extra>")


def _patch_lines(fig: go.Figure, shape: tuple[int, int], patch: int, col: int, row: int = 1) -> None:
    height, width = shape
    for x in range(patch, width, patch):
        fig.add_shape(type="line", x0=x - 0.5, x1=x - 0.5, y0=-0.5, y1=height - 0.5, row=row, col=col,
                      line={"color": "rgba(80,80,80,0.35)", "width": 1})
    for y in range(patch, height, patch):
        fig.add_shape(type="line", y0=y - 0.5, y1=y - 0.5, x0=-0.5, x1=width - 0.5, row=row, col=col,
                      line={"color": "rgba(80,80,80,0.35)", "width": 1})


def relevance_figure(image: np.ndarray | None, pixel_relevance: np.ndarray, patch: int, title: str,
                     patch_relevance: np.ndarray | None = None) -> go.Figure:
    """[image |] pixel relevance (laid over the image when given, patch grid drawn) | patch relevance.

    `image`: uint8 [H, W] or [H, W, 3] at the model's input size (what the model saw); `patch_relevance`:
    [rows, cols] (default: the pixel map summed over each patch)."""
    pixels = np.asarray(pixel_relevance, dtype=np.float64)
    height, width = pixels.shape
    if patch_relevance is None:
        rows, cols = height // patch, width // patch
        patch_relevance = pixels[:rows * patch, :cols * patch].reshape(rows, patch, cols, patch).sum(axis=(1, 3))
    patches = np.asarray(patch_relevance, dtype=np.float64)
    titles = (["Image (model input)"] if image is not None else []) + ["Pixel relevance", "Patch relevance (sum)"]
    fig = make_subplots(rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=0.06)
    col = 1
    if image is not None:
        fig.add_trace(go.Image(z=_grey(image), hoverinfo="skip"), row=1, col=1)
        col = 2
        fig.add_trace(go.Image(z=_grey(image), hoverinfo="skip", opacity=1.0), row=1, col=col)
    fig.add_trace(_heat(pixels, _scale(pixels), False, 0.7 if image is not None else 1.0), row=1, col=col)
    _patch_lines(fig, (height, width), patch, col)
    stretched = np.kron(patches, np.ones((patch, patch)))  # the patch map at pixel coordinates, same axes
    fig.add_trace(_heat(stretched, _scale(patches), True, label="patch sum"), row=1, col=col + 1)
    fig.data[-1].update(hovertemplate="pixel row %{y}, col %{x}: patch sum %{z:.4g}<extra></extra>")
    _patch_lines(fig, (height, width), patch, col + 1)
    for index in range(1, len(titles) + 1):
        fig.update_xaxes(showticklabels=False, range=[-0.5, width - 0.5], constrain="domain", row=1, col=index)
        fig.update_yaxes(showticklabels=False, range=[height - 0.5, -0.5], constrain="domain",
                         scaleanchor=f"x{index if index > 1 else ''}", row=1, col=index)
    fig.update_layout(title={"text": title, "font": {"size": 14}}, height=360, margin={"l": 10, "r": 10, "t": 70,
                                                                                        "b": 10})
    return fig


def compact_figure(image: np.ndarray | None, pixel_relevance: np.ndarray, patch: int, title: str) -> go.Figure:
    """A narrow column's view of one map: pixel relevance over the image above, the patch sums below (each on its
    own signed scale, no colour bar), for several methods side by side."""
    pixels = np.asarray(pixel_relevance, dtype=np.float64)
    height, width = pixels.shape
    rows, cols = height // patch, width // patch
    patches = pixels[:rows * patch, :cols * patch].reshape(rows, patch, cols, patch).sum(axis=(1, 3))
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.06)
    if image is not None:
        fig.add_trace(go.Image(z=_grey(image), hoverinfo="skip"), row=1, col=1)
    fig.add_trace(_heat(pixels, _scale(pixels), False, 0.7 if image is not None else 1.0), row=1, col=1)
    fig.add_trace(_heat(np.kron(patches, np.ones((patch, patch))), _scale(patches), False), row=2, col=1)
    fig.data[-1].update(hovertemplate="patch sum %{z:.4g}<extra></extra>")
    for index in (1, 2):
        _patch_lines(fig, (height, width), patch, 1, row=index)
        fig.update_xaxes(showticklabels=False, range=[-0.5, width - 0.5], constrain="domain", row=index, col=1)
        fig.update_yaxes(showticklabels=False, range=[height - 0.5, -0.5], constrain="domain",
                         scaleanchor=f"x{index if index > 1 else ''}", row=index, col=1)
    fig.update_layout(title={"text": title, "font": {"size": 13}}, height=430, showlegend=False,
                      margin={"l": 4, "r": 4, "t": 36, "b": 4})
    return fig


def flipping_figure(result: Any) -> go.Figure:  # an interpscope.relevance.image_faithfulness.ImageFaithfulness
    """Target logit vs fraction of patches removed (most relevant first), one line per method, and the random
    orders' mean with a band of one standard deviation."""
    x = np.asarray(result.fractions)
    mean, std = np.asarray(result.random.mean), np.asarray(result.random.std)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=np.concatenate([x, x[::-1]]), y=np.concatenate([mean + std, (mean - std)[::-1]]),
                             fill="toself", fillcolor="rgba(120,120,120,0.2)", line={"width": 0}, hoverinfo="skip",
                             name="random ± 1 sd"))
    fig.add_trace(go.Scatter(x=x, y=mean, mode="lines", line={"color": "grey", "dash": "dash"},
                             name=f"Random order (AUC {result.random.auc_mean:.3g})"))
    for index, curve in enumerate(result.curves):
        fig.add_trace(go.Scatter(x=x, y=curve.values, mode="lines", line={"color": PALETTE[index % len(PALETTE)]},
                                 name=f"{curve.method_label} (AUC {curve.auc:.3g})"))
    fig.update_layout(title=f"Patch flipping: {result.target_label!r} logit as the most relevant patches go "
                            f"(set to {result.reference_label})", xaxis_title="fraction of patches removed",
                      yaxis_title="class logit", height=400, legend={"orientation": "v"},
                      margin={"l": 10, "r": 10, "t": 60, "b": 10})
    return fig
