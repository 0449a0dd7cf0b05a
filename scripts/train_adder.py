"""Train the bundled addition model: a small GPT-2-style transformer whose numbers 0..N-1 are single tokens.

Recipe of Zhou et al. (2024) scaled to a CPU: a + b with a, b < N/2, several templates, the (a, b) pairs split
80/10/10 (interpscope.fourier.data), loss on the answer token only. Writes config.json, model.safetensors, a
word-level tokenizer.json (+ tokenizer_config.json) loadable by AutoTokenizer, and interpscope.json.

Rebuild:  nice -n 10 .venv/bin/python scripts/train_adder.py --out assets/models/adder --force
(--force because the shipped folder predates the output marker; only the files this script writes are replaced.)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from interpscope.config import InterpscopeError  # noqa: E402
from interpscope.fourier.data import DEFAULT_TEMPLATE, TEMPLATES  # noqa: E402
from interpscope.fourier.supervised import accuracy as split_accuracy  # noqa: E402
from interpscope.fourier.supervised import answer_logits, encode_split
from interpscope.fourier.vocab import number_tokenizer  # noqa: E402
from interpscope.outputs import OutputFolder, check_output_folder  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="assets/models/adder")
    parser.add_argument("--force", action="store_true",
                        help="write into a folder holding files this script did not write (they are kept)")
    parser.add_argument("--numbers", type=int, default=100, help="N: numbers 0..N-1 are tokens")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    try:
        check_output_folder(args.out, args.force)
    except InterpscopeError as err:
        parser.exit(2, f"train_adder: error: {err}\n")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = number_tokenizer(args.numbers)
    train = encode_split(tokenizer, args.numbers, "train", TEMPLATES)
    valid = encode_split(tokenizer, args.numbers, "valid", TEMPLATES)
    test_plain = encode_split(tokenizer, args.numbers, "test", (DEFAULT_TEMPLATE,))
    test_all = encode_split(tokenizer, args.numbers, "test", TEMPLATES)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=args.d_model, n_layer=args.layers,
                        n_head=args.heads, n_inner=4 * args.d_model, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.bos_token_id,
                        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                                  betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps,
                                                   pct_start=0.05)
    generator = torch.Generator().manual_seed(args.seed)
    ids, mask, last, answers = train
    start = time.time()
    for step in range(1, args.steps + 1):
        pick = torch.randint(len(ids), (args.batch,), generator=generator)
        logits = answer_logits(model, ids[pick], mask[pick], last[pick])
        loss = torch.nn.functional.cross_entropy(logits, answers[pick])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 250 == 0 or step == args.steps:
            model.eval()
            print(json.dumps({"step": step, "loss": round(loss.item(), 4),
                              "valid_acc": round(split_accuracy(model, valid, batch=2048), 4),
                              "seconds": round(time.time() - start, 1)}), flush=True)
            model.train()
    model.eval()
    figures = {"test_accuracy_plain": split_accuracy(model, test_plain, batch=2048),
               "test_accuracy_all_templates": split_accuracy(model, test_all, batch=2048),
               "valid_accuracy": split_accuracy(model, valid, batch=2048),
               "train_accuracy": split_accuracy(model, train, batch=2048),
               "train_seconds": round(time.time() - start, 1)}
    folder = OutputFolder.claim(args.out, force=args.force, command="scripts/train_adder.py")
    out = folder.path
    with folder.writing():
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    for extra in ("special_tokens_map.json", "generation_config.json"):
        if folder.owns(extra):
            folder.remove(extra)
    meta = {
        "name": "adder",
        "family": "gpt2",
        "description": (f"Small GPT-2-style addition model trained from scratch: numbers 0..{args.numbers - 1} are "
                        f"single tokens, a + b with a, b < {args.numbers // 2}; test accuracy "
                        f"{figures['test_accuracy_plain']:.2%} on '{DEFAULT_TEMPLATE}'"),
        "rebuild": "nice -n 10 .venv/bin/python scripts/train_adder.py --force --out " + args.out,
        "numbers": args.numbers,
        "templates": list(TEMPLATES),
        "training": {k: v for k, v in vars(args).items() if k not in ("out", "threads")},
        "figures": figures,
    }
    (out / "interpscope.json").write_text(json.dumps(meta, indent=2) + "\n")
    folder.record("interpscope.json")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
