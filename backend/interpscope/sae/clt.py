"""Cross-layer transcoders (CLTs; Ameisen et al. 2025, "Circuit Tracing"): features read the MLP input of one layer
and write to the MLP outputs of that layer and every later one.

Layer i's features: f_i = act_i(x_i W_enc[i] + b_enc[i]) with x_i the input at hook_in(i) (JumpReLU with a per-feature
threshold, or ReLU); the prediction at layer t: y_hat_t = sum_{i <= t} f_i W_dec[i][:, t - i] + b_dec[t]
(+ x_t W_skip[t] with a skip connection). Shapes: W_enc [L, d_in, d_sae], b_enc and threshold [L, d_sae],
W_dec[i] [d_sae, L - i, d_out], b_dec [L, d_out], W_skip [L, d_in, d_out].

On disk, circuit-tracer's CLT layout, which Interpscope also writes: `W_enc_{i}.safetensors` holding W_enc_{i}
[d_sae, d_in], b_enc_{i}, b_dec_{i}, and threshold_{i} for a JumpReLU (W_skip_{i} [d_in, d_out] with a skip), and
`W_dec_{i}.safetensors` holding W_dec_{i} [d_sae, L - i, d_out], with a `config.yaml` (model_kind
cross_layer_transcoder, model_name, feature_input_hook, feature_output_hook; Interpscope's hook templates under
`interpscope`). Gemma Scope 2's CLTs (one `params`-style file per layer: w_enc [d_in, d_sae], w_dec [d_sae, L, d_out]
over all target layers, b_enc, b_dec [d_out], threshold, optionally affine_skip_connection [d_in, d_out]) are read by
load_clt too; their hooks are pre_feedforward_layernorm's output -> post_feedforward_layernorm's output.

Evaluation (`evaluate_clt`): per target layer t, the MLP output at t is replaced by the CLT's prediction from the
clean inputs of layers 0..t (the spliced pass changes nothing before layer t's MLP), with the same figures as a
transcoder's (interpscope.sae.transcoder_eval): FVU, loss recovered, L0 of the features that write to t.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from interpscope.config import InterpscopeError
from interpscope.sae.arch.base import SAEConfig, SparseAutoencoder
from interpscope.sae.transcoder_eval import _TranscoderSplice

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel
    from interpscope.sae.evaluation import SAEEvaluation

HOOK_IN = "blocks.{layer}.mlp.hook_in"
HOOK_OUT = "blocks.{layer}.hook_mlp_out"
CONFIG_FILE = "config.yaml"
# circuit-tracer's hook names (TransformerLens's) -> the adapters' block hook points
CIRCUIT_TRACER_HOOKS = {"hook_resid_mid": "hook_resid_mid", "hook_mlp_out": "hook_mlp_out",
                        "mlp.hook_in": "mlp.hook_in", "ln2.hook_normalized": "mlp.hook_in",
                        "hook_mlp_in": "hook_resid_mid"}


class CrossLayerTranscoder(nn.Module):
    """A CLT over `n_layers` blocks: per-layer encoders, decoders from each layer to it and every later one."""

    def __init__(self, n_layers: int, d_in: int, d_sae: int, d_out: int | None = None, jumprelu: bool = True,
                 skip: bool = False, model_name: str = "", hook_in: str = HOOK_IN, hook_out: str = HOOK_OUT,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        if n_layers < 1 or d_in < 1 or d_sae < 1:
            raise ValueError(f"A CLT needs positive n_layers, d_in and d_sae (got {n_layers}, {d_in}, {d_sae}).")
        d_out = d_in if d_out is None else d_out
        self.n_layers, self.d_in, self.d_sae, self.d_out = n_layers, d_in, d_sae, d_out
        self.model_name, self.hook_in, self.hook_out = model_name, hook_in, hook_out
        self.W_enc = nn.Parameter(torch.zeros(n_layers, d_in, d_sae, dtype=dtype))
        self.b_enc = nn.Parameter(torch.zeros(n_layers, d_sae, dtype=dtype))
        self.threshold = nn.Parameter(torch.zeros(n_layers, d_sae, dtype=dtype)) if jumprelu else None
        self.W_dec = nn.ParameterList([nn.Parameter(torch.zeros(d_sae, n_layers - i, d_out, dtype=dtype))
                                       for i in range(n_layers)])
        self.b_dec = nn.Parameter(torch.zeros(n_layers, d_out, dtype=dtype))
        self.W_skip = nn.Parameter(torch.zeros(n_layers, d_in, d_out, dtype=dtype)) if skip else None

    @property
    def jumprelu(self) -> bool:
        return self.threshold is not None

    @property
    def skip(self) -> bool:
        return self.W_skip is not None

    def hook_in_name(self, layer: int) -> str:
        return self.hook_in.format(layer=layer)

    def hook_out_name(self, layer: int) -> str:
        return self.hook_out.format(layer=layer)

    # --- inference -------------------------------------------------------------------------------------------
    def encode_layer(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """Layer `layer`'s features from its input x [..., d_in]."""
        z = x.to(self.W_enc.dtype) @ self.W_enc[layer] + self.b_enc[layer]
        if self.threshold is None:
            return torch.relu(z)
        return torch.relu(z) * (z > self.threshold[layer]).to(z.dtype)

    def encode(self, xs: torch.Tensor) -> torch.Tensor:
        """Every layer's features from every layer's input: xs [L, ..., d_in] -> [L, ..., d_sae]."""
        return torch.stack([self.encode_layer(xs[layer], layer) for layer in range(self.n_layers)])

    def decoder_rows(self, source: int, feature: int) -> torch.Tensor:
        """What one feature of layer `source` writes to layers source..L-1: [L - source, d_out]."""
        return self.W_dec[source][feature]

    def decode_layer(self, features: torch.Tensor | list[torch.Tensor], target: int,
                     x_target: torch.Tensor | None = None) -> torch.Tensor:
        """The prediction at layer `target` from the features of layers 0..target (features[i] [..., d_sae]) and,
        with a skip connection, layer target's input."""
        y = self.b_dec[target].expand(*features[0].shape[:-1], self.d_out)
        for source in range(target + 1):
            y = y + features[source] @ self.W_dec[source][:, target - source]
        if self.W_skip is not None:
            if x_target is None:
                raise ValueError("This CLT has a skip connection: decoding layer t needs layer t's input.")
            y = y + x_target.to(self.W_skip.dtype) @ self.W_skip[target]
        return y

    def decode(self, features: torch.Tensor, xs: torch.Tensor | None = None) -> torch.Tensor:
        """Every layer's prediction: features [L, ..., d_sae] -> [L, ..., d_out]."""
        return torch.stack([self.decode_layer(features, t, None if xs is None else xs[t])
                            for t in range(self.n_layers)])

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(xs), xs)

    def layer_view(self, target: int) -> CLTLayerView:
        return CLTLayerView(self, target)


_last_input = threading.local()


class CLTLayerView(SparseAutoencoder):
    """The part of a CLT that predicts layer `target`, as a transcoder whose input is the inputs of layers
    0..target side by side ([..., (target + 1) * d_in]) and whose features are those layers' features side by side;
    used to evaluate a CLT with the transcoders' spliced evaluation. Not registered: it is not trained or saved."""

    architecture = "clt"
    label = "Cross-layer transcoder"
    paired = True

    def __init__(self, clt: CrossLayerTranscoder, target: int):
        if not 0 <= target < clt.n_layers:
            raise InterpscopeError(f"Layer {target} is outside the CLT's {clt.n_layers} layers.")
        nn.Module.__init__(self)
        self.clt, self.target = clt, target
        self.cfg = SAEConfig(d_in=clt.d_out, d_sae=(target + 1) * clt.d_sae, architecture="clt",
                             model_name=clt.model_name, hook_name=clt.hook_in_name(target),
                             extra={"d_out": clt.d_out, "hook_name_out": clt.hook_out_name(target)})
        self.W_enc = clt.W_enc  # its dtype and device are the CLT's

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        d = self.clt.d_in
        chunks = [x[..., i * d:(i + 1) * d] for i in range(self.target + 1)]
        records = getattr(_last_input, "records", None)
        if records is None:
            records = _last_input.records = {}
        records[id(self)] = chunks[-1].detach()
        return torch.cat([self.clt.encode_layer(chunk, i) for i, chunk in enumerate(chunks)], dim=-1)

    def decode(self, features: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        per_layer = list(features.split(self.clt.d_sae, dim=-1))
        x_target = x[..., -self.clt.d_in:] if x is not None else getattr(_last_input, "records", {}).get(id(self))
        return self.clt.decode_layer(per_layer, self.target, x_target)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x), x)


# --- folders ----------------------------------------------------------------------------------------------------
def _load(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(file))
    except (SafetensorError, OSError) as err:
        raise InterpscopeError(f"{file} is not a readable safetensors file ({err}).") from None


def _yaml(folder: Path) -> dict:
    file = folder / CONFIG_FILE
    if not file.is_file():
        return {}
    import yaml

    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise InterpscopeError(f"{file} is not valid YAML ({err}).") from None
    if not isinstance(raw, dict):
        raise InterpscopeError(f"{file} must hold a mapping.")
    return raw


def _hook_template(name: str | None, default: str) -> str:
    """circuit-tracer's hook name (or an Interpscope template) as an Interpscope hook template."""
    if not name:
        return default
    if "{layer}" in name:
        return name
    if name not in CIRCUIT_TRACER_HOOKS:
        raise InterpscopeError(f"Hook {name!r} is not one Interpscope maps (it reads "
                               f"{', '.join(CIRCUIT_TRACER_HOOKS)}).")
    return "blocks.{layer}." + CIRCUIT_TRACER_HOOKS[name]


def save_clt(clt: CrossLayerTranscoder, folder: str | Path) -> Path:
    """Write circuit-tracer's CLT layout (see the module docstring) with config.yaml."""
    import yaml

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(clt.n_layers):
        enc = {f"W_enc_{i}": clt.W_enc[i].detach().T.contiguous().cpu(), f"b_enc_{i}": clt.b_enc[i].detach().cpu(),
               f"b_dec_{i}": clt.b_dec[i].detach().cpu()}
        if clt.threshold is not None:
            enc[f"threshold_{i}"] = clt.threshold[i].detach().cpu()
        if clt.W_skip is not None:
            enc[f"W_skip_{i}"] = clt.W_skip[i].detach().contiguous().cpu()
        save_file(enc, str(folder / f"W_enc_{i}.safetensors"))
        save_file({f"W_dec_{i}": clt.W_dec[i].detach().contiguous().cpu()}, str(folder / f"W_dec_{i}.safetensors"))
    config = {"model_name": clt.model_name, "model_kind": "cross_layer_transcoder",
              "feature_input_hook": clt.hook_in.replace("blocks.{layer}.", ""),
              "feature_output_hook": clt.hook_out.replace("blocks.{layer}.", ""),
              "interpscope": {"hook_in": clt.hook_in, "hook_out": clt.hook_out}}
    (folder / CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return folder


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise InterpscopeError(message)


def _from_circuit_tracer(folder: Path, config: dict, dtype: torch.dtype) -> CrossLayerTranscoder:
    n_layers = len(list(folder.glob("W_enc_*.safetensors")))
    encoders = [_load(folder / f"W_enc_{i}.safetensors") for i in range(n_layers)]
    first = encoders[0]
    _check("W_enc_0" in first and "b_enc_0" in first and "b_dec_0" in first,
           f"{folder}/W_enc_0.safetensors lacks W_enc_0, b_enc_0 or b_dec_0 (it has {', '.join(sorted(first))}).")
    d_sae, d_in = (int(n) for n in first["W_enc_0"].shape)
    d_out = int(first["b_dec_0"].shape[0])
    jumprelu, skip = "threshold_0" in first, "W_skip_0" in first
    interpscope = config.get("interpscope") or {}
    clt = CrossLayerTranscoder(n_layers, d_in, d_sae, d_out, jumprelu=jumprelu, skip=skip,
                               model_name=str(config.get("model_name") or ""),
                               hook_in=str(interpscope.get("hook_in") or _hook_template(
                                   config.get("feature_input_hook"), HOOK_IN)),
                               hook_out=str(interpscope.get("hook_out") or _hook_template(
                                   config.get("feature_output_hook"), HOOK_OUT)), dtype=dtype)
    with torch.no_grad():
        for i, enc in enumerate(encoders):
            names = [f"W_enc_{i}", f"b_enc_{i}", f"b_dec_{i}"] + ([f"threshold_{i}"] if jumprelu else []) + (
                [f"W_skip_{i}"] if skip else [])
            missing = [name for name in names if name not in enc]
            _check(not missing, f"{folder}/W_enc_{i}.safetensors lacks {', '.join(missing)}.")
            dec_file = folder / f"W_dec_{i}.safetensors"
            _check(dec_file.is_file(), f"{folder} lacks W_dec_{i}.safetensors (a CLT has one decoder file per layer).")
            dec = _load(dec_file)
            _check(f"W_dec_{i}" in dec, f"{dec_file} lacks W_dec_{i}.")
            shapes = {f"W_enc_{i}": (d_sae, d_in), f"b_enc_{i}": (d_sae,), f"b_dec_{i}": (d_out,),
                      f"threshold_{i}": (d_sae,), f"W_skip_{i}": (d_in, d_out)}
            for name in names:
                _check(tuple(enc[name].shape) == shapes[name], f"{name} has shape {tuple(enc[name].shape)}; layer 0 "
                       f"implies {shapes[name]}.")
            _check(tuple(dec[f"W_dec_{i}"].shape) == (d_sae, n_layers - i, d_out),
                   f"W_dec_{i} has shape {tuple(dec[f'W_dec_{i}'].shape)}; a CLT of {n_layers} layers needs "
                   f"{(d_sae, n_layers - i, d_out)}.")
            clt.W_enc[i].copy_(enc[f"W_enc_{i}"].T)
            clt.b_enc[i].copy_(enc[f"b_enc_{i}"])
            clt.b_dec[i].copy_(enc[f"b_dec_{i}"])
            if clt.threshold is not None:
                clt.threshold[i].copy_(enc[f"threshold_{i}"])
            if clt.W_skip is not None:
                clt.W_skip[i].copy_(enc[f"W_skip_{i}"])
            clt.W_dec[i].copy_(dec[f"W_dec_{i}"])
    return clt


_GS2_LAYER = re.compile(r"layer_(\d+)")


def _from_gemma_scope_2(folder: Path, files: dict[int, Path], dtype: torch.dtype, model_name: str,
                        ) -> CrossLayerTranscoder:
    n_layers = len(files)
    _check(sorted(files) == list(range(n_layers)), f"{folder}: a CLT needs one file per layer 0..{n_layers - 1}; "
           f"found layers {sorted(files)}.")
    clt: CrossLayerTranscoder | None = None
    with torch.no_grad():
        for layer in range(n_layers):
            params = _load(files[layer])
            missing = [n for n in ("w_enc", "w_dec", "b_enc", "b_dec", "threshold") if n not in params]
            _check(not missing, f"{files[layer]} lacks {', '.join(missing)}.")
            d_in, d_sae = (int(n) for n in params["w_enc"].shape)
            w_dec = params["w_dec"]
            _check(w_dec.dim() == 3 and w_dec.shape[0] == d_sae and w_dec.shape[1] in (n_layers, n_layers - layer),
                   f"{files[layer]}: w_dec has shape {tuple(w_dec.shape)}; a CLT layer's decoder is [d_sae, "
                   f"{n_layers} layers, d_out].")
            if clt is None:
                clt = CrossLayerTranscoder(n_layers, d_in, d_sae, int(w_dec.shape[2]), jumprelu=True,
                                           skip="affine_skip_connection" in params, model_name=model_name,
                                           dtype=dtype)
            _check((d_in, d_sae, int(w_dec.shape[2])) == (clt.d_in, clt.d_sae, clt.d_out),
                   f"{files[layer]} has shapes unlike layer 0's.")
            clt.W_enc[layer].copy_(params["w_enc"])
            clt.b_enc[layer].copy_(params["b_enc"])
            clt.threshold[layer].copy_(params["threshold"])  # type: ignore[index]
            clt.b_dec[layer].copy_(params["b_dec"])
            clt.W_dec[layer].copy_(w_dec[:, layer:] if w_dec.shape[1] == n_layers else w_dec)
            if clt.W_skip is not None:
                _check("affine_skip_connection" in params, f"{files[layer]} lacks affine_skip_connection.")
                clt.W_skip[layer].copy_(params["affine_skip_connection"])
    assert clt is not None
    return clt


def load_clt(folder: str | Path, dtype: torch.dtype = torch.float32, model_name: str = "") -> CrossLayerTranscoder:
    """A CLT from circuit-tracer's layout (W_enc_{i} / W_dec_{i} files) or Gemma Scope 2's (one file per layer
    named ..layer_{i}..); pickles are never opened."""
    from interpscope.paths import confined_folder
    from interpscope.sae.formats import Source
    from interpscope.sae.formats.gemma_scope import gemma3_model_name

    folder = confined_folder(folder, "CLT folder")
    if not folder.is_dir():
        raise InterpscopeError(f"No CLT folder at {folder}.")
    config = _yaml(folder)
    if config and config.get("model_kind", "cross_layer_transcoder") != "cross_layer_transcoder":
        raise InterpscopeError(f"{folder}/{CONFIG_FILE} says model_kind {config.get('model_kind')!r}; a CLT is "
                               "cross_layer_transcoder.")
    if (folder / "W_enc_0.safetensors").is_file():
        return _from_circuit_tracer(folder, config, dtype)
    files = {}
    for file in folder.glob("*.safetensors"):
        match = _GS2_LAYER.search(file.stem)
        if match:
            files[int(match.group(1))] = file
    if not files:
        raise InterpscopeError(f"{folder} holds no CLT: circuit-tracer's layout has W_enc_0.safetensors, Gemma Scope "
                               "2's one file per layer named ...layer_0...safetensors.")
    name = model_name or gemma3_model_name(str(config.get("model_name") or ""), Source.of(folder).repo_id)
    return _from_gemma_scope_2(folder, files, dtype, name)


# --- evaluation -------------------------------------------------------------------------------------------------
@dataclass
class CLTEvaluation:
    """Per target layer, the transcoder figures of the CLT's prediction spliced in at that layer."""

    model_name: str
    layers: list[SAEEvaluation]

    def summary(self) -> dict[str, list[float]]:
        return {key: [float(getattr(e, key)) for e in self.layers] for key in ("l0", "fvu", "loss_recovered")}


@torch.no_grad()
def evaluate_clt(lm: LoadedModel, clt: CrossLayerTranscoder, *, layers: list[int] | None = None,
                 n_tokens: int = 2048, context_size: int = 128, batch_size: int = 4, source: str | None = None,
                 split: str = "test", ids: torch.Tensor | None = None) -> CLTEvaluation:
    """For each target layer t (default all): L0, FVU and loss recovered with the MLP output at t replaced by the
    CLT's prediction from the clean inputs of layers 0..t."""
    from interpscope.corpus import token_chunks
    from interpscope.sae.evaluation import DENSE_THRESHOLD, _figures, run_batches
    from interpscope.sae.folder import hook_width

    adapter = lm.adapter
    if adapter.n_layers != clt.n_layers:
        raise InterpscopeError(f"The CLT spans {clt.n_layers} layers but {lm.name} has {adapter.n_layers} blocks.")
    for layer in range(clt.n_layers):
        widths = (hook_width(adapter, clt.hook_in_name(layer)), hook_width(adapter, clt.hook_out_name(layer)))
        if widths != (clt.d_in, clt.d_out):
            raise InterpscopeError(f"Shape mismatch at layer {layer}: the CLT maps {clt.d_in} -> {clt.d_out}, but "
                                   f"{lm.name} has {widths[0]} -> {widths[1]} there.")
    if ids is None:
        ids = token_chunks(lm.tokenizer, context_size, n_tokens, source=source, split=split)
    results = []
    for target in (range(clt.n_layers) if layers is None else layers):
        view = clt.layer_view(target)
        job = _CLTEvalJob([view], [clt.hook_in_name(i) for i in range(target + 1)], clt.hook_out_name(target),
                          batch_size)
        sums = run_batches(lm, [view], job, ids, batch_size, None, None, d_out=clt.d_out)
        label = f"{clt.hook_in_name(0)}..{clt.hook_in_name(target)}->{clt.hook_out_name(target)}"
        results.append(_figures(lm, [view], label, sums, DENSE_THRESHOLD)[0])
    return CLTEvaluation(lm.name, results)


@dataclass
class _CLTEvalJob:
    """One shard of a CLT evaluation at one target layer: each batch's terms."""

    saes: list[SparseAutoencoder]
    hooks_in: list[str]
    hook_out: str
    batch_size: int

    @torch.no_grad()
    def run(self, lm: LoadedModel, shard) -> list:
        from interpscope.capture import model_lock
        from interpscope.sae.evaluation import batch_terms

        passes = _CLTSplice(lm, self.hooks_in, self.hook_out)
        windows = shard.payload
        with model_lock(lm):
            return [batch_terms(passes, self.saes, windows[k:k + self.batch_size])
                    for k in range(0, windows.shape[0], self.batch_size)]


class _CLTSplice(_TranscoderSplice):
    """A transcoder's passes whose clean pass records every source layer's input, side by side, as the input."""

    def __init__(self, lm: LoadedModel, hooks_in: list[str], hook_out: str):
        super().__init__(lm, hooks_in[-1], hook_out)
        self.hooks_in = hooks_in

    def clean(self, batch: torch.Tensor) -> torch.Tensor:
        from interpscope.capture import hooks
        from interpscope.sinks import sink_rows

        inputs: dict[str, torch.Tensor] = {}

        def recorder(name: str):
            def record(tensor: torch.Tensor):
                inputs[name] = tensor[:, 1:].detach()
                return None
            return record

        def record_out(tensor: torch.Tensor):
            self.state["first"] = tensor[:, :1].detach()
            self.state["x"] = tensor[:, 1:].detach()
            return None
        edits = [(name, recorder(name)) for name in self.hooks_in] + [(self.hook_out_name, record_out)]
        with hooks(self.loaded.adapter, edits):
            logits = self.loaded.model(input_ids=batch, use_cache=False).logits.cpu()
        self.state["source"] = torch.cat([inputs[name] for name in self.hooks_in], dim=-1)
        self.state["sinks"] = sink_rows(inputs[self.hooks_in[-1]]) | sink_rows(self.state["x"])
        return logits


__all__ = ["CLTEvaluation", "CLTLayerView", "CrossLayerTranscoder", "evaluate_clt", "load_clt", "save_clt"]
