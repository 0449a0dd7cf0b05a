"""cfg.json of the common SAE folder format (SAELens), in every layout that library reads: each field is read with
that library's meaning or refused with a message naming it.

Layouts: before 6.0 (no `sae_lens_version`, or one below 6) the where-it-reads fields sit at the top level, the
hook may be called `hook_point` (`hook_point_layer`, `hook_point_head_index`), `activation_fn_str` may say topk
(see interpscope.sae.arch.topk), and `normalize_activations` may be a boolean (true = 'expected_average_only_in');
from 6.0 they sit in a `metadata` object. We read either and write both.
Provenance: an architecture saved under another library name is recorded in `metadata.interpscope.architecture`;
a model_name that is a Hugging Face id of a bundled model is read as that bundled model, the id kept in
`extra["model_name_in_cfg"]`.
"""
from __future__ import annotations

import re
from typing import Any

from interpscope.config import InterpscopeError
from interpscope.sae.arch import SAEConfig, SparseAutoencoder, architecture_class, choices_text, registered
from interpscope.sae.normalisation import RUNTIME_KINDS

WHERE_FIELDS = ("model_name", "hook_name", "hook_layer", "context_size", "dataset_path", "prepend_bos",
                "training_tokens")
LEGACY_NAMES = {"hook_name": "hook_point", "hook_layer": "hook_point_layer", "hook_head_index": "hook_point_head_index"}
_LAYER = re.compile(r"^blocks\.(\d+)\.")
_NOT_STORED = {
    "expected_average_only_in": "activations multiplied by one dataset-wide constant",
    "covariance_whitening": "whitened activations (a mean and a whitening matrix)",
}


def is_pre_6(raw: dict) -> bool:
    """True for the library's layouts before 6.0 (no version, or a version below 6), read as that library does."""
    version = raw.get("sae_lens_version") or (raw.get("metadata") or {}).get("sae_lens_version")
    match = re.match(r"\s*(\d+)", str(version or ""))
    return not match or int(match.group(1)) < 6


def _pick(raw: dict, name: str, default: Any = None) -> Any:
    """A where-it-reads field: top level, then `metadata`, then its pre-6.0 name."""
    meta = raw.get("metadata") or {}
    for source, key in ((raw, name), (meta, name), (raw, LEGACY_NAMES.get(name)), (meta, LEGACY_NAMES.get(name))):
        if key and source.get(key) is not None:
            return source[key]
    return default


def folder_class(raw: dict) -> type[SparseAutoencoder]:
    """The registered architecture a cfg.json means."""
    stated = raw.get("architecture")
    provenance = ((raw.get("metadata") or {}).get("interpscope") or {}).get("architecture")
    if provenance:
        try:
            cls = architecture_class(str(provenance))
        except ValueError as err:
            raise InterpscopeError(f"cfg.json field metadata.interpscope.architecture: {err}") from None
        if stated not in (cls.folder_architecture, cls.architecture):
            raise InterpscopeError(f"cfg.json field metadata.interpscope.architecture says {provenance!r}, which is "
                                   f"saved as {cls.folder_architecture!r}, but field architecture says {stated!r}.")
        return cls
    pre_6 = is_pre_6(raw)
    for cls in registered():
        if cls.claims_folder(raw, pre_6):
            return cls
    try:
        return architecture_class(str(stated or "standard"))
    except ValueError:
        raise InterpscopeError(f"cfg.json field architecture is {stated!r}, which Interpscope does not read; it "
                               f"reads {choices_text()}.") from None


def _normalisation(raw: dict) -> str:
    value = raw.get("normalize_activations")
    if value is None or value is False or value in ("none", "None"):
        return "none"
    if value is True:
        value = "expected_average_only_in"
    if value in RUNTIME_KINDS:
        return str(value)
    if value in _NOT_STORED:
        raise InterpscopeError(
            f"cfg.json field normalize_activations is {value!r}: the SAE reads {_NOT_STORED[value]}, which the folder "
            "does not store. Fold it into W_enc, W_dec and b_dec and set normalize_activations to 'none'.")
    raise InterpscopeError(f"cfg.json field normalize_activations is {value!r}; readable values are "
                           f"{', '.join(RUNTIME_KINDS)}.")


def _refuse_unsupported(raw: dict, cls: type[SparseAutoencoder]) -> None:
    """Fields whose meaning Interpscope cannot give: refused by name."""
    activation = raw.get("activation_fn_str", raw.get("activation_fn"))
    if activation is not None and activation != cls.activation_fn:
        raise InterpscopeError(f"cfg.json field activation_fn_str is {activation!r}, but a {cls.label} SAE "
                               f"computes {cls.activation_fn!r}; Interpscope does not read this combination.")
    reshape = raw.get("reshape_activations")
    if reshape not in (None, "none"):
        raise InterpscopeError(f"cfg.json field reshape_activations is {reshape!r}: the SAE reads attention heads' "
                               "per-head outputs (hook_z), which Interpscope does not hook.")
    head = _pick(raw, "hook_head_index")
    if head is not None:
        raise InterpscopeError(f"cfg.json field hook_head_index is {head!r}: the SAE reads one attention head, "
                               "which Interpscope does not hook (it reads whole hook points).")
    for name in ("apply_b_dec_to_input", "finetuning_scaling_factor"):
        if not isinstance(raw.get(name, False), bool):
            raise InterpscopeError(f"cfg.json field {name} must be true or false (got {raw[name]!r}).")


def _model_name(value: Any, extra: dict) -> str:
    from interpscope.models.registry import bundled_name_for

    name = str(value or "")
    bundled = bundled_name_for(name) if name else None
    if bundled and bundled != name:
        extra["model_name_in_cfg"] = name
        return bundled
    return name


def read_config(raw: dict) -> tuple[type[SparseAutoencoder], SAEConfig]:
    """The architecture class and the SAEConfig a cfg.json (any layout) describes."""
    for required in ("d_in", "d_sae"):
        value = raw.get(required)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InterpscopeError(f"cfg.json has no positive integer {required!r}.")
    cls = folder_class(raw)
    _refuse_unsupported(raw, cls)
    extra = dict(((raw.get("metadata") or {}).get("interpscope")) or {})
    extra.pop("architecture", None)
    hook_name = str(_pick(raw, "hook_name", "") or "")
    hook_layer = _pick(raw, "hook_layer")
    if hook_layer is None:
        match = _LAYER.match(hook_name)
        hook_layer = int(match.group(1)) if match else -1
    try:
        own = cls.read_fields(raw)
        extra.update(own.pop("extra", None) or {})
        cfg = SAEConfig(
            d_in=int(raw["d_in"]), d_sae=int(raw["d_sae"]), architecture=cls.architecture,
            model_name=_model_name(_pick(raw, "model_name"), extra), hook_name=hook_name, hook_layer=int(hook_layer),
            dtype=str(raw.get("dtype") or "float32"), context_size=int(_pick(raw, "context_size", 128) or 128),
            dataset_path=str(_pick(raw, "dataset_path", "") or ""),
            apply_b_dec_to_input=bool(raw.get("apply_b_dec_to_input", True)),
            normalize_activations=_normalisation(raw), prepend_bos=bool(_pick(raw, "prepend_bos", False)),
            training_tokens=int(_pick(raw, "training_tokens", 0) or 0), extra=extra, **own)
        cls.check_config(cfg)
    except ValueError as err:
        raise InterpscopeError(str(err)) from None
    return cls, cfg


def config_to_json(cfg: SAEConfig) -> dict:
    """cfg.json content with the common library's field names (top level and `metadata`)."""
    cls = architecture_class(cfg.architecture)
    top = {"architecture": cls.folder_architecture, "d_in": cfg.d_in, "d_sae": cfg.d_sae, "dtype": cfg.dtype,
           "device": "cpu", "apply_b_dec_to_input": cfg.apply_b_dec_to_input,
           "normalize_activations": cfg.normalize_activations, "reshape_activations": "none",
           **cls.write_fields(cfg), "finetuning_scaling_factor": False, "hook_head_index": None}
    meta = {name: getattr(cfg, name) for name in WHERE_FIELDS}
    top.update(meta)
    interpscope = dict(cfg.extra)
    if cls.folder_architecture != cls.architecture:
        interpscope["architecture"] = cls.architecture
    top["metadata"] = dict(meta, hook_head_index=None, interpscope=interpscope)
    return top
