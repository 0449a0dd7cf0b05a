"""Gemma Scope 2 (Gemma 3) and Gemma Scope 1 (Gemma 2): JumpReLU SAEs and transcoders, one folder per dictionary.

Gemma Scope 2 (`google/gemma-scope-2-<size>-<pt|it>`): `params.safetensors` with w_enc [d_in, d_sae], w_dec
[d_sae, d_out], b_enc, b_dec, threshold, and for `_affine` transcoders affine_skip_connection [d_in, d_out]; an
optional `config.json` ({"architecture": "jump_relu", "model_name", "hf_hook_point_in", "hf_hook_point_out",
"affine_connection"}). Without config.json the folder's kind names the hooks, as SAELens's loader infers them:
`resid_post*` reads a block's output; `mlp_out*` the MLP's output after post_feedforward_layernorm; `attn_out*` the
attention's o_proj input (the heads' outputs side by side, blocks.L.attn.hook_z); `transcoder*` reads
pre_feedforward_layernorm's output and writes post_feedforward_layernorm's output.
f = ReLU(z) * 1[z > threshold] with z = x W_enc + b_enc (nothing subtracted from x); x_hat = f W_dec + b_dec
(+ x affine_skip_connection).

The Hugging Face module paths map onto the adapters' hook points, Gemma's sandwich norms included:
model.layers.L.output -> blocks.L.hook_resid_post, .pre_feedforward_layernorm.output -> blocks.L.mlp.hook_in,
.post_feedforward_layernorm.output -> blocks.L.hook_mlp_out, .post_attention_layernorm.output ->
blocks.L.hook_attn_out, .self_attn.o_proj.input -> blocks.L.attn.hook_z, .input -> blocks.L.hook_resid_pre.

Gemma Scope 1 (`google/gemma-scope-<size>-pt-<res|mlp|att>`): `params.npz` with W_enc, W_dec, b_enc, b_dec,
threshold (read with pickles refused); the repository's suffix names the hook (res: block output; mlp: MLP output
after Gemma 2's post-feedforward norm; att: per-head outputs), the folder `layer_L/width_W/average_l0_N` the layer.
An `embedding` SAE reads the embeddings scaled by sqrt(d_model), so its encoder is divided and decoder multiplied by
that, as SAELens does.
"""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from interpscope.config import InterpscopeError
from interpscope.sae.formats import ReleasedFormat, Source

_LAYER = re.compile(r"layer_(\d+)")
_HF_HOOK = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
HF_TO_HOOK = {
    "output": "hook_resid_post",
    "input": "hook_resid_pre",
    "pre_feedforward_layernorm.output": "mlp.hook_in",
    "post_feedforward_layernorm.output": "hook_mlp_out",
    "post_attention_layernorm.output": "hook_attn_out",
    "self_attn.o_proj.input": "attn.hook_z",
}
KINDS = ("resid_post", "mlp_out", "attn_out", "transcoder", "clt")
_INFERRED_HOOKS = {  # the kind of folder -> (HF hook in, HF hook out) as SAELens infers them without config.json
    "resid_post": ("output", None),
    "mlp_out": ("post_feedforward_layernorm.output", None),
    "attn_out": ("self_attn.o_proj.input", None),
    "transcoder": ("pre_feedforward_layernorm.output", "post_feedforward_layernorm.output"),
}


def layer_of(path: str) -> int:
    match = _LAYER.search(path)
    if not match:
        raise InterpscopeError(f"Cannot tell the layer of {path!r}: a Gemma Scope folder is named layer_L_...")
    return int(match.group(1))


def kind_of(path: str) -> str:
    """resid_post, mlp_out, attn_out or transcoder, from the folder's path in its repository."""
    for part in reversed(Path(path).parts):
        for kind in KINDS:
            if part.startswith(kind):
                if kind == "clt":
                    raise InterpscopeError(f"{path} is part of a cross-layer transcoder; load the CLT's folder as a "
                                           "whole (interpscope.sae.clt).")
                return kind
    raise InterpscopeError(f"Cannot tell what {path!r} reads: a Gemma Scope 2 folder lies under resid_post, mlp_out, "
                           "attn_out or transcoder (give the folder's path as in its repository, or a config.json).")


def hook_name(hf_hook: str) -> str:
    """The adapters' hook point for a Hugging Face module path (model.layers.L.<module>.output)."""
    match = _HF_HOOK.match(hf_hook)
    point = HF_TO_HOOK.get(match.group(2)) if match else None
    if point is None:
        raise InterpscopeError(f"Gemma Scope hook {hf_hook!r} is not one Interpscope maps onto a hook point "
                               f"(it reads model.layers.L.{', model.layers.L.'.join(HF_TO_HOOK)}).")
    return f"blocks.{int(match.group(1))}.{point}"  # type: ignore[union-attr]


def gemma3_model_name(config_name: str, repo_id: str) -> str:
    """The Gemma 3 model a Gemma Scope 2 SAE reads, as a Hugging Face id (SAELens's normalisation: google/ prefix,
    -v3 -> -3, the 270M model's id without -pt)."""
    name = config_name or repo_id.replace("gemma-scope-2", "gemma-3")
    if not name:
        return ""
    if "/" not in name:
        name = f"google/{name}"
    name = name.replace("-v3", "-3")
    if "270m" in name:
        name = name.replace("-pt", "")
    return name


def _load_safetensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(file))
    except (SafetensorError, OSError) as err:
        raise InterpscopeError(f"{file} is not a readable safetensors file ({err}).") from None


def _config(folder: Path) -> dict:
    file = folder / "config.json"
    if not file.is_file():
        return {}
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InterpscopeError(f"{file} is not valid JSON ({err}).") from None
    if not isinstance(raw, dict):
        raise InterpscopeError(f"{file} must hold a JSON object.")
    return raw


def _need(tensors: dict[str, torch.Tensor], names: tuple[str, ...], file: Path) -> None:
    missing = [name for name in names if name not in tensors]
    if missing:
        raise InterpscopeError(f"{file} lacks {', '.join(missing)} (it has {', '.join(sorted(tensors))}); a Gemma "
                               f"Scope dictionary holds {', '.join(names)}.")
    if tensors["w_enc"].dim() != 2 or tensors["w_dec"].dim() != 2:
        raise InterpscopeError(f"{file}: w_enc and w_dec must be matrices (got {tuple(tensors['w_enc'].shape)} and "
                               f"{tuple(tensors['w_dec'].shape)}).")


def cfg_json(*, d_in: int, d_sae: int, model_name: str, hook: str, provenance: dict, dtype: str,
             transcoder_out: tuple[int, str] | None = None, skip: bool = False) -> dict:
    """cfg.json content for a JumpReLU SAE, or a JumpReLU transcoder (d_out, hook out), reading raw activations."""
    raw: dict = {"architecture": "jumprelu", "d_in": d_in, "d_sae": d_sae, "dtype": dtype, "model_name": model_name,
                 "hook_name": hook, "hook_head_index": None, "apply_b_dec_to_input": False,
                 "normalize_activations": "none", "prepend_bos": True, "context_size": 1024,
                 "metadata": {"interpscope": {"release": provenance}}}
    if transcoder_out is not None:
        d_out, hook_out = transcoder_out
        raw.update(architecture="jumprelu_skip_transcoder" if skip else "jumprelu_transcoder", d_out=d_out,
                   hook_name_out=hook_out, hook_head_index_out=None)
    return raw


def _dtype_name(tensor: torch.Tensor) -> str:
    return {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
            torch.float64: "float64"}.get(tensor.dtype, "float32")


class GemmaScope2(ReleasedFormat):
    """Gemma Scope 2: one folder with params.safetensors (and perhaps config.json) per SAE or transcoder."""

    name = "gemma_scope_2"
    label = "Gemma Scope 2 (params.safetensors)"
    weights_file = "params.safetensors"
    tensors = ("w_enc", "w_dec", "b_enc", "b_dec", "threshold")

    def detect(self, folder: Path) -> bool:
        return (folder / self.weights_file).is_file()

    def read(self, folder: Path, source: Source) -> tuple[dict, dict[str, torch.Tensor]]:
        config = _config(folder)
        if config.get("architecture", "jump_relu") != "jump_relu":
            raise InterpscopeError(f"{folder}/config.json says architecture {config.get('architecture')!r}; Gemma "
                                   "Scope 2 dictionaries are jump_relu.")
        path = source.path or folder.name
        file = folder / self.weights_file
        raw_tensors = _load_safetensors(file)
        _need(raw_tensors, self.tensors, file)
        layer = layer_of(path)
        hf_in, hf_out = config.get("hf_hook_point_in"), config.get("hf_hook_point_out")
        kind = None
        if not hf_in:
            kind = kind_of(path)
            inferred_in, inferred_out = _INFERRED_HOOKS[kind]
            hf_in = f"model.layers.{layer}.{inferred_in}"
            hf_out = f"model.layers.{layer}.{inferred_out}" if inferred_out else None
        transcoder = bool(hf_out) or kind == "transcoder"
        affine = "affine_skip_connection" in raw_tensors
        if transcoder and bool(config.get("affine_connection", affine)) != affine:
            raise InterpscopeError(f"{folder}: config.json's affine_connection is {config.get('affine_connection')} "
                                   f"but {self.weights_file} {'holds' if affine else 'lacks'} affine_skip_connection.")
        if affine and not transcoder:
            raise InterpscopeError(f"{file} holds affine_skip_connection, but the folder is an SAE (only transcoders "
                                   "have a skip connection).")
        tensors = {"W_enc": raw_tensors["w_enc"], "W_dec": raw_tensors["w_dec"], "b_enc": raw_tensors["b_enc"],
                   "b_dec": raw_tensors["b_dec"], "threshold": raw_tensors["threshold"]}
        if affine:  # stored [d_in, d_out]; SAELens's folders (and ours) keep W_skip as [d_out, d_in]
            tensors["W_skip"] = raw_tensors["affine_skip_connection"].T.contiguous()
        d_in, d_sae = (int(n) for n in raw_tensors["w_enc"].shape)
        provenance = {"format": self.name, "repo_id": source.repo_id, "path": path, "revision": source.revision,
                      "hf_hook_in": hf_in, "hf_hook_out": hf_out}
        model = gemma3_model_name(str(config.get("model_name") or ""), source.repo_id)
        out = (int(raw_tensors["w_dec"].shape[-1]), hook_name(str(hf_out))) if transcoder and hf_out else None
        raw = cfg_json(d_in=d_in, d_sae=d_sae, model_name=model, hook=hook_name(str(hf_in)), provenance=provenance,
                       dtype=_dtype_name(raw_tensors["w_enc"]), transcoder_out=out, skip=affine)
        return raw, tensors


_GEMMA2 = {"2b": "google/gemma-2-2b", "9b": "google/gemma-2-9b", "27b": "google/gemma-2-27b"}


def _read_npz(file: Path) -> dict[str, torch.Tensor]:
    try:
        with np.load(file, allow_pickle=False) as data:
            return {key: torch.from_numpy(np.array(data[key])) for key in data.files}
    except ValueError as err:  # object arrays need pickles, which are refused
        raise InterpscopeError(f"{file} holds pickled objects ({err}); Interpscope refuses pickles.") from None
    except (OSError, zipfile.BadZipFile, EOFError) as err:
        raise InterpscopeError(f"{file} is not a readable npz file ({err}).") from None


class GemmaScope1(ReleasedFormat):
    """Gemma Scope 1 (Gemma 2): one folder with params.npz per SAE."""

    name = "gemma_scope_1"
    label = "Gemma Scope 1 (params.npz)"
    weights_file = "params.npz"

    def detect(self, folder: Path) -> bool:
        return (folder / self.weights_file).is_file()

    def read(self, folder: Path, source: Source) -> tuple[dict, dict[str, torch.Tensor]]:
        file = folder / self.weights_file
        raw_tensors = {("W_" + key[2:] if key.lower().startswith("w_") else key): tensor
                       for key, tensor in _read_npz(file).items()}
        missing = [n for n in ("W_enc", "W_dec", "b_enc", "b_dec", "threshold") if n not in raw_tensors]
        if missing:
            raise InterpscopeError(f"{file} lacks {', '.join(missing)} (it has {', '.join(sorted(raw_tensors))}).")
        path = source.path or folder.name
        repo = source.repo_id
        size = next((key for key in _GEMMA2 if f"-{key}-" in f"{repo}-"), None)
        model = _GEMMA2[size] + ("-it" if "-it-" in f"{repo}-" else "") if size else ""
        embedding = "embedding" in path
        if embedding:
            hook = "hook_embed"
        else:
            layer = layer_of(path)
            suffix = repo.rsplit("-", 1)[-1] if repo else ""
            point = {"res": "hook_resid_post", "mlp": "hook_mlp_out", "att": "attn.hook_z"}.get(suffix)
            if point is None:
                raise InterpscopeError(f"Cannot tell what {path!r} reads: a Gemma Scope 1 repository ends in -res, "
                                       "-mlp or -att (load it by release name, or from its place in a Hugging Face "
                                       "cache).")
            hook = f"blocks.{layer}.{point}"
        tensors = {name: raw_tensors[name].float() for name in ("W_enc", "W_dec", "b_enc", "b_dec", "threshold")}
        if "scaling_factor" in raw_tensors:
            tensors["scaling_factor"] = raw_tensors["scaling_factor"].float()
        d_in, d_sae = (int(n) for n in tensors["W_enc"].shape)
        if embedding:  # trained on embeddings scaled by sqrt(d_model) (SAELens's loader does the same)
            tensors["W_enc"] = tensors["W_enc"] / d_in ** 0.5
            tensors["W_dec"] = tensors["W_dec"] * d_in ** 0.5
        provenance = {"format": self.name, "repo_id": repo, "path": path, "revision": source.revision}
        raw = cfg_json(d_in=d_in, d_sae=d_sae, model_name=model, hook=hook, provenance=provenance, dtype="float32")
        return raw, tensors
