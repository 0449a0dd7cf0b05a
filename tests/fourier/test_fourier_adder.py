"""The shipped addition model (assets/models/adder): what it is, how well it adds, and what filters do to it."""
from __future__ import annotations

import json

import pytest
import torch

from interpscope.config import ASSETS_DIR
from interpscope.fourier.addition import run_addition
from interpscope.fourier.data import DEFAULT_TEMPLATE, split_pairs
from interpscope.fourier.filters import filter_table
from interpscope.fourier.probe import single_token_setup
from interpscope.models import load_model

FOLDER = ASSETS_DIR / "models" / "adder"


@pytest.fixture(scope="module")
def adder():
    return load_model("adder", device="cpu")


@pytest.fixture(scope="module")
def meta() -> dict:
    return json.loads((FOLDER / "interpscope.json").read_text())


def test_asset_is_small_and_self_describing(meta):
    total = sum(f.stat().st_size for f in FOLDER.iterdir() if f.is_file())
    assert total < 25 * 2 ** 20
    assert meta["name"] == "adder" and meta["family"] == "gpt2"
    assert meta["rebuild"].startswith("nice -n 10 .venv/bin/python scripts/train_adder.py")
    assert "from scratch" in meta["description"]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(FOLDER))
    n_numbers = meta["numbers"]
    assert [len(tokenizer(str(n), add_special_tokens=False).input_ids) for n in (0, 7, n_numbers - 1)] == [1, 1, 1]
    assert tokenizer.convert_ids_to_tokens(tokenizer(f"12+{n_numbers - 1}=").input_ids) == \
        ["<bos>", "12", "+", str(n_numbers - 1), "="]


def test_accuracy_from_real_argmax_matches_backend_and_recorded_figure(adder, meta):
    n_numbers = meta["numbers"]
    pairs = split_pairs(n_numbers, "test")
    correct = 0
    with torch.no_grad():
        for a, b in pairs:
            ids = adder.tokenizer(DEFAULT_TEMPLATE.format(a=a, b=b), return_tensors="pt").input_ids
            top = int(adder.model(input_ids=ids).logits[0, -1].argmax())
            correct += adder.tokenizer.decode([top]).strip() == str(a + b)
    independent = correct / len(pairs)
    numbers = single_token_setup(adder, None)
    assert numbers.n_numbers == n_numbers
    backend = run_addition(adder, pairs, DEFAULT_TEMPLATE, numbers=numbers)
    assert backend.accuracy == pytest.approx(independent, abs=1e-12)
    assert meta["figures"]["test_accuracy_plain"] == pytest.approx(independent, abs=1e-12)
    assert f"{independent:.2%}" in meta["description"]
    assert independent > 0.5  # it learned to add, well above chance (1/N)


def test_filters_change_accuracy(adder, meta):
    numbers = single_token_setup(adder, None)
    pairs = split_pairs(numbers.n_numbers, "test")[:150]
    table = filter_table(adder, numbers, pairs)
    baseline = table.rows[0]
    assert baseline.kind == "none"
    assert all(not row.zeroes_everything for row in table.rows)  # d_model leaves room for every filter
    changes = [abs(row.accuracy - baseline.accuracy) for row in table.rows[1:]]
    assert max(changes) > 0.2
    assert all(row.loss >= 0 for row in table.rows)
    counts = [row.error_counts for row in table.rows]
    for row, count in zip(table.rows, counts, strict=True):
        assert count["wrong"] == int(round((1 - row.accuracy) * len(pairs)))
