"""The bad-input battery: every subcommand given every kind of bad value (empty, binary, wrong encoding, huge,
NaN/inf, negative, out of range, unknown model, missing / unreadable / non-regular file, a pickle where
safetensors belongs, an output onto a folder or a file, a closed Ray port...). Each case runs the real command
line in-process and must end with exit status 2, exactly one line `interpscope: error: ...` on stderr, no
traceback, and nothing written: every file and folder under the test's folder and the shared fixtures is as
it was.

Cases are generated from tables (per subcommand x per kind of bad value), so a new option only needs a row.
"Unreadable" inputs are made with chmod 000 where that stops reads; as root (CI) chmod does not, so the same
cases deny the read with a PermissionError from open() in-process instead.
"""
from __future__ import annotations

import builtins
import codecs
import copy
import errno
import io
import json
import os
import pickle
import shutil
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from interpscope.cli import main
from interpscope.inputs import MAX_UPLOAD_BYTES
from tests.sae_store_tiny import HOOK, random_sae_folder, save_tiny_lm, tiny_lm

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    words: tuple[str, ...] = ()
    deny: str | None = None  # a fixture path whose reads fail with PermissionError
    env: dict = field(default_factory=dict)
    patch: str | None = None  # a name in PATCHES: how the machine misbehaves during the run (a full disk)


def _disk_full(monkeypatch) -> None:
    """The data directory's disk has 1 KiB left (what shutil.disk_usage reports; nothing is really full)."""
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**40, 2**40 - 1024, 1024))


PATCHES = {"disk-full": _disk_full}


def _closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Every input the cases point at, built once (the cases must leave them untouched)."""
    root = tmp_path_factory.mktemp("battery")
    model = save_tiny_lm(root / "model")
    lm = tiny_lm()
    sae = random_sae_folder(lm, root / "sae", d_sae=16)
    from interpscope.sae.store import build_store

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(root / "fixture-data"))
    try:
        store = build_store(lm, sae, root / "store", n_tokens=128, context_size=32, batch_size=2)
    finally:
        monkeypatch.undo()
    paths = {"model": model, "sae": sae, "store": store, "afile": root / "afile.txt", "adir": root / "adir",
             "foreign": root / "foreign", "missing": root / "no" / "such", "fifo": root / "fifo.txt"}
    paths["afile"].write_text("not a folder", encoding="utf-8")
    paths["adir"].mkdir()
    paths["folder_png"] = root / "folder.png"
    paths["folder_png"].mkdir()
    paths["foreign"].mkdir()
    (paths["foreign"] / "notes.txt").write_text("keep me", encoding="utf-8")
    os.mkfifo(paths["fifo"])
    texts = {"good.txt": b"The cat sat on the mat and looked out of the window.\n",
             "good.csv": b"text,label\nThe cat sat,a\nThe dog ran,b\n",
             "empty.txt": b"", "binary.txt": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
             "latin1.txt": "caf\u00e9 au lait".encode("latin-1"),
             "utf16odd.txt": codecs.BOM_UTF16_LE + "hello".encode("utf-16-le") + b"!",
             "huge.txt": b"a" * (MAX_UPLOAD_BYTES + 1), "denied.txt": b"a secret text\n",
             "denied.csv": b"text\nsecret\n"}
    for name, data in texts.items():
        (root / name).write_bytes(data)
        paths[name.replace(".", "_")] = root / name
    pickled = root / "pickle-model"
    shutil.copytree(model, pickled)
    (pickled / "model.safetensors").unlink()
    (pickled / "pytorch_model.bin").write_bytes(pickle.dumps({"weight": [1.0]}))
    truncated = root / "truncated-model"
    shutil.copytree(model, truncated)
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    pickled_sae = root / "pickle-sae"
    shutil.copytree(sae, pickled_sae)
    (pickled_sae / "sae_weights.safetensors").unlink()
    (pickled_sae / "sae_weights.pt").write_bytes(pickle.dumps({"W_enc": [1.0]}))
    garbage_cfg = root / "garbage-cfg-sae"
    shutil.copytree(sae, garbage_cfg)
    (garbage_cfg / "cfg.json").write_bytes(b"{not json")
    denied_sae = root / "denied-sae"
    shutil.copytree(sae, denied_sae)
    dir_cfg = root / "dir-cfg-sae"
    shutil.copytree(sae, dir_cfg)
    (dir_cfg / "cfg.json").unlink()
    (dir_cfg / "cfg.json").mkdir()
    paths.update(pickle_model=pickled, truncated_model=truncated, pickle_sae=pickled_sae,
                 garbage_cfg_sae=garbage_cfg, denied_sae=denied_sae, dir_cfg_sae=dir_cfg,
                 denied_cfg=denied_sae / "cfg.json")
    paths.update(_newer_inputs(root))
    paths.update(_reproduction_inputs(root, lm, paths))
    yield {name: str(path) for name, path in paths.items()}
    for name in ("denied_txt", "denied_csv", "denied_cfg"):
        os.chmod(paths[name], 0o644)


def _newer_inputs(root: Path) -> dict[str, Path]:
    """Inputs of the reproductions of issue 45.17-24: sweep tables with bad figures, ragged CSV files."""
    from interpscope.config import ASSETS_DIR

    shipped = ASSETS_DIR / "sae_sweeps" / "smollm2-135m-blocks.15-resid-post" / "sweep_table.json"
    table = json.loads(shipped.read_text(encoding="utf-8"))
    out: dict[str, Path] = {}
    for name, (row, key, value) in SWEEP_VARIANTS.items():
        document = copy.deepcopy(table)
        if value is _MISSING:
            del document["rows"][row][key]
        elif value is _FIRST_NAME:
            document["rows"][row][key] = document["rows"][0]["name"]
        else:
            document["rows"][row][key] = value
        out[f"sweep_{name}"] = root / f"sweep-{name}.json"
        out[f"sweep_{name}"].write_text(json.dumps(document), encoding="utf-8")
    out["sweep_list"] = root / "sweep-list.json"
    out["sweep_list"].write_text(json.dumps(table["rows"]), encoding="utf-8")
    for name, text in RAGGED.items():
        out[name] = root / f"{name}.csv"
        out[name].write_text(text, encoding="utf-8")
    # 45.23: folders whose files a --force run deleted or took for its own
    for name, marker in FORGED_MARKERS.items():  # an unfinished-build folder Interpscope did not make
        partial = root / f"forged-{name}" / "store.partial"
        partial.mkdir(parents=True)
        (partial / ".interpscope-output.json").write_text(json.dumps(marker), encoding="utf-8")
        for listed in ("notes.txt", "chunk_00000.npz"):
            (partial / listed).write_text("a person's file", encoding="utf-8")
        out[f"forged_{name}"] = partial.parent
    for name in ("rows.jsonl", "spec.json", "aggregates.json", "labels.json", "train_meta.json", "sweep.json",
                 "sweep_table.csv"):  # a person's file named like one a command writes
        folder = root / f"user-{name.replace('.', '-')}"
        folder.mkdir()
        (folder / name).write_text('{"row": 0, "mine": true}\n', encoding="utf-8")
        out[f"user_{name.replace('.', '_')}"] = folder
    return out


def _reproduction_inputs(root: Path, lm, paths: dict[str, Path]) -> dict[str, Path]:
    """Inputs of the reproductions of issue 45.17 (an output onto an input) and 45.18 (tracebacks)."""
    from interpscope.sae.transcoder_set import random_transcoder_set, save_transcoder_set

    out: dict[str, Path] = {"tset": root / "tset", "tset_positional": root / "tset-positional",
                            "sweep_dir": root / "sweep-dir", "x_png": root / "x.png", "f_csv": root / "f.csv",
                            "corpus": root / "corpus", "graph_json": root / "graph.json",
                            "deep_jsonl": root / "deep.jsonl", "cfg_link": root / "cfg-link.json"}
    tset = random_transcoder_set(lm, 8, seed=0)
    save_transcoder_set(tset, out["tset"])
    save_transcoder_set(tset, out["tset_positional"])
    manifest = json.loads((out["tset_positional"] / "manifest.json").read_text(encoding="utf-8"))
    manifest["hook_in"] = "blocks.{}.mlp.hook_in"  # 45.18: IndexError 'Replacement index 0'
    (out["tset_positional"] / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    out["sweep_dir"].mkdir()
    shutil.copy(paths["sweep_nan_fvu"].parent / "sweep-nan_fvu.json", out["sweep_dir"] / "sweep_table.json")
    document = json.loads((out["sweep_dir"] / "sweep_table.json").read_text(encoding="utf-8"))
    document["rows"][2]["fvu"] = 0.5  # a good table
    (out["sweep_dir"] / "sweep_table.json").write_text(json.dumps(document), encoding="utf-8")
    out["x_png"].write_bytes(b"\x89PNG\r\n\x1a\nnot really a picture")
    out["f_csv"].write_text("text\nhello world\n", encoding="utf-8")
    out["corpus"].mkdir()
    (out["corpus"] / "a.txt").write_text("some words to train on\n", encoding="utf-8")
    out["graph_json"].write_text("{}", encoding="utf-8")
    out["deep_jsonl"].write_text("[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    out["cfg_link"].symlink_to(paths["sae"] / "cfg.json")
    return out


FORGED_MARKERS = {
    "plain": {"files": ["notes.txt", "chunk_00000.npz"]},
    "full-shape": {"tool": "interpscope", "command": "sae store", "created": True,
                   "files": ["notes.txt", "chunk_00000.npz"]},
    "bad-signature": {"tool": "interpscope", "command": "sae store", "created": True, "id": "0" * 32,
                      "sig": "1" * 32, "files": ["notes.txt", "chunk_00000.npz"]}}


_MISSING, _FIRST_NAME = object(), object()
# a sweep table's row (0-based), field and the bad value put there (45.19: ratios were given silently)
SWEEP_VARIANTS = {"nan_fvu": (2, "fvu", float("nan")), "string_fvu": (2, "fvu", "0.31"),
                  "missing_fvu": (0, "fvu", _MISSING), "null_l0": (5, "l0", None), "inf_loss": (1, "loss_recovered",
                                                                                                float("inf")),
                  "string_l0": (3, "l0", "12"), "bool_fvu": (4, "fvu", True), "negative_fvu": (6, "fvu", -0.5),
                  "missing_name": (7, "name", _MISSING), "repeated_name": (8, "name", _FIRST_NAME),
                  "string_seed": (2, "seed", "one")}
SWEEP_WORDS = {"nan_fvu": ("row 3", "fvu = NaN"), "string_fvu": ("row 3", "fvu = '0.31'"),
               "missing_fvu": ("row 1", "no fvu"), "null_l0": ("row 6", "no l0"),
               "inf_loss": ("row 2", "loss_recovered = inf"), "string_l0": ("row 4", "l0 = '12'"),
               "bool_fvu": ("row 5", "fvu = True"), "negative_fvu": ("row 7", "fvu = -0.5"),
               "missing_name": ("row 8", "no name"), "repeated_name": ("row 9", "repeats the name"),
               "string_seed": ("row 3", "seed = 'one'")}
# CSV rows whose field count differs from the header's (45.19: pandas re-aligned them silently)
RAGGED = {"ragged_first": "text,label\nThe cat sat,a,extra\nThe dog ran,b\n",
          "ragged_short": "text,label\nThe cat sat,a\nThe dog ran\n",
          "ragged_later": "text,label\nThe cat sat,a\nThe dog ran,b\nThe owl,c,d\n"}
RAGGED_WORDS = {"ragged_first": ("line 2", "3 field(s)"), "ragged_short": ("line 3", "1 field(s)"),
                "ragged_later": ("line 4", "3 field(s)")}


# --- the commands, each with arguments that would work -------------------------------------------------------
TRAIN = ("sae", "train", "--model", "{model}", "--hook", HOOK, "--tokens", "512", "--cache-tokens", "512",
         "--context", "32", "--batch-size", "128", "--width", "32", "--out", "{tmp}/run")
BASE = {
    "predict": ("predict", "--model", "{model}", "--text", "hi"),
    "explain": ("explain", "--model", "{model}", "--text", "hi"),
    "explain-rows": ("explain", "--model", "{model}", "--file", "{good_csv}", "--all-rows", "--out", "{tmp}/rows"),
    "flow": ("flow", "--model", "{model}", "--text", "hi"),
    "sae-train": TRAIN,
    "sae-train-topk": TRAIN + ("--arch", "topk", "--k", "4"),
    "sae-eval": ("sae", "eval", "--sae", "{sae}", "--model", "{model}", "--tokens", "64", "--context", "32"),
    "sae-store": ("sae", "store", "--sae", "{sae}", "--model", "{model}", "--tokens", "64", "--context", "32",
                  "--out", "{tmp}/store"),
    "sae-feature": ("sae", "feature", "--store", "{store}", "--id", "1"),
    "sae-search": ("sae", "search", "--store", "{store}", "word"),
    "sae-prompt": ("sae", "prompt", "--sae", "{sae}", "--model", "{model}", "--text", "hi"),
    "sae-steer": ("sae", "steer", "--sae", "{sae}", "--model", "{model}", "--text", "hi", "--feature", "1",
                  "--tokens", "2"),
    "sae-circuit": ("sae", "circuit", "--upstream", "{sae}", "--model", "{model}", "--text", "hi"),
    "sae-explain": ("sae", "explain", "--store", "{store}", "--explainer", "{model}"),
    "neurons": ("neurons", "--model", "{model}", "--no-unigram"),
    "neurons-ablate": ("neurons", "ablate", "--model", "{model}", "--neurons", "1.3", "--tokens", "64",
                       "--seq-len", "32"),
    "neurons-detail": ("neurons", "detail", "--model", "{model}", "--neuron", "1.3"),
    "neurons-store": ("neurons", "store", "--model", "{model}", "--out", "{tmp}/nstore", "--tokens", "64",
                      "--seq-len", "32"),
    "fourier-spectrum": ("fourier", "spectrum", "--model", "{model}"),
    "fourier-filter": ("fourier", "filter", "--model", "{model}", "--kind", "low", "--modules", "attn"),
    "fourier-table": ("fourier", "table", "--model", "{model}"),
    "fourier-store": ("fourier", "store", "--model", "{model}", "--out", "{tmp}/fstore"),
    "graph": ("graph", "--transcoders", "{tset}", "--model", "{model}", "--text", "hi"),
    "heads": ("heads", "--model", "{model}", "--find"),
    "flow-tuned": ("flow", "--model", "{model}", "--text", "hi", "--lens", "tuned"),
    "patch": ("patch", "--model", "{model}", "--clean", "The cat sat", "--corrupt", "The dog sat"),
    "sae-bench": ("sae", "bench", "--sae", "{sae}", "--model", "{model}"),
    "sae-pareto": ("sae", "pareto", "--sweep", "{sweep_dir}"),
    "explain-image": ("explain", "--image", "{x_png}"),
    "explain-faithfulness": ("explain", "--model", "{model}", "--text", "hi there", "--faithfulness"),
    "sae-sweep": ("sae", "sweep", "--model", "{model}", "--hook", HOOK, "--archs", "relu", "--sparsity", "1",
                  "--width", "32", "--tokens", "512", "--cache-tokens", "512", "--context", "32", "--batch-size",
                  "128", "--eval-tokens", "64", "--out", "{tmp}/sweep", "--json", "{tmp}/sweep.json"),
}

# --- numbers: per option, the kinds of bad value it must refuse ----------------------------------------------
VALUES = {"nan": "nan", "inf": "inf", "overflow": "1e309", "negative": "-5", "zero": "0", "word": "lots",
          "empty": "", "fraction": "2.5", "huge": str(10**30)}
INT = ("nan", "inf", "negative", "word", "empty", "fraction")
POS = INT + ("zero",)
FLOAT = ("nan", "inf", "overflow", "word", "empty")
NUMBERS = {
    "predict": {"--top": POS},
    "explain": {"--ig-steps": POS, "--occlusion-window": POS},
    "explain-rows": {"--ig-steps": POS},
    "flow": {"--threshold": FLOAT + ("negative", "fraction")},
    "sae-train": {"--width": POS + ("huge",), "--l1": FLOAT + ("negative",), "--tokens": POS,
                  "--cache-tokens": POS, "--context": POS, "--batch-size": POS,
                  "--lr": FLOAT + ("negative", "zero"), "--warmup-steps": INT,
                  "--decay-fraction": FLOAT + ("negative", "fraction"),
                  "--resample-at": ("nan", "inf", "overflow", "word", "negative", "fraction"),
                  "--dead-window-tokens": POS,
                  "--checkpoint-every": INT, "--seed": INT + ("huge",), "--eval-tokens": INT,
                  "--cache-batch-size": ("negative", "zero", "word", "empty"), "--workers": POS + ("huge",)},
    "sae-train-topk": {"--k": POS + ("huge",)},
    "sae-eval": {"--tokens": POS, "--context": POS, "--batch-size": ("negative", "zero", "word"),
                 "--workers": POS + ("huge",)},
    "sae-store": {"--tokens": POS, "--context": POS, "--batch-size": ("negative", "zero", "word"),
                  "--eval-tokens": ("negative", "word", "nan"), "--workers": POS + ("huge",)},
    "sae-feature": {"--id": INT + ("huge",)},
    "sae-search": {"--limit": POS},
    "sae-prompt": {"--top": POS, "--per-token": INT},
    "sae-steer": {"--feature": INT + ("huge",), "--strength": FLOAT, "--tokens": INT + ("huge",)},
    "sae-circuit": {"--features": POS, "--position": ("word", "nan", "empty", "huge")},
    "sae-explain": {"--features": ("negative", "word", "nan", "empty"), "--batch-size": ("negative", "zero", "word"),
                    "--workers": POS + ("huge",)},
    "neurons": {"--k": POS, "--top": INT, "--layer": ("word", "nan", "huge")},
    "neurons-ablate": {"--tokens": POS, "--seq-len": POS, "--random": INT, "--seed": INT + ("huge",),
                       "--k": POS, "--mean-tokens": POS},
    "neurons-detail": {"--k": POS, "--neuron": ("word", "empty", "huge", "negative")},
    "neurons-store": {"--tokens": POS, "--seq-len": POS, "--batch-size": ("negative", "zero", "word"),
                      "--workers": POS + ("huge",)},
    "fourier-spectrum": {"--numbers": POS + ("huge",), "--layer": ("word", "nan", "huge")},
    "fourier-filter": {"--tau": POS, "--prompts": POS, "--numbers": POS + ("huge",),
                       "--batch-size": ("negative", "zero", "word"), "--workers": POS + ("huge",)},
    "fourier-table": {"--tau": POS, "--prompts": POS, "--numbers": POS},
    # the newer commands the battery walked (45.17-24)
    "graph": {"--node-budget": POS + ("huge",), "--edge-budget": POS + ("huge",),
              "--max-feature-nodes": POS + ("huge",), "--max-logits": POS + ("huge",),
              "--logit-probability": FLOAT + ("negative", "zero", "fraction"), "--lrp-features": INT + ("huge",),
              "--ablation-check": INT + ("huge",), "--check-supernodes": FLOAT + ("negative",)},
    "heads": {"--sequences": POS + ("huge",), "--half-len": POS + ("huge",), "--seed": INT + ("huge",),
              "--ablate": INT + ("huge",)},
    "flow-tuned": {"--threshold": FLOAT + ("negative", "fraction")},
    "sae-bench": {"--words": POS + ("huge",), "--passages": POS + ("huge",), "--features": POS,
                  "--examples": POS, "--seed": INT + ("huge",), "--threads": POS + ("huge",)},
    "sae-sweep": {"--width": POS + ("huge",), "--tokens": POS, "--cache-tokens": POS,
                  "--eval-tokens": ("negative", "word", "nan"), "--context": POS, "--batch-size": POS,
                  "--lr": FLOAT + ("negative", "zero"), "--warmup-steps": INT,
                  "--decay-fraction": FLOAT + ("negative", "fraction"), "--dead-window-tokens": POS,
                  "--checkpoint-every": INT, "--seed": INT + ("huge",), "--workers": POS + ("huge",)},
    "explain-faithfulness": {"--curve-steps": POS, "--bootstrap": POS, "--seed": INT},
}

# --- input files: per command, the option that reads one ------------------------------------------------------
INPUTS = {
    "predict": ("predict", "--model", "{model}", "--file"),
    "explain": ("explain", "--model", "{model}", "--file"),
    "explain-rows": ("explain", "--model", "{model}", "--all-rows", "--out", "{tmp}/rows", "--file"),
    "sae-steer": ("sae", "steer", "--sae", "{sae}", "--model", "{model}", "--feature", "1", "--text-file"),
    "sae-prompt": ("sae", "prompt", "--sae", "{sae}", "--model", "{model}", "--text-file"),
    "sae-eval": ("sae", "eval", "--sae", "{sae}", "--model", "{model}", "--context", "32", "--tokens", "64",
                 "--text-file"),
}
BAD_FILES = {"missing": ("{missing}/x.txt", ("No such file",)), "folder": ("{adir}", ("folder",)),
             "fifo": ("{fifo}", ("not a regular file",)), "empty": ("{empty_txt}", ("empty",)),
             "binary": ("{binary_txt}", ("binary",)), "latin1": ("{latin1_txt}", ("UTF-8",)),
             "utf16-odd": ("{utf16odd_txt}", ("UTF-16",)), "huge": ("{huge_txt}", ("MiB",)),
             "unreadable": ("{denied_txt}", ("ermission denied",))}

# --- outputs: per command, a file it writes and a folder it writes ---------------------------------------------
OUT_FILES = {
    "explain-json": BASE["explain"] + ("--json",), "explain-png": BASE["explain"] + ("--png",),
    "flow-json": BASE["flow"] + ("--json",), "sae-circuit-json": BASE["sae-circuit"] + ("--json",),
    "sae-eval-out": BASE["sae-eval"] + ("--json", "--out"),
    "sae-feature-out": BASE["sae-feature"] + ("--json", "--out"),
    "sae-steer-out": BASE["sae-steer"] + ("--json", "--out"),
    "sae-prompt-out": BASE["sae-prompt"] + ("--json", "--out"),
    "sae-explain-json": BASE["sae-explain"] + ("--json",),
}
BAD_OUT_FILES = {"onto-a-folder": ("{folder_png}", ("folder",)),
                 "missing-folder": ("{missing}/r.png", ("does not exist",)),
                 "under-a-file": ("{afile}/r.png", ("is a file",))}
OUT_FOLDERS = {"sae-train": TRAIN[:-2] + ("--out",), "sae-store": BASE["sae-store"][:-2] + ("--out",),
               "neurons-store": BASE["neurons-store"][:4] + BASE["neurons-store"][6:] + ("--out",),
               "fourier-store": BASE["fourier-store"][:-2] + ("--out",),
               "explain-rows": BASE["explain-rows"][:-2] + ("--out",)}
BAD_OUT_FOLDERS = {"is-a-file": ("{afile}", ("is a file",)), "under-a-file": ("{afile}/sub", ("is a file",)),
                   "foreign": ("{foreign}", ("foreign",))}

# --- models and SAE folders ------------------------------------------------------------------------------------
MODEL_COMMANDS = ("predict", "explain", "flow", "neurons", "neurons-ablate", "neurons-detail", "neurons-store",
                  "fourier-spectrum", "fourier-filter", "fourier-store", "sae-train", "explain-rows")
BAD_MODELS = {"unknown-name": ("no-such-model-xyz", ("not available offline",)),
              "pickle-weights": ("{pickle_model}", ("pickle",)),
              "truncated-weights": ("{truncated_model}", ("truncated",)),
              "a-file": ("{afile}", ())}
SAE_COMMANDS = {"sae-eval": "--sae", "sae-store": "--sae", "sae-prompt": "--sae", "sae-steer": "--sae",
                "sae-circuit": "--upstream"}
BAD_SAES = {"missing": ("{missing}", ()), "pickle-weights": ("{pickle_sae}", ("pickle",)),
            "garbage-cfg": ("{garbage_cfg_sae}", ("cfg.json",)), "cfg-is-a-folder": ("{dir_cfg_sae}", ()),
            "unreadable-cfg": ("{denied_sae}", ("ermission denied",))}

# --- scaling out ------------------------------------------------------------------------------------------------
SCALE_COMMANDS = ("sae-train", "sae-eval", "sae-store", "neurons-store", "fourier-filter", "sae-explain")
BAD_SCALE = {"address-not-an-address": (("--ray-address", "not an address!"), ("--ray-address",)),
             "address-bad-port": (("--ray-address", "127.0.0.1:99999"), ("--ray-address",)),
             "address-closed-port": (("--ray-address", "127.0.0.1:{closed_port}"), ("No Ray cluster answers",)),
             "address-closed-port-workers": (("--ray-address", "127.0.0.1:{closed_port}", "--workers", "2"),
                                             ("No Ray cluster answers",)),
             "workers-over-cores": (("--workers", "100000"), ("--workers",))}


def _without(argv: tuple[str, ...], flag: str) -> tuple[str, ...]:
    """argv with `flag` and its value left out (so the case's own value is the only one)."""
    out, skip = [], False
    for part in argv:
        if skip:
            skip = False
            continue
        if part == flag:
            skip = True
            continue
        out.append(part)
    return tuple(out)


def _cases() -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for command, options in NUMBERS.items():
        for flag, kinds in options.items():
            for kind in kinds:
                argv = _without(BASE[command], flag) + (f"{flag}={VALUES[kind]}",)
                words = () if kind == "huge" or flag in ("--neuron", "--layer", "--position") else (flag,)
                cases[f"{command} {flag} {kind}"] = Case(argv, words)
    for command, prefix in INPUTS.items():
        for kind, (path, words) in BAD_FILES.items():
            deny = "denied_csv" if kind == "unreadable" and command == "explain-rows" else (
                "denied_txt" if kind == "unreadable" else None)
            value = "{denied_csv}" if deny == "denied_csv" else path
            cases[f"{command} input {kind}"] = Case(prefix + (value,), words, deny=deny)
    cases["sae-eval corpus unreadable"] = Case(BASE["sae-eval"] + ("--corpus", "{denied_txt}"),
                                               ("ermission denied",), deny="denied_txt")
    cases["sae-eval corpus missing"] = Case(BASE["sae-eval"] + ("--corpus", "{missing}/c.txt"), ())
    cases["sae-train corpus unreadable"] = Case(TRAIN + ("--corpus", "{denied_txt}"), ("ermission denied",),
                                                deny="denied_txt")
    cases["sae-store corpus binary"] = Case(BASE["sae-store"] + ("--corpus", "{binary_txt}"), ("binary",))
    for command, prefix in OUT_FILES.items():
        for kind, (path, words) in BAD_OUT_FILES.items():
            value = path.replace("r.png", "r.json") if not command.endswith("png") else path
            cases[f"{command} {kind}"] = Case(prefix + (value,), words)
    for command, prefix in OUT_FOLDERS.items():
        for kind, (path, words) in BAD_OUT_FOLDERS.items():
            cases[f"{command} out {kind}"] = Case(prefix + (path,), words)
    for command in MODEL_COMMANDS:
        for kind, (model, words) in BAD_MODELS.items():
            cases[f"{command} model {kind}"] = Case(_without(BASE[command], "--model") + ("--model", model), words)
    for command, flag in SAE_COMMANDS.items():
        for kind, (sae, words) in BAD_SAES.items():
            deny = "denied_cfg" if kind == "unreadable-cfg" else None
            cases[f"{command} sae {kind}"] = Case(_without(BASE[command], flag) + (flag, sae), words, deny=deny)
    for command in SCALE_COMMANDS:
        for kind, (extra, words) in BAD_SCALE.items():
            cases[f"{command} {kind}"] = Case(_without(BASE[command], "--workers") + extra, words)
    cases.update(_newer_cases())
    cases.update({
        "models unknown option": Case(("models", "--bogus"), ("unrecognized",)),
        "no command": Case((), ("required",)),
        "unknown command": Case(("frobnicate",), ("invalid choice",)),
        "explain method unknown": Case(BASE["explain"] + ("--method", "magic"), ("--method",)),
        "explain png suffix": Case(BASE["explain"] + ("--png", "{tmp}/r.gif"), ("--png",)),
        "explain row out of range": Case(("explain", "--model", "{model}", "--file", "{good_csv}", "--row", "99"),
                                         ("out of range",)),
        "explain row with text": Case(BASE["explain"] + ("--row", "0"), ("--row",)),
        "explain all-rows without out": Case(("explain", "--model", "{model}", "--file", "{good_csv}",
                                              "--all-rows"), ("--out",)),
        "explain all-rows with json": Case(BASE["explain-rows"] + ("--json", "{tmp}/r.json"), ("--json",)),
        "explain text empty": Case(("explain", "--model", "{model}", "--text", ""), ()),
        "flow text empty": Case(("flow", "--model", "{model}", "--text", ""), ()),
        "predict text surrogate": Case(("predict", "--model", "{model}", "--text", "bad \udcff"), ("surrogate",)),
        "sae-train arch stray comma": Case(TRAIN + ("--arch", "relu,,topk", "--k", "4"), ("stray comma",)),
        "sae-train arch trailing comma": Case(TRAIN + ("--arch", "relu,"), ("stray comma",)),
        "sae-train arch unknown": Case(TRAIN + ("--arch", "bogus"), ("bogus",)),
        "sae-train k with relu": Case(TRAIN + ("--arch", "relu", "--k", "5"), ("--k", "relu")),
        "sae-train l1 with topk": Case(TRAIN + ("--arch", "topk", "--k", "4", "--l1", "1"), ("--l1",)),
        "sae-train k over width": Case(TRAIN + ("--arch", "topk", "--k", "99"), ("--k",)),
        "sae-train width needs terabytes": Case(_without(TRAIN, "--width") + ("--width", "100000000000"),
                                                ("GiB",)),
        "sae-train hook unknown": Case(_without(TRAIN, "--hook") + ("--hook", "blocks.0.nothing"), ("hook",)),
        "sae-train hook out of range": Case(_without(TRAIN, "--hook") + ("--hook", "blocks.9.hook_resid_post"),
                                            ("out of range",)),
        "sae-train save-dtype": Case(TRAIN + ("--save-dtype", "int8"), ("--save-dtype",)),
        "sae-eval out without json": Case(BASE["sae-eval"] + ("--out", "{tmp}/e.json"), ("--json",)),
        "sae-eval split": Case(BASE["sae-eval"] + ("--split", "nope"), ("--split",)),
        "sae-feature id out of range": Case(("sae", "feature", "--store", "{store}", "--id", "999999"), ()),
        "sae-feature no store": Case(("sae", "feature", "--store", "{missing}", "--id", "1"), ()),
        "sae-feature store is a file": Case(("sae", "feature", "--store", "{afile}", "--id", "1"), ()),
        "sae-search kind": Case(BASE["sae-search"] + ("--kind", "nope"), ("--kind",)),
        "sae-search no store": Case(("sae", "search", "--store", "{adir}", "x"), ()),
        "sae-steer mode": Case(BASE["sae-steer"] + ("--mode", "nope"), ("--mode",)),
        "sae-steer text and file": Case(BASE["sae-steer"] + ("--text-file", "{good_txt}"), ("exactly one",)),
        "sae-steer neither text": Case(_without(BASE["sae-steer"], "--text"), ("exactly one",)),
        "sae-steer out without json": Case(BASE["sae-steer"] + ("--out", "{tmp}/s.json"), ("--json",)),
        "sae-prompt out without json": Case(BASE["sae-prompt"] + ("--out", "{tmp}/s.json"), ("--json",)),
        "sae-circuit feature without downstream": Case(BASE["sae-circuit"] + ("--feature", "1"), ("--downstream",)),
        "sae-circuit method": Case(BASE["sae-circuit"] + ("--method", "ig"), ("--method",)),
        "sae-explain no store": Case(("sae", "explain", "--store", "no-such-store"), ("No feature store",)),
        "sae-explain feature out of range": Case(BASE["sae-explain"] + ("--features", "999999"), ()),
        "neurons-ablate neuron word": Case(_without(BASE["neurons-ablate"], "--neurons") + ("--neurons", "x.y"), ()),
        "neurons-ablate neuron out of range": Case(_without(BASE["neurons-ablate"], "--neurons")
                                                   + ("--neurons", "9.0"), ()),
        "neurons-ablate tokens below seq-len": Case(_without(BASE["neurons-ablate"], "--tokens")
                                                    + ("--tokens", "8"), ("--seq-len",)),
        "neurons-store layers stray comma": Case(BASE["neurons-store"] + ("--layers", "1,,0"), ("--layers",)),
        "neurons-store layers word": Case(BASE["neurons-store"] + ("--layers", "last"), ("--layers",)),
        "neurons-store split": Case(BASE["neurons-store"] + ("--split", "all"), ("--split",)),
        "neurons-detail no store": Case(BASE["neurons-detail"], ("--compute",)),
        "fourier-spectrum matrix": Case(BASE["fourier-spectrum"] + ("--matrix", "nope"), ("--matrix",)),
        "fourier-filter kind": Case(_without(BASE["fourier-filter"], "--kind") + ("--kind", "band"), ("--kind",)),
        "fourier-filter template": Case(BASE["fourier-filter"] + ("--template", "no placeholders"), ()),
        "max-tokens env not a number": Case(BASE["predict"], ("INTERPSCOPE_MAX_TOKENS",),
                                            env={"INTERPSCOPE_MAX_TOKENS": "abc"}),
        "data-dir env is a file": Case(BASE["predict"], ("INTERPSCOPE_DATA_DIR",),
                                       env={"INTERPSCOPE_DATA_DIR": "{afile}"}),
    })
    return cases


def _newer_cases() -> dict[str, Case]:
    """The reproductions of issue 45.17-24 that must be refused (one line, exit 2, nothing written)."""
    cases: dict[str, Case] = {}
    # the newer commands' own bad values beyond numbers
    cases.update({
        "patch metric unknown": Case(BASE["patch"] + ("--metric", "nope"), ("--metric",)),
        "patch components unknown": Case(BASE["patch"] + ("--components", "nope"), ("nope",)),
        "patch method unknown": Case(BASE["patch"] + ("--method", "nope"), ("nope",)),
        "patch path not a component": Case(BASE["patch"] + ("--path", "99", "0"), ("'99'",)),
        "patch prompts of different lengths": Case(_without(BASE["patch"], "--corrupt")
                                                   + ("--corrupt", "The big dog sat on"), ("different lengths",)),
        "patch corrupt empty": Case(_without(BASE["patch"], "--corrupt") + ("--corrupt", ""), ("empty",)),
        "flow lens unknown": Case(_without(BASE["flow-tuned"], "--lens") + ("--lens", "magic"), ("--lens",)),
        "sae-bench metric unknown": Case(BASE["sae-bench"] + ("--metrics", "absorption,nonsense"), ("nonsense",)),
        "explain-image png not an image": Case(BASE["explain-image"], ()),
    })
    # 45.17 an output onto one of the command's inputs (7 commands overwrote it)
    onto_input = {
        "graph json onto the set's manifest": (BASE["graph"] + ("--json", "{tset}/manifest.json")),
        "graph check-json onto the graph json": (BASE["graph"] + ("--json", "{graph_json}", "--check-json",
                                                                  "{graph_json}", "--ablation-check", "2")),
        "sae-pareto json onto the table": (BASE["sae-pareto"] + ("--json", "{sweep_dir}/sweep_table.json")),
        "explain image json onto the image": (BASE["explain-image"] + ("--json", "{x_png}")),
        "explain file json onto the file": (("explain", "--model", "{model}", "--file", "{f_csv}", "--json",
                                             "{f_csv}")),
        "sae-bench json onto cfg.json": (BASE["sae-bench"] + ("--json", "{sae}/cfg.json")),
        "sae-bench json through a link onto cfg.json": (BASE["sae-bench"] + ("--json", "{cfg_link}")),
        "sae-sweep json onto its corpus": (_without(BASE["sae-sweep"], "--json")
                                           + ("--corpus", "{corpus}", "--json", "{corpus}/a.txt")),
        "sae-store out onto the sae": (_without(BASE["sae-store"], "--out") + ("--out", "{sae}")),
        "sae-store force out onto the sae": (_without(BASE["sae-store"], "--out") + ("--out", "{sae}", "--force")),
    }
    for name, argv in onto_input.items():
        cases[name] = Case(argv, ())
    # 45.18 tracebacks, a hang and a crash
    cases["graph max-feature-nodes 2**70"] = Case(_without(BASE["graph"], "--max-feature-nodes")
                                                  + ("--max-feature-nodes", "1180591620717411303424"), ("too large",))
    cases["graph positional hook template"] = Case(("graph", "--transcoders", "{tset_positional}", "--model",
                                                    "{model}", "--text", "hi"), ("{layer}",))
    cases["sae-pareto table is a JSON list"] = Case(("sae", "pareto", "--sweep", "{sweep_list}"), ("list",))
    cases["explain file nested 100000 deep"] = Case(("explain", "--model", "{model}", "--file", "{deep_jsonl}"),
                                                    ("nested too deeply",))
    cases["sae-bench words 1e11"] = Case(BASE["sae-bench"] + ("--words", "100000000000"), ("20000",))
    cases["sae-bench threads 100000"] = Case(BASE["sae-bench"] + ("--threads", "100000"), ("256",))
    # 45.19 accepted nonsense: sweep tables with bad figures, image flags on text, ragged CSV rows
    for name, words in SWEEP_WORDS.items():
        cases[f"sae-pareto table {name}"] = Case(("sae", "pareto", "--sweep", f"{{sweep_{name}}}"), words)
    for name, words in RAGGED_WORDS.items():
        cases[f"explain file {name}"] = Case(("explain", "--model", "{model}", "--file", f"{{{name}}}"), words)
        cases[f"explain-rows file {name}"] = Case(_without(BASE["explain-rows"], "--file")
                                                  + ("--file", f"{{{name}}}"), words)
    for flag in (("--target-class", "3"), ("--reference", "black"), ("--patch-flipping",)):
        cases[f"explain text {flag[0]}"] = Case(BASE["explain"] + flag, (flag[0], "--image"))
        cases[f"explain-rows text {flag[0]}"] = Case(BASE["explain-rows"] + flag, (flag[0], "--image"))
    cases["explain file --target-class"] = Case(("explain", "--model", "{model}", "--file", "{good_csv}",
                                                 "--target-class", "0"), ("--target-class",))
    # 45.23 --force and files Interpscope did not write: a forged marker in <store>.partial, a person's rows.jsonl
    for name in FORGED_MARKERS:
        for force in ((), ("--force",)):
            cases[f"sae-store forged partial {name}{' force' if force else ''}"] = Case(
                _without(BASE["sae-store"], "--out") + ("--out", f"{{forged_{name}}}/store") + force,
                ("store.partial", "not made by Interpscope"))
    own_files = {"explain-rows": ("rows.jsonl", "spec.json", "aggregates.json"), "sae-store": ("labels.json",),
                 "sae-train": ("train_meta.json",), "sae-sweep": ("sweep.json", "sweep_table.csv")}
    for command, names in own_files.items():
        for name in names:
            cases[f"{command} user's {name} force"] = Case(
                _without(BASE[command], "--out") + ("--out", f"{{user_{name.replace('.', '_')}}}", "--force"),
                (name, "did not write"))
    # 45.24 silent deaths: a full data directory (was a bus error, rc 135, mid-cache), a sweep wider than memory
    # (was checked only after a half-hour cache)
    for command in ("sae-train", "sae-sweep"):
        cases[f"{command} data dir full"] = Case(BASE[command], ("activation cache needs", "GiB is free"),
                                                 patch="disk-full")
    cases["sae-sweep width needs terabytes"] = Case(_without(BASE["sae-sweep"], "--width")
                                                    + ("--width", "100000000000"), ("GiB", "--width"))
    cases["sae-sweep width needs terabytes, big cache"] = Case(
        _without(_without(BASE["sae-sweep"], "--width"), "--cache-tokens")
        + ("--width", "100000000000", "--cache-tokens", "100000000"), ("GiB", "--width"))
    return cases


CASES = _cases()


def test_the_battery_is_large():
    """At least 350 cases (issue 45), the newer commands among them, and every reproduction of 45.17-24."""
    assert len(CASES) >= 350, len(CASES)
    for command in ("graph", "heads", "flow-tuned", "patch", "sae-bench", "sae-pareto", "sae-sweep", "explain-image",
                    "explain-faithfulness"):
        assert any(name.startswith(command + " ") for name in CASES), command
    for found in ("onto", "2**70", "nested 100000 deep", "table nan_fvu", "ragged_first", "text --target-class",
                  "forged partial", "user's rows.jsonl", "data dir full", "width needs terabytes"):
        assert any(found in name for name in CASES), found


def _tree(root: str | Path) -> dict[str, tuple[int, ...] | None]:
    """Every path under root with what identifies its contents: a file's (or link's, FIFO's) size, modification
    time in ns, inode and mode as os.lstat reports them, None for a folder. A write, a replacement (a new inode), a
    chmod and a new or removed path all show (reading every file's bytes twice per case, as this did, took as long as
    the cases themselves once the fixtures of 45.17-24 joined). The data dir itself may appear (empty) when a model
    is looked up; anything inside it counts."""
    out: dict[str, tuple[int, ...] | None] = {}
    for path in sorted(Path(root).rglob("*")):
        if path == Path(root) / "data":
            continue
        info = path.lstat()
        out[str(path.relative_to(root))] = None if stat.S_ISDIR(info.st_mode) else (
            info.st_size, info.st_mtime_ns, info.st_ino, info.st_mode)
    return out


def _deny(monkeypatch, path: str) -> None:
    """Make reading `path` fail with PermissionError: chmod 000 where that works, else open() refusing it."""
    target = Path(path)
    if not IS_ROOT and target.is_file():
        os.chmod(target, 0)  # restored by the test once the command has run
        return
    real_open = builtins.open

    def guarded(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and Path(file).resolve() == target.resolve():
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    monkeypatch.setattr(io, "open", guarded)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name, files, tmp_path, monkeypatch, capsys):
    case = CASES[name]
    data = tmp_path / "data"
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(data))
    monkeypatch.delenv("INTERPSCOPE_MAX_TOKENS", raising=False)
    values = dict(files, tmp=str(tmp_path), closed_port=str(_closed_port()))
    argv = [part.format(**values) if "{" in part else part for part in case.argv]
    for key, value in case.env.items():
        monkeypatch.setenv(key, value.format(**values))
    before = _tree(tmp_path), _tree(Path(files["model"]).parent)
    if case.patch:
        PATCHES[case.patch](monkeypatch)
    if case.deny:
        _deny(monkeypatch, files[case.deny])
    capsys.readouterr()
    try:
        code = main(argv)
    finally:
        if case.deny and not IS_ROOT:
            os.chmod(files[case.deny], 0o644)
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    assert "Traceback" not in err, err
    # a person's own model gets its memory estimate printed before the run starts (issue 40.4): a refusal that only
    # the run itself can make (a component the model lacks) then follows it; nothing else may come before the error
    lines = [line for line in err.strip().splitlines() if not line.startswith("interpscope: memory estimate for ")]
    assert len(lines) == 1 and lines[0].startswith("interpscope: error: "), err
    for word in case.words:
        assert word in lines[0], (word, lines[0])
    after = _tree(tmp_path), _tree(Path(files["model"]).parent)
    assert after[0] == before[0], sorted(set(after[0]) ^ set(before[0])) or "a file changed"
    assert after[1] == before[1], sorted(set(after[1]) ^ set(before[1])) or "a fixture changed"


# --- runs that must succeed and keep every file they did not write (45.23: --force deleted files named like
# Interpscope's temporary files, in the folder and its sub-folders) -----------------------------------------------
PLANTED = {".notes.99999.bak.tmp": b"a person's backup", ".notes.4194305.0123456789abcdef.abcdefgh.tmp": b"mine too",
           "sub/.deep.99999.x.tmp": b"deeper", "notes.txt": b"keep me"}


@pytest.mark.parametrize("command", ["sae-store", "sae-train", "sae-sweep", "explain-rows"])
def test_force_keeps_what_interpscope_did_not_write(command, files, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "out"
    for name, data in PLANTED.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    values = dict(files, tmp=str(tmp_path))
    argv = [part.format(**values) if "{" in part else part for part in _without(BASE[command], "--out")]
    quick = ["--eval-tokens", "0"] if command == "sae-store" else []  # the store's evaluation takes 25 s here
    code = main(argv + quick + ["--out", str(out), "--force"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Traceback" not in err
    for name, data in PLANTED.items():
        assert (out / name).is_file() and (out / name).read_bytes() == data, name
