"""Encoder-decoder relevance views: two aligned token heatmaps (source; decoder input) on ONE colour scale, and the
readout of where the explained value went (source, decoder input, softmaxes, position bias, biases).

The scale is max |R| over both parts' positions that are not excluded (measured sinks, the decoder start token):
excluded positions are drawn grey with a dashed outline and named with their value and reason. Sentences are built
from the numbers beside them; the split between source and decoder input stands beside its control, the split a
uniform spread over the tokens would give.
"""
from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interpscope.figures.relevance.readout import COLOURS, Readout
from interpscope.figures.tokens import BLUE, COLORSCALE, RED

PER_ROW = 12
READOUT_COLOURS = {**COLOURS, "source tokens": "#d6604d", "decoder input": "#f4a582", "position bias": "#92c5de"}


def _visible(token: str) -> str:
    return html.escape(token).replace("\n", "↵<br>").replace("\t", "⇥") or "∅"


def _background(value: float, scale: float, excluded: bool) -> str:
    if excluded:
        return "rgba(200,200,200,0.35)"
    weight = min(1.0, abs(value) / scale) if scale > 0 else 0.0
    red, green, blue = RED if value >= 0 else BLUE
    return f"rgba({red},{green},{blue},{weight:.3f})"


def excluded_words(tokens: Sequence[str], relevance: Sequence[float], sinks: Sequence[dict]) -> str:
    """'position 0 '<pad>' (decoder start token; R = +4.77)' for each excluded position, '' when none."""
    return "; ".join(f"position {row['position']} {tokens[row['position']]!r} ({row['reason']}; "
                     f"R = {float(relevance[row['position']]):+.3g})" for row in sinks if row["position"] < len(tokens))


def part_html(label: str, tokens: Sequence[str], relevance: Sequence[float], scale: float,
              sinks: Sequence[dict]) -> str:
    """One part's heatmap as HTML spans (hover: position, raw value, why excluded) under its label."""
    reasons = {row["position"]: row["reason"] for row in sinks}
    spans = []
    for index, (token, value) in enumerate(zip(tokens, relevance, strict=True)):
        excluded = index in reasons
        note = f" ({reasons[index]}: not used for the colour scale)" if excluded else ""
        title = html.escape(f"{label} token {index} {token!r}: R = {float(value):+.4f}{note}", quote=True)
        border = "outline:1px dashed #888;" if excluded else ""
        spans.append(f'<span class="relevance-token" title="{title}" style="background:'
                     f'{_background(float(value), scale, excluded)};{border}border-radius:3px;padding:1px 2px;'
                     f'margin-right:2px;font-family:monospace;white-space:pre-wrap">{_visible(token)}</span>')
    named = excluded_words(tokens, relevance, sinks)
    note = (f'<div style="font-size:0.8em;color:#555">Not used for the colour scale: {html.escape(named)}.</div>'
            if named else "")
    return (f'<div style="font-size:0.85em;color:#333;margin-top:8px"><b>{html.escape(label)}</b></div>'
            f'<div class="relevance-heatmap" style="line-height:1.9">{"".join(spans)}</div>{note}')


def pair_html(source_tokens: Sequence[str], source_relevance: Sequence[float], decoder_tokens: Sequence[str],
              decoder_relevance: Sequence[float], scale: float, source_sinks: Sequence[dict],
              decoder_sinks: Sequence[dict]) -> str:
    """Both heatmaps, one under the other, with the one legend of their shared scale."""
    legend = ('<div style="font-size:0.8em;color:#555;margin-top:6px">'
              f'<span style="background:rgba{RED + (0.8,)};padding:0 6px">&nbsp;</span> for the target &nbsp; '
              f'<span style="background:rgba{BLUE + (0.8,)};padding:0 6px">&nbsp;</span> against &nbsp; '
              f"(one colour scale for both parts: full colour at |R| = {scale:.3g}; hover a token for its value)</div>")
    return (part_html("Source (encoder input)", source_tokens, source_relevance, scale, source_sinks)
            + part_html("Decoder input (start token + prefix)", decoder_tokens, decoder_relevance, scale,
                        decoder_sinks) + legend)


def _grid(tokens: Sequence[str], relevance: Sequence[float], sinks: Sequence[dict], label: str):
    reasons = {row["position"]: row["reason"] for row in sinks}
    n_rows = max(1, int(np.ceil(len(tokens) / PER_ROW)))
    z = np.full((n_rows, PER_ROW), np.nan)
    text = np.full((n_rows, PER_ROW), "", dtype=object)
    hover = np.full((n_rows, PER_ROW), "", dtype=object)
    for index, (token, value) in enumerate(zip(tokens, relevance, strict=True)):
        row, col = divmod(index, PER_ROW)
        z[row, col] = np.nan if index in reasons else float(value)
        text[row, col] = html.escape(token.replace("\n", "↵")) or "∅"
        why = f" ({reasons[index]}: not used for the colour scale)" if index in reasons else ""
        hover[row, col] = html.escape(f"{label} token {index} {token!r}: R = {float(value):+.4f}{why}")
    return z, text, hover


def seq2seq_figure(source_tokens: Sequence[str], source_relevance: Sequence[float], decoder_tokens: Sequence[str],
                   decoder_relevance: Sequence[float], title: str, scale: float, source_sinks: Sequence[dict],
                   decoder_sinks: Sequence[dict]) -> go.Figure:
    """The two heatmaps as one Plotly figure: aligned grids of PER_ROW tokens, one colour axis (+-scale), excluded
    positions blank (grey) and named under the figure."""
    parts = [("Source (encoder input)", source_tokens, source_relevance, source_sinks),
             ("Decoder input (start token + prefix)", decoder_tokens, decoder_relevance, decoder_sinks)]
    grids = [_grid(tokens, values, sinks, label) for label, tokens, values, sinks in parts]
    heights = [g[0].shape[0] for g in grids]
    fig = make_subplots(rows=2, cols=1, row_heights=heights, vertical_spacing=0.25 / sum(heights) + 0.08,
                        subplot_titles=[label for label, *_ in parts])
    bound = scale or 1.0
    for row, (z, text, hover) in enumerate(grids, start=1):
        fig.add_trace(go.Heatmap(z=z, text=text, customdata=hover, texttemplate="%{text}",
                                 textfont=dict(family="monospace", size=13), coloraxis="coloraxis", xgap=2, ygap=4,
                                 hovertemplate="%{customdata}<extra></extra>"), row=row, col=1)
        fig.update_xaxes(visible=False, range=[-0.5, PER_ROW - 0.5], row=row, col=1)
        fig.update_yaxes(visible=False, autorange="reversed", row=row, col=1)
    notes = [f"{label.split(' (')[0]}: {words}" for label, tokens, values, sinks in parts
             if (words := excluded_words(tokens, values, sinks))]
    fig.update_layout(title=title, template="plotly_white", width=1100, height=170 + 46 * sum(heights),
                      margin=dict(l=20, r=20, t=80, b=50 if notes else 20),
                      coloraxis=dict(colorscale=COLORSCALE, cmin=-bound, cmax=bound,
                                     colorbar=dict(title=dict(text="relevance R", side="right"))))
    if notes:
        fig.add_annotation(text=html.escape("Not used for the colour scale: " + "; ".join(notes)), xref="paper",
                           yref="paper", x=0, y=-0.04, showarrow=False, xanchor="left", yanchor="top",
                           font=dict(size=11, color="#555"))
    return fig


def split_sentence(result) -> str:
    """How |relevance| splits between source and decoder input, beside the uniform-spread control (each token the
    same share), over the positions that are not excluded; the excluded positions' own share of |relevance| is named
    first, so the split cannot read against the readout's signed sums, which count every position (issue 45.9: "the
    source's 11 tokens carry 100%" beside "the source carries 3%" when the decoder start token held the rest)."""
    kept, dropped = [], 0.0
    for values, excluded in ((result.source_relevance, result.source_excluded),
                             (result.decoder_relevance, result.decoder_excluded)):
        magnitudes = np.abs(np.asarray(values, dtype=float))
        kept.append(np.delete(magnitudes, excluded))
        dropped += float(magnitudes[list(excluded)].sum()) if len(excluded) else 0.0
    total = float(sum(part.sum() for part in kept))
    everything = total + dropped
    if everything == 0:
        return "No relevance on any position."
    opening = ""
    if dropped > 0:
        opening = (f"The excluded positions (named on the maps) hold {dropped / everything:.0%} of |relevance| and "
                   f"are left out of this split. ")
    if total == 0:
        return opening + "No relevance outside the excluded positions."
    n_source, n_decoder = kept[0].size, kept[1].size
    share = float(kept[0].sum()) / total
    uniform = n_source / (n_source + n_decoder)
    lean = ("more on the source than" if share > uniform else "less on the source than" if share < uniform
            else "as much on the source as")
    decoder = (f"the decoder input's {n_decoder} token{'s' if n_decoder != 1 else ''} {1 - share:.0%}" if n_decoder
               else "the decoder input has no token outside them")
    return (f"{opening}Of the rest, the source's {n_source} token{'s' if n_source != 1 else ''} carry {share:.0%} of "
            f"|relevance| and {decoder}; a uniform spread over these tokens would give the source {uniform:.0%}, so "
            f"this map puts {lean} a uniform one. (The readout above sums signed relevance over every position.)")


def seq2seq_readout(result) -> Readout:
    """Where the explained value went, from the result's own numbers (LRP: conservation; IG: completeness; Gradient x
    Input: no law)."""
    y, label = float(result.logit), result.target.value_label
    c, k = result.conservation, result.completeness
    share = (lambda part: f" ({part / y:.0%})") if y else (lambda part: "")
    if c is not None:
        parts = [("source tokens", c.source_sum), ("decoder input", c.decoder_sum)]
        words = [f"The source carries {c.source_sum:.3g}{share(c.source_sum)} and the decoder input "
                 f"{c.decoder_sum:.3g}{share(c.decoder_sum)} of the {label.lower()} {y:.3g}"]
        if c.softmax_sum is not None and c.position_bias_sum is not None:
            parts += [("softmax (dropped by AttnLRP)", c.softmax_sum), ("position bias", c.position_bias_sum)]
            words.append(f"the softmaxes (self- and cross-attention) drop {c.softmax_sum:.3g}{share(c.softmax_sum)} "
                         f"and the relative position bias takes {c.position_bias_sum:.3g}"
                         f"{share(c.position_bias_sum)}: AttnLRP does not conserve through them on its own")
        if c.bias_sum is not None:  # a model without biases (T5) has no bias share to draw
            parts.append(("biases", c.bias_sum))
        rest = y - sum(value for _, value in parts)
        parts.append(("rest (numerical error)", rest))
        sentence = "; ".join(words) + f". What is left over is numerical (relative error {c.relative_error:.1e})."
        return Readout(label, y, parts, sentence, "relative error", c.relative_error)
    if k is not None:
        parts = [("input tokens", k.relevance_sum), ("f(baseline)", k.baseline_value),
                 ("minus the integration gap", k.value - k.baseline_value - k.relevance_sum)]
        sentence = (f"Integrated Gradients over both inputs: relevance should sum to f(x) - f(baseline) = "
                    f"{k.value - k.baseline_value:.3g} (baseline: {k.baseline_label}); at {k.steps} steps it sums to "
                    f"{k.relevance_sum:.3g}, a gap of {k.gap:+.3g} ({k.relative_gap:.1%}).")
        return Readout(label, y, parts, sentence, "completeness gap", k.relative_gap)
    total = float(np.sum(result.source_relevance) + np.sum(result.decoder_relevance))
    sentence = (f"{result.method_label} obeys no conservation law: its relevance sums to {total:.3g} over both "
                f"inputs, while the {label.lower()} is {y:.3g}.")
    return Readout(label, y, [("input tokens", total)], sentence)


def readout_figure(data: Readout) -> go.Figure:
    """One stacked bar of the readout's parts (negative parts left of zero), the explained value marked."""
    fig = go.Figure()
    for label, value in data.parts:
        fig.add_trace(go.Bar(x=[value], y=[""], orientation="h", name=f"{label}: {value:.3g}",
                             marker_color=READOUT_COLOURS.get(label, "#888888"),
                             hovertemplate=f"{label}: %{{x:.4g}}<extra></extra>"))
    fig.add_vline(x=data.value, line=dict(color="black", dash="dash"),
                  annotation_text=f"{data.value_label}: {data.value:.3g}", annotation_position="top")
    fig.update_layout(barmode="relative", template="plotly_white", height=230, margin=dict(l=10, r=10, t=30, b=10),
                      legend=dict(orientation="h", yanchor="top", y=-0.35, x=0), yaxis=dict(visible=False))
    return fig
