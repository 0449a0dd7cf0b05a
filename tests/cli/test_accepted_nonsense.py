"""Issue 45.19, the case that must run rather than be refused: `sae bench` on a tokenizer with few single-token words
runs absorption on the words there are and says so (it refused below 100 words, though two are enough to fit and
test the probe). The refusals of 45.19 (a sweep table with NaN / string / missing figures, --target-class on a text
model, a ragged CSV row) are rows of tests/cli/test_bad_input_battery.py."""
from __future__ import annotations

import pytest

from interpscope.cli import main
from tests.sae_store_tiny import random_sae_folder, save_tiny_lm, tiny_lm


class FewTokens:
    """A tokenizer that is the first `size` ids of GPT-2's (31 single-token words at 300): a tiny vocabulary."""

    def __init__(self, tokenizer, size: int):
        self._tokenizer, self._size = tokenizer, size

    def __len__(self) -> int:
        return self._size

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("few-words")
    lm = tiny_lm()
    return {"lm": lm, "sae": random_sae_folder(lm, root / "sae", d_sae=16), "model": save_tiny_lm(root / "model")}


def test_bench_runs_absorption_on_the_words_a_tiny_tokenizer_has(tiny, tmp_path, monkeypatch):
    from interpscope.sae.bench.run import bench_sae

    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    lm = tiny["lm"]
    real = lm.tokenizer
    lm.tokenizer = FewTokens(real, 300)
    try:
        result = bench_sae(lm, tiny["sae"], metric_names="absorption", use_cache=False)
    finally:
        lm.tokenizer = real
    settings = result.metrics["absorption"].settings
    assert settings["words"] == 31 and settings["n_words"] == 2400
    assert "only 31 single-token word(s)" in settings["note"] and "fewer than the 2400 asked for" in settings["note"]
    assert result.metrics["absorption"].measure("first-letter probe accuracy").value is not None


def test_bench_command_says_it_ran_with_fewer_words(tiny, tmp_path, monkeypatch, capsys):
    from interpscope.sae.bench import absorption

    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    real = absorption.letter_words
    monkeypatch.setattr(absorption, "letter_words", lambda tokenizer, n, seed=0: real(FewTokens(tokenizer, 300), n,
                                                                                       seed))
    out = tmp_path / "bench.json"
    code = main(["sae", "bench", "--sae", str(tiny["sae"]), "--model", str(tiny["model"]), "--metrics",
                 "absorption", "--words", "500", "--no-cache", "--json", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "absorption: The tokenizer has only 31 single-token word(s)" in err and "500 asked for" in err
    assert out.is_file()


def test_bench_refuses_a_tokenizer_without_two_words(tiny, tmp_path, monkeypatch):
    from interpscope.config import InterpscopeError
    from interpscope.sae.bench.run import bench_sae

    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    lm = tiny["lm"]
    real = lm.tokenizer
    lm.tokenizer = FewTokens(real, 258)
    try:
        with pytest.raises(InterpscopeError, match="needs at least 2"):
            bench_sae(lm, tiny["sae"], metric_names="absorption", use_cache=False)
    finally:
        lm.tokenizer = real
