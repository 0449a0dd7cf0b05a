"""`interpscope sae train --arch transcoder --target-hook OUT`: transcoders from `sae train`, trained as `sae sweep
--archs transcoder --target-hook OUT` trains them (interpscope.sae.sweep: one cache of paired input/target rows,
each transcoder in its own sub-folder of --out, resumable), and reported as every `sae train` run is (the training
report, schema interpscope.sae.training). Part of the `sae train` command (interpscope.cli.sae_cmd)."""
from __future__ import annotations

import argparse
from collections.abc import Callable

from interpscope.config import InterpscopeError

TARGET_EXAMPLE = "e.g. blocks.L.hook_mlp_out with --hook blocks.L.hook_resid_mid"


def check_target_hook(args: argparse.Namespace, specs: list) -> bool:
    """Before any work: True when this run trains transcoders (every --arch is one and --target-hook is given);
    a transcoder without --target-hook, --target-hook with an SAE architecture, or the same hook twice is refused."""
    paired = [spec for spec in specs if spec.arch_class.paired]
    if args.target_hook is None:
        if paired:
            raise InterpscopeError("A transcoder reads one activation and predicts another: give --target-hook (the "
                                   f"activation it predicts, {TARGET_EXAMPLE}).")
        return False
    if len(paired) != len(specs):
        others = ", ".join(sorted({spec.arch_class.short_name for spec in specs if not spec.arch_class.paired}))
        raise InterpscopeError(f"--target-hook trains transcoders: use --arch transcoder with it ({others} "
                               "reconstruct(s) --hook itself; train those without --target-hook).")
    if args.target_hook == args.hook:
        raise InterpscopeError("--target-hook must differ from --hook (the same hook is an SAE: leave it out).")
    names = [spec.run_name() for spec in specs]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InterpscopeError(f"--arch and --l1/--k repeat {', '.join(repeated)}; give each setting once.")
    return True


def train_transcoders(args: argparse.Namespace, specs: list, *,
                      cache_progress: Callable[[int, int], None] | None = None,
                      progress: Callable[[int, int, dict], None] | None = None):
    """Train each transcoder spec into --out/<run name> (a finished one under the same settings is kept), evaluate
    them on --eval-tokens test tokens when asked; the training report of the run."""
    from interpscope import atomic
    from interpscope.cli.common import load_from_args
    from interpscope.cli.sae_sweep_cmd import sweep_settings
    from interpscope.cli.scale_args import scale_from_args
    from interpscope.outputs import OutputFolder
    from interpscope.sae.documents import training_report
    from interpscope.sae.sweep import (
        SWEEP_FILE,
        check_sweep,
        finished,
        point_record,
        sweep_cache,
        train_point,
    )

    settings = sweep_settings(args)
    check_sweep(args.out, settings, force=args.force)  # the folder may be written; a run there has these settings
    scale = scale_from_args(args)
    loaded = load_from_args(args)
    settings.model_name = loaded.name
    from interpscope.sae.activations import check_cache_space

    check_cache_space(loaded, settings.cache_hook, settings.cache_tokens, source=settings.source,
                      context_size=settings.context_size)  # before the folder is claimed: a full disk, one line
    output = OutputFolder.claim(args.out, force=args.force, command="sae train")
    output.record(output.path / SWEEP_FILE)  # listed before it is written (a kill in between: nothing unlisted)
    atomic.write_json(output.path / SWEEP_FILE, {"settings": settings.to_json(),
                                                 "grid": [point_record(spec) for spec in specs]}, indent=1)
    cache = sweep_cache(loaded, settings, scale, cache_progress)
    if cache.n_rows < settings.batch_size:
        raise InterpscopeError(f"Only {cache.n_rows} cached activations; need at least one batch of "
                               f"{settings.batch_size}.")
    saved = {}
    for spec in specs:
        folder = output.path / spec.run_name()
        if not finished(folder, spec, settings):
            output.mkdir(folder)
            train_point(output.path, cache, settings, spec, checkpoint_every=args.checkpoint_every,
                        progress=progress)
            output.record(folder)
        saved[spec.run_name()] = folder
    evaluations = None
    if args.eval_tokens > 0:
        from interpscope.sae.folder import load_sae
        from interpscope.sae.transcoder_eval import evaluate_any

        evaluations = {name: evaluate_any(loaded, load_sae(path), n_tokens=args.eval_tokens,
                                          context_size=min(128, args.eval_tokens), scale=scale).summary()
                       for name, path in saved.items()}
    return training_report(loaded.name, args.hook, saved, evaluations)
