"""Released dictionaries by name, `RELEASE/SAE_ID` (SAELens's names, e.g.
`gemma-scope-2-270m-pt-res/layer_12_width_16k_l0_medium`), resolved through the Hugging Face cache.

The catalogue (release_catalogue.json beside this module, rebuilt by scripts/make_release_catalogue.py) lists the
releases that fit the bundled models: per release its repository, model and format, per dictionary its path in the
repository, hook point(s), width and L0. Resolving one:
1. its files are looked up in the Hugging Face cache ($HF_HUB_CACHE, or $HF_HOME/hub) first; only when they are not
   there, the process is online (HF_HUB_OFFLINE unset) and not serving a shared server (server mode) are they
   downloaded; otherwise a message says how to get them;
2. the folder is read by its released format (interpscope.sae.formats) and written once as an SAE folder (cfg.json +
   sae_weights.safetensors) under <data dir>/releases/<release>/<sae id>/, with the release, repository, path and
   revision in cfg.json's metadata.interpscope.release; a later resolve of the same revision reuses it. Stores,
   the feature browser, steering, circuits and evaluation then read it as any SAE folder.
A dictionary whose model is not the model in use is refused naming both (`check_model`).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from interpscope.config import InterpscopeError, data_dir
from interpscope.paths import hf_hub_cache, server_mode

CATALOGUE_FILE = Path(__file__).with_name("release_catalogue.json")
RELEASES_DIR = "releases"
_SPEC = re.compile(r"^(?P<release>[A-Za-z0-9][A-Za-z0-9._-]*)/(?P<sae_id>[A-Za-z0-9][A-Za-z0-9._/-]*)$")


@dataclass(frozen=True)
class ReleasedSAE:
    """One dictionary of a release, as the catalogue lists it."""

    release: str
    sae_id: str
    repo_id: str
    path: str
    model: str
    format: str
    hook: str
    hook_out: str | None
    width: int
    l0: float | None
    affine: bool = False

    @property
    def name(self) -> str:
        return f"{self.release}/{self.sae_id}"

    @property
    def kind(self) -> str:
        if self.hook_out:
            return "transcoder (affine)" if self.affine else "transcoder"
        return "SAE"

    def weight_files(self) -> tuple[str, ...]:
        from interpscope.sae.formats import format_named

        return (format_named(self.format).weights_file,)


@lru_cache(maxsize=1)
def catalogue() -> dict[str, list[ReleasedSAE]]:
    """Release name -> its dictionaries, from the shipped catalogue."""
    document = json.loads(CATALOGUE_FILE.read_text(encoding="utf-8"))
    result: dict[str, list[ReleasedSAE]] = {}
    for name, release in document["releases"].items():
        result[name] = [ReleasedSAE(name, sae["id"], release["repo_id"], sae["path"], release["model"],
                                    release["format"], sae["hook"], sae.get("hook_out"), int(sae["width"]),
                                    sae.get("l0"), bool(sae.get("affine"))) for sae in release["saes"]]
    return result


def looks_like_release(value: str) -> bool:
    """True for a RELEASE/SAE_ID whose release is catalogued (a path that exists is never read as one)."""
    match = _SPEC.match(value.strip())
    return match is not None and match["release"] in catalogue() and not Path(value).expanduser().exists()


def find(spec: str) -> ReleasedSAE:
    """The catalogued dictionary RELEASE/SAE_ID; clear errors for an unknown release or id."""
    match = _SPEC.match(spec.strip())
    if not match:
        raise InterpscopeError(f"{spec!r} is not RELEASE/SAE_ID (e.g. gemma-scope-2-270m-pt-res/"
                               "layer_12_width_16k_l0_medium).")
    releases = catalogue()
    release, sae_id = match["release"], match["sae_id"]
    if release not in releases:
        raise InterpscopeError(f"Unknown release {release!r}; Interpscope's catalogue lists {', '.join(releases)} "
                               "(docs: reference/released-dictionaries).")
    for entry in releases[release]:
        if entry.sae_id == sae_id:
            return entry
    prefix = sae_id.split("_width")[0]
    near = [entry.sae_id for entry in releases[release] if entry.sae_id.split("_width")[0] == prefix][:6]
    hint = f" Close: {', '.join(near)}." if near else ""
    raise InterpscopeError(f"Release {release} has no SAE {sae_id!r} ({len(releases[release])} listed).{hint}")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _download(entry: ReleasedSAE, filename: str, local_only: bool) -> Path | None:
    """One file of the dictionary from the cache (or downloaded when allowed); None when it is not to be had."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(entry.repo_id, f"{entry.path}/{filename}", cache_dir=hf_hub_cache(),
                                    local_files_only=local_only))
    except (LocalEntryNotFoundError, EntryNotFoundError, FileNotFoundError):
        return None
    except OSError as err:  # network errors and the like, when a download was allowed
        raise InterpscopeError(f"Could not download {entry.repo_id}/{entry.path}/{filename} ({err}).") from None


def cached_folder(entry: ReleasedSAE) -> Path | None:
    """The dictionary's folder in the Hugging Face cache when its weights are there (nothing is downloaded)."""
    from huggingface_hub import try_to_load_from_cache

    files = [try_to_load_from_cache(entry.repo_id, f"{entry.path}/{name}", cache_dir=hf_hub_cache())
             for name in entry.weight_files()]
    if not files or not all(isinstance(file, str) for file in files):
        return None
    return Path(str(files[0])).parent


def fetch(entry: ReleasedSAE) -> Path:
    """The dictionary's folder in the Hugging Face cache: cached first; downloaded only online and off a server."""
    folder = cached_folder(entry)
    if folder is not None:
        return folder
    may_download = not _offline() and not server_mode()
    if not may_download:
        why = "this is a shared server (server mode)" if server_mode() else "HF_HUB_OFFLINE is set"
        raise InterpscopeError(
            f"{entry.name} is not in the Hugging Face cache ({hf_hub_cache()}: {entry.repo_id}, {entry.path}/) and "
            f"{why}, so it is not downloaded. Download it where the network is reachable (e.g. `huggingface-cli "
            f"download {entry.repo_id} --include '{entry.path}/*'`) into that cache.")
    files = [_download(entry, name, local_only=False) for name in entry.weight_files()]
    if not all(files):
        raise InterpscopeError(f"{entry.repo_id} has no {entry.path}/{entry.weight_files()[0]}.")
    _download(entry, "config.json", local_only=False)  # optional: the loader infers the hooks without it
    return files[0].parent  # type: ignore[union-attr]


def release_dir(entry: ReleasedSAE) -> Path:
    return data_dir() / RELEASES_DIR / entry.release / entry.sae_id.replace("/", "__")


def _converted(dest: Path, entry: ReleasedSAE, revision: str) -> bool:
    from interpscope.sae.folder import CFG_FILE, WEIGHTS_FILE

    try:
        raw = json.loads((dest / CFG_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return False
    stamp = ((raw.get("metadata") or {}).get("interpscope") or {}).get("release") or {}
    return ((dest / WEIGHTS_FILE).is_file() and stamp.get("name") == entry.name
            and stamp.get("revision") == revision and stamp.get("path") == entry.path)


def resolve(spec: str, model_name: str | None = None) -> Path:
    """The SAE folder for RELEASE/SAE_ID (converted from the cached release once; see the module docstring).
    With model_name, a dictionary of another model is refused first."""
    from interpscope.sae.folder import save_sae
    from interpscope.sae.formats import Source, format_named

    entry = find(spec)
    if model_name is not None:
        check_model(entry, model_name)
    folder = fetch(entry)
    source = Source(entry.repo_id, entry.path, Source.of(folder).revision)
    dest = release_dir(entry)
    if _converted(dest, entry, source.revision):
        return dest
    sae = format_named(entry.format).load(folder, dtype=None, source=source)
    sae.cfg.extra["release"] = dict(sae.cfg.extra.get("release") or {}, name=entry.name, width=entry.width,
                                    l0=entry.l0)
    save_sae(sae, dest, dtype=sae.cfg.dtype)
    return dest


def import_folder(folder: str | Path) -> Path:
    """A folder in a released format (interpscope.sae.formats) written once as an SAE folder under
    <data dir>/releases/folders/ (reused while the source's weights file is unchanged), so that stores and pages,
    which read SAE folders, take it too."""
    import hashlib

    from interpscope.sae.folder import CFG_FILE, save_sae
    from interpscope.sae.formats import detect_format

    folder = Path(folder).expanduser().resolve()
    fmt = detect_format(folder)
    if fmt is None:
        raise InterpscopeError(f"{folder} is in no released format Interpscope reads.")
    weights = folder / fmt.weights_file
    stat = weights.stat()
    stamp = f"{weights}:{stat.st_size}:{stat.st_mtime_ns}"
    dest = data_dir() / RELEASES_DIR / "folders" / f"{folder.name}-{hashlib.sha1(stamp.encode()).hexdigest()[:10]}"
    try:
        raw = json.loads((dest / CFG_FILE).read_text(encoding="utf-8"))
        if ((raw.get("metadata") or {}).get("interpscope") or {}).get("release", {}).get("stamp") == stamp:
            return dest
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        pass
    sae = fmt.load(folder, dtype=None)
    sae.cfg.extra["release"] = dict(sae.cfg.extra.get("release") or {}, stamp=stamp)
    save_sae(sae, dest, dtype=sae.cfg.dtype)
    return dest


def release_model(entry: ReleasedSAE) -> str:
    """The model a release reads, as Interpscope names it (a bundled model's name where it is one)."""
    from interpscope.models.registry import bundled_name_for

    return bundled_name_for(entry.model) or entry.model


def check_model(entry: ReleasedSAE, model_name: str) -> None:
    """Refuse a release made for another model, naming both."""
    from interpscope.models.registry import bundled_name_for

    wanted = release_model(entry)
    have = bundled_name_for(model_name) or model_name
    if bundled_name_for(model_name) is None and Path(model_name).expanduser().exists():
        return  # a local model folder: its name says nothing; the hook widths are checked when the SAE is used
    if wanted.lower() != have.lower():
        raise InterpscopeError(f"{entry.name} was trained on {entry.model} ({wanted}), but the model in use is "
                               f"{model_name}; load {wanted} or pick a release for {model_name}.")


def check_sae_model(sae, model_name: str) -> None:
    """For an SAE converted from a release (its cfg.json's metadata names it): refuse another model, naming both."""
    stamp = sae.cfg.extra.get("release") or {}
    if stamp.get("name"):
        try:
            entry = find(str(stamp["name"]))
        except InterpscopeError:
            return
        check_model(entry, model_name)


def listing(model_name: str | None = None) -> list[dict]:
    """Rows for a page or `sae releases`: every catalogued dictionary (of model_name's releases when given), with
    whether its weights are in the Hugging Face cache now."""
    from interpscope.models.registry import bundled_name_for

    have = (bundled_name_for(model_name) or model_name).lower() if model_name else None
    rows = []
    for entries in catalogue().values():
        for entry in entries:
            if have is not None and release_model(entry).lower() != have:
                continue
            rows.append({"name": entry.name, "release": entry.release, "sae_id": entry.sae_id,
                         "model": release_model(entry), "kind": entry.kind, "hook": entry.hook,
                         "hook_out": entry.hook_out, "width": entry.width, "l0": entry.l0,
                         "cached": cached_folder(entry) is not None})
    return rows


__all__ = ["ReleasedSAE", "catalogue", "check_model", "check_sae_model", "fetch", "find", "import_folder", "listing",
           "looks_like_release", "resolve"]
