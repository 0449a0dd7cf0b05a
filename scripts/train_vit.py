"""Train the bundled image model: a small Hugging Face ViTForImageClassification on Fashion-MNIST.

The images come from Debian's `dataset-fashion-mnist` package (apt-get install -y dataset-fashion-mnist; files under
/usr/share/datasets/fashion-mnist), 60,000 training and 10,000 held-out test images of 28x28 grey pixels in ten
classes. The model is transformers' own ViT class (patch embedding conv, class token, learned positions, pre-norm
blocks, GELU MLP, linear head on the class token), so the project's ViT adapter that explains it also serves real
HF ViT/DeiT folders. Training is resumable (a checkpoint after every epoch under --work, refused when resumed with
other settings), seeded, and ends with the held-out accuracy on all 10,000 test images, written into the manifest.

Rebuild:  nice -n 15 .venv/bin/python scripts/train_vit.py --out assets/models/vit-fashion-mnist --force
Writes config.json, model.safetensors, preprocessor_config.json, labels.json, interpscope.json and examples/ (50
held-out test images as PNGs, five per class, with examples/labels.json), so pages and tests need no Debian package.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from interpscope.atomic import write_text  # noqa: E402
from interpscope.config import InterpscopeError  # noqa: E402
from interpscope.resume import check_same_settings  # noqa: E402

DATA = Path("/usr/share/datasets/fashion-mnist")
LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
MEAN, STD = 0.5, 0.5


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (the MNIST format: magic, dims, big-endian sizes, then uint8 data) as a numpy array."""
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_split(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(images uint8 [N, 28, 28], labels int64 [N]) of 'train' or 't10k'."""
    images = read_idx(DATA / f"{split}-images-idx3-ubyte.gz")
    labels = read_idx(DATA / f"{split}-labels-idx1-ubyte.gz")
    return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 28, 28] -> float [N, 1, 28, 28] in the model's input scale (what preprocessor_config.json says)."""
    return ((images.float() / 255.0) - MEAN).div(STD).unsqueeze(1)


def shifted(images: torch.Tensor, generator: torch.Generator, pad: int) -> torch.Tensor:
    """Random translations by up to `pad` pixels (zero padding: the background colour)."""
    n = images.shape[0]
    if pad == 0:
        return images
    padded = torch.nn.functional.pad(images, (pad, pad, pad, pad))
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    rows = (dy[:, None] + torch.arange(28)[None, :])[:, :, None]
    cols = (dx[:, None] + torch.arange(28)[None, :])[:, None, :]
    return padded[torch.arange(n)[:, None, None], rows, cols]


@torch.no_grad()
def accuracy(model, images: torch.Tensor, labels: torch.Tensor, batch: int = 1000) -> float:
    """Share of images whose arg-max logit is the label."""
    model.eval()
    right = 0
    for start in range(0, len(images), batch):
        logits = model(pixel_values=normalise(images[start:start + batch])).logits
        right += int((logits.argmax(-1) == labels[start:start + batch]).sum())
    model.train()
    return right / len(images)


def write_examples(out: Path, images: torch.Tensor, labels: torch.Tensor, per_class: int) -> None:
    """The first `per_class` test images of each class as PNGs plus examples/labels.json (file -> label)."""
    from PIL import Image

    folder = out / "examples"
    folder.mkdir(parents=True, exist_ok=True)
    index = {}
    for label in range(len(LABELS)):
        picks = (labels == label).nonzero().flatten()[:per_class].tolist()
        for pick in picks:
            name = f"test{pick:05d}.png"
            Image.fromarray(images[pick].numpy(), mode="L").save(folder / name, optimize=True)
            index[name] = {"label": label, "name": LABELS[label], "test_index": pick}
    write_text(folder / "labels.json", json.dumps(dict(sorted(index.items())), indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="assets/models/vit-fashion-mnist")
    parser.add_argument("--work", default="build/train_vit", help="where the resumable checkpoint lives")
    parser.add_argument("--force", action="store_true", help="start afresh even when a checkpoint differs")
    parser.add_argument("--patch", type=int, default=7)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--shift", type=int, default=1, help="random translations by up to this many pixels")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--examples-per-class", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    from safetensors.torch import save_file
    from transformers import ViTConfig, ViTForImageClassification

    settings = {k: v for k, v in vars(args).items() if k not in ("out", "work", "force", "threads")}
    train_x, train_y = load_split("train")
    test_x, test_y = load_split("t10k")
    config = ViTConfig(image_size=28, patch_size=args.patch, num_channels=1, hidden_size=args.d_model,
                       num_hidden_layers=args.layers, num_attention_heads=args.heads,
                       intermediate_size=4 * args.d_model, hidden_act="gelu", hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, qkv_bias=True, num_labels=len(LABELS),
                       id2label=dict(enumerate(LABELS)), label2id={name: i for i, name in enumerate(LABELS)})
    model = ViTForImageClassification(config)
    steps_per_epoch = len(train_x) // args.batch
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, pct_start=0.1,
                                                   total_steps=steps_per_epoch * args.epochs)
    generator = torch.Generator().manual_seed(args.seed)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = work / "checkpoint.pt"
    epoch, seconds = 0, 0.0
    if checkpoint.is_file():
        saved = torch.load(checkpoint, weights_only=False)
        try:
            resume = check_same_settings(saved["settings"], settings, what="ViT training", where="in the checkpoint",
                                         force=args.force)
        except InterpscopeError as err:
            parser.exit(2, f"train_vit: error: {err}\n")
        if resume:
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            schedule.load_state_dict(saved["schedule"])
            generator.set_state(saved["generator"])
            epoch, seconds = saved["epoch"], saved["seconds"]
            print(f"resuming after epoch {epoch} ({seconds:.0f} s so far)", flush=True)
    model.train()
    while epoch < args.epochs:
        start = time.time()
        order = torch.randperm(len(train_x), generator=generator)
        total = 0.0
        for step in range(steps_per_epoch):
            pick = order[step * args.batch:(step + 1) * args.batch]
            pixels = normalise(shifted(train_x[pick], generator, args.shift))
            loss = torch.nn.functional.cross_entropy(model(pixel_values=pixels).logits, train_y[pick])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            total += float(loss.detach())
            if step % 50 == 0:
                print(f"epoch {epoch + 1} step {step}/{steps_per_epoch} loss {float(loss.detach()):.3f} "
                      f"({time.time() - start:.0f} s)", flush=True)
        epoch += 1
        seconds += time.time() - start
        torch.save({"settings": settings, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "schedule": schedule.state_dict(), "generator": generator.get_state(), "epoch": epoch,
                    "seconds": seconds}, work / "checkpoint.tmp")
        (work / "checkpoint.tmp").replace(checkpoint)
        print(f"epoch {epoch}: mean loss {total / steps_per_epoch:.4f}, {seconds:.0f} s", flush=True)
    held_out = accuracy(model, test_x, test_y)
    print(f"held-out accuracy on the 10,000 test images: {held_out:.4f}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    preprocessor = {"image_processor_type": "ViTImageProcessor", "do_resize": False, "size": {"height": 28,
                    "width": 28}, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                    "image_mean": [MEAN], "image_std": [STD]}
    write_text(out / "preprocessor_config.json", json.dumps(preprocessor, indent=2) + "\n")
    write_text(out / "labels.json", json.dumps(LABELS, indent=2) + "\n")
    write_examples(out, test_x, test_y, args.examples_per_class)
    manifest = {
        "name": "vit-fashion-mnist", "family": "vit", "modality": "image",
        "description": f"Small ViT ({args.layers} layers, d {args.d_model}, patch {args.patch}) trained from "
                       f"scratch on Fashion-MNIST; held-out accuracy {held_out:.2%} on the 10,000 test images",
        "rebuild": "nice -n 15 .venv/bin/python scripts/train_vit.py --out assets/models/vit-fashion-mnist --force",
        "data": {"source": "Debian package dataset-fashion-mnist (Zalando Research, MIT licence)",
                 "path": str(DATA), "train_images": len(train_x), "test_images": len(test_x)},
        "held_out_accuracy": round(held_out, 4), "labels": LABELS,
        "image": {"height": 28, "width": 28, "channels": 1, "mean": MEAN, "std": STD,
                  "background": "zero pixels (black)"},
        "training": {**settings, "seconds": round(seconds), "threads": args.threads,
                     "augmentation": f"random shifts up to {args.shift} px",
                     "torch": torch.__version__},
    }
    write_text(out / "interpscope.json", json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
