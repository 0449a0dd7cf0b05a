"""Rewrite a feature store's vocab.json and labels.json with the project's token display (interpscope.token_text:
a token holding part of a multi-byte character shown by its bytes, <0xF0>, instead of "�"), without rebuilding the
store: no other file depends on them. Idempotent; run after a change to the display.

Run: .venv/bin/python scripts/refresh_store_vocab.py assets/sae_stores/*
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "backend"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stores", nargs="+", type=Path)
    args = parser.parse_args()
    from interpscope import atomic
    from interpscope.models import load_model
    from interpscope.sae.store import FeatureStore
    from interpscope.sae.store.labels import LABELS_FILE, compute_labels
    from interpscope.token_text import vocabulary_texts

    tokenizers: dict[str, object] = {}
    for folder in args.stores:
        store = FeatureStore(folder)
        name = store.spec["model_name"]
        if name not in tokenizers:
            tokenizers[name] = load_model(name, device="cpu").tokenizer
        old = store.vocab
        vocab = vocabulary_texts(tokenizers[name], len(old))
        atomic.write_json(folder / "vocab.json", vocab)
        labels = compute_labels(store.arrays, vocab)
        atomic.write_json(folder / LABELS_FILE, labels)
        changed = sum(a != b for a, b in zip(old, vocab, strict=True))
        print(json.dumps({"store": str(folder), "tokens_changed": changed,
                          "labels_with_replacement_char": sum("\ufffd" in label for label in labels)}))


if __name__ == "__main__":
    main()
