"""Bad input on the command line and in uploads: one line `interpscope: error: ...`, exit status 2, no traceback,
and checks that run before any model is loaded or any activation is cached.

Each case runs the real command line in-process against a temporary data directory. A case's stage says how far
loading may get: "args" cases fail the test if a model load even starts, "files" cases if transformers is asked to
load the weights (pickles are never handed to it); every case fails it if an activation cache folder appears.
"""
from __future__ import annotations

import codecs
import importlib
import pickle
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from interpscope.cli import main
from interpscope.config import InterpscopeError
from interpscope.inputs import MAX_UPLOAD_BYTES, decode_bytes
from interpscope.sae import SAEConfig, build_sae, save_sae
from interpscope.uploads import parse_examples
from tests.sae_store_tiny import save_tiny_lm

HOOK = "blocks.1.hook_resid_post"
CLI_MODULES = ("models_cmd", "relevance_cmd", "sae_cmd", "sae_store_cmd", "entropy_neurons_cmd", "fourier_cmd")
UTF16_ODD = codecs.BOM_UTF16_LE + "hello there".encode("utf-16-le") + b"!"
UTF16_SURROGATE = codecs.BOM_UTF16_LE + "hi ".encode("utf-16-le") + b"\x00\xd8" + "there".encode("utf-16-le")


def _sae_folder(folder: Path, poison: float | None = None) -> Path:
    """A small random SAE for the tiny model's residual stream; `poison` written into W_enc[0, 0]."""
    sae = build_sae(SAEConfig(d_in=32, d_sae=16, model_name="tiny", hook_name=HOOK, hook_layer=1))
    if poison is not None:
        with torch.no_grad():
            sae.W_enc[0, 0] = poison
    return save_sae(sae, folder)


def _broken_model(model: Path, folder: Path, damage) -> Path:
    shutil.copytree(model, folder)
    damage(folder)
    return folder


def _poison_weights(value: float):
    def damage(folder: Path) -> None:
        tensors = load_file(str(folder / "model.safetensors"))
        tensors["transformer.h.1.mlp.c_fc.weight"][3, 5] = value
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return damage


def _truncate(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _pickle_only(suffix: str):
    def damage(folder: Path) -> None:
        (folder / "model.safetensors").unlink()
        (folder / f"pytorch_model{suffix}").write_bytes(pickle.dumps({"weight": [1.0]}))
    return damage


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Every file and folder the cases point at (built once; the cases must leave them as they are)."""
    root = tmp_path_factory.mktemp("bad-inputs")
    model = save_tiny_lm(root / "model")
    paths = {
        "model": model, "sae": _sae_folder(root / "sae"),
        "nan_sae": _sae_folder(root / "nan-sae", float("nan")),
        "inf_sae": _sae_folder(root / "inf-sae", float("inf")),
        "truncated_model": _broken_model(model, root / "truncated", _truncate),
        "garbage_model": _broken_model(model, root / "garbage", lambda f: (f / "model.safetensors").write_bytes(
            b"\xff" * 64)),
        "bin_model": _broken_model(model, root / "bin", _pickle_only(".bin")),
        "pt_model": _broken_model(model, root / "pt", _pickle_only(".pt")),
        "no_weights_model": _broken_model(model, root / "noweights", lambda f: (f / "model.safetensors").unlink()),
        "nan_model": _broken_model(model, root / "nan-model", _poison_weights(float("nan"))),
        "inf_model": _broken_model(model, root / "inf-model", _poison_weights(float("-inf"))),
        "foreign": root / "foreign", "a_file": root / "a-file.txt", "missing": root / "no" / "such" / "folder",
    }
    (paths["foreign"] / "sub").mkdir(parents=True)
    (paths["foreign"] / "notes.txt").write_text("keep me", encoding="utf-8")
    (paths["foreign"] / "sub" / "data.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    paths["a_file"].write_text("not a folder", encoding="utf-8")
    uploads = {"odd.txt": UTF16_ODD, "surrogate.txt": UTF16_SURROGATE, "odd.csv": UTF16_ODD,
               "surrogate.jsonl": UTF16_SURROGATE, "latin1.txt": "café".encode("latin-1"), "empty.txt": b"",
               "binary.txt": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "huge.txt": b"a" * (MAX_UPLOAD_BYTES + 1)}
    for name, data in uploads.items():
        (root / name).write_bytes(data)
        paths[name.replace(".", "_")] = root / name
    return {name: str(path) for name, path in paths.items()}


@dataclass
class Case:
    argv: tuple[str, ...]
    words: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    stage: str = "args"  # fails before: "args" any model is loaded, "files" transformers opens the weights


def _train(*extra: str) -> tuple[str, ...]:
    return ("sae", "train", "--model", "{model}", "--hook", HOOK, "--tokens", "2048", "--cache-tokens", "2000",
            "--context", "32", "--batch-size", "256", "--width", "32", "--out", "{tmp}/run", *extra)


CASES = {
    # text files and typed text
    "utf16-odd-bytes": Case(("predict", "--model", "{model}", "--file", "{odd_txt}"), ("UTF-16", "odd.txt")),
    "utf16-lone-surrogate": Case(("predict", "--model", "{model}", "--file", "{surrogate_txt}"),
                                 ("UTF-16", "surrogate")),
    "explain-utf16-odd": Case(("explain", "--model", "{model}", "--file", "{odd_txt}"), ("UTF-16",)),
    "explain-csv-utf16-odd": Case(("explain", "--model", "{model}", "--file", "{odd_csv}"), ("UTF-16", "odd.csv")),
    "explain-jsonl-surrogate": Case(("explain", "--model", "{model}", "--file", "{surrogate_jsonl}", "--row", "0"),
                                    ("UTF-16",)),
    "text-lone-surrogate": Case(("predict", "--model", "{model}", "--text", "bad \udcff byte"), ("surrogate",)),
    "latin1-file": Case(("predict", "--model", "{model}", "--file", "{latin1_txt}"), ("not valid UTF-8",)),
    "empty-file": Case(("predict", "--model", "{model}", "--file", "{empty_txt}"), ("empty",)),
    "binary-file": Case(("explain", "--model", "{model}", "--file", "{binary_txt}"), ("binary",)),
    "huge-file": Case(("predict", "--model", "{model}", "--file", "{huge_txt}"), ("the limit is 20 MiB",)),
    "negative-row": Case(("explain", "--model", "{model}", "--file", "{latin1_txt}", "--row", "-1"),
                         ("--row", "0 or more")),
    # model folders and names
    "truncated-safetensors": Case(("predict", "--model", "{truncated_model}", "--text", "hi"),
                                  ("model.safetensors", "truncated"), stage="files"),
    "garbage-safetensors": Case(("predict", "--model", "{garbage_model}", "--text", "hi"),
                                ("not a readable safetensors",), stage="files"),
    "pickle-bin-model": Case(("predict", "--model", "{bin_model}", "--text", "hi"),
                             ("pytorch_model.bin", "pickle", "arbitrary code"), stage="files"),
    "pickle-pt-model": Case(("explain", "--model", "{pt_model}", "--text", "hi"), ("pytorch_model.pt", "pickle"),
                            stage="files"),
    "no-weights-model": Case(("predict", "--model", "{no_weights_model}", "--text", "hi"), ("no model weights",),
                             stage="files"),
    "nan-model-weights": Case(("predict", "--model", "{nan_model}", "--text", "hi"),
                              ("transformer.h.1.mlp.c_fc.weight", "NaN"), stage="model"),
    "inf-model-weights": Case(("explain", "--model", "{inf_model}", "--text", "hi"),
                              ("transformer.h.1.mlp.c_fc.weight", "infinite"), stage="model"),
    "model-name-10000-chars": Case(("predict", "--model", "m" * 10_000, "--text", "hi"), ("10,000 characters",),
                                   stage="files"),
    # output files checked before the work
    "json-into-missing-folder": Case(("explain", "--model", "{model}", "--text", "hi", "--json", "{missing}/r.json"),
                                     ("--json", "does not exist")),
    "png-into-missing-folder": Case(("explain", "--model", "{model}", "--text", "hi", "--png", "{missing}/r.png"),
                                    ("--png", "does not exist")),
    "json-onto-a-folder": Case(("explain", "--model", "{model}", "--text", "hi", "--json", "{foreign}"),
                               ("is a folder",)),
    "eval-out-missing-folder": Case(("sae", "eval", "--sae", "{sae}", "--model", "{model}", "--json", "--out",
                                     "{missing}/e.json"), ("--out", "does not exist")),
    "feature-out-missing-folder": Case(("sae", "feature", "--sae", "{sae}", "--id", "1", "--json", "--out",
                                        "{missing}/f.json"), ("--out", "does not exist")),
    # environment
    "max-tokens-not-a-number": Case(("predict", "--model", "{model}", "--text", "hi"), ("INTERPSCOPE_MAX_TOKENS",),
                                    env={"INTERPSCOPE_MAX_TOKENS": "abc"}),
    "max-tokens-zero": Case(("predict", "--model", "{model}", "--text", "hi"), ("INTERPSCOPE_MAX_TOKENS",),
                            env={"INTERPSCOPE_MAX_TOKENS": "0"}),
    "data-dir-is-a-file": Case(("predict", "--text", "hi"), ("INTERPSCOPE_DATA_DIR", "is a file"),
                               env={"INTERPSCOPE_DATA_DIR": "{a_file}"}),
    # sae train: settings checked before the model loads and before activations are cached
    "train-unknown-arch": Case(_train("--arch", "foo"), ("Unknown SAE architecture", "foo")),
    "train-unknown-arch-in-list": Case(_train("--arch", "relu,bogus", "--l1", "1"), ("bogus",)),
    "train-width-zero": Case(_train("--width", "0"), ("--width", "positive")),
    "train-width-negative": Case(_train("--width", "-3"), ("--width", "positive")),
    "train-lr-zero": Case(_train("--lr", "0"), ("--lr", "greater than 0")),
    "train-lr-nan": Case(_train("--lr", "nan"), ("--lr", "finite")),
    "train-l1-negative": Case(_train("--l1", "-1"), ("--l1", "0 or more")),
    "train-k-zero": Case(_train("--arch", "topk", "--k", "0"), ("--k", "positive")),
    "train-k-over-width": Case(_train("--arch", "topk", "--k", "99"), ("--k", "width 32")),
    "train-batch-zero": Case(_train("--batch-size", "0"), ("--batch-size", "positive")),
    "train-context-one": Case(_train("--context", "1"), ("--context", "at least 2")),
    "train-decay-fraction": Case(_train("--decay-fraction", "1.5"), ("--decay-fraction", "from 0 to 1")),
    "train-resample-at": Case(_train("--resample-at", "0.2,1.2"), ("--resample-at", "between 0 and 1")),
    "train-tokens-not-a-number": Case(_train("--tokens", "lots"), ("--tokens", "whole number")),
    "train-cache-below-context": Case(_train("--cache-tokens", "20"), ("--cache-tokens", "one window")),
    "train-eval-tokens-two": Case(_train("--eval-tokens", "2"), ("--eval-tokens", "0 (skip) or at least 3")),
    "train-out-is-a-file": Case(_train("--out", "{a_file}"), ("is a file",)),
    "train-out-foreign-folder": Case(_train("--out", "{foreign}"), ("did not write", "notes.txt", "--force")),
    "train-hook-out-of-range": Case(_train("--hook", "blocks.9.hook_resid_post"), ("layer 9 out of range",),
                                    stage="model"),
    "train-hook-unknown": Case(_train("--hook", "blocks.0.resid"), ("Unknown hook point",), stage="model"),
    # sae eval / search / feature / store
    "eval-tokens-negative": Case(("sae", "eval", "--sae", "{sae}", "--tokens", "-5"), ("--tokens", "positive")),
    "eval-context-zero": Case(("sae", "eval", "--sae", "{sae}", "--context", "0"), ("--context", "at least 3")),
    "eval-tokens-below-context": Case(("sae", "eval", "--sae", "{sae}", "--tokens", "100"),
                                      ("--tokens (100)", "--context (128)")),
    "eval-nan-sae": Case(("sae", "eval", "--sae", "{nan_sae}", "--model", "{model}"), ("W_enc", "NaN", "refused")),
    "eval-inf-sae": Case(("sae", "eval", "--sae", "{inf_sae}", "--model", "{model}"), ("W_enc", "infinite")),
    "search-limit-negative": Case(("sae", "search", "--sae", "{sae}", "--limit", "-5", "word"),
                                  ("--limit", "positive")),
    "search-limit-zero": Case(("sae", "search", "--sae", "{sae}", "--limit", "0", "word"), ("--limit",)),
    "feature-id-negative": Case(("sae", "feature", "--sae", "{sae}", "--id", "-1"), ("--id", "0 or more")),
    "store-nan-sae": Case(("sae", "store", "--sae", "{nan_sae}", "--model", "{model}", "--out", "{tmp}/s"),
                          ("NaN",)),
    "store-tokens-zero": Case(("sae", "store", "--sae", "{sae}", "--tokens", "0"), ("--tokens", "positive")),
    "store-batch-zero": Case(("sae", "store", "--sae", "{sae}", "--batch-size", "0"), ("--batch-size",)),
    "store-eval-tokens-negative": Case(("sae", "store", "--sae", "{sae}", "--eval-tokens", "-1"), ("--eval-tokens",)),
    "store-tokens-below-context": Case(("sae", "store", "--sae", "{sae}", "--tokens", "64", "--context", "128"),
                                       ("--tokens (64)", "one window")),
    "store-eval-tokens-one": Case(("sae", "store", "--sae", "{sae}", "--eval-tokens", "1"), ("--eval-tokens",)),
    "store-out-foreign-folder": Case(("sae", "store", "--sae", "{sae}", "--model", "{model}", "--out", "{foreign}"),
                                     ("did not write", "--force")),
    # other commands' numbers
    "neurons-top-negative": Case(("neurons", "--model", "{model}", "--top", "-1"), ("--top",)),
    "ablate-seq-len-one": Case(("neurons", "ablate", "--model", "{model}", "--neurons", "0.1", "--seq-len", "1"),
                               ("--seq-len", "at least 2")),
    "fourier-numbers-too-few": Case(("fourier", "spectrum", "--model", "{model}", "--numbers", "5"),
                                    ("--numbers", "from 10 to 2000")),
    "fourier-prompts-zero": Case(("fourier", "filter", "--model", "{model}", "--kind", "low", "--modules", "attn",
                                  "--prompts", "0"), ("--prompts", "positive")),
}


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "data"
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(folder))
    monkeypatch.delenv("INTERPSCOPE_MAX_TOKENS", raising=False)
    return folder


def _snapshot(folder: str) -> dict[str, bytes]:
    root = Path(folder)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_and_exit_2(name, files, data_dir, tmp_path, monkeypatch, capsys):
    case = CASES[name]
    values = dict(files, tmp=str(tmp_path))
    argv = [part.format(**values) if "{" in part else part for part in case.argv]
    for key, value in case.env.items():
        monkeypatch.setenv(key, value.format(**values))
    loads: list[str] = []

    def refuse(*args, **kwargs):
        loads.append(name)
        raise AssertionError(f"{name}: loading went further than the check allows")

    if case.stage == "args":
        for module in CLI_MODULES:
            monkeypatch.setattr(importlib.import_module(f"interpscope.cli.{module}"), "load_from_args", refuse)
    elif case.stage == "files":
        monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    foreign_before = _snapshot(files["foreign"])
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interpscope: error: "), err
    for word in case.words:
        assert word in lines[0], (word, lines[0])
    assert not loads
    assert not (data_dir / "activations").exists(), "activations were cached before the input was refused"
    assert not (tmp_path / "run").exists() and not (tmp_path / "s").exists()
    assert _snapshot(files["foreign"]) == foreign_before
    assert sorted(p.name for p in Path(files["foreign"]).iterdir()) == ["notes.txt", "sub"]


UPLOADS = {
    "odd.txt": ("UTF-16",), "surrogate.txt": ("UTF-16", "surrogate"), "odd.csv": ("UTF-16",),
    "surrogate.jsonl": ("UTF-16",), "latin1.txt": ("not valid UTF-8",), "empty.txt": ("empty",),
    "binary.txt": ("binary",), "huge.txt": ("MiB", "the limit is 20 MiB"),
}


@pytest.mark.parametrize("upload", list(UPLOADS))
@pytest.mark.parametrize("reader", ["decode_bytes", "parse_examples"])
def test_bad_uploads_raise_a_clear_error(upload, reader, files):
    """What the pages call with an uploaded file's bytes: an InterpscopeError naming the file, never another error."""
    data = Path(files[upload.replace(".", "_")]).read_bytes()
    with pytest.raises(InterpscopeError) as caught:
        decode_bytes(data, upload) if reader == "decode_bytes" else parse_examples(data, upload)
    message = str(caught.value)
    assert "\n" not in message and upload in message
    for word in UPLOADS[upload]:
        assert word in message


@pytest.mark.parametrize("folder, words", [
    ("truncated_model", ("truncated",)), ("bin_model", ("pickle",)), ("pt_model", ("pickle",)),
    ("no_weights_model", ("no model weights",)), ("nan_model", ("NaN", "transformer.h.1.mlp.c_fc.weight")),
])
def test_load_model_refuses_bad_folders(folder, words, files):
    """What the pages call to open a model folder: a clear InterpscopeError before anything unsafe is opened."""
    from interpscope.models.loading import load_model

    with pytest.raises(InterpscopeError) as caught:
        load_model(files[folder], device="cpu")
    for word in words:
        assert word in str(caught.value)


def test_a_good_utf16_upload_still_reads():
    assert decode_bytes("héllo wörld".encode("utf-16"), "ok.txt") == "héllo wörld"
    assert parse_examples("one\ntwo\n".encode("utf-16"), "ok.txt") == ["one", "two"]


def test_huge_numbers_deep_nesting_and_thread_counts_are_refused_in_one_line(tmp_path, capsys):
    """The CLI battery's tracebacks and crash (issue 45.18): a count past int64 (OverflowError deep in torch), a
    .jsonl line of 100,000 nested brackets (RecursionError), `sae bench --threads 100000` (a segfault in
    torch.set_num_threads) and a word count that silently ran over the whole vocabulary for minutes."""
    from interpscope.cli import main
    from interpscope.config import ASSETS_DIR

    sae = str(next(p for p in (ASSETS_DIR / "saes").iterdir() if (p / "cfg.json").is_file()))
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    cases = [(["graph", "--text", "hi", "--max-feature-nodes", "1180591620717411303424"], "is too large"),
             (["explain", "--file", str(deep)], "nested too deeply"),
             (["sae", "bench", "--sae", sae, "--threads", "100000"], "must be from 1 to 256"),
             (["sae", "bench", "--sae", sae, "--words", "100000000000"], "must be from 1 to 20000")]
    for argv, said in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err and err.count("\n") == 1, err
