"""The memory estimator (interpscope.models.memory) against real models and measured peaks, and the refusal of a
run or a load that would not fit: refused before it starts, the message naming the figure and what to change."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers as hf

from interpscope.cli import main
from interpscope.config import InterpscopeError
from interpscope.models.memory import (
    RUN_OVERHEAD,
    VIEWS,
    check_fits,
    estimate_for,
    shape_from_config,
    view_memory,
)
from tests.sae_store_tiny import save_tiny_lm

ROOT = Path(__file__).resolve().parents[2]
_IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
CONFIGS = {
    "llama-tied": hf.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                                 num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, **_IDS),
    "llama-untied": hf.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, **_IDS),
    "qwen3": hf.Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
                            **_IDS),
    "gemma3": hf.Gemma3TextConfig(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                                  num_attention_heads=4, num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32,
                                  sliding_window=8, **_IDS),
    "gpt2": hf.GPT2Config(vocab_size=256, n_embd=64, n_layer=3, n_head=4, n_positions=64),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_shape_counts_the_parameters_a_model_of_that_config_has(name):
    config = CONFIGS[name]
    model = hf.AutoModelForCausalLM.from_config(config)
    shape = shape_from_config(config)
    real = sum(p.numel() for p in model.parameters())  # tied weights are one parameter
    assert abs(shape.n_params - real) / real < 0.02, (shape.n_params, real)
    assert (shape.n_layers, shape.d_model, shape.vocab) == (3, 64, 256)
    assert shape.gated == (name != "gpt2")


def test_bfloat16_halves_the_weights_and_the_activations():
    shape = shape_from_config(CONFIGS["llama-tied"])
    full, half = view_memory(shape, "gradient", 128, "float32"), view_memory(shape, "gradient", 128, "bfloat16")
    assert half.weight_bytes * 2 == full.weight_bytes
    assert half.activation_bytes - RUN_OVERHEAD < 0.6 * (full.activation_bytes - RUN_OVERHEAD)
    assert set(estimate_for(shape, 64).tidy()[0]) >= {"weights_mib", "activations_mib", "gradients_mib", "fits"}


def test_a_run_that_would_not_fit_is_refused_naming_the_figure_and_the_fix():
    shape = shape_from_config(CONFIGS["llama-tied"])
    need = view_memory(shape, "attnlrp", 512, "float32").run_bytes
    with pytest.raises(InterpscopeError) as caught:
        check_fits(shape, "attnlrp", 512, "float32", free=need // 2, model="tiny")
    message = str(caught.value)
    assert f"{need / 2**30:,.2f} GiB" in message and f"{(need // 2) / 2**30:,.2f} GiB is free" in message
    assert "Nothing was run" in message
    longest = int(re.search(r"at most (\d+) tokens", message).group(1))
    assert 1 <= longest < 512
    check_fits(shape, "attnlrp", longest, "float32", free=need // 2)  # the length it names fits...
    with pytest.raises(InterpscopeError):
        check_fits(shape, "attnlrp", longest + 1, "float32", free=need // 2)  # ...and is the longest that does
    check_fits(shape, "attnlrp", 512, "float32", free=2 * need)


def test_a_model_not_yet_loaded_counts_its_weights_and_suggests_bfloat16():
    shape = shape_from_config(CONFIGS["llama-untied"])
    row = view_memory(shape, "predict", 8, "float32")
    free = int((row.total_bytes - row.weight_bytes / 2) / 0.9)  # fits in bfloat16, not in float32
    check_fits(shape, "predict", 8, "float32", free=free, loaded=True)
    with pytest.raises(InterpscopeError, match=r"weights .*bfloat16"):
        check_fits(shape, "predict", 8, "float32", free=free, loaded=False)


def _forget(folder: str) -> None:
    """Drop this folder's cached copies only (clearing the whole cache would also drop the session's bundled model,
    which later tests hold as the one copy)."""
    from interpscope.models.loading import CACHE

    with CACHE._lock:
        for key in [k for k in CACHE._models if str(folder) in str(k[0])]:
            del CACHE._models[key]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return str(save_tiny_lm(tmp_path_factory.mktemp("memory") / "tiny-gpt2"))


def test_a_folder_model_gets_its_estimate_printed_before_the_run(tiny_folder, capsys):
    assert main(["predict", "--model", tiny_folder, "--device", "cpu", "--text", "The cat sat", "--json"]) == 0
    captured = capsys.readouterr()
    assert "memory estimate for predict on" in captured.err and "GiB free" in captured.err
    assert json.loads(captured.out)["schema"] == "interpscope.prediction"  # stdout keeps only the document


def test_the_cli_refuses_a_predict_run_before_it_starts(tiny_folder, monkeypatch, capsys):
    import importlib

    import interpscope.limits
    from interpscope.models.loading import load_model

    predict_module = importlib.import_module("interpscope.predict")  # the module, not the API function of that name

    _forget(tiny_folder)
    lm = load_model(tiny_folder, device="cpu")  # loaded while memory is plenty
    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    monkeypatch.setattr(interpscope.limits, "free_bytes", lambda device: 1024)  # 1 KiB free from now on
    ran = []
    monkeypatch.setattr(predict_module, "predict_next", lambda *a, **k: ran.append(1))
    code = main(["predict", "--model", tiny_folder, "--device", "cpu", "--text", "The cat sat on the mat"])
    err = capsys.readouterr().err
    assert code == 2 and not ran
    assert "needs about" in err and "GiB is free" in err and "tokens" in err and "Nothing was run" in err
    assert weights > 0


def test_loading_refuses_weights_that_do_not_fit_before_opening_them(tiny_folder, monkeypatch):
    import interpscope.limits
    import interpscope.models.loading as loading
    from interpscope.models.memory import weight_bytes

    _forget(tiny_folder)
    monkeypatch.setattr(interpscope.limits, "free_bytes", lambda device: 1024)
    opened = []
    monkeypatch.setattr(loading, "_from_pretrained", lambda *a, **k: opened.append(1))
    with pytest.raises(InterpscopeError) as caught:
        loading.load_model(tiny_folder, device="cpu")
    need = weight_bytes(tiny_folder, torch.float32)
    assert not opened and need and f"{need / 2**30:,.2f} GiB" in str(caught.value)
    assert "Nothing was loaded" in str(caught.value)
    monkeypatch.setenv("INTERPSCOPE_SKIP_MEMORY_CHECK", "1")
    monkeypatch.setattr(loading, "_from_pretrained", lambda *a, **k: (_ for _ in ()).throw(OSError("opened")))
    with pytest.raises(InterpscopeError, match="opened"):  # past the check: transformers is reached
        loading.load_model(tiny_folder, device="cpu")


def test_models_estimate_prints_the_table_without_loading(tiny_folder, capsys):
    from interpscope.models.loading import load_model

    _forget(tiny_folder)
    assert main(["models", "estimate", "--model", tiny_folder, "--tokens", "32", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == "interpscope.memory_estimate"
    assert [row["view"] for row in document["rows"]] == list(VIEWS)
    assert document["parameters"] == load_model(tiny_folder, device="cpu").n_parameters()
    assert main(["models", "estimate", "--model", tiny_folder, "--tokens", "32", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "bfloat16" in out and "attnlrp" in out and "fits" in out
    assert main(["models", "estimate", "--model", "nobody/no-such-model", "--tokens", "8"]) == 2
    assert "not available offline" in capsys.readouterr().err


PROBE = r"""
import ctypes, gc, json, sys
from pathlib import Path
import torch
from transformers import LlamaConfig, LlamaForCausalLM
import interpscope.api as api
from interpscope.adapters import get_adapter
from interpscope.inputs import input_ids_for
from interpscope.models.loaded import LoadedModel
from interpscope.models.memory import RUN_OVERHEAD, shape_of, view_memory
from interpscope.models.tokenizers import gpt2_tokenizer
from interpscope.predict import predict_next

def high_water():
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024

tokenizer = gpt2_tokenizer()
torch.manual_seed(0)
config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                     num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
model = LlamaForCausalLM._from_config(config, attn_implementation="eager").eval()
for p in model.parameters():
    p.requires_grad_(False)
lm = LoadedModel("probe", model, tokenizer, get_adapter(model), torch.device("cpu"), torch.float32, "memory", 0.0)
text = " ".join(["the house by the road"] * 40)
tokens = int(input_ids_for(lm, text)[0].shape[1])
def runs(text, half):
    return {"predict": lambda: predict_next(lm, text, fresh=True),
            "gradient": lambda: api.explain(lm, text, "gradxinput"),
            "attnlrp": lambda: api.explain(lm, text, "attnlrp"),
            "heads": lambda: api.find_heads(lm, n_sequences=4, half_len=half)}
for run in runs("the house by the road", 3).values():  # every view's code imported, its scratch allocated
    run()
out = {}
for view, run in runs(text, tokens // 2).items():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    base = high_water()
    run()
    estimate = view_memory(shape_of(lm), view, tokens, torch.float32, sequences=4).run_bytes - RUN_OVERHEAD
    out[view] = [high_water() - base, estimate]
print(json.dumps(out))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="peak resident set needs Linux /proc")
def test_the_estimate_is_within_30_percent_of_measured_peaks():
    """Each view's run in one fresh process (a random Llama, d 256, 4 blocks, ~200 tokens): the peak resident set
    over the one before the run (VmHWM after /proc/self/clear_refs; every tensor its own mapping, so freed memory is
    returned) against the estimate without its first-run overhead: each view runs once on a short text first, so
    its code is imported and only the activations of the measured run count."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "backend"), str(ROOT)]))
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120,
                          check=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    for view, (measured, predicted) in figures.items():
        assert abs(predicted - measured) <= 0.3 * measured, (view, measured / 2**20, predicted / 2**20)


def test_a_page_run_is_checked_before_it_runs(monkeypatch):
    """The pages wrap each computation in run_checked (inside their shared-result cache): refused, it never runs;
    a method no estimate covers (view None) runs unchecked."""
    import interpscope.limits
    from interpscope.models.memory import run_checked
    from tests.sae_store_tiny import tiny_lm

    lm = tiny_lm()
    monkeypatch.setattr(interpscope.limits, "free_bytes", lambda device: 1024)
    ran: list[str] = []
    with pytest.raises(InterpscopeError, match="Nothing was run"):
        run_checked(lm, "attnlrp", "The cat sat on the mat", lambda: ran.append("attnlrp"))
    assert run_checked(lm, None, "The cat sat", lambda: ran.append("ig") or "done") == "done"
    assert ran == ["ig"]
