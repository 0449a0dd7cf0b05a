"""Faults: memory over many calls, kill -9 in the middle of every resumable job, a full disk under every writer,
and a planted output marker that names files outside its folder.

- RSS: 100 calls of every analysis on a tiny model in this process; the resident set after them is within a
  bound of what it was after a warm-up.
- kill -9: each resumable command runs in a child process that SIGKILLs itself in the middle of its k-th write
  (a temporary file written but not renamed, or half a log line appended), k drawn with a fixed seed; the
  command is then run again to completion and its folder must equal an uninterrupted run's byte for byte
  (timings aside), with no temporary file left anywhere.
- Full disk: every command that writes runs with its output on a full 1 MB tmpfs (mounted here as root) and,
  everywhere, with fsync/write failing with ENOSPC in-process: one line "No space left on device", exit 2, a file
  that was there before unchanged, and nothing half-written.
"""
from __future__ import annotations

import errno
import gc
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from interpscope.cli import main
from tests.sae_store_tiny import random_sae_folder, save_tiny_lm, tiny_lm

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("faults")
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(root / "fixture-data"))
    try:
        lm = tiny_lm()
        model = save_tiny_lm(root / "model")
        sae = random_sae_folder(lm, root / "sae", d_sae=16)
        from interpscope.sae.store import build_store

        store = build_store(lm, sae, root / "store", n_tokens=128, context_size=32, batch_size=2)
    finally:
        monkeypatch.undo()
    rows = root / "rows.csv"
    rows.write_text("text,label\n" + "".join(f"The {w} sat on the mat number {i},{i % 2}\n"
                                            for i, w in enumerate(["cat", "dog", "bird", "fox", "cow", "owl"])),
                    encoding="utf-8")
    yield {"root": root, "lm": lm, "model": model, "sae": sae, "store": store, "rows": rows}


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("INTERPSCOPE_MAX_TOKENS", raising=False)


# --- RSS over 100 calls -------------------------------------------------------------------------------------
def _analyses(fx) -> dict:
    from interpscope.flow.information import information_flow
    from interpscope.predict import predict_next
    from interpscope.relevance.api import explain
    from interpscope.sae import load_sae
    from interpscope.sae.circuits import feature_circuit
    from interpscope.sae.store.prompt import prompt_features
    from interpscope.sae.store.steering import steer

    lm, sae = fx["lm"], load_sae(fx["sae"])
    text = "The cat sat on the mat and looked at the dog"
    return {"predict": lambda: predict_next(lm, text, top=5),
            "explain-attnlrp": lambda: explain(lm, text, "attnlrp"),
            "flow": lambda: information_flow(lm, text),
            "sae-prompt": lambda: prompt_features(lm, sae, text, n_top=5),
            "sae-steer": lambda: steer(lm, sae, text, 3, strength=4.0, n_new=2),
            "sae-circuit": lambda: feature_circuit(lm, sae, None, text, n_features=4)}


RSS_BOUND_MB = 40


@pytest.mark.parametrize("analysis", ["predict", "explain-attnlrp", "flow", "sae-prompt", "sae-steer",
                                      "sae-circuit"])
def test_rss_stays_bounded_over_100_calls(analysis, fx):
    call = _analyses(fx)[analysis]
    process = psutil.Process()
    for _ in range(5):
        call()
    gc.collect()
    before = process.memory_info().rss
    for _ in range(100):
        call()
    gc.collect()
    grown = (process.memory_info().rss - before) / 2**20
    assert grown < RSS_BOUND_MB, f"{analysis}: RSS grew {grown:.1f} MB over 100 calls"


# --- kill -9 mid-write, resume, identical ----------------------------------------------------------------------
KILLER = r"""
import json, os, signal, sys
from contextlib import contextmanager
from interpscope import atomic, resume
import interpscope.relevance.file_attribution as file_attribution
import interpscope.sae.store.explain as store_explain

kill_at, count = int(os.environ["KILL_AT"]), [0]
real_open, real_appending = atomic.atomic_open, resume.appending


def due():
    count[0] += 1
    return count[0] == kill_at


@contextmanager
def killing_open(path, mode="wb", encoding=None):
    with real_open(path, mode, encoding) as handle:
        yield handle
        if due():  # the temporary file is written and flushed, not yet renamed
            handle.flush()
            os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def killing_appending(path):
    with real_appending(path) as append:
        def wrapped(entry):
            if due():  # half a line on disk, as a power cut leaves it
                line = (json.dumps(entry, ensure_ascii=False) + "\n").encode()
                with open(path, "ab") as handle:
                    handle.write(line[: len(line) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
            append(entry)
        yield wrapped


atomic.atomic_open = killing_open
file_attribution.appending = store_explain.appending = killing_appending
from interpscope.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _count_writes(monkeypatch) -> list[int]:
    """Count atomic writes and log appends in this process (the kill points a full run offers)."""
    from contextlib import contextmanager

    import interpscope.relevance.file_attribution as file_attribution
    from interpscope import atomic, resume

    count = [0]
    real_open, real_appending = atomic.atomic_open, resume.appending

    @contextmanager
    def counting_open(path, mode="wb", encoding=None):
        with real_open(path, mode, encoding) as handle:
            yield handle
        count[0] += 1

    @contextmanager
    def counting_appending(path):
        with real_appending(path) as append:
            def wrapped(entry):
                count[0] += 1
                append(entry)
            yield wrapped

    monkeypatch.setattr(atomic, "atomic_open", counting_open)
    monkeypatch.setattr(file_attribution, "appending", counting_appending)
    return count


def _normalised(folder: Path) -> dict[str, object]:
    """Every file under folder, JSON (and JSON lines) without timings, the marker's list as a set."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if "seconds" not in k}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    out: dict[str, object] = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        name = str(path.relative_to(folder))
        if path.name == ".interpscope-output.json":
            out[name] = sorted(json.loads(path.read_text())["files"])
        elif path.suffix == ".json":
            out[name] = strip(json.loads(path.read_text()))
        elif path.suffix == ".jsonl":
            out[name] = [strip(json.loads(line)) for line in path.read_text().splitlines()]
        else:
            out[name] = path.read_bytes()
    return out


def _jobs(fx) -> dict[str, tuple[list[str], str]]:
    """Resumable commands: argv with {out} for the folder, and the folder to compare."""
    model, sae = str(fx["model"]), str(fx["sae"])
    return {
        "explain-all-rows": (["explain", "--model", model, "--file", str(fx["rows"]), "--all-rows", "--out",
                              "{out}"], "{out}"),
        "sae-store": (["sae", "store", "--sae", sae, "--model", model, "--tokens", "256", "--context", "32",
                       "--batch-size", "2", "--eval-tokens", "0", "--out", "{out}"], "{out}"),
        "neurons-store": (["neurons", "store", "--model", model, "--tokens", "128", "--seq-len", "32",
                           "--layers", "0,1", "--out", "{out}"], "{out}"),
        "sae-train": (["sae", "train", "--model", model, "--hook", "blocks.0.hook_resid_post", "--tokens", "1024",
                       "--cache-tokens", "512", "--context", "32", "--batch-size", "128", "--width", "32",
                       "--checkpoint-every", "2", "--out", "{out}"], "{out}"),
    }


def _run(argv: list[str], out: Path) -> int:
    return main([part.replace("{out}", str(out)) for part in argv])


@pytest.mark.parametrize("job", ["explain-all-rows", "sae-store", "neurons-store", "sae-train"])
def test_kill_9_mid_write_then_resume_is_identical(job, fx, tmp_path, monkeypatch, capsys):
    argv, _ = _jobs(fx)[job]
    with monkeypatch.context() as patch:
        count = _count_writes(patch)
        assert _run(argv, tmp_path / "reference") == 0
    reference = _normalised(tmp_path / "reference")
    writes = count[0]
    assert writes >= 3
    rng = random.Random(f"kill-{job}")
    env = dict(os.environ, INTERPSCOPE_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT))
    for attempt, kill_at in enumerate(sorted(rng.sample(range(2, writes), 2))):
        out = tmp_path / f"killed-{attempt}"
        child = subprocess.run([sys.executable, "-c", KILLER, *[p.replace("{out}", str(out)) for p in argv]],
                               cwd=ROOT, env=dict(env, KILL_AT=str(kill_at)), capture_output=True, timeout=300)
        assert child.returncode == -9, (kill_at, child.stderr.decode()[-2000:])
        capsys.readouterr()
        assert _run(argv, out) == 0, capsys.readouterr().err
        assert _normalised(out) == reference, f"{job}: resumed after a kill at write {kill_at} differs"
    left = [str(p) for p in tmp_path.rglob("*.tmp")] + [str(p) for p in tmp_path.rglob("*.partial") if p.is_file()]
    assert not left, left


def test_a_torn_last_line_is_cut_before_the_resume_appends(fx, tmp_path, capsys):
    """explain --all-rows after a power cut mid-line: every row once, in order, no glued line."""
    argv, _ = _jobs(fx)["explain-all-rows"]
    out = tmp_path / "rows"
    assert _run(argv, out) == 0
    rows = (out / "rows.jsonl").read_bytes().splitlines(keepends=True)
    (out / "rows.jsonl").write_bytes(b"".join(rows[:3]) + rows[3][: len(rows[3]) // 2])
    assert _run(argv, out) == 0
    lines = (out / "rows.jsonl").read_text().splitlines()
    assert [json.loads(line)["row"] for line in lines] == list(range(6))


# --- a full disk under every writer ------------------------------------------------------------------------------
def _writers(fx) -> dict[str, tuple[list[str], bool]]:
    """Commands that write, with {out} for the target and whether it is a folder."""
    model, sae, store = str(fx["model"]), str(fx["sae"]), str(fx["store"])
    return {
        "explain --json": (["explain", "--model", model, "--text", "hi there", "--json", "{out}"], False),
        "explain --png": (["explain", "--model", model, "--text", "hi there", "--png", "{out}.png"], False),
        "flow --json": (["flow", "--model", model, "--text", "hi there", "--json", "{out}"], False),
        "sae feature --out": (["sae", "feature", "--store", store, "--id", "1", "--json", "--out", "{out}"], False),
        "sae steer --out": (["sae", "steer", "--sae", sae, "--model", model, "--text", "hi", "--feature", "1",
                             "--tokens", "2", "--json", "--out", "{out}"], False),
        "sae prompt --out": (["sae", "prompt", "--sae", sae, "--model", model, "--text", "hi", "--json", "--out",
                              "{out}"], False),
        "sae eval --out": (["sae", "eval", "--sae", sae, "--model", model, "--tokens", "64", "--context", "32",
                            "--json", "--out", "{out}"], False),
        "sae circuit --json": (["sae", "circuit", "--upstream", sae, "--model", model, "--text", "hi there",
                                "--json", "{out}"], False),
        "explain --all-rows": (_jobs(fx)["explain-all-rows"][0], True),
        "sae store": (_jobs(fx)["sae-store"][0], True),
        "neurons store": (_jobs(fx)["neurons-store"][0], True),
        "sae train": (_jobs(fx)["sae-train"][0], True),
        "fourier store": (["fourier", "store", "--model", model, "--out", "{out}"], True),
    }


def _is_mount_point(folder: Path) -> bool:
    """Whether folder is a mount point now (from /proc/self/mounts: what `mount` lists)."""
    wanted = os.path.realpath(folder)
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1].encode().decode("unicode_escape") == wanted for line in mounts if line.strip())


def _unmount(folder: Path) -> None:
    """Unmount folder for good: a plain umount, and where something still holds a file there (a memory map left in
    a cache, a child process) a lazy one, which detaches it at once. Raises if it is still mounted after both."""
    gc.collect()  # drop memory maps of objects nothing refers to any more
    if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
    if _is_mount_point(folder):
        raise RuntimeError(f"{folder} is still mounted after umount and umount -l")


def _mount_full_tmpfs(folder: Path, mounted: list[Path]) -> bool:
    """A 1 MB tmpfs at folder, filled to the last byte; False where mounting is not permitted. The folder goes into
    `mounted` as soon as it is mounted (before the filling, which may fail), for the caller's teardown."""
    folder.mkdir()
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        return False
    mounted.append(folder)
    (folder / "before.json").write_text('{"old": true}\n')
    with open(folder / "filler", "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
                filler.flush()
        except OSError as err:
            assert err.errno == errno.ENOSPC
    return True


@pytest.fixture
def full_tmpfs(request):
    """mount(folder) -> bool: a full 1 MB tmpfs at folder (see _mount_full_tmpfs); every tmpfs it mounted is
    unmounted by a finalizer, so none is left under /tmp/pytest-of-* whether the test passes, fails or errors."""
    mounted: list[Path] = []

    def unmount_all() -> None:
        while mounted:
            _unmount(mounted.pop())

    request.addfinalizer(unmount_all)
    return lambda folder: _mount_full_tmpfs(folder, mounted)


def _refuse_writes(monkeypatch) -> None:
    """In-process ENOSPC: every fsync (each atomic write's last step) and every raw os.write fails."""
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    monkeypatch.setattr(os, "write", full)


def _screen_lines(err: str) -> list[str]:
    """The lines stderr leaves on a terminal: a progress bar erased with carriage returns leaves nothing; the memory
    estimate a person's own model gets before each run (issue 40.4) is information, not one of the run's lines."""
    shown = [line.rsplit("\r", 1)[-1].strip() for line in err.split("\n")]
    return [line for line in shown if line and not line.startswith("interpscope: memory estimate for ")]


def _check_nothing_half_written(folder: Path) -> None:
    for path in folder.rglob("*"):
        assert not path.name.endswith(".tmp"), path
        if path.is_file() and path.suffix == ".json":
            json.loads(path.read_text())  # complete or absent, never cut
        if path.is_file() and path.suffix == ".jsonl":
            assert path.read_bytes().endswith(b"\n") or path.stat().st_size == 0, path


@pytest.mark.parametrize("how", ["tmpfs", "patched"])
@pytest.mark.parametrize("writer", ["explain --json", "explain --png", "flow --json", "sae feature --out",
                                    "sae steer --out", "sae prompt --out", "sae eval --out", "sae circuit --json",
                                    "explain --all-rows", "sae store", "neurons store", "sae train",
                                    "fourier store"])
def test_a_full_disk_is_one_line_and_nothing_half_written(writer, how, fx, tmp_path, monkeypatch, capsys,
                                                          full_tmpfs):
    argv, is_folder = _writers(fx)[writer]
    disk = tmp_path / "disk"
    if how == "tmpfs":
        if not full_tmpfs(disk):
            pytest.skip("mounting a tmpfs needs root (the patched case covers this writer)")
    else:
        disk.mkdir()
        (disk / "before.json").write_text('{"old": true}\n')
    target = disk / ("out" if is_folder else "before.json")
    with monkeypatch.context() as patch:
        if how == "patched":
            _refuse_writes(patch)
        capsys.readouterr()
        code = _run(argv, target)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = _screen_lines(err)
    assert len(lines) == 1 and "No space left on device" in lines[0], err
    assert "Traceback" not in err
    assert (disk / "before.json").read_text() == '{"old": true}\n'
    if not is_folder:
        png = Path(f"{target}.png")
        assert not png.exists() and sorted(p.name for p in disk.iterdir()) == sorted(
            ["before.json"] + (["filler"] if how == "tmpfs" else []))
    _check_nothing_half_written(disk)


def test_teardown_unmounts_a_busy_tmpfs(tmp_path):
    """The full_tmpfs teardown on a tmpfs with a file on it still held open (what a cached memory map of a store
    written there does; the old `umount` with check=True then raised in the test's finally and left the mount):
    afterwards nothing is mounted there."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []
    disk = tmp_path / "disk"
    assert _mount_full_tmpfs(disk, mounted) and _is_mount_point(disk)
    held = open(disk / "before.json")  # a plain umount now fails: target is busy
    try:
        assert subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0
        while mounted:
            _unmount(mounted.pop())
        assert not _is_mount_point(disk)
    finally:
        held.close()
        if _is_mount_point(disk):
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)


# --- a planted marker ----------------------------------------------------------------------------------------
def test_a_marker_cannot_name_files_outside_its_folder(fx, tmp_path, capsys):
    """sae store --force with an unfinished build folder whose marker lists ../victims/v1.txt, an absolute path
    and a symlink out: a marker Interpscope did not sign is refused even with --force (issue 45.23) and every
    outside file survives; once that folder is moved away the build runs."""
    victims = tmp_path / "victims"
    victims.mkdir()
    for name in ("v1.txt", "v2.txt", "v3.txt"):
        (victims / name).write_text("precious", encoding="utf-8")
    out = tmp_path / "store"
    partial = tmp_path / "store.partial"
    partial.mkdir()
    (partial / "outside").symlink_to(victims)
    (partial / ".interpscope-output.json").write_text(json.dumps({
        "tool": "interpscope", "command": "sae store", "created": True,
        "files": ["../victims/v1.txt", str(victims / "v2.txt"), "outside/v3.txt", "outside/", "sub/../../victims/"]}))
    (partial / "progress.json").write_text(json.dumps({"spec": {"other": "settings"}}))
    argv, _ = _jobs(fx)["sae-store"]
    capsys.readouterr()
    assert _run(argv + ["--force"], out) == 2
    assert "was not made by Interpscope" in capsys.readouterr().err
    assert sorted(p.name for p in victims.iterdir()) == ["v1.txt", "v2.txt", "v3.txt"]
    assert all((victims / n).read_text() == "precious" for n in ("v1.txt", "v2.txt", "v3.txt"))
    assert sorted(p.name for p in partial.iterdir()) == [".interpscope-output.json", "outside", "progress.json"]
    partial.rename(tmp_path / "moved-away")
    assert _run(argv + ["--force"], out) == 0, capsys.readouterr().err
    assert sorted(p.name for p in victims.iterdir()) == ["v1.txt", "v2.txt", "v3.txt"]
    assert (out / "manifest.json").is_file()


def test_marker_entries_outside_the_folder_are_never_trusted(tmp_path):
    from interpscope.outputs import OutputFolder, read_marker, safe_entry

    folder = tmp_path / "out"
    folder.mkdir()
    (tmp_path / "secret.txt").write_text("keep")
    (folder / "link").symlink_to(tmp_path)
    for entry in ("../secret.txt", str(tmp_path / "secret.txt"), "link/secret.txt", "a/../../secret.txt", "",
                  "~/x", 5):
        assert not safe_entry(folder, entry), entry
    assert safe_entry(folder, "mine.txt") and safe_entry(folder, "sub/mine.txt")
    (folder / ".interpscope-output.json").write_text(json.dumps(
        {"created": True, "files": ["../secret.txt", "link/secret.txt", "mine.txt"]}))
    assert read_marker(folder)["files"] == ["mine.txt"]
    owned = OutputFolder(folder, read_marker(folder))
    (folder / "mine.txt").write_text("ours")
    owned.clear()
    assert (tmp_path / "secret.txt").read_text() == "keep" and not (folder / "mine.txt").exists()
    with pytest.raises(Exception, match="outside"):
        owned.record(tmp_path / "secret.txt")
