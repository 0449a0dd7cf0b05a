"""A tiny random ViT (or DeiT) image classifier, as a model object or a Hugging Face folder, for the image tests."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

LABELS = ["zero", "one", "two", "three"]


def tiny_vit(seed: int = 0, kind: str = "vit", channels: int = 1, **overrides):
    """12x12 pixels, patch 4 (a 3x3 grid), 2 layers, d 16, 2 heads, 4 classes; weights large enough that the pixels
    matter, non-zero biases and embeddings so that the conservation readout's bias share is exercised."""
    from transformers import DeiTConfig, DeiTForImageClassification, ViTConfig, ViTForImageClassification

    torch.manual_seed(seed)
    config_cls, model_cls = (ViTConfig, ViTForImageClassification) if kind == "vit" else \
        (DeiTConfig, DeiTForImageClassification)
    settings = {"image_size": 12, "patch_size": 4, "num_channels": channels, "hidden_size": 16,
                "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
                "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "num_labels": len(LABELS),
                "initializer_range": 0.3,
                "id2label": dict(enumerate(LABELS)), "label2id": {n: i for i, n in enumerate(LABELS)}, **overrides}
    model = model_cls(config_cls(**settings)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or "token" in name or "position" in name:
                param.normal_(0, 0.1)
    return model


def tiny_vit_folder(folder: Path, seed: int = 0, kind: str = "vit", channels: int = 1) -> Path:
    """Save a tiny random ViT (config.json, model.safetensors, preprocessor_config.json) into `folder`."""
    model = tiny_vit(seed, kind, channels)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {"do_resize": True, "size": {"height": 12, "width": 12}, "do_rescale": True, "rescale_factor": 1 / 255,
         "do_normalize": True, "image_mean": [0.5] * channels, "image_std": [0.5] * channels}))
    return folder


def sample_image(seed: int = 0, size: int = 12) -> np.ndarray:
    """A random-looking but fixed uint8 RGB image [size, size, 3] with a bright block (something to find)."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 60, (size, size, 3), dtype=np.uint8)
    image[2:7, 5:10] = 230
    return image


def png_bytes(image: np.ndarray) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()
