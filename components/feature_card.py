"""Figures and HTML for SAE feature cards, the prompt view and steering (plain data in, no models run here).

Context highlighting: each token's background is orange with opacity activation / scale (scale = the feature's
max activation over the corpus, so contexts are comparable); hovering shows the value; the token the context is
centred on is underlined; tokens outside the stored window are not shown.
"""
from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from interpscope.figures.sae import ORANGE, histogram_figure, logits_figure
from interpscope.sae.store.explanations import SCORE_DIFFERENCE, score_text
from interpscope.sae.store.verification import verification_text


def _visible(token: str) -> str:
    return html.escape(token).replace("\n", "↵").replace("\t", "⇥") or "∅"


def context_html(tokens: Sequence[str], activations: Sequence[float | None], centre: int | None,
                 scale: float) -> str:
    """One context as a line of highlighted tokens (hover = activation)."""
    spans = []
    for index, (token, value) in enumerate(zip(tokens, activations, strict=True)):
        value = 0.0 if value is None else float(value)
        alpha = min(1.0, value / scale) if scale > 0 and value > 0 else 0.0
        underline = "text-decoration:underline;font-weight:600;" if index == centre else ""
        title = html.escape(f"{token!r}: {value:.4g}", quote=True)
        spans.append(f'<span class="feature-token" title="{title}" style="background:rgba{ORANGE + (round(alpha, 3),)};'
                     f'{underline}border-radius:2px;white-space:pre-wrap">{_visible(token)}</span>')
    return f'<div style="font-family:monospace;font-size:0.85em;line-height:1.8">{"".join(spans)}</div>'


def contexts_table_html(contexts: Sequence[dict], scale: float) -> str:
    """Contexts (dicts with tokens, activations, centre, max) one per row, with their activation in front."""
    rows = []
    for ctx in contexts:
        rows.append('<tr><td style="padding:0 8px;text-align:right;font-family:monospace;color:#444">'
                    f'{ctx["max"]:.3g}</td><td>{context_html(ctx["tokens"], ctx["activations"], ctx["centre"], scale)}'
                    "</td></tr>")
    legend = ('<div style="font-size:0.8em;color:#555">colour: activation / the feature\'s max activation; hover a '
              "token for its value; the underlined token is the one the row is ranked by</div>")
    return f'<table class="feature-contexts" style="border:none">{"".join(rows)}</table>{legend}'


def contexts_html(contexts: Sequence, scale: float) -> str:
    """Context dataclasses (tokens, activations, centre, max) as the contexts table."""
    return contexts_table_html([vars(c) for c in contexts], scale)


NOT_VERIFIED = {"degenerate": "it is degenerate: no word beyond the writer's own instructions",
                "not verified": "it does not beat its control (other features' explanations scored on the same "
                                "contexts: the interval of its lead reaches 0)",
                "unverified": "it has not been tested against its control (no verification of this store's current "
                              "explanations, or no held-out contexts to test it on)"}


def fires_on(card, n: int = 5) -> str:
    """The tokens a feature fires on in its top contexts, most frequent first ('' for a dead feature)."""
    from collections import Counter

    counts = Counter(ctx.tokens[ctx.centre] for ctx in card.top_contexts
                     if ctx.centre is not None and 0 <= ctx.centre < len(ctx.tokens))
    return ", ".join(f"{html.escape(repr(t))} ({c})" for t, c in counts.most_common(n))


def show_explanation(card, show_unverified: bool = False) -> None:
    """An explanation is shown as one only when it beat its control (status 'verified'); otherwise the card says
    "no verified explanation" and shows the tokens it fires on (its contexts follow), the writer's text only on
    request and named as unverified text."""
    import streamlit as st

    entry = card.explanation
    if not entry:
        return
    writer = entry.get("writer", "a bundled model")
    kind = entry.get("status", "unverified")
    if kind == "verified":
        proof = verification_text(entry["verification"], entry["verification"].get("scorer", ""))
        scored = f" · {score_text(entry)}" if entry.get("score") is not None else ""
        st.markdown(f"**Explanation** (written by {writer}, verified): {html.escape(entry.get('explanation', ''))}"
                    f" · {proof}{scored}", help=SCORE_DIFFERENCE)
        return
    tokens = fires_on(card)
    st.markdown(f"**No verified explanation** ({NOT_VERIFIED.get(kind, kind)})."
                + (f" Fires most on: {tokens} (its top contexts below)." if tokens else ""))
    if show_unverified:
        proof = (f" · {verification_text(entry['verification'], entry['verification'].get('scorer', ''))}"
                 if entry.get("verification") else "")
        st.caption(f"Unverified text written by {writer}, not an explanation: "
                   f"\"{html.escape(entry.get('explanation', ''))}\"{proof}")


def show_feature_card(card, store_name: str, open_feature: Callable[[int], None],
                      show_unverified: bool = False) -> None:
    """The whole feature card: label and (verified) explanation, metrics, top contexts, activation and logit-weight
    histograms, top and bottom logits, nearest features (buttons calling open_feature), interval samples.
    show_unverified: also show the writer's text of an explanation that is not verified, named as such."""
    import streamlit as st

    from components.export import export_menu

    feature = card.id
    st.markdown(f"**Label:** {html.escape(card.label)}")
    show_explanation(card, show_unverified)
    cols = st.columns(4)
    cols[0].metric("Density", f"{card.density:.3e}" if card.density else "dead",
                   help=f"fraction of the store's {card.n_tokens:,} corpus tokens where it is > 0")
    cols[1].metric("Tokens it fires on", f"{card.fire_count:,}")
    cols[2].metric("Max activation", f"{card.max_activation:.4g}")
    cols[3].metric("Mean (when > 0)", f"{card.mean_activation:.4g}")
    export_menu(None, card, key="sae-card", filename=f"{store_name}-feature-{feature}")
    if card.fire_count == 0:
        st.info("This feature never fired on the store's corpus: no contexts or activation histogram.")
    else:
        st.subheader("Top activating contexts")
        st.html(contexts_html(card.top_contexts, card.max_activation))
    left, right = st.columns(2)
    with left:
        if card.fire_count:
            fig = histogram_figure(card.histogram.edges, card.histogram.counts,
                                   f"Feature {feature}: activations when > 0", "activation")
            st.plotly_chart(fig, width="stretch", key="sae-act-hist")
            export_menu(fig, card.panel("activation_histogram", card.histogram),
                        key="sae-act-hist", filename=f"{store_name}-feature-{feature}-hist")
        fig = histogram_figure(card.logit_histogram.edges, card.logit_histogram.counts,
                               f"Feature {feature}: logit weights over the vocabulary", "logit weight", y_log=True,
                               color="rgb(100,100,100)")
        st.plotly_chart(fig, width="stretch", key="sae-logit-hist")
        export_menu(fig, card.panel("logit_histogram", card.logit_histogram), key="sae-logit-hist",
                    filename=f"{store_name}-feature-{feature}-logit-hist")
    with right:
        fig = logits_figure(card.top_logits, card.bottom_logits, f"Feature {feature}: top and bottom logit weights")
        st.plotly_chart(fig, width="stretch", key="sae-logits")
        export_menu(fig, card.panel("logits", {"top": card.top_logits, "bottom": card.bottom_logits}), key="sae-logits",
                    filename=f"{store_name}-feature-{feature}-logits")
    st.subheader("Nearest features (decoder cosine)")
    neighbour_cols = st.columns(5)
    for k, neighbour in enumerate(card.neighbours):
        neighbour_cols[k % 5].button(f"#{neighbour.feature} · cos {neighbour.cosine:.2f}", key=f"sae-neighbour-{k}",
                                     on_click=open_feature, args=(neighbour.feature,), width="stretch")
    if card.fire_count:
        st.subheader("Samples from activation intervals")
        st.caption("Equal-width intervals of activation from 0 to the max (intervals, not quantiles), a few random "
                   "examples each.")
        for interval in reversed(card.intervals):
            label = f"({interval.low:.3g}, {interval.high:.3g}] — {len(interval.examples)} examples"
            with st.expander(label, expanded=False):
                if interval.examples:
                    st.html(contexts_html(interval.examples, card.max_activation))
                else:
                    st.caption("No activation in this interval.")
