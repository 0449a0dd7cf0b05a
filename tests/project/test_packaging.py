"""One import package, `interpscope`, in the source root backend/ (backend/interpscope/, found by setuptools with no
hand-kept list or mapping); a built wheel holds interpscope/ only (no `backend`, `components` or `pages`), and
`import interpscope` works from any directory."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
OLD_IMPORT = re.compile(r"(from|import) (backend|interpscope\.components)([.\s]|$)")
PACKAGE = ROOT / "backend" / "interpscope"


def test_pyproject_finds_the_package_under_the_source_root():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = config["tool"]["setuptools"]
    assert "package-dir" not in setuptools  # no mapping: the folder is the package
    assert setuptools["packages"] == {"find": {"where": ["backend"], "include": ["interpscope*"]}}  # no list by hand
    assert config["project"]["scripts"]["interpscope"] == "interpscope.cli:main"
    assert config["tool"]["mypy"]["mypy_path"] == "backend"  # mypy reads the package from its source root
    assert not (ROOT / "backend" / "__init__.py").exists()  # backend/ is a source root, not a package


def test_no_module_imports_the_old_top_level_names():
    offenders = []
    for top in ("backend", "components", "pages", "tests", "bench", "scripts"):
        for path in (ROOT / top).rglob("*.py"):
            if path == Path(__file__):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                stripped = line.strip()
                if OLD_IMPORT.match(stripped):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {stripped}")
    assert offenders == []


def test_built_wheel_holds_only_the_interpscope_package(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("backend", "components", "pages"):  # the app's folders beside it must stay out of the wheel
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(wheels), str(source)], check=True, cwd=tmp_path,
                   capture_output=True, timeout=300)
    (wheel,) = wheels.glob("interpscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"interpscope", next(t for t in tops if t.endswith(".dist-info"))}
    expected = {str(p.relative_to(ROOT / "backend")) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    assert expected == {name for name in names if name.endswith(".py")}
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "interpscope = interpscope.cli:main" in entry


def test_import_interpscope_from_any_directory(tmp_path):
    code = ("import interpscope, interpscope.cli, interpscope.figures.tokens as heatmap, importlib.util;"
            "print(interpscope.__file__); print(heatmap.__file__);"
            "print(importlib.util.find_spec('backend') is None)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    package_file, heatmap_file, no_backend = done.stdout.split()
    assert Path(package_file) == PACKAGE / "__init__.py"
    assert Path(heatmap_file) == PACKAGE / "figures" / "tokens.py"
    assert no_backend == "True"


def test_an_installed_package_reads_a_clones_assets_from_the_environment(tmp_path):
    """A wheel in site-packages has no assets/ beside it: INTERPSCOPE_ASSETS_DIR points it at a clone's, and the
    shipped SAEs are then found there by name."""
    import os

    names = "print(sorted(f.name for f in sae.saes().values())[0])"
    code = "import interpscope.config as c, interpscope.sae as sae; print(c.ASSETS_DIR); print(c.REPO_ROOT); " + names
    env = {**os.environ, "INTERPSCOPE_ASSETS_DIR": str(ROOT / "assets"), "INTERPSCOPE_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assets, root, first = done.stdout.split()
    assert Path(assets) == ROOT / "assets" and Path(root) == ROOT and first.startswith("smollm2-135m-")
    env["INTERPSCOPE_ASSETS_DIR"] = str(tmp_path / "elsewhere" / "assets")
    done = subprocess.run([sys.executable, "-c", code.replace(names, "print(len(sae.saes()))")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0] == str(tmp_path / "elsewhere" / "assets") and "smollm2-135m-blocks" not in done.stdout


def test_api_functions_named_like_a_subpackage_stay_functions(tmp_path):
    """interpscope.flow (the information-flow function) shares its name with the flow view's package, as
    interpscope.predict with the prediction module: importing the package must not replace the function."""
    code = ("import interpscope, interpscope.flow.information, interpscope.flow.tuned, interpscope.predict;"
            "import types; print(callable(interpscope.flow), callable(interpscope.predict),"
            "isinstance(interpscope.flow, types.ModuleType))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "False"]


def test_an_installation_without_the_shipped_artefacts_says_which_and_how_to_get_them(tmp_path):
    """A wheel install has no assets/: the shipped models, corpus and tuned lenses named there said
    'huggingface-cli download adder' or 'rebuild: scripts/build_corpus.sh' (a script a wheel lacks). Each now names
    the missing artefact and the one way to provide it (INTERPSCOPE_ASSETS_DIR at a clone's assets/)."""
    import os

    env = {**os.environ, "INTERPSCOPE_ASSETS_DIR": str(tmp_path / "no-clone" / "assets"),
           "INTERPSCOPE_DATA_DIR": str(tmp_path / "data")}
    code = ("import interpscope.corpus as c\ntry:\n    c._bundled_paragraphs()\nexcept Exception as e:\n    print(e)")
    for argv in (["-m", "interpscope.cli", "predict", "--model", "adder", "--text", "1 + 2 ="], ["-c", code]):
        done = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        said = done.stdout + done.stderr
        assert "INTERPSCOPE_ASSETS_DIR" in said and "clone" in said and "huggingface-cli" not in said, said
        assert "Traceback" not in said


def test_the_shipped_model_names_are_the_asset_folders():
    from interpscope.models.registry import ASSET_MODEL_NAMES

    shipped = sorted(p.parent.name for p in (ROOT / "assets" / "models").glob("*/interpscope.json"))
    assert sorted(ASSET_MODEL_NAMES) == shipped
