"""Scaling bench: seconds and peak memory of each view on random-initialised models of real shapes (SmolLM2-135M,
Qwen3-0.6B, Llama-3.2-1B, Gemma-3-1B), against parameters and tokens, with the growth exponents fitted by log-log
least squares and the memory estimator's prediction (interpscope.models.memory) beside each measurement.

Nothing is downloaded: each shape is a transformers config written below from the published numbers, its weights
drawn at random (seed 0); the token ids come from the bundled SmolLM2 tokenizer (every id < 49,152 is a valid id of
the larger vocabularies too). Views: predict, attnlrp, gradient (Gradient x Input), patching (real activation
patching of the residual grid), heads (the head finder), sae (a random SAE of width 8 x d_model at the middle
block, evaluated on the prompt: encode, decode, spliced loss) and graph (the attribution graph over a random
transcoder set of width 768 per block, ~3% of features firing, --graph-feature-nodes features expanded).

Memory is measured in a fresh process per (model, view, tokens). On the CPU: the model is built, the view's code
imported, then /proc/self/clear_refs resets the peak resident set (VmHWM) to the current one (VmRSS); after one run
of the view, peak_mb = VmHWM - that baseline (Linux; not ru_maxrss, which survives fork/exec, nor tracemalloc, which
misses torch's allocations). weights_mb = VmRSS after building the model - VmRSS before. On CUDA:
torch.cuda.max_memory_allocated over the run minus memory_allocated before it (the caching allocator's reserve not
counted). Each figure carries os.getloadavg() at its start: the CPU is shared, so seconds are noisy.

On a CPU shared with other jobs use OMP_NUM_THREADS=1: two threads on two busy cores spend most of each pass waiting
at OpenMP barriers (docs/benchmarks/scaling.md measured the same runs 10-40x slower); peaks do not depend on it.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/scaling.py [--max-params 1.3e9] [--device cpu]
        [--views predict,attnlrp,...] [--tokens 64] [--token-sweep 32,64,128] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "backend"))

VIEWS = ("predict", "attnlrp", "gradient", "patching", "heads", "sae", "graph")
# published shapes (no download): name -> (transformers config class, fields)
SHAPES: dict[str, tuple[str, dict]] = {
    "SmolLM2-135M": ("LlamaConfig", dict(num_hidden_layers=30, hidden_size=576, num_attention_heads=9,
                                         num_key_value_heads=3, intermediate_size=1536, vocab_size=49152,
                                         tie_word_embeddings=True, max_position_embeddings=8192,
                                         rope_theta=100000.0, rms_norm_eps=1e-5)),
    "Qwen3-0.6B": ("Qwen3Config", dict(num_hidden_layers=28, hidden_size=1024, num_attention_heads=16,
                                       num_key_value_heads=8, head_dim=128, intermediate_size=3072,
                                       vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=40960,
                                       rope_theta=1000000.0, rms_norm_eps=1e-6)),
    "Llama-3.2-1B": ("LlamaConfig", dict(num_hidden_layers=16, hidden_size=2048, num_attention_heads=32,
                                         num_key_value_heads=8, head_dim=64, intermediate_size=8192,
                                         vocab_size=128256, tie_word_embeddings=True,
                                         max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5)),
    "Gemma-3-1B": ("Gemma3TextConfig", dict(num_hidden_layers=26, hidden_size=1152, num_attention_heads=4,
                                            num_key_value_heads=1, head_dim=256, intermediate_size=6912,
                                            vocab_size=262144, tie_word_embeddings=True,
                                            max_position_embeddings=32768, query_pre_attn_scalar=256,
                                            sliding_window=512, rms_norm_eps=1e-6)),
}
PROSE = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
         "of a wife. However little known the feelings or views of such a man may be on his first entering a "
         "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered "
         "the rightful property of some one or other of their daughters. My dear Mr. Bennet, said his lady to him one "
         "day, have you heard that Netherfield Park is let at last? Mr. Bennet replied that he had not. But it is, "
         "returned she; for Mrs. Long has just been here, and she told me all about it. Mr. Bennet made no answer. "
         "Do you not want to know who has taken it? cried his wife impatiently. You want to tell me, and I have no "
         "objection to hearing it. This was invitation enough.")


def config_for(name: str, n_layers: int | None = None, vocab: int | None = None):
    """The transformers config of a shape (n_layers, vocab: a smaller model of the family)."""
    import transformers

    cls_name, fields = SHAPES[name]
    fields = dict(fields, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if n_layers is not None:
        fields["num_hidden_layers"] = n_layers
    if vocab is not None:
        fields["vocab_size"] = vocab
    config = getattr(transformers, cls_name)(**fields)
    config._attn_implementation = "eager"
    return config


def build(name: str, device: str, dtype: str, rss: list[float] | None = None):
    """A random-initialised model of the shape, wrapped as load_model would (eval, no parameter gradients); `rss`
    gets the resident set (MB) just before the weights are made, the tokenizer and the model's code loaded."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from interpscope.adapters import get_adapter
    from interpscope.config import resolve_dtype
    from interpscope.models.loaded import LoadedModel
    from interpscope.models.registry import BUNDLED

    tokenizer = AutoTokenizer.from_pretrained(str(BUNDLED["smollm2-135m"].folder()))
    torch.manual_seed(0)
    config = config_for(name)
    torch_dtype = resolve_dtype(dtype, torch.device(device))
    AutoModelForCausalLM.from_config(config_for(name, n_layers=1, vocab=8))  # its code imported before the baseline
    _release()
    if rss is not None:
        rss.append(_status_mb("VmRSS"))
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype, attn_implementation="eager")
    model.to(device).eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return LoadedModel(name=name, model=model, tokenizer=tokenizer, adapter=get_adapter(model),
                       device=torch.device(device), dtype=torch_dtype, source="memory", load_seconds=0.0)


def text_of(lm, tokens: int) -> str:
    """The longest start of PROSE that reads as at most `tokens` tokens (the prefix token included)."""
    from interpscope.relevance.api import input_ids_for

    words = PROSE.split()
    best = words[0]
    for end in range(1, len(words) + 1):
        text = " ".join(words[:end])
        if int(input_ids_for(lm, text)[0].shape[1]) > tokens:
            break
        best = text
    return best


def corrupt_of(lm, text: str) -> str:
    """`text` with its last word swapped for one of the same token length (patching compares position by position)."""
    from interpscope.relevance.api import input_ids_for

    words = text.split()
    n = int(input_ids_for(lm, text)[0].shape[1])
    for other in ("house", "garden", "letter", "sister", "table", "road", "ball", "walk"):
        candidate = " ".join(words[:-1] + [other])
        if candidate != text and int(input_ids_for(lm, candidate)[0].shape[1]) == n:
            return candidate
    raise RuntimeError("no same-length corrupt prompt found")


def runner(lm, view: str, tokens: int, feature_nodes: int):
    """A no-argument function running the view once (everything it needs prepared and imported beforehand)."""
    import torch

    import interpscope.api as api

    text = text_of(lm, tokens)
    if view == "predict":
        from interpscope.predict import predict_next

        return lambda: predict_next(lm, text, fresh=True)
    if view in ("attnlrp", "gradient"):
        method = "attnlrp" if view == "attnlrp" else "gradxinput"
        return lambda: api.explain(lm, text, method)
    if view == "patching":
        corrupt = corrupt_of(lm, text)
        # fixed answer and wrong tokens: a random model's top predictions may be one token for both prompts
        return lambda: api.patch(lm, text, corrupt, components="resid", methods="real", answer="#100",
                                 wrong="#200")
    if view == "heads":
        return lambda: api.find_heads(lm, n_sequences=8, half_len=max(2, tokens // 2))
    if view == "sae":
        from interpscope.relevance.api import input_ids_for
        from interpscope.sae.arch.base import SAEConfig
        from interpscope.sae.arch.registry import build_sae
        from interpscope.sae.evaluation import evaluate_sae

        middle = lm.adapter.n_layers // 2
        hook = f"blocks.{middle}.hook_resid_post"
        d = lm.adapter.d_model
        sae = build_sae(SAEConfig(d_in=d, d_sae=8 * d, architecture="standard", model_name=lm.name, hook_name=hook,
                                  hook_layer=middle)).to(lm.device)
        ids = input_ids_for(lm, text)[0]
        return lambda: evaluate_sae(lm, sae, hook_name=hook, ids=ids, batch_size=1)
    if view == "graph":
        from interpscope.capture import model_lock
        from interpscope.graphs import build_graph
        from interpscope.graphs.replay import record
        from interpscope.relevance.api import input_ids_for
        from interpscope.sae.transcoder_set import random_transcoder_set

        tset = random_transcoder_set(lm, 768, seed=0)
        with model_lock(lm):
            run = record(lm, input_ids_for(lm, text)[0])
        with torch.no_grad():
            for layer, tc in enumerate(tset.transcoders):
                tc.to(lm.device)
                tc.b_enc.copy_(-torch.quantile(run.mlp_in[layer].float() @ tc.W_enc.float(), 0.97, dim=0))
        del run
        return lambda: build_graph(lm, tset, text, max_feature_nodes=feature_nodes)
    raise ValueError(f"unknown view {view!r}")


def _release() -> None:
    """Hand freed heap back to the system (glibc keeps freed arenas: a run would reuse them unseen by VmHWM)."""
    import ctypes

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status (Linux only)")


def child(name: str, view: str, tokens: int, device: str, dtype: str, feature_nodes: int) -> dict:
    """One (model, view, tokens) in this fresh process: build, prepare, reset the peak, run once, measure."""
    import torch

    rss: list[float] = []
    started = time.perf_counter()
    lm = build(name, device, dtype, rss)
    build_seconds = time.perf_counter() - started
    _release()
    weights_mb = _status_mb("VmRSS") - rss[0]
    run = runner(lm, view, tokens, feature_nodes)
    _release()
    load = os.getloadavg()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        weights_mb = base / 2**20
    else:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        base = _status_mb("VmHWM")
    started = time.perf_counter()
    run()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    peak_mb = (torch.cuda.max_memory_allocated() - base) / 2**20 if device == "cuda" else _status_mb("VmHWM") - base
    forward = forward_seconds(lm, tokens)
    row = {"model": name, "view": view, "tokens": tokens, "device": device, "dtype": dtype,
           "parameters": lm.n_parameters(), "seconds": round(seconds, 3), "build_seconds": round(build_seconds, 1),
           "peak_mb": round(peak_mb, 1), "weights_mb": round(weights_mb, 1), "graph_feature_nodes": feature_nodes,
           "forward_seconds": round(forward, 3), "in_forward_passes": round(seconds / forward, 1),
           "threads": torch.get_num_threads(), "load_average": [round(x, 2) for x in load]}
    return predicted(row)


def forward_seconds(lm, tokens: int) -> float:
    """One plain forward pass of `tokens` tokens after the view (warm): the load-independent yardstick the view's
    seconds are divided by (in_forward_passes), since the CPU is shared."""
    import torch

    ids = torch.arange(3, 3 + tokens, device=lm.device)[None]
    with torch.no_grad():
        started = time.perf_counter()
        lm.model(input_ids=ids, use_cache=False)
        if lm.device.type == "cuda":
            torch.cuda.synchronize()
    return time.perf_counter() - started


def predicted(row: dict) -> dict:
    """The row with the estimator's figures for the same run (interpscope.models.memory.view_memory, with what this
    bench runs: the residual grid only for patching, 8 sequences for the head finder, transcoders of width 768):
    predicted_view_mb (the run: activations + gradients; the SAE's or transcoders' own weights are made before the
    baseline, so not in either), predicted_weights_mb (the model's), and the ratios to the measured figures."""
    import torch

    from interpscope.models.memory import shape_from_config, view_memory

    shape = shape_from_config(config_for(row["model"]))
    shape = type(shape)(**{**shape.__dict__, "n_params": row["parameters"]})
    dtype = getattr(torch, row["dtype"])
    estimate = view_memory(shape, row["view"], row["tokens"], dtype, patch_kinds=1, sequences=8,
                           graph_width=768, graph_feature_nodes=row.get("graph_feature_nodes", 32))
    view_mb = estimate.run_bytes / 2**20
    weights_mb = shape.n_params * torch.empty((), dtype=dtype).element_size() / 2**20
    return {**row, "predicted_view_mb": round(view_mb, 1), "predicted_weights_mb": round(weights_mb, 1),
            "view_ratio": round(view_mb / row["peak_mb"], 3) if row["peak_mb"] > 0 else None,
            "total_ratio": round((view_mb + weights_mb) / (row["peak_mb"] + row["weights_mb"]), 3)}


def fit_exponent(xs: list[float], ys: list[float]) -> float | None:
    """The slope of log y against log x by least squares (None with fewer than two distinct x)."""
    points = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len({p[0] for p in points}) < 2:
        return None
    mean_x = sum(p[0] for p in points) / len(points)
    mean_y = sum(p[1] for p in points) / len(points)
    sxx = sum((p[0] - mean_x) ** 2 for p in points)
    return round(sum((p[0] - mean_x) * (p[1] - mean_y) for p in points) / sxx, 3)


def parameters_of(name: str) -> int:
    from interpscope.models.memory import shape_from_config

    return shape_from_config(config_for(name)).n_params


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SHAPES), help="comma-separated shapes (default: all four)")
    parser.add_argument("--views", default=",".join(VIEWS))
    parser.add_argument("--tokens", type=int, default=64, help="prompt length of every view (default 64)")
    parser.add_argument("--view-tokens", default="", help="per-view overrides, e.g. patching=16,graph=32")
    parser.add_argument("--token-sweep", default="", help="extra lengths run on the smallest model, e.g. 32,128")
    parser.add_argument("--max-params", type=float, default=None, help="skip shapes above this many parameters")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--graph-feature-nodes", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per (model, view) before giving up")
    parser.add_argument("--out", help="also write the JSON here (rows are appended as they finish)")
    parser.add_argument("--rescore", nargs="+", metavar="FILE",
                        help="merge earlier reports and recompute the predictions with the current estimator")
    parser.add_argument("--markdown", action="store_true", help="with --rescore: print the docs' tables instead")
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "VIEW", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], int(args.child[2]), args.device, args.dtype,
                               args.graph_feature_nodes)))
        return 0
    overrides = {k: int(v) for k, v in (item.split("=") for item in args.view_tokens.split(",") if item)}
    if args.rescore:
        return rescore(args.rescore, args.tokens, overrides, args.out, args.markdown)
    import torch

    overrides = {k: int(v) for k, v in (item.split("=") for item in args.view_tokens.split(",") if item)}
    models = [m for m in args.models.split(",") if args.max_params is None or parameters_of(m) <= args.max_params]
    views = args.views.split(",")
    jobs = [(m, v, overrides.get(v, args.tokens)) for m in models for v in views]
    if args.token_sweep and models:
        jobs += [(models[0], v, int(t)) for t in args.token_sweep.split(",") for v in views
                 if v in ("predict", "attnlrp", "gradient", "sae")]
    report: dict = {"device": args.device, "dtype": args.dtype, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                    "torch_threads": torch.get_num_threads(), "load_average_start": os.getloadavg(),
                    "graph_feature_nodes": args.graph_feature_nodes, "rows": [], "skipped": []}
    # every tensor of 128 KiB or more its own mapping, returned when freed: VmHWM then follows the live tensors (glibc's
    # moving threshold otherwise serves them from heap chunks freed earlier, and a run's peak shows +-40% between runs)
    child_env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=os.environ.get("MALLOC_MMAP_THRESHOLD_", "131072"))
    report["malloc_mmap_threshold"] = child_env["MALLOC_MMAP_THRESHOLD_"]
    for model, view, tokens in jobs:
        command = [sys.executable, __file__, "--child", model, view, str(tokens), "--device", args.device,
                   "--dtype", args.dtype, "--graph-feature-nodes", str(args.graph_feature_nodes)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=child_env)
        except subprocess.TimeoutExpired:
            report["skipped"].append({"model": model, "view": view, "tokens": tokens, "why": "timeout"})
            continue
        if done.returncode != 0:
            report["skipped"].append({"model": model, "view": view, "tokens": tokens,
                                      "why": done.stderr.strip().splitlines()[-1][:300] if done.stderr else "?"})
            print(f"{model} {view} {tokens}: failed", file=sys.stderr, flush=True)
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        report["rows"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1))
    report["exponents"] = exponents(report["rows"], args.tokens, overrides)
    report["load_average_end"] = os.getloadavg()
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


def rescore(files: list[str], tokens: int, overrides: dict[str, int], out: str | None, markdown: bool = False) -> int:
    """Merge the rows of several reports (the first's header kept, each file's load averages listed) and recompute
    every prediction and exponent with the estimator as it is now."""
    reports = [json.loads(Path(file).read_text()) for file in files]
    merged = {k: v for k, v in reports[0].items() if k not in ("rows", "skipped", "exponents")}
    merged["sources"] = [{"file": Path(file).name, "load_average_start": r.get("load_average_start"),
                          "load_average_end": r.get("load_average_end")}
                         for file, r in zip(files, reports, strict=True)]
    merged["rows"] = [predicted(row) for r in reports for row in r["rows"]]
    merged["skipped"] = [item for r in reports for item in r.get("skipped", [])]
    merged["exponents"] = exponents(merged["rows"], tokens, overrides)
    text = json.dumps(merged, indent=1)
    if out:
        Path(out).write_text(text)
    print(tables(merged) if markdown else text)
    return 0


def tables(report: dict) -> str:
    """The docs' tables: one row per (model, view, tokens), then the fitted exponents per view."""
    lines = ["| model | parameters | view | tokens | seconds | in forward passes | load (1 min) | peak MB | predicted "
             "MB | predicted / measured | weights MB (predicted) | total predicted / measured |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(report["rows"], key=lambda r: (r["parameters"], VIEWS.index(r["view"]), r["tokens"])):
        lines.append(f"| {r['model']} | {r['parameters'] / 1e9:.3f} B | {r['view']} | {r['tokens']} | "
                     f"{r['seconds']:.1f} | {r.get('in_forward_passes', '-')} | {r['load_average'][0]:.1f} | "
                     f"{r['peak_mb']:.1f} | "
                     f"{r['predicted_view_mb']:.1f} | {r['view_ratio']:.2f} | {r['weights_mb']:.0f} "
                     f"({r['predicted_weights_mb']:.0f}) | {r['total_ratio']:.3f} |")
    lines += ["", "| view | seconds ~ parameters^a | peak ~ parameters^a | seconds ~ tokens^a | peak ~ tokens^a |",
              "|---|---|---|---|---|"]
    def cell(value) -> str:
        return "-" if value is None else f"{value:.2f}"

    for view, e in report["exponents"].items():
        lines.append(f"| {view} | {cell(e['seconds_vs_parameters'])} | {cell(e['peak_vs_parameters'])} | "
                     f"{cell(e['seconds_vs_tokens'])} | {cell(e['peak_vs_tokens'])} |")
    return "\n".join(lines)


def exponents(rows: list[dict], tokens: int, overrides: dict[str, int]) -> dict:
    """Per view: growth exponents of seconds and peak memory against parameters (at the view's bench length) and,
    where a token sweep ran, against tokens (on the smallest model)."""
    out: dict = {}
    for view in VIEWS:
        at_length = [r for r in rows if r["view"] == view and r["tokens"] == overrides.get(view, tokens)]
        entry = {"seconds_vs_parameters": fit_exponent([r["parameters"] for r in at_length],
                                                       [r["seconds"] for r in at_length]),
                 "peak_vs_parameters": fit_exponent([r["parameters"] for r in at_length],
                                                    [r["peak_mb"] for r in at_length])}
        smallest = min((r["parameters"] for r in rows if r["view"] == view), default=None)
        sweep = [r for r in rows if r["view"] == view and r["parameters"] == smallest]
        entry["seconds_vs_tokens"] = fit_exponent([r["tokens"] for r in sweep], [r["seconds"] for r in sweep])
        entry["peak_vs_tokens"] = fit_exponent([r["tokens"] for r in sweep], [r["peak_mb"] for r in sweep])
        out[view] = entry
    return out


if __name__ == "__main__":
    raise SystemExit(main())
