"""How much memory a model and each view's run need, from the model's config alone, and the refusal of a run that
would not fit: one estimator for the loader, the command line (`interpscope models estimate`, and each view's command
before its run) and bench/scaling.py, which measures it.

A model's shape (layers L, width d, heads H with d_head each, key/value heads H_kv, MLP width m, vocabulary V,
gated MLP or not) comes from its Hugging Face config; b is the byte width of the dtype the model runs in, T the
tokens of one sequence, N the tokens of one forward pass (sequences x T); q = H d_head and kv = H_kv d_head.

- weights: parameters x b (tied embeddings counted once), plus the SAE's or transcoders' float32 weights for the sae
  and graph views.
- one block's forward without autograd (what lives at once inside it): N (3d + 4q + 2kv + k m) b, k = 3 for a
  gated MLP and 2 otherwise, plus the eager attention's scores and probabilities, 2 H N T b.
- a pass with autograd keeps per block N (4d + q + 2kv + 2m) b and half a pattern per head (H N T b / 2) for the
  backward, which adds N ((q + 2kv) / 2 + 1.5 m) b per block while it runs (reported as the gradients).

Per view (view_memory): predict is one block's forward, four d-wide rows per token (the embedding and the
residual stream around the block) and the last position's logits; gradient is the autograd pass over every block;
attnlrp that x LRP_SAVED; patching the clean and corrupt runs' cached activations (float32, per kind of component)
and, for PATCH_BATCH patched sequences at once, two d-wide and one m-wide activation, one attention pattern per head
and the last position's logits; heads 8 bytes per head and pattern entry of the sequences and 2.5 m-wide rows per
token; sae the forward, four width-wide rows per token and 36 bytes per token and vocabulary entry (float32 logits
and float64 log-probabilities of the clean, zero-ablated and spliced passes); graph the recorded forward (5d + m per
token and block, float32), the rows of the expanded features over every active feature, GRAPH_ACTIVE d-wide vectors
per active feature and the LRP pass. Every run adds RUN_OVERHEAD (the first run in a process imports code and
allocates thread scratch). The coefficients were counted from the tensors each view keeps, then fitted to the peaks
bench/scaling.py measured (SmolLM2-135M's shape and a tiny Llama first; patching's batch, the graph's per-feature
and the head finder's MLP terms refitted on all four shapes); docs/benchmarks/scaling.md gives every prediction
beside its measurement, tests/models/test_memory.py checks them on a tiny model.

The refusal (check_fits, check_run, check_load) compares the bytes with SAFETY of the free memory the device reports
(interpscope.limits.free_bytes: psutil's available RAM, or torch.cuda.mem_get_info) and names what to change.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from interpscope.config import InterpscopeError
from interpscope.results import Result

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

T = TypeVar("T")
VIEWS = ("predict", "attnlrp", "gradient", "patching", "heads", "sae", "graph")
VIEW_LABELS = {"predict": "next-token prediction", "attnlrp": "AttnLRP relevance", "gradient": "Gradient x Input",
               "patching": "activation patching (residual grid)", "heads": "head finder", "sae": "SAE encode/eval",
               "graph": "attribution graph (transcoders)"}
LRP_VIEW, GRADIENT_VIEW = VIEWS[1], VIEWS[2]  # what an LRP method's, resp. a gradient method's run keeps
# (which relevance method is which view is the registry's to say: interpscope.relevance.methods.memory_view)
LRP_SAVED = 1.05  # AttnLRP keeps this many times the plain gradient's saved activations (measured)
RUN_OVERHEAD = 10 * 2**20  # a view's first run in a process: code imported, thread scratch (measured: 8-14 MiB)
PATCH_BATCH = 24  # patched sequences per forward (interpscope.patching.run.patch's batch_size)
HEAD_SEQUENCES = 8  # the head finder's default sequences
SAE_EXPANSION = 8  # SAE width / d_model the estimate assumes when none is given
GRAPH_WIDTH = 768  # transcoder width the estimate assumes when none is given
GRAPH_FEATURE_NODES = 128  # interpscope.graphs.defaults.DEFAULT_MAX_FEATURE_NODES
GRAPH_DENSITY = 0.03  # share of (position, feature) pairs active in a transcoder (bench/scaling.py's random sets)
GRAPH_ACTIVE = 0.5  # d-wide float32 vectors the graph holds per active feature (fitted at 0.135-1.2 B)
SAFETY = 0.9  # a run may take at most this share of the free memory
# the precision each view needs (docs/reference/models.md#precision): views that accept bf16/fp16 models, and why not
PRECISION = {
    "predict": "bf16/fp16 allowed",
    "attnlrp": "bf16/fp16 allowed: relevance summed in float64, maps within 2e-2 of float32",
    "gradient": "bf16/fp16 allowed but noisier (bf16 2.8-7.4% relative L2): float32 for published maps",
    "patching": "bf16/fp16 allowed; metrics read in float32",
    "heads": "bf16/fp16 allowed; patterns kept in float16, scores in float64",
    "sae": "bf16/fp16 allowed for the model (L0, FVU within 1e-3 in bf16); the SAE in its own dtype",
    "graph": "the model may be bf16/fp16; the replay upcasts to float32",
}


@dataclass(frozen=True)
class ModelShape:
    """The sizes the estimate reads from a config."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_mlp: int
    vocab: int
    gated: bool
    tied: bool
    n_params: int

    @property
    def q_width(self) -> int:
        return self.n_heads * self.d_head

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.d_head


def _first(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def _gated(model_type: str) -> bool:
    from interpscope.adapters import ADAPTERS

    return any(model_type in cls.model_types and cls.gated_mlp for cls in ADAPTERS)


def shape_from_config(config: Any) -> ModelShape:
    """A causal LM's shape from its Hugging Face config (a text config inside a multimodal one is read)."""
    config = getattr(config, "text_config", None) or config
    d = int(_first(config, "hidden_size", "n_embd", "d_model"))
    layers = int(_first(config, "num_hidden_layers", "n_layer", "num_layers"))
    heads = int(_first(config, "num_attention_heads", "n_head", default=1) or 1)
    kv = int(_first(config, "num_key_value_heads", default=heads) or heads)
    d_head = int(_first(config, "head_dim", default=0) or d // heads)
    gated = _gated(str(getattr(config, "model_type", "")))
    m = int(_first(config, "intermediate_size", "n_inner", default=0) or 4 * d)
    vocab = int(config.vocab_size)
    tied = bool(getattr(config, "tie_word_embeddings", True))
    per_block = d * heads * d_head * 2 + d * kv * d_head * 2 + (3 if gated else 2) * d * m + 4 * d
    params = layers * per_block + vocab * d * (1 if tied else 2) + d
    if getattr(config, "n_positions", None):
        params += int(config.n_positions) * d
    return ModelShape(layers, d, heads, kv, d_head, m, vocab, gated, tied, int(params))


def shape_of(lm: LoadedModel) -> ModelShape:
    """A loaded model's shape, with its exact parameter count."""
    shape = shape_from_config(lm.model.config)
    return ModelShape(**{**shape.__dict__, "n_params": lm.n_parameters()})


def byte_width(dtype: str | torch.dtype) -> int:
    from interpscope.config import resolve_dtype

    if isinstance(dtype, str):
        dtype = resolve_dtype(dtype, torch.device("cpu"))
    return torch.empty((), dtype=dtype).element_size()


def _block_forward(s: ModelShape, n: int, t: int, b: int) -> int:
    """Bytes alive at once inside one block's forward without autograd: n tokens in sequences of t."""
    k_mlp = 3 if s.gated else 2
    return n * (3 * s.d_model + 4 * s.q_width + 2 * s.kv_width + k_mlp * s.d_mlp) * b + 2 * s.n_heads * n * t * b


def _block_saved(s: ModelShape, n: int, t: int, b: int) -> tuple[int, int]:
    """(forward, backward) bytes per block of a pass with autograd: what the forward keeps for the backward
    (4d + q + 2kv + 2m per token, half an attention pattern per head), and what the backward adds while it runs
    (half of q + 2kv and 1.5m per token); fitted to measured peaks (module docstring), the split between the two is
    the count's, only the sum is measured."""
    qkv = s.q_width + 2 * s.kv_width
    forward = n * (4 * s.d_model + qkv + 2 * s.d_mlp) * b + s.n_heads * n * t * b // 2
    backward = n * (qkv // 2 + 3 * s.d_mlp // 2) * b
    return int(forward), int(backward)


@dataclass
class ViewMemory:
    """One view's estimate at a length and dtype: the weights, the run's activations and its gradients, in bytes."""

    view: str
    tokens: int
    weight_bytes: int
    activation_bytes: int
    gradient_bytes: int
    precision: str = ""

    @property
    def run_bytes(self) -> int:
        """What the run adds to a loaded model."""
        return self.activation_bytes + self.gradient_bytes

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.run_bytes


def view_memory(s: ModelShape, view: str, tokens: int, dtype: str | torch.dtype = "float32", *,
                sae_width: int | None = None, graph_width: int | None = None,
                graph_feature_nodes: int = GRAPH_FEATURE_NODES, sequences: int = HEAD_SEQUENCES,
                patch_kinds: int = 3) -> ViewMemory:
    """The estimate of one view (see the module docstring for each formula)."""
    if view not in VIEWS:
        raise InterpscopeError(f"Unknown view {view!r} for the memory estimate; choose one of {', '.join(VIEWS)}.")
    b = byte_width(dtype)
    t, L, d, V = int(tokens), s.n_layers, s.d_model, s.vocab
    weights = s.n_params * b
    grads = 0
    if view == "predict":
        acts = _block_forward(s, t, t, b) + 4 * t * d * b + 3 * V * 4
    elif view in (GRADIENT_VIEW, LRP_VIEW):
        factor = LRP_SAVED if view == LRP_VIEW else 1.0
        forward, backward = _block_saved(s, t, t, b)
        acts = int(factor * L * forward) + 3 * V * 4
        grads = int(factor * L * backward)
    elif view == "patching":
        batch = PATCH_BATCH
        caches = 2 * patch_kinds * (L + 1) * t * d * 4
        n = batch * t
        acts = caches + n * (2 * d + s.d_mlp) * b + s.n_heads * n * t * b + batch * V * 4
    elif view == "heads":
        n = sequences * t
        acts = 8 * L * s.n_heads * n * t + n * s.d_mlp * b * 5 // 2
    elif view == "sae":
        width = sae_width or SAE_EXPANSION * d
        weights += (2 * d * width + width + d) * 4
        acts = _block_forward(s, t, t, b) + 4 * t * width * 4 + 36 * t * V + 3 * t * d * b
    else:  # graph
        width = graph_width or GRAPH_WIDTH
        weights += L * (2 * d * width + width + d) * 4
        recorded = L * t * (5 * d + s.d_mlp) * 4
        active = int(GRAPH_DENSITY * L * t * width)
        rows = (graph_feature_nodes + 1) * (active + L * t + t) * 4 * 2
        acts = recorded + rows + int(GRAPH_ACTIVE * active * d * 4) + 3 * V * 4
        grads = sum(_block_saved(s, t, t, max(b, 4)))  # the LRP pass into the logit
    acts += RUN_OVERHEAD
    return ViewMemory(view, t, int(weights), int(acts), int(grads), PRECISION[view])


@dataclass
class MemoryEstimate(Result):
    """The memory a model and its views need at a length and dtype (schema interpscope.memory_estimate; =
    `interpscope models estimate --json`): the weights, then per view the activations and gradients of one run,
    beside the free memory of the device."""

    SCHEMA = "interpscope.memory_estimate"
    SCHEMA_VERSION = 1

    model: str
    tokens: int
    dtype: str
    parameters: int
    free_bytes: int | None
    rows: list[ViewMemory] = field(default_factory=list)

    def tidy(self) -> list[dict]:
        """One row per view, in MiB, with whether it fits in the free memory."""
        out = []
        for row in self.rows:
            fits = None if self.free_bytes is None else row.total_bytes <= SAFETY * self.free_bytes
            out.append({"view": row.view, "tokens": row.tokens, "dtype": self.dtype,
                        "weights_mib": round(row.weight_bytes / 2**20, 1),
                        "activations_mib": round(row.activation_bytes / 2**20, 1),
                        "gradients_mib": round(row.gradient_bytes / 2**20, 1),
                        "total_mib": round(row.total_bytes / 2**20, 1), "fits": fits, "precision": row.precision})
        return out

    def figure(self):
        """Stacked bars per view: weights, activations, gradients (MiB), and the free memory as a line."""
        import plotly.graph_objects as go

        rows = self.tidy()
        views = [r["view"] for r in rows]
        fig = go.Figure([go.Bar(name=name, x=views, y=[r[f"{name}_mib"] for r in rows])
                         for name in ("weights", "activations", "gradients")])
        if self.free_bytes is not None:
            fig.add_hline(y=SAFETY * self.free_bytes / 2**20, line_dash="dash",
                          annotation_text=f"{SAFETY:.0%} of free memory")
        fig.update_layout(barmode="stack", yaxis_title="MiB",
                          title=f"Memory of {self.model} at {self.tokens} tokens in {self.dtype}")
        return fig


def estimate_for(shape: ModelShape, tokens: int, dtype: str | torch.dtype = "float32", *, model: str = "",
                 views: list[str] | tuple[str, ...] = VIEWS, free: int | None = None,
                 **options: Any) -> MemoryEstimate:
    """Every view's estimate for a shape (free: the device's free bytes to compare with, or None)."""
    name = str(dtype).replace("torch.", "")
    return MemoryEstimate(model=model, tokens=int(tokens), dtype=name, parameters=shape.n_params, free_bytes=free,
                          rows=[view_memory(shape, view, tokens, dtype, **options) for view in views])


def _gib(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB"


def _fix(shape: ModelShape, view: str, tokens: int, dtype: str | torch.dtype, room: int, loaded: bool,
         options: dict) -> str:
    """What to change so the run fits in `room` bytes: fewer tokens (the longest that fits), a 2-byte dtype, or a
    smaller model (fewer layers)."""
    def need(t: int, dt: str | torch.dtype) -> int:
        row = view_memory(shape, view, t, dt, **options)
        return row.run_bytes if loaded else row.total_bytes

    hints = []
    low, high = 0, tokens
    while low < high:  # the longest length that fits
        mid = (low + high + 1) // 2
        if mid >= 1 and need(mid, dtype) <= room:
            low = mid
        else:
            high = mid - 1
    if low >= 1:
        hints.append(f"use at most {low} tokens")
    if byte_width(dtype) > 2 and need(tokens, "bfloat16") <= room:
        hints.append("load the model in bfloat16 (--dtype bfloat16), which this view allows"
                     if view != "graph" else "load the model in bfloat16 (the graph's replay still runs in float32)")
    if not hints:
        hints.append("use a smaller model (fewer layers) or a machine with more memory")
    return "; or ".join(hints)


def check_fits(shape: ModelShape, view: str, tokens: int, dtype: str | torch.dtype, *, device: torch.device | str
               = "cpu", loaded: bool = True, free: int | None = None, model: str = "", **options: Any) -> ViewMemory:
    """Refuse (InterpscopeError naming the estimate, the free memory and what to change) a run of `view` at `tokens`
    that would not fit; loaded=False also counts the weights (a model not loaded yet). Returns the estimate."""
    from interpscope.limits import free_bytes

    row = view_memory(shape, view, tokens, dtype, **options)
    free = free_bytes(torch.device(device)) if free is None else int(free)
    need = row.run_bytes if loaded else row.total_bytes
    room = int(SAFETY * free)
    if need <= room:
        return row
    what = "the run" if loaded else "the weights and the run"
    parts = (f"activations {_gib(row.activation_bytes)}, gradients {_gib(row.gradient_bytes)}"
             + ("" if loaded else f", weights {_gib(row.weight_bytes)}"))
    raise InterpscopeError(
        f"{VIEW_LABELS[view].capitalize()} of {model or 'this model'} on {tokens} tokens in "
        f"{str(dtype).replace('torch.', '')} needs about {_gib(need)} ({parts}); {_gib(free)} is free on "
        f"{torch.device(device).type} and {what} may take {SAFETY:.0%} of it. To fit: "
        f"{_fix(shape, view, tokens, dtype, room, loaded, options)}. Nothing was run.")


def check_run(lm: LoadedModel, view: str, text: str | None = None, *, tokens: int | None = None,
              free: int | None = None, **options: Any) -> ViewMemory:
    """The helper a view calls before a run on a loaded model (the CLI's commands do): check_fits with the model's
    shape, dtype and device; the length is `tokens`, or `text` counted as the views tokenise it."""
    if tokens is None:
        from interpscope.inputs import input_ids_for

        tokens = int(input_ids_for(lm, text or "")[0].shape[1])
    if _skipped():
        return view_memory(shape_of(lm), view, tokens, lm.dtype, **options)
    return check_fits(shape_of(lm), view, tokens, lm.dtype, device=lm.device, loaded=True, free=free,
                      model=lm.name, **options)


def run_checked(lm: LoadedModel, view: str | None, text: str | None, run: Callable[[], T], *,
                tokens: int | None = None, **options: Any) -> T:
    """check_run, then run(): what a page wraps its computation in (inside its shared-result cache, so a result
    already computed is shown without a check). view None (a method no estimate covers) runs unchecked."""
    if view is not None:
        check_run(lm, view, text, tokens=tokens, **options)
    return run()


# --- a model not loaded yet: its folder's config and safetensors headers -----------------------------------------
SKIP_ENV = "INTERPSCOPE_SKIP_MEMORY_CHECK"  # 1: refuse nothing for memory (a machine with swap, a person who knows)


def _skipped() -> bool:
    import os

    return os.environ.get(SKIP_ENV, "").strip() not in ("", "0", "false", "False")


def _weights_folder(location: str):
    from pathlib import Path

    from interpscope.models.checks import cached_hub_folder

    return Path(location) if Path(location).is_dir() else cached_hub_folder(location)


def weight_bytes(location: str, dtype: torch.dtype) -> int | None:
    """The weights of a model folder (or a hub id in the local cache) once loaded in `dtype`, from the safetensors
    headers (interpscope.models.cache.estimate_bytes); None when unknown."""
    from interpscope.models.cache import estimate_bytes

    folder = _weights_folder(location)
    return None if folder is None else estimate_bytes(str(folder), dtype)


def check_load(location: str, dtype: torch.dtype, device: torch.device, name: str, free: int | None = None) -> None:
    """Refuse, before transformers opens anything, a model whose weights alone would not fit in the free memory of
    `device` (SAFETY of it), naming the figure and what to change. Unknown sizes pass."""
    from interpscope.limits import free_bytes

    if _skipped():
        return
    need = weight_bytes(location, dtype)
    if need is None:
        return
    free = free_bytes(device) if free is None else int(free)
    if need <= SAFETY * free:
        return
    half = weight_bytes(location, torch.bfloat16)
    hint = (f"load it in bfloat16 (--dtype bfloat16: {_gib(half)})" if half is not None and half < need
            and half <= SAFETY * free else "choose a smaller model, or free memory")
    raise InterpscopeError(f"Loading {name} in {str(dtype).replace('torch.', '')} needs about {_gib(need)} for its "
                           f"weights alone; {_gib(free)} is free on {device.type} and a model may take {SAFETY:.0%} "
                           f"of it. To fit: {hint} (set {SKIP_ENV}=1 to load anyway). Nothing was loaded.")


def estimate_model(name: str, tokens: int, dtype: str = "float32", device: str = "auto",
                   views: list[str] | tuple[str, ...] = VIEWS, free: int | None = None,
                   **options: Any) -> MemoryEstimate:
    """The estimate for a model by name (bundled, folder or cached hub id) without loading it: its config and the
    safetensors headers give the shape and the parameters; `free` defaults to the device's free memory."""
    from interpscope.config import resolve_device, resolve_dtype
    from interpscope.limits import free_bytes
    from interpscope.models.locations import _auto_classes, _resolve_location

    if tokens < 1:
        raise InterpscopeError(f"The estimate needs at least 1 token (got {tokens}).")
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    location, source, local_only = _resolve_location(name)
    AutoConfig = _auto_classes()[0]
    try:
        config = AutoConfig.from_pretrained(location, local_files_only=local_only, trust_remote_code=False)
    except (OSError, ValueError) as err:
        if source == "huggingface":
            raise InterpscopeError(f"Model {name!r} is not available offline: it is not bundled, not a local folder, "
                                   f"and not in the Hugging Face cache. Download it where there is network "
                                   f"(huggingface-cli download {name}) or pass a local folder.") from None
        raise InterpscopeError(f"Cannot read the config of {name!r}: {err}") from None
    shape = shape_from_config(config)
    stored = weight_bytes(location, torch.float32)
    if stored:
        shape = ModelShape(**{**shape.__dict__, "n_params": stored // 4})
    free = free_bytes(torch_device) if free is None else free
    return estimate_for(shape, tokens, torch_dtype, model=name, views=views, free=free, **options)
