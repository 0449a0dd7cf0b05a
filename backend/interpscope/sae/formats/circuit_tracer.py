"""circuit-tracer's per-layer transcoder sets (`model_kind: transcoder_set`), read as an Interpscope TranscoderSet.

A set is a folder with `config.yaml` (model_name, feature_input_hook, feature_output_hook, optionally `transcoders`:
one path per layer, relative to the folder or `hf://ORG/REPO/PATH` looked up in the Hugging Face cache only, and
`activation`: relu / jumprelu / topk) and, without that list, `layer_{i}.safetensors` for i = 0..L-1. Each layer's
file holds W_enc [d_sae, d_model] (applied as F.linear, so transposed here), W_dec [d_sae, d_model], b_enc, b_dec,
optionally `activation_function.threshold` (a JumpReLU; without it a ReLU) and W_skip [d_out, d_in] (applied as
x @ W_skip.T, SAELens's orientation). TopK transcoders (`k`) are refused: Interpscope has no TopK transcoder.
Cross-layer sets (`model_kind: cross_layer_transcoder`) are read by interpscope.sae.clt.load_clt.
Hooks are circuit-tracer's (TransformerLens) names, mapped as interpscope.sae.clt.CIRCUIT_TRACER_HOOKS says:
hook_resid_mid (the residual stream before the MLP's norm), mlp.hook_in / ln2.hook_normalized (after it),
hook_mlp_out.
"""
from __future__ import annotations

from pathlib import Path

import torch

from interpscope.config import InterpscopeError


def _layer_files(folder: Path, config: dict) -> list[Path]:
    listed = config.get("transcoders")
    if listed is None:
        files = sorted(folder.glob("layer_*.safetensors"))
        n = len(files)
        paths = [folder / f"layer_{i}.safetensors" for i in range(n)]
        missing = [p.name for p in paths if not p.is_file()]
        if not n or missing:
            raise InterpscopeError(f"{folder} has no complete set of layer_<i>.safetensors (missing "
                                   f"{', '.join(missing) or 'layer_0.safetensors'}).")
        return paths
    if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed) or not listed:
        raise InterpscopeError(f"{folder}/config.yaml: transcoders must list one path per layer.")
    result = []
    for path in listed:
        if path.startswith("hf://"):
            result.append(_hub_file(path))
            continue
        file = (folder / path) if not Path(path).is_absolute() else Path(path)
        if ".." in Path(path).parts or Path(path).is_absolute():
            raise InterpscopeError(f"{folder}/config.yaml: transcoder path {path[:120]!r} must lie inside the set.")
        result.append(file)
    return result


def _hub_file(uri: str) -> Path:
    """An hf://ORG/REPO/PATH[?revision=R] file from the Hugging Face cache (never downloaded here)."""
    from urllib.parse import parse_qs, urlparse

    from huggingface_hub import try_to_load_from_cache

    from interpscope.paths import hf_hub_cache

    parsed = urlparse(uri)
    repo, _, path = parsed.path.lstrip("/").partition("/")
    revisions = parse_qs(parsed.query).get("revision")
    revision = revisions[0] if revisions else None
    found = try_to_load_from_cache(f"{parsed.netloc}/{repo}", path, cache_dir=hf_hub_cache(), revision=revision)
    if not isinstance(found, str):
        raise InterpscopeError(f"{uri} is not in the Hugging Face cache ({hf_hub_cache()}); download it first.")
    return Path(found)


def load_circuit_tracer_set(folder: str | Path, dtype: str | torch.dtype | None = "float32"):
    """A TranscoderSet from circuit-tracer's per-layer layout (see the module docstring)."""
    from interpscope.paths import confined_folder
    from interpscope.sae.arch.transcoder import Transcoder
    from interpscope.sae.clt import _hook_template, _load, _yaml
    from interpscope.sae.parts import sae_from_parts
    from interpscope.sae.transcoder_set_base import HOOK_IN, HOOK_OUT, TranscoderSet

    folder = confined_folder(folder, "transcoder set folder")
    config = _yaml(folder)
    if config.get("model_kind", "transcoder_set") != "transcoder_set":
        raise InterpscopeError(f"{folder}/config.yaml says model_kind {config.get('model_kind')!r}; a per-layer set "
                               "is transcoder_set (a cross_layer_transcoder loads with load_clt).")
    if config.get("activation") == "topk" or config.get("k") is not None:
        raise InterpscopeError(f"{folder}: TopK transcoders are not read (Interpscope has no TopK transcoder).")
    hook_in = _hook_template(config.get("feature_input_hook"), HOOK_IN)
    hook_out = _hook_template(config.get("feature_output_hook"), HOOK_OUT)
    transcoders: list[Transcoder] = []
    for layer, file in enumerate(_layer_files(folder, config)):
        if not file.is_file():
            raise InterpscopeError(f"Layer {layer} of the set: no file {file.name}.")
        raw = _load(file)
        if "k" in raw:
            raise InterpscopeError(f"{file} is a TopK transcoder (it holds k); Interpscope has no TopK transcoder.")
        missing = [n for n in ("W_enc", "W_dec", "b_enc", "b_dec") if n not in raw]
        if missing:
            raise InterpscopeError(f"{file} lacks {', '.join(missing)} (it has {', '.join(sorted(raw))}).")
        threshold = raw.get("activation_function.threshold", raw.get("threshold"))
        tensors = {"W_enc": raw["W_enc"].T.contiguous(), "W_dec": raw["W_dec"], "b_enc": raw["b_enc"],
                   "b_dec": raw["b_dec"]}
        jumprelu = threshold is not None or config.get("activation") == "jumprelu"
        if jumprelu:
            if threshold is None:
                raise InterpscopeError(f"{file} lacks activation_function.threshold, which a JumpReLU needs.")
            tensors["threshold"] = threshold.reshape(-1)
        if "W_skip" in raw:
            if not jumprelu:
                raise InterpscopeError(f"{file}: a ReLU transcoder with W_skip is not read (Interpscope's skip "
                                       "transcoders are JumpReLU).")
            tensors["W_skip"] = raw["W_skip"]
        d_sae, d_in = (int(n) for n in raw["W_enc"].shape)
        d_out = int(raw["b_dec"].shape[0])
        architecture = ("jumprelu_skip_transcoder" if "W_skip" in raw else "jumprelu_transcoder") if jumprelu \
            else "transcoder"
        cfg = {"architecture": architecture, "d_in": d_in, "d_sae": d_sae, "d_out": d_out,
               "model_name": str(config.get("model_name") or ""), "hook_name": hook_in.format(layer=layer),
               "hook_name_out": hook_out.format(layer=layer), "apply_b_dec_to_input": False,
               "normalize_activations": "none",
               "metadata": {"interpscope": {"release": {"format": "circuit_tracer", "file": file.name}}}}
        try:
            tc = sae_from_parts(cfg, tensors, file.parent, dtype, weights_file=file.name)
        except InterpscopeError as err:
            raise InterpscopeError(f"Layer {layer} of the set: {err}") from None
        if not isinstance(tc, Transcoder):
            raise InterpscopeError(f"Layer {layer} of the set is not a transcoder.")
        tc.eval()
        transcoders.append(tc)
    model = transcoders[0].cfg.model_name
    return TranscoderSet(model, transcoders, hook_in, hook_out, folder,
                         {"model": model, "source": "circuit-tracer", "n_layers": len(transcoders)})


def save_circuit_tracer_set(tset, folder: str | Path) -> Path:
    """Write a TranscoderSet in circuit-tracer's per-layer layout (config.yaml + layer_<i>.safetensors)."""
    import yaml
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for layer, tc in enumerate(tset.transcoders):
        tensors = {"W_enc": tc.W_enc.detach().T.contiguous(), "W_dec": tc.W_dec.detach().contiguous(),
                   "b_enc": tc.b_enc.detach(), "b_dec": tc.b_dec.detach()}
        if hasattr(tc, "threshold"):
            tensors["activation_function.threshold"] = tc.threshold.detach()
        if getattr(tc, "skip", False):
            tensors["W_skip"] = tc.W_skip.detach().T.contiguous()
        save_file({k: v.cpu() for k, v in tensors.items()}, str(folder / f"layer_{layer}.safetensors"))
    config = {"model_name": tset.model_name, "model_kind": "transcoder_set",
              "feature_input_hook": tset.hook_in.replace("blocks.{layer}.", ""),
              "feature_output_hook": tset.hook_out.replace("blocks.{layer}.", "")}
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return folder


__all__ = ["load_circuit_tracer_set", "save_circuit_tracer_set"]
