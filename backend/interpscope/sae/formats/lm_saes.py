"""Llama Scope (OpenMOSS, `fnlp/Llama3_1-8B-Base-L{X}{R,A,M}-{8,32}x`): lm-saes training folders, read as SAELens's
loader reads them.

A folder holds `hyperparams.json` (d_model, d_sae, hook_point_in, hook_point_out, jump_relu_threshold: one threshold
for every feature, dataset_average_activation_norm: {"in": ..., "out": ...}) and `checkpoints/final.safetensors`
(encoder.weight [d_sae, d_model], encoder.bias, decoder.weight [d_model, d_sae], decoder.bias). The SAE was trained on
activations scaled to norm sqrt(d_model) on average: x_n = s x with s = sqrt(d_model) / average norm "in". That
constant is folded into the weights, as SAELens folds it (fold_activation_norm_scaling_factor, with the threshold
scaled alike in its loader): W_enc = encoder.weight^T * s, W_dec = decoder.weight^T / s_out, b_dec = decoder.bias /
s_out, threshold = jump_relu_threshold * s for every feature, nothing subtracted from the input. For an SAE
(hook_point_in == hook_point_out) s_out = s, as SAELens uses; a transcoder (the two differ) uses the "out" norm for
its output. Hook names are TransformerLens's, read as the adapters' hook points (ln2.hook_normalized ->
mlp.hook_in).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from interpscope.config import InterpscopeError
from interpscope.sae.formats import ReleasedFormat, Source

HYPERPARAMS = "hyperparams.json"
WEIGHTS = "checkpoints/final.safetensors"
_HOOKS = {"hook_resid_post": "hook_resid_post", "hook_resid_pre": "hook_resid_pre", "hook_resid_mid": "hook_resid_mid",
          "hook_attn_out": "hook_attn_out", "hook_mlp_out": "hook_mlp_out", "ln2.hook_normalized": "mlp.hook_in",
          "mlp.hook_in": "mlp.hook_in"}


def _hook(name: object, file: Path) -> str:
    text = str(name or "")
    parts = text.split(".", 2)
    if len(parts) < 3 or parts[0] != "blocks" or not parts[1].isdigit() or parts[2] not in _HOOKS:
        raise InterpscopeError(f"{file}: hook {text!r} is not one Interpscope maps (blocks.L.<{', '.join(_HOOKS)}>).")
    return f"blocks.{int(parts[1])}.{_HOOKS[parts[2]]}"


def _positive(raw: dict, name: str, file: Path) -> float:
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InterpscopeError(f"{file}: {name} must be a positive number (got {value!r}).")
    return float(value)


class LlamaScope(ReleasedFormat):
    """lm-saes / Llama Scope: hyperparams.json + checkpoints/final.safetensors."""

    name = "llama_scope"
    label = "Llama Scope / lm-saes (hyperparams.json)"
    weights_file = WEIGHTS

    def detect(self, folder: Path) -> bool:
        return (folder / HYPERPARAMS).is_file() and (folder / WEIGHTS).is_file()

    def read(self, folder: Path, source: Source) -> tuple[dict, dict[str, torch.Tensor]]:
        from interpscope.sae.formats.gemma_scope import _load_safetensors, cfg_json

        file = folder / HYPERPARAMS
        try:
            hyper = json.loads(file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise InterpscopeError(f"{file} is not valid JSON ({err}).") from None
        if not isinstance(hyper, dict):
            raise InterpscopeError(f"{file} must hold a JSON object.")
        d_model = int(_positive(hyper, "d_model", file))
        norms = hyper.get("dataset_average_activation_norm")
        if not isinstance(norms, dict):
            raise InterpscopeError(f"{file} lacks dataset_average_activation_norm (the input scale the SAE was "
                                   "trained at).")
        scale_in = d_model ** 0.5 / _positive(norms, "in", file)
        hook_in = _hook(hyper.get("hook_point_in"), file)
        hook_out = _hook(hyper.get("hook_point_out") or hyper.get("hook_point_in"), file)
        transcoder = hook_in != hook_out
        scale_out = d_model ** 0.5 / _positive(norms, "out", file) if transcoder else scale_in
        threshold = _positive(hyper, "jump_relu_threshold", file)
        weights = _load_safetensors(folder / WEIGHTS)
        missing = [n for n in ("encoder.weight", "encoder.bias", "decoder.weight", "decoder.bias") if n not in weights]
        if missing:
            raise InterpscopeError(f"{folder / WEIGHTS} lacks {', '.join(missing)} (it has "
                                   f"{', '.join(sorted(weights))}).")
        enc, dec = weights["encoder.weight"].double(), weights["decoder.weight"].double()
        if enc.dim() != 2 or dec.dim() != 2:
            raise InterpscopeError(f"{folder / WEIGHTS}: encoder.weight and decoder.weight must be matrices.")
        dtype = torch.float32
        d_sae = int(enc.shape[0])
        tensors = {"W_enc": (enc.T * scale_in).to(dtype), "W_dec": (dec.T / scale_out).to(dtype),
                   "b_enc": weights["encoder.bias"].to(dtype),
                   "b_dec": (weights["decoder.bias"].double() / scale_out).to(dtype),
                   "threshold": torch.full((d_sae,), threshold * scale_in, dtype=dtype)}
        provenance = {"format": self.name, "repo_id": source.repo_id, "path": source.path or folder.name,
                      "revision": source.revision, "scale_in": scale_in, "scale_out": scale_out}
        out = (int(dec.shape[0]), hook_out) if transcoder else None
        raw = cfg_json(d_in=int(enc.shape[1]), d_sae=d_sae, model_name="meta-llama/Llama-3.1-8B", hook=hook_in,
                       provenance=provenance, dtype="float32", transcoder_out=out)
        return raw, tensors
