"""Write two tiny demo models to try the views no bundled model has: a mixture of experts (Mixtral: the Relevance
page's "Mixture of experts" section) and an encoder-decoder (T5: source + decoder-input maps). Their weights are
RANDOM (no MoE or T5 weights exist offline): they show what the views do, not what a trained model does. Nothing
outside the output folder is touched, and an existing folder is refused, not replaced.

Run from a clone: .venv/bin/python scripts/make_demo_models.py [--out DIR]
(default: <data directory>/demo-models; then pick "Other: Hugging Face id or local folder…" in the sidebar and give
DIR/tiny-mixtral or DIR/tiny-t5, or `interpscope relevance --model DIR/tiny-t5 --text ... --decoder-text ...`)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "backend")]


def write_demo_models(out: Path, tokenizer) -> dict[str, Path]:
    """Write tiny-mixtral (with `tokenizer`) and tiny-t5 under `out`; refuses when either folder exists."""
    import torch

    from tests.tiny import FAMILIES, save_tiny_t5

    targets = {"tiny-mixtral": out / "tiny-mixtral", "tiny-t5": out / "tiny-t5"}
    taken = [str(path) for path in targets.values() if path.exists()]
    if taken:
        raise SystemExit(f"Already there (remove it yourself to rebuild): {', '.join(taken)}")
    out.mkdir(parents=True, exist_ok=True)
    mixtral = FAMILIES["mixtral"].build(torch.float32, vocab_size=len(tokenizer))
    mixtral.save_pretrained(targets["tiny-mixtral"])
    tokenizer.save_pretrained(targets["tiny-mixtral"])
    save_tiny_t5(targets["tiny-t5"], gated=True)
    for name, path in targets.items():
        (path / "DEMO-README.txt").write_text(
            f"{name}: random weights written by scripts/make_demo_models.py, to try the views; not a trained model.\n",
            encoding="utf-8")
    return targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from interpscope.config import data_dir
    from interpscope.models import load_model

    out = args.out or data_dir() / "demo-models"
    taken = [str(out / name) for name in ("tiny-mixtral", "tiny-t5") if (out / name).exists()]
    if taken:  # before the model loads
        raise SystemExit(f"Already there (remove it yourself to rebuild): {', '.join(taken)}")
    tokenizer = load_model("smollm2-135m", device="cpu").tokenizer  # a real tokenizer, so any text can be typed
    targets = write_demo_models(out, tokenizer)
    print(json.dumps({name: str(path) for name, path in targets.items()}))


if __name__ == "__main__":
    main()
