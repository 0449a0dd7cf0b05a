"""Train the bundled Mamba language model (mamba-tiny) on the bundled Jane Austen corpus, on a CPU.

A byte-level BPE tokenizer (the `tokenizers` library, trained on the train split only) and a small
MambaForCausalLM trained with next-token loss on random windows of the train split. The training forward is the
project's own pure-PyTorch Mamba forward (interpscope.relevance.mamba.forward, chunked scan: HF's fallback scan is a
Python loop and too slow for a CPU); the shipped weights are a plain HF checkpoint. Training stops after --minutes of
wall time, checkpointing as it goes. At the end the validation perplexity of the saved model, run through HF's own
forward, is compared with a unigram baseline (add-one smoothed train-split token frequencies) on the same
held-out tokens (valid split), and both are written to interpscope.json.

Rebuild:  nice -n 10 .venv/bin/python scripts/train_mamba.py --out assets/models/mamba-tiny --minutes 22 --force
(--force because the shipped folder predates the output marker; only the files this script writes are replaced.)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from interpscope.adapters import get_adapter  # noqa: E402
from interpscope.config import InterpscopeError  # noqa: E402
from interpscope.corpus import paragraphs, token_stream  # noqa: E402
from interpscope.outputs import OutputFolder  # noqa: E402
from interpscope.relevance.mamba.forward import backbone_forward  # noqa: E402

EOS = "<|endoftext|>"
REBUILD = "nice -n 10 .venv/bin/python scripts/train_mamba.py --out assets/models/mamba-tiny --minutes 22 --force"


def train_tokenizer(vocab_size: int):
    """Byte-level BPE on the train split: every string is encodable, decoding gives the text back."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(paragraphs(split="train"), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, bos_token=EOS, unk_token=EOS,
                                   pad_token=EOS, model_max_length=4096)


def build_model(vocab_size: int, d_model: int, layers: int, state: int):
    from transformers import MambaConfig, MambaForCausalLM

    config = MambaConfig(vocab_size=vocab_size, hidden_size=d_model, state_size=state, num_hidden_layers=layers,
                         expand=2, conv_kernel=4, tie_word_embeddings=True, eos_token_id=0, bos_token_id=0,
                         pad_token_id=0)
    return MambaForCausalLM(config)


@torch.no_grad()
def mean_nll_hf(model, chunks: torch.Tensor, batch: int = 8) -> float:
    """Mean next-token negative log-likelihood (nats) of the HF model's own forward over [N, T] chunks."""
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(chunks), batch):
        ids = chunks[start:start + batch]
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1]
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                       reduction="sum"))
        count += ids[:, 1:].numel()
    return total / count


def unigram_nll(train_ids: torch.Tensor, chunks: torch.Tensor, vocab_size: int) -> float:
    """Mean NLL (nats) of the same predicted tokens under add-one smoothed train-split token frequencies."""
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0
    log_prob = torch.log(counts / counts.sum())
    return float(-log_prob[chunks[:, 1:].reshape(-1)].mean())


def write_meta(folder: OutputFolder, extra: dict) -> None:
    meta = {"name": "mamba-tiny", "family": "mamba",
            "description": "Small Mamba LM trained by the project on the bundled Jane Austen corpus (byte-level "
                           "BPE); for MambaLRP and the other tools, offline.",
            "rebuild": REBUILD, **extra}
    (folder.path / "interpscope.json").write_text(json.dumps(meta, indent=2) + "\n")
    folder.record("interpscope.json")


def save_model(folder: OutputFolder, model) -> None:
    with folder.writing():
        model.save_pretrained(folder.path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="assets/models/mamba-tiny")
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--state", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=80)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--minutes", type=float, default=25.0, help="wall-clock training budget")
    parser.add_argument("--eval-tokens", type=int, default=16_000, help="held-out tokens for the perplexity")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the checkpoint and tokenizer already in --out (fresh optimizer)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true",
                        help="write into a folder holding files this script did not write (they are kept)")
    args = parser.parse_args()
    try:
        folder = OutputFolder.claim(args.out, force=args.force, command="scripts/train_mamba.py")
    except InterpscopeError as err:
        parser.exit(2, f"train_mamba: error: {err}\n")
    torch.manual_seed(args.seed)
    out = folder.path

    previous = {}
    if args.resume:
        from transformers import AutoTokenizer, MambaForCausalLM

        tokenizer = AutoTokenizer.from_pretrained(out)
        model = MambaForCausalLM.from_pretrained(out, dtype=torch.float32)
        previous = json.loads((out / "interpscope.json").read_text()).get("training", {})
    else:
        tokenizer = train_tokenizer(args.vocab)
        with folder.writing():
            tokenizer.save_pretrained(out)
        model = build_model(len(tokenizer), args.d_model, args.layers, args.state)
    train_ids = token_stream(tokenizer, paragraphs(split="train"))
    valid_ids = token_stream(tokenizer, paragraphs(split="valid"), max_tokens=args.eval_tokens)
    n_valid = valid_ids.numel() // args.seq_len
    valid_chunks = valid_ids[: n_valid * args.seq_len].view(n_valid, args.seq_len)
    print(f"tokens: train {train_ids.numel()}, valid {valid_chunks.numel()}", flush=True)

    adapter = get_adapter(model)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params}", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    budget = args.minutes * 60
    start = last_save = time.time()
    step, tokens_seen, smoothed = previous.get("steps", 0), previous.get("tokens_seen", 0), None
    minutes_before = previous.get("minutes", 0.0)
    model.train()
    while True:
        elapsed = time.time() - start
        if elapsed > budget:
            break
        fraction = elapsed / budget
        warm = min(1.0, (time.time() - start) / 60)
        lr = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * fraction)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        offsets = torch.randint(0, train_ids.numel() - args.seq_len - 1, (args.batch,))
        batch = torch.stack([train_ids[o:o + args.seq_len + 1] for o in offsets.tolist()])
        logits = backbone_forward(adapter, adapter.embedding()(batch[:, :-1]), chunked_scan=True)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        tokens_seen += batch[:, 1:].numel()
        value = loss.item()
        smoothed = value if smoothed is None else 0.95 * smoothed + 0.05 * value
        if step % 20 == 0:
            print(f"step {step} t={elapsed:.0f}s lr={lr:.2e} loss={smoothed:.3f}", flush=True)
        if time.time() - last_save > 180:
            save_model(folder, model)
            write_meta(folder, {"training": {"steps": step, "tokens_seen": tokens_seen, "train_loss": smoothed,
                                          "minutes": minutes_before + (time.time() - start) / 60}})
            last_save = time.time()

    save_model(folder, model)
    valid_nll = mean_nll_hf(model, valid_chunks)
    baseline_nll = unigram_nll(train_ids, valid_chunks, len(tokenizer))
    validation = {"split": "valid", "tokens": int(valid_chunks[:, 1:].numel()), "perplexity": math.exp(valid_nll),
                  "unigram_perplexity": math.exp(baseline_nll)}
    training = {"steps": step, "tokens_seen": tokens_seen, "train_loss": smoothed,
                "minutes": minutes_before + args.minutes,
                "parameters": n_params, "d_model": model.config.hidden_size, "layers": model.config.num_hidden_layers,
                "state": model.config.state_size,
                "seq_len": args.seq_len, "batch": args.batch, "vocab": len(tokenizer)}
    write_meta(folder, {"training": training, "validation": validation})
    print(json.dumps({"training": training, "validation": validation}, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
