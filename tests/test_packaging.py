"""One import package: `interpscope` maps onto backend/ (and components/ onto `interpscope.components`), a built
wheel holds no top-level `backend`, `components` or `pages`, and `import interpscope` works from any directory."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
OLD_IMPORT = re.compile(r"(from|import) (backend|components)([.\s]|$)")
FOLDERS = {"interpscope": ROOT / "backend", "interpscope.components": ROOT / "components"}


def _package_folders() -> set[str]:
    names = set()
    for package, folder in FOLDERS.items():
        for init in folder.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(folder)
            names.add(".".join([package, *rel.parts]) if rel.parts else package)
    return names


def test_pyproject_lists_every_package_folder_and_maps_them():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(config["packages"]) == _package_folders()
    assert config["package-dir"] == {"interpscope": "backend", "interpscope.components": "components"}
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["interpscope"] == "interpscope.cli:main"


def test_no_module_imports_the_old_top_level_names():
    offenders = []
    for top in ("backend", "components", "pages", "tests", "bench", "scripts"):
        for path in (ROOT / top).rglob("*.py"):
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
    for name in ("backend", "components"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(wheels), str(source)], check=True, cwd=tmp_path,
                   capture_output=True, timeout=300)
    (wheel,) = wheels.glob("interpscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"interpscope", next(t for t in tops if t.endswith(".dist-info"))}
    expected = {"interpscope/" + str(p.relative_to(ROOT / "backend")) for p in (ROOT / "backend").rglob("*.py")
                if "__pycache__" not in p.parts}
    expected |= {"interpscope/components/" + str(p.relative_to(ROOT / "components"))
                 for p in (ROOT / "components").rglob("*.py") if "__pycache__" not in p.parts}
    assert expected <= set(names)
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "interpscope = interpscope.cli:main" in entry


def test_import_interpscope_from_any_directory(tmp_path):
    code = ("import interpscope, interpscope.cli, interpscope.components.token_heatmap as heatmap, importlib.util;"
            "print(interpscope.__file__); print(heatmap.__file__);"
            "print(importlib.util.find_spec('backend') is None)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    package_file, heatmap_file, no_backend = done.stdout.split()
    assert Path(package_file) == ROOT / "backend" / "__init__.py"
    assert Path(heatmap_file) == ROOT / "components" / "token_heatmap.py"
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
