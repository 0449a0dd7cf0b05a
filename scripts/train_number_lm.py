"""Pretrain a number-rich language model with single-token numbers, then fine-tune it on addition (issue 21).

An offline stand-in for the paper's setting (Zhou et al. 2024: GPT-2-XL, numbers 0..520 single tokens, pre-trained
on text, fine-tuned on a + b): no registry package ships a model with multi-digit number tokens, so this script
builds one. A GPT-2-style model (d_model 512 by default) is first pretrained with the plain LM loss on synthetic,
number-rich text (sums and differences, "x mod m", counting runs, comparisons, last digit / tens, parity,
successor / predecessor), packed into sequences, so that the number embeddings can acquire structure from many
tasks; then fine-tuned on a + b (the 80/10/10 pair split of interpscope.fourier.data, several templates, loss on the
answer token). No held-out (valid/test) addition pair appears in the pretraining text, as a sum or a difference.

Time-boxed and resumable: each phase stops at its step count or its wall-clock budget, whichever comes first, and a
checkpoint (model, optimiser, step, elapsed seconds) is written to --checkpoints every --save-every steps; rerunning
the same command resumes there. Writes config.json, model.safetensors (fp16), tokenizer files and interpscope.json.

Rebuild:  nice -n 10 .venv/bin/python scripts/train_number_lm.py --out assets/models/number-lm
Measure throughput first:  nice -n 10 .venv/bin/python scripts/train_number_lm.py --probe-steps 5
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from interpscope.config import InterpscopeError  # noqa: E402
from interpscope.fourier.data import DEFAULT_TEMPLATE, TEMPLATES, split_pairs  # noqa: E402
from interpscope.fourier.supervised import accuracy, answer_logits, encode_split  # noqa: E402
from interpscope.fourier.vocab import number_tokenizer  # noqa: E402
from interpscope.outputs import OutputFolder, check_output_folder  # noqa: E402

# Words of the pretraining sentences (besides the addition templates' words); written as pseudo-templates so that
# interpscope.fourier.vocab.number_tokenizer puts them in the vocabulary.
WORDS = ("mod", "after", "before", "max", "min", "last", "digit", "of", "tens", "even", "odd", "count", "from",
         "to", "less", "than", "more", "so", "by", "minus", "times")
EXTRA = ("+ - = < > . : , ?",) + tuple(f"{{a}} {word} {{b}}" for word in WORDS)
MODULI = (2, 3, 4, 5, 6, 7, 8, 9, 10, 12)


class Sentences:
    """Random number-rich sentences as word lists; never states a held-out addition pair."""

    def __init__(self, n_numbers: int, seed: int):
        self.n = n_numbers
        self.rng = np.random.default_rng(seed)
        held = np.concatenate([split_pairs(n_numbers, "valid"), split_pairs(n_numbers, "test")])
        self.held = {(int(a), int(b)) for a, b in held} | {(int(b), int(a)) for a, b in held}

    def _pair(self) -> tuple[int, int]:
        while True:
            a, b = (int(v) for v in self.rng.integers(0, self.n, size=2))
            if a + b < self.n and (a, b) not in self.held:
                return a, b

    def sentence(self) -> list[str]:
        rng, n = self.rng, self.n
        kind = int(rng.integers(0, 10))
        x = int(rng.integers(0, n))
        if kind == 0:
            a, b = self._pair()
            return [str(a), "+", str(b), "=", str(a + b)]
        if kind == 1:
            a, b = self._pair()
            return [str(a + b), "-", str(b), "=", str(a)]
        if kind == 2:
            m = int(rng.choice(MODULI))
            return [str(x), "mod", str(m), "=", str(x % m)]
        if kind == 3:
            step = int(rng.choice((1, 1, 1, 2, 5, 10)))
            length = int(rng.integers(3, 9))
            start = int(rng.integers(0, max(1, n - step * length)))
            return ["count", ":"] + [str(start + step * i) for i in range(length) if start + step * i < n]
        if kind == 4:
            y = int(rng.integers(0, n))
            if x == y:
                y = (x + 1) % n
            return [str(x), "<" if x < y else ">", str(y)]
        if kind == 5:
            y = int(rng.integers(0, n))
            word = "max" if rng.random() < 0.5 else "min"
            return [word, "of", str(x), str(y), "=", str(max(x, y) if word == "max" else min(x, y))]
        if kind == 6:
            return ["last", "digit", "of", str(x), "=", str(x % 10)]
        if kind == 7:
            return ["tens", "of", str(x), "=", str((x // 10) % 10)]
        if kind == 8:
            return [str(x), "even" if x % 2 == 0 else "odd"]
        if x == 0:
            return ["before", "1", "=", "0"]
        return ["after", str(x - 1), "=", str(x)] if rng.random() < 0.5 else ["before", str(x), "=", str(x - 1)]


def pretrain_batch(source: Sentences, vocab: dict, batch: int, length: int, bos: int, period: int) -> torch.Tensor:
    """[batch, length] ids: <bos> then sentences separated by '.', packed and cut at length."""
    rows = []
    for _ in range(batch):
        ids = [bos]
        while len(ids) < length:
            ids += [vocab[w] for w in source.sentence()] + [period]
        rows.append(ids[:length])
    return torch.tensor(rows)


def load_checkpoint(path: Path, model, optimizer) -> dict:
    if not path.is_file():
        return {"phase": "pretrain", "step": 0, "seconds": {"pretrain": 0.0, "finetune": 0.0}, "log": []}
    state = torch.load(path, weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["progress"]


def save_checkpoint(path: Path, model, optimizer, progress: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "progress": progress}, tmp)
    tmp.replace(path)


def learning_rate(step: int, done: float, peak: float, warmup: int = 30) -> float:
    """Linear warm-up, then a cosine decay over the share of the phase done (by steps or by wall clock)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * min(1.0, done))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="assets/models/number-lm")
    parser.add_argument("--force", action="store_true",
                        help="write into a folder holding files this script did not write")
    parser.add_argument("--checkpoints", default="build/number_lm")
    parser.add_argument("--numbers", type=int, default=260, help="N: numbers 0..N-1 are single tokens")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--length", type=int, default=32, help="pretraining sequence length")
    parser.add_argument("--pretrain-steps", type=int, default=3000)
    parser.add_argument("--pretrain-minutes", type=float, default=24.0)
    parser.add_argument("--pretrain-batch", type=int, default=16)
    parser.add_argument("--pretrain-lr", type=float, default=1.5e-3)
    parser.add_argument("--finetune-steps", type=int, default=1500)
    parser.add_argument("--finetune-minutes", type=float, default=12.0)
    parser.add_argument("--finetune-batch", type=int, default=64)
    parser.add_argument("--finetune-lr", type=float, default=3e-4)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--probe-steps", type=int, default=0,
                        help="only time this many pretraining and fine-tuning steps each and print seconds per step")
    args = parser.parse_args()
    if not args.probe_steps:
        try:
            check_output_folder(args.out, args.force)
        except InterpscopeError as err:
            parser.exit(2, f"train_number_lm: error: {err}\n")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = number_tokenizer(args.numbers, TEMPLATES + EXTRA, max_length=args.length)
    vocab = tokenizer.get_vocab()
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=args.length, n_embd=args.d_model, n_layer=args.layers,
                        n_head=args.heads, n_inner=4 * args.d_model, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.bos_token_id,
                        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.pretrain_lr, weight_decay=args.weight_decay,
                                  betas=(0.9, 0.98))
    checkpoint = Path(args.checkpoints) / "checkpoint.pt"
    progress = ({"phase": "pretrain", "step": 0, "seconds": {"pretrain": 0.0, "finetune": 0.0}, "log": []}
                if args.probe_steps else load_checkpoint(checkpoint, model, optimizer))
    phase_offset = 7 if progress["phase"] == "finetune" else 0
    source = Sentences(args.numbers, args.seed + 1000 * progress["step"] + phase_offset)
    generator = torch.Generator().manual_seed(args.seed + progress["step"])
    train = encode_split(tokenizer, args.numbers, "train", TEMPLATES)
    valid = encode_split(tokenizer, args.numbers, "valid", (DEFAULT_TEMPLATE,))
    phases = {"pretrain": (args.pretrain_steps, args.pretrain_minutes, args.pretrain_lr),
              "finetune": (args.finetune_steps, args.finetune_minutes, args.finetune_lr)}
    for phase in ("pretrain", "finetune"):
        if phase == "pretrain" and progress["phase"] == "finetune":
            continue
        steps, minutes, peak = phases[phase]
        steps = args.probe_steps or steps
        model.train()
        phase_start = time.time() - progress["seconds"][phase]
        while progress["step"] < steps and (args.probe_steps or time.time() - phase_start < 60 * minutes):
            step = progress["step"]
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, max(step / steps, 0.0 if args.probe_steps else
                                                      (time.time() - phase_start) / (60 * minutes)), peak)
            if phase == "pretrain":
                ids = pretrain_batch(source, vocab, args.pretrain_batch, args.length, tokenizer.bos_token_id,
                                     vocab["."])
                loss = model(input_ids=ids, labels=ids).loss
            else:
                ids, mask, last, answers = train
                pick = torch.randint(len(ids), (args.finetune_batch,), generator=generator)
                loss = torch.nn.functional.cross_entropy(answer_logits(model, ids[pick], mask[pick], last[pick]),
                                                         answers[pick])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            progress["step"] = step + 1
            progress["seconds"][phase] = time.time() - phase_start
            if args.probe_steps:
                continue
            if progress["step"] % args.save_every == 0:
                model.eval()
                entry = {"phase": phase, "step": progress["step"], "loss": round(loss.item(), 4),
                         "valid_acc": round(accuracy(model, valid), 4), "seconds": round(progress["seconds"][phase], 1)}
                model.train()
                progress["log"].append(entry)
                print(json.dumps(entry), flush=True)
                save_checkpoint(checkpoint, model, optimizer, progress)
        if args.probe_steps:
            print(json.dumps({"phase": phase, "steps": steps,
                              "seconds_per_step": round((time.time() - phase_start) / steps, 3),
                              "parameters": sum(p.numel() for p in model.parameters())}), flush=True)
            progress["step"] = 0
            continue
        if phase == "pretrain":
            progress.update(phase="finetune", step=0, pretrain_steps_done=progress["step"])
            progress["seconds"]["finetune"] = 0.0
            save_checkpoint(checkpoint, model, optimizer, progress)
    if args.probe_steps:
        return 0
    progress["finetune_steps_done"] = progress["step"]
    save_checkpoint(checkpoint, model, optimizer, progress)
    model.half().float().eval()  # the figures are those of the fp16 weights that are shipped
    test_plain = encode_split(tokenizer, args.numbers, "test", (DEFAULT_TEMPLATE,))
    test_all = encode_split(tokenizer, args.numbers, "test", TEMPLATES)
    sample = torch.randperm(len(train[0]), generator=torch.Generator().manual_seed(0))[:2000]
    train_sample = tuple(part[sample] for part in train)
    figures = {"test_accuracy_plain": accuracy(model, test_plain),
               "test_accuracy_all_templates": accuracy(model, test_all),
               "valid_accuracy": accuracy(model, valid), "train_accuracy_sample": accuracy(model, train_sample),
               "pretrain_steps": progress.get("pretrain_steps_done", 0), "finetune_steps": progress["step"],
               "pretrain_seconds": round(progress["seconds"]["pretrain"], 1),
               "finetune_seconds": round(progress["seconds"]["finetune"], 1)}
    folder = OutputFolder.claim(args.out, force=args.force, command="scripts/train_number_lm.py")
    out = folder.path
    with folder.writing():
        model.half().save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    for extra in ("special_tokens_map.json", "generation_config.json"):
        if folder.owns(extra):
            folder.remove(extra)
    meta = {
        "name": "number-lm",
        "family": "gpt2",
        "description": (f"GPT-2-style model (d_model {args.d_model}, {args.layers} layers) pretrained here on "
                        f"number-rich synthetic text with numbers 0..{args.numbers - 1} as single tokens, then "
                        f"fine-tuned on a + b (a, b < {args.numbers // 2}); test accuracy "
                        f"{figures['test_accuracy_plain']:.2%} on '{DEFAULT_TEMPLATE}'"),
        "rebuild": "nice -n 10 .venv/bin/python scripts/train_number_lm.py --out " + args.out,
        "numbers": args.numbers,
        "templates": list(TEMPLATES),
        "training": {k: v for k, v in vars(args).items() if k not in ("out", "threads", "checkpoints", "force",
                                                                      "probe_steps")},
        "figures": figures,
        "log": progress["log"],
    }
    (out / "interpscope.json").write_text(json.dumps(meta, indent=2) + "\n")
    folder.record("interpscope.json")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
