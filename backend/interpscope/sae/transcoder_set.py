"""A set of per-layer transcoders, one per block: each reads the MLP's input (`blocks.L.mlp.hook_in`, after the
block's MLP norm) and predicts the MLP's output (`blocks.L.hook_mlp_out`), so the whole stack of MLPs can be
replaced by sparse features (the replacement model of attribution graphs).

On disk a set is a folder with `manifest.json` and one SAELens transcoder folder per layer, `layer_00`,
`layer_01`, ... (cfg.json + sae_weights.safetensors, read by interpscope.sae.folder.load_sae, which refuses
pickles), or, when the manifest lists `layer_folders`, those folders in a released layout that load_sae reads
(Gemma Scope 2's `transcoder_all/layer_L_width_W_l0_X_affine/params.safetensors` + config.json: the layout the
shipped Gemma 3 270M set is written in, `save_transcoder_set(..., layout="gemma_scope_2")`). The manifest names
the model, the hook templates, the width, the dtype, the tokens trained and evaluated on, the command that rebuilds
the set, and per layer its FVU, spliced loss recovered, L0 and dead fraction. The shipped set for a model lives
under assets/transcoders/<model>/ (default_transcoder_set).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from interpscope import atomic
from interpscope.config import ASSETS_DIR, InterpscopeError
from interpscope.paths import confined_folder, display_path
from interpscope.sae.arch.base import SAEConfig
from interpscope.sae.arch.transcoder import Transcoder
from interpscope.sae.folder import PICKLE_SUFFIXES, hook_width, load_sae, save_sae
from interpscope.sae.transcoder_set_base import (  # noqa: F401  (this module's names, as before)
    HOOK_IN,
    HOOK_OUT,
    MANIFEST,
    TRANSCODERS_DIR,
    TranscoderSet,
    layer_folder_name,
)

if TYPE_CHECKING:
    from interpscope.models.loaded import LoadedModel

def _manifest(folder: Path) -> dict[str, Any]:
    """The set's manifest.json (the folder is already confined: in server mode, inside the allowed roots with every
    file in it, so nothing here opens or lists anything outside them)."""
    file = folder / MANIFEST
    shown = display_path(folder)
    if not file.is_file():
        pickles = [p.name for p in folder.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES] if folder.is_dir() else []
        hint = f" (it holds {pickles[0]}, a pickle: Interpscope refuses pickles)" if pickles else ""
        raise InterpscopeError(f"{shown} is not a transcoder set: it needs {MANIFEST} and one folder per layer "
                               f"({layer_folder_name(0)}, {layer_folder_name(1)}, ...){hint}.")
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InterpscopeError(f"{shown}/{MANIFEST} is not valid JSON ({err}).") from None
    if not isinstance(manifest, dict):
        raise InterpscopeError(f"{shown}/{MANIFEST} must hold a JSON object.")
    return manifest


def _hook_for(template: str, layer: int) -> str:
    """A manifest's hook template ('blocks.{layer}.mlp.hook_in') for one layer; any other placeholder is refused."""
    try:
        return template.format(layer=layer)
    except (IndexError, KeyError, ValueError, AttributeError):
        raise InterpscopeError(f"The transcoder set's hook {template[:120]!r} must name its layer as '{{layer}}' "
                               "(e.g. 'blocks.{layer}.mlp.hook_in') and hold no other braces.") from None


def _n_layers(manifest: dict, folder: Path) -> int:
    n = manifest.get("n_layers")
    if n is None and isinstance(manifest.get("layers"), list):
        n = len(manifest["layers"])
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InterpscopeError(f"{folder / MANIFEST} must give n_layers (a positive integer), got {n!r}.")
    return n


def _layer_folders(manifest: dict, folder: Path, n_layers: int) -> list[str] | None:
    """The manifest's `layer_folders` (relative paths inside the set, one per layer), or None; refuse a list of
    the wrong length or a path that leads out of the set."""
    listed = manifest.get("layer_folders")
    if listed is None:
        return None
    if not isinstance(listed, list) or len(listed) != n_layers or not all(isinstance(p, str) for p in listed):
        raise InterpscopeError(f"{display_path(folder)}/{MANIFEST}: layer_folders must list {n_layers} relative "
                               "folder paths, one per layer.")
    for path in listed:
        if Path(path).is_absolute() or ".." in Path(path).parts:
            raise InterpscopeError(f"{display_path(folder)}/{MANIFEST}: layer folder {path[:120]!r} must be a path "
                                   "inside the set.")
    return listed


def load_transcoder_set(folder: str | Path, dtype: str | torch.dtype | None = "float32",
                        lm: LoadedModel | None = None) -> TranscoderSet:
    """Read manifest.json and layer_00 ... layer_{n-1}; every layer must be a transcoder on its own hook pair with
    the set's width and shapes. With `lm`, the set is also checked against that model's blocks."""
    # Confined before anything is looked at: in server mode a folder outside the allowed roots, or one holding a
    # file that leads outside them (a symlinked manifest), gets one refusal whether or not it exists.
    folder = confined_folder(folder, "transcoder set folder")
    if folder.is_file() and folder.suffix.lower() in PICKLE_SUFFIXES:
        raise InterpscopeError(f"{folder.name} is a pickle; Interpscope refuses pickles. A transcoder set is a "
                               f"folder with {MANIFEST} and one safetensors folder per layer.")
    if not folder.is_dir():
        raise InterpscopeError(f"No transcoder set folder at {display_path(folder)}.")
    if not (folder / MANIFEST).is_file() and (folder / "config.yaml").is_file():  # circuit-tracer's layout
        from interpscope.sae.formats.circuit_tracer import load_circuit_tracer_set

        loaded = load_circuit_tracer_set(folder, dtype)
        if lm is not None:
            loaded.check_model(lm)
        return loaded
    manifest = _manifest(folder)
    n_layers = _n_layers(manifest, folder)
    hook_in = str(manifest.get("hook_in") or HOOK_IN)
    hook_out = str(manifest.get("hook_out") or HOOK_OUT)
    width = manifest.get("width")
    transcoders: list[Transcoder] = []
    listed = _layer_folders(manifest, folder, n_layers)
    for layer in range(n_layers):
        sub = folder / (listed[layer] if listed else layer_folder_name(layer))
        if not sub.is_dir():
            raise InterpscopeError(f"The transcoder set at {display_path(folder)} lacks layer {layer} ({sub.name}/); "
                                   f"the manifest lists {n_layers} layers.")
        try:
            tc = load_sae(sub, dtype=dtype)
        except InterpscopeError as err:
            raise InterpscopeError(f"Layer {layer} of the transcoder set: {err}") from None
        if not isinstance(tc, Transcoder):
            raise InterpscopeError(f"Layer {layer} ({sub.name}) is a {tc.cfg.architecture} SAE, not a transcoder.")
        want_in, want_out = _hook_for(hook_in, layer), _hook_for(hook_out, layer)
        if (tc.cfg.hook_name, tc.hook_name_out) != (want_in, want_out):
            raise InterpscopeError(f"Layer {layer} ({sub.name}) maps {tc.cfg.hook_name!r} -> {tc.hook_name_out!r}; the "
                                   f"set expects {want_in!r} -> {want_out!r}.")
        first = transcoders[0] if transcoders else None
        expected = (first.cfg.d_in, first.d_out) if first else (tc.cfg.d_in, tc.d_out)
        if (tc.cfg.d_in, tc.d_out) != expected:
            raise InterpscopeError(f"Layer {layer} ({sub.name}) maps {tc.cfg.d_in} -> {tc.d_out}, but layer 0 maps "
                                   f"{expected[0]} -> {expected[1]}.")
        if width is not None and tc.cfg.d_sae != width:
            raise InterpscopeError(f"Layer {layer} ({sub.name}) has width {tc.cfg.d_sae}, but the manifest says "
                                   f"{width}.")
        tc.eval()
        transcoders.append(tc)
    result = TranscoderSet(str(manifest.get("model") or transcoders[0].cfg.model_name), transcoders, hook_in,
                           hook_out, folder, manifest)
    if lm is not None:
        result.check_model(lm)
    return result


LAYOUTS = ("saelens", "gemma_scope_2")


def gemma_scope_2_folder(layer: int, width: int, l0_tag: str, skip: bool) -> str:
    """A layer's folder as Gemma Scope 2 names its all-layer transcoders: transcoder_all/layer_L_width_W_l0_X[_affine]
    (W as written: 16k, 262k; here the set's own width)."""
    shown = f"{width // 1024}k" if width % 1024 == 0 else str(width)
    return f"transcoder_all/layer_{layer}_width_{shown}_l0_{l0_tag}" + ("_affine" if skip else "")


def save_gemma_scope_2(tc: Transcoder, folder: Path, hf_model_id: str, dtype: str = "float16") -> Path:
    """One JumpReLU transcoder in Gemma Scope 2's layout: params.safetensors (w_enc [d_in, d_sae], w_dec [d_sae,
    d_out], b_enc, b_dec, threshold, and affine_skip_connection [d_in, d_out] with a skip) + config.json naming the
    Hugging Face module paths it reads and writes (pre_feedforward_layernorm's and post_feedforward_layernorm's
    outputs of the block)."""
    from safetensors.torch import save_file

    threshold = getattr(tc, "threshold", None)
    if threshold is None or tc.cfg.hook_name != HOOK_IN.format(layer=tc.cfg.hook_layer) or \
            tc.hook_name_out != HOOK_OUT.format(layer=tc.cfg.hook_layer):
        raise InterpscopeError("Gemma Scope 2's layout holds JumpReLU transcoders from a block's MLP input to its MLP "
                               f"output; this one is a {tc.label} on {tc.cfg.hook_name} -> {tc.hook_name_out}.")
    cast = getattr(torch, dtype)
    tensors = {"w_enc": tc.W_enc, "w_dec": tc.W_dec, "b_enc": tc.b_enc, "b_dec": tc.b_dec, "threshold": threshold}
    W_skip = getattr(tc, "W_skip", None)
    if W_skip is not None:
        tensors["affine_skip_connection"] = W_skip  # [d_in, d_out], as Gemma Scope 2 stores it
    layer = tc.cfg.hook_layer
    config = {"architecture": "jump_relu", "model_name": hf_model_id,
              "hf_hook_point_in": f"model.layers.{layer}.pre_feedforward_layernorm.output",
              "hf_hook_point_out": f"model.layers.{layer}.post_feedforward_layernorm.output",
              "affine_connection": W_skip is not None, "width": int(tc.cfg.d_sae), "dtype": dtype}
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().to(cast).contiguous() for k, v in tensors.items()}, str(folder / "params.safetensors"))
    atomic.write_json(folder / "config.json", config)
    return folder


def save_transcoder_set(tset: TranscoderSet, folder: str | Path, dtype: str = "float16",
                        manifest: dict | None = None, layout: str = "saelens", hf_model_id: str = "",
                        l0_tag: str = "small") -> Path:
    """Write one folder per layer (layout "saelens": layer_XX/ in SAELens's transcoder format; "gemma_scope_2":
    Gemma Scope 2's transcoder_all/layer_L_... folders, listed in the manifest as layer_folders, for JumpReLU
    transcoders of a Gemma 3 model, hf_model_id its Hugging Face id), in dtype, and manifest.json (written last)."""
    if layout not in LAYOUTS:
        raise InterpscopeError(f"Unknown transcoder set layout {layout!r}; choose {' or '.join(LAYOUTS)}.")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    layer_folders: list[str] = []
    for layer, tc in enumerate(tset.transcoders):
        if layout == "gemma_scope_2":
            sub = gemma_scope_2_folder(layer, tc.cfg.d_sae, l0_tag, getattr(tc, "W_skip", None) is not None)
            save_gemma_scope_2(tc, folder / sub, hf_model_id, dtype)
            layer_folders.append(sub)
        else:
            save_sae(tc, folder / layer_folder_name(layer), dtype=dtype)
    document: dict[str, Any] = {"model": tset.model_name, "hook_in": tset.hook_in, "hook_out": tset.hook_out,
                                "width": tset.width, "dtype": dtype, "n_layers": tset.n_layers}
    if layer_folders:
        document.update(layout=layout, layer_folders=layer_folders)
    document.update(manifest if manifest is not None else {k: v for k, v in tset.manifest.items()
                                                           if k not in document and k not in ("layout",
                                                                                              "layer_folders")})
    atomic.write_json(folder / MANIFEST, document)
    tset.folder, tset.manifest = folder, document
    return folder


def default_transcoder_set(model_name: str) -> Path | None:
    """The shipped set's folder for this model (assets/transcoders/<model>/), or None when none is shipped."""
    folder = ASSETS_DIR / TRANSCODERS_DIR / model_name
    return folder if (folder / MANIFEST).is_file() else None


def new_transcoder(lm: LoadedModel, layer: int, width: int, seed: int | None = 0, hook_in: str = HOOK_IN,
                   hook_out: str = HOOK_OUT, dtype: torch.dtype = torch.float32, architecture: str = "transcoder",
                   skip: bool = False) -> Transcoder:
    """An untrained transcoder for one block of lm (the shapes of its hooks): the ReLU transcoder, or another
    paired architecture of the registry (e.g. 'jumprelu_transcoder', with skip: a trained skip connection)."""
    from interpscope.sae.arch import architecture_class

    name_in, name_out = hook_in.format(layer=layer), hook_out.format(layer=layer)
    extra: dict[str, Any] = {"d_out": hook_width(lm.adapter, name_out), "hook_name_out": name_out,
                             "hook_layer_out": layer}
    if skip:
        extra["skip"] = True
    cls = architecture_class(architecture)
    if not cls.paired:
        raise InterpscopeError(f"{architecture} is not a transcoder architecture (it reads and writes one "
                               "activation).")
    cfg = SAEConfig(d_in=hook_width(lm.adapter, name_in), d_sae=int(width), architecture=cls.architecture,
                    model_name=lm.name, hook_name=name_in, hook_layer=layer, extra=extra)
    tc = cls(cfg, dtype=dtype, seed=seed)
    assert isinstance(tc, Transcoder)
    return tc


def random_transcoder_set(lm: LoadedModel, width: int, seed: int = 0) -> TranscoderSet:
    """Random transcoders (small random encoder biases, so some features fire) for every block: for tests."""
    generator = torch.Generator().manual_seed(seed)
    transcoders = []
    for layer in range(lm.adapter.n_layers):
        tc = new_transcoder(lm, layer, width, seed=seed + 2 * layer)
        with torch.no_grad():
            tc.b_enc.copy_(0.1 * torch.randn(width, generator=generator))
            tc.b_dec.copy_(0.01 * torch.randn(tc.d_out, generator=generator))
        tc.eval()
        transcoders.append(tc)
    return TranscoderSet(lm.name, transcoders)


def is_clt_folder(folder: str | Path) -> bool:
    """Whether a folder holds a cross-layer transcoder (circuit-tracer's CLT layout, or a config.yaml that says
    cross_layer_transcoder) rather than a per-layer set."""
    folder = Path(folder)
    if (folder / "W_enc_0.safetensors").is_file():
        return True
    config = folder / "config.yaml"
    return config.is_file() and "cross_layer_transcoder" in config.read_text(encoding="utf-8", errors="replace")


def load_dictionary(folder: str | Path, lm: LoadedModel | None = None) -> Any:
    """What attribution graphs read from a folder: a per-layer transcoder set (load_transcoder_set), or a
    cross-layer transcoder (interpscope.sae.clt.load_clt), checked against lm's blocks when given."""
    if is_clt_folder(folder):
        from interpscope.sae.clt import load_clt

        where = confined_folder(folder, "CLT folder")
        clt = load_clt(where)
        clt.folder = where  # type: ignore[assignment]  # named in the graph as a set's folder is
        if lm is not None and clt.n_layers != lm.adapter.n_layers:
            raise InterpscopeError(f"The CLT at {display_path(where)} spans {clt.n_layers} layers; {lm.name} has "
                                   f"{lm.adapter.n_layers} blocks.")
        return clt
    return load_transcoder_set(folder, lm=lm)


def dictionary_width(dictionary: Any) -> int:
    """Features per layer of a transcoder set or a CLT."""
    width = getattr(dictionary, "width", None)
    return int(width if width is not None else getattr(dictionary, "d_sae", 0))
