"""`interpscope sae synth`: train the registry's SAE architectures on synthetic activations with a known dictionary
(interpscope.sae.synth, interpscope.sae.synth_run) and score them against it: MCC, recovery, absorption, L0 and FVU,
beside the true dictionary's and a random dictionary's. Registered inside the `sae` group by sae_cmd.py."""
from __future__ import annotations

import argparse
import sys

from interpscope.cli.argtypes import (
    fraction,
    int_at_least,
    int_between,
    non_negative_float,
    positive_float,
    positive_int,
    seed_int,
)
from interpscope.cli.common import add_outputs, check_outputs, json_to_stdout, write_outputs
from interpscope.config import InterpscopeError

MAX_FEATURES = 65_536
MAX_D_MODEL = 8192


def _synth(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from interpscope.cli.sae_sweep_cmd import parse_sets
    from interpscope.sae.arch import architecture_class
    from interpscope.sae.synth import SynthData, SynthSpec
    from interpscope.sae.synth_run import SynthSettings, default_grid, run_synth

    check_outputs(args)
    if args.n_features > MAX_FEATURES or args.d_model > MAX_D_MODEL:
        raise InterpscopeError(f"--n-features is at most {MAX_FEATURES:,} and --d-model at most {MAX_D_MODEL:,} "
                               f"(got {args.n_features:,} and {args.d_model:,}).")
    archs = tuple(a.strip() for a in args.archs.split(","))
    if not all(archs):
        raise InterpscopeError(f"--archs {args.archs!r} has an empty item; give names such as relu,gated,topk.")
    for arch in archs:
        try:
            cls = architecture_class(arch)
        except ValueError as err:
            raise InterpscopeError(str(err)) from None
        if cls.paired:
            raise InterpscopeError(f"--archs {arch}: a transcoder maps one activation to another; the synthetic task "
                                   "has one activation (its short-run check is in tests/sae/test_sae_synth.py).")
    spec = SynthSpec(n_features=args.n_features, d_model=args.d_model, target_l0=args.l0,
                     zipf_exponent=args.zipf, n_correlated=args.correlated, group_size=args.group_size,
                     correlation=args.correlation, n_parents=args.parents, children=args.children,
                     child_rate=args.child_rate, magnitude_std=args.magnitude_std, noise=args.noise, seed=args.seed)
    try:
        data = SynthData(spec)
    except ValueError as err:
        raise InterpscopeError(str(err)) from None
    width = args.width or args.n_features
    if args.tokens < args.batch_size:
        raise InterpscopeError(f"--tokens ({args.tokens}) must be at least one batch ({args.batch_size}).")
    sets = parse_sets(args.set)
    counts = {name: [int(v) for v in values] for name, values in sets.items() if architecture_class(name).knob.is_count}
    weights = {name: values for name, values in sets.items() if name not in counts}
    if width > 4 * MAX_FEATURES:
        raise InterpscopeError(f"--width is at most {4 * MAX_FEATURES:,} (got {width:,}).")
    specs = default_grid(data.expected_l0, width, archs, weights, ladder=args.ladder, ks=counts)
    settings = SynthSettings(tokens=args.tokens, batch_size=args.batch_size, lr=args.lr, eval_rows=args.eval_rows,
                             seed=args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    bar = tqdm(total=settings.tokens // settings.batch_size, desc=f"training {len(specs)} SAEs", unit="step",
               file=sys.stderr)

    def progress(step: int, total: int) -> None:
        bar.total = total
        bar.update(step - bar.n)

    result = run_synth(spec, specs, settings, progress=progress)
    bar.close()
    write_outputs(args, result, document_by_default=True)
    if not json_to_stdout(args, document_by_default=True) or args.json not in (None, "-"):
        for sentence in result.sentences():
            print(sentence, file=sys.stderr)
    return 0


def register(sae_sub) -> None:
    synth = sae_sub.add_parser("synth", help="train the SAE architectures on synthetic activations with known "
                               "features and score them against the truth (MCC, recovery, absorption)")
    synth.add_argument("--n-features", type=int_at_least(2), default=512, help="true features (N)")
    synth.add_argument("--d-model", type=int_at_least(2), default=256, help="activation width (d < N: superposition)")
    synth.add_argument("--l0", type=positive_float, default=12.0, help="expected active features per row (true L0)")
    synth.add_argument("--zipf", type=non_negative_float, default=0.5, help="Zipf exponent of the firing rates")
    synth.add_argument("--correlated", type=int_at_least(0), default=128,
                       help="features that fire in correlated groups")
    synth.add_argument("--group-size", type=positive_int, default=4)
    synth.add_argument("--correlation", type=fraction, default=0.6, help="Gaussian-copula correlation in a group "
                       "(below 1)")
    synth.add_argument("--parents", type=int_at_least(0), default=16, help="hierarchical parents")
    synth.add_argument("--children", type=positive_int, default=2, help="children per parent")
    synth.add_argument("--child-rate", type=fraction, default=0.5, help="share of a parent's rows with a child")
    synth.add_argument("--magnitude-std", type=non_negative_float, default=0.15)
    synth.add_argument("--noise", type=non_negative_float, default=0.3, help="expected norm of the added noise")
    synth.add_argument("--archs", default="relu,gated,topk,jumprelu,batchtopk,matryoshka",
                       help="SAE architectures (the transcoder is paired and not trained here)")
    synth.add_argument("--ladder", default="batchtopk", help="the architecture whose k runs over 1/4..4 x the true "
                       "L0 (where MCC peaks, where c_dec is lowest)")
    synth.add_argument("--set", action="append", help="ARCH=v1,v2: coefficients (or k) of one architecture")
    synth.add_argument("--width", type=int_at_least(0), default=0, help="features per SAE (0: the true N)")
    synth.add_argument("--tokens", type=positive_int, default=614_400, help="training rows per SAE")
    synth.add_argument("--batch-size", type=positive_int, default=2048)
    synth.add_argument("--lr", type=positive_float, default=3e-3)
    synth.add_argument("--eval-rows", type=positive_int, default=8192, help="held-out rows every SAE is scored on")
    synth.add_argument("--threads", type=int_between(0, 256), default=0, help="torch CPU threads (0: torch's default)")
    synth.add_argument("--seed", type=seed_int, default=0)
    from interpscope.sae.synth_run import SynthResult

    add_outputs(synth, SynthResult, document_by_default=True,
                json_help="write the JSON document to FILE instead of stdout; without FILE or with '-' print it (the "
                          "default)")
    synth.set_defaults(func=_synth)
