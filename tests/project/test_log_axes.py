"""Every log axis the figures draw labels its ticks with full values (issue 45, item 11): plotly's own log ticks
label the 2s and 5s between powers of ten by their leading digit alone ("100 5 2 10 5 2 1" on the KL axis, on the
Pareto L0 axis), which reads as a different number. A log axis passes when its ticks are powers of ten only (dtick 1:
1, 10, 100 or 10^k), or listed, each label the number at its tick ("0.02", "50", "2k")."""
from __future__ import annotations

import math

import numpy as np
import pytest


def value_of(label: str) -> float:
    """The number a tick label says: 0.002, 50, 2k, 3M, 1e-06."""
    scale = {"k": 1e3, "M": 1e6}.get(label[-1:], 1.0)
    return float(label[:-1] if scale != 1.0 else label) * scale


def log_axes(fig) -> list:
    return [axis for name, axis in fig.layout.to_plotly_json().items()
            if name.startswith(("xaxis", "yaxis")) and axis.get("type") == "log"]


def readable(axis: dict) -> bool:
    if axis.get("dtick") in (1, "1"):
        return True
    values, labels = axis.get("tickvals"), axis.get("ticktext")
    if values is None:
        return False
    labels = labels if labels is not None else [f"{v:g}" for v in values]
    return all(math.isclose(value_of(text), float(v), rel_tol=1e-9) for v, text in zip(values, labels, strict=True))


def kl():
    from interpscope.figures.flow import kl_figure

    steps = ["emb", *[f"L{i}" for i in range(8)]]
    kl = np.geomspace(40.0, 0.05, len(steps))  # 0.05 .. 40 nats: plotly writes 1, 2, 5 alone here
    return kl_figure(steps, kl, kl / 3, list(kl * 1.1), list(kl / 2.5))


def pareto():
    from interpscope.sae.sweep_docs import pareto_figure

    rows = [{"name": f"{arch}-{l0}", "architecture": arch, "label": arch, "l0": l0, "loss_recovered": 0.9 + l0 / 1000,
             "fvu": 1 / l0, "width": 576, "training_tokens": 1000, "folder": f"{arch}-{l0}", "k": 8}
            for arch in ("relu", "gated") for l0 in (1.2, 4.0, 17.0, 60.0, 95.0)]
    names = {"relu": [r["name"] for r in rows if r["architecture"] == "relu"],
             "gated": [r["name"] for r in rows if r["architecture"] == "gated"]}
    return pareto_figure(rows, {"loss_recovered": names, "fvu": names})


def effects():
    from interpscope.figures.entropy_neurons import effects_bars

    return effects_bars(["11.1", "11.2", "11.3"], [0.03, 0.2, 0.9], [0.004, 0.01, 0.05], [False, False, True],
                        "loss")


def training():
    from interpscope.figures.sae import training_curves_figure

    history = [{"tokens": t, "loss": 5.0 / (1 + t / 100), "l0": 30.0, "fvu": 0.3} for t in range(0, 2000, 100)]
    return training_curves_figure({"relu": history})


def mamba_distance():
    from interpscope.figures.relevance.mamba import distance_figure

    d = np.arange(12)
    share = np.geomspace(0.5, 0.02, 12)
    return distance_figure(d, share, share, np.full(12, 3), 3, "MambaLRP")


def mamba_fixes():
    from interpscope.figures.relevance.mamba import fix_error_figure

    return fix_error_figure(["all fixes", "no norm fix", "no fixes"], [0.03, 0.2, 0.6], "conservation")


@pytest.mark.parametrize("build", [kl, pareto, effects, training, mamba_distance, mamba_fixes])
def test_log_axes_label_full_values(build):
    axes = log_axes(build())
    assert axes, "the figure has no log axis"
    assert all(readable(axis) for axis in axes), axes


def test_log_ticks():
    from interpscope.figures.draw import log_ticks

    assert log_ticks([0.012, 15.0]) == {"tickmode": "array", "tickvals": [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0,
                                                                           100.0],
                                        "ticktext": ["0.01", "0.03", "0.1", "0.3", "1", "3", "10", "30", "100"]}
    assert log_ticks([0.7, 101.0])["ticktext"] == ["0.1", "0.2", "0.5", "1", "2", "5", "10", "20", "50", "100",
                                                   "200", "500", "1k"]  # the KL axis: ~2 decades, 1-2-5
    small = log_ticks([1.2, 95.0])
    assert small["ticktext"] == ["1", "2", "5", "10", "20", "50", "100"]
    assert log_ticks([2e-9, 0.5])["dtick"] == 1  # many decades: each power of ten
    assert log_ticks([0.0, -1.0, float("nan")]) == {}  # nothing to put on a log axis
    assert log_ticks([1500, 40000])["ticktext"][:3] == ["1k", "2k", "5k"]


def test_chosen_neurons_are_named_above_the_webgl_points():
    """Issue 45.11: the chosen neurons' labels were a text trace, drawn under the WebGL scatter of every neuron
    (hidden behind the points); they are annotations now (drawn above it), on a white box, and every neuron point
    carries its name for a click."""
    from interpscope.figures.entropy_neurons import candidates_scatter

    rng = np.random.default_rng(0)
    norm, var, rho = rng.uniform(1, 5, 300), 10 ** rng.uniform(-3.5, -2, 300), rng.uniform(0, 0.8, 300)
    fig = candidates_scatter(norm, var, rho, 29, 6, [12, 40, 41], "m")
    notes = {a.text: a for a in fig.layout.annotations}
    assert set(notes) >= {"29.12", "29.40", "29.41"}
    assert all(notes[n].bgcolor and notes[n].showarrow for n in ("29.12", "29.40", "29.41"))
    assert not any(t.text is not None and "text" in (t.mode or "") for t in fig.data)  # no label under the points
    points = next(t for t in fig.data if t.name == "neurons")
    assert list(points.customdata[:3]) == ["29.0", "29.1", "29.2"]
    assert readable(log_axes(fig)[0])
