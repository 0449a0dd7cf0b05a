"""`interpscope explain` on an encoder-decoder (T5, Flan-T5): `--text` is the source, `--decoder-text` an optional
decoder prefix, and the explained token is the next decoder token after it (the first one without a prefix).
Relevance over the source and the decoder input, one document (interpscope.relevance_seq2seq) for --json."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from interpscope.cli.common import write_outputs
from interpscope.config import InterpscopeError

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

# explain's options that serve decoder-only views: refused (by name) on an encoder-decoder rather than ignored
# (--png is the plotly figure here: the token heatmap with its suffix-named format is a decoder-only view)
DECODER_ONLY = (("prepend_bos", "--prepend-bos"), ("all_rows", "--all-rows"), ("out", "--out"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--decoder-text", metavar="PREFIX", default=None,
                        help="encoder-decoders (T5): a decoder prefix; the explained token is the next decoder token "
                             "after it (default: none, the first decoder token)")


def run(args: argparse.Namespace, lm: LoadedModel, text: str) -> int:
    """Explain `text` as the source of an encoder-decoder; refuses a decoder-only model given --decoder-text."""
    from interpscope.cli.method_options import options_from_args
    from interpscope.relevance.seq2seq import explain_seq2seq, seq2seq_methods

    if not lm.is_encoder_decoder:
        raise InterpscopeError(f"--decoder-text is for encoder-decoder models (T5, Flan-T5); {lm.name} is a "
                               f"decoder-only {lm.family} model: put the whole text in --text instead.")
    for attribute, flag in DECODER_ONLY:
        if getattr(args, attribute, None):
            raise InterpscopeError(f"{flag} is not available for encoder-decoder models ({lm.name}); use --json.")
    method = args.method or next(iter(seq2seq_methods()))  # the registry's first: the LRP method
    result = explain_seq2seq(lm, text, args.decoder_text, method, token=args.target_token,
                             contrast=tuple(args.contrast) if args.contrast else None, options=options_from_args(args))
    write_outputs(args, result)
    if args.json != "-":
        _print_human(result)
    return 0


def _print_human(result) -> None:
    target = result.target
    print(f"{result.method_label} on {result.model}: next decoder token {target.label} (id {target.token_id}) after "
          f"decoder position {target.position}, {target.kind} {result.logit:.4f}, {result.seconds:.3f} s")
    for part, tokens, values, rows in (("source", result.source_tokens, result.source_relevance, result.source_sinks),
                                       ("decoder", result.decoder_tokens, result.decoder_relevance,
                                        result.decoder_sinks)):
        reasons = {row["position"]: row["reason"] for row in rows}
        print(f"{part}:")
        for index, (token, value) in enumerate(zip(tokens, values, strict=True)):
            print(f"{value:+10.4f}  {token!r}" + (f"  (excluded: {reasons[index]})" if index in reasons else ""))
    c = result.conservation
    if c is not None:
        softmax = "" if c.softmax_sum is None else (f" + softmax {c.softmax_sum:.4f} + position bias "
                                                    f"{c.position_bias_sum:.4f}")
        biases = "" if c.bias_sum is None else f" + biases {c.bias_sum:.4f}"  # None: the model has none (T5)
        print(f"conservation: source {c.source_sum:.4f} + decoder {c.decoder_sum:.4f}{biases}"
              f"{softmax} vs {c.target_logit:.4f} (relative error {c.relative_error:.2e})")
    k = result.completeness
    if k is not None:
        print(f"completeness: relevance {k.relevance_sum:.4f} vs f(x) - f(baseline) = {k.value - k.baseline_value:.4f} "
              f"(gap {k.gap:+.4f}, {k.relative_gap:.1%}, {k.steps} steps)")
