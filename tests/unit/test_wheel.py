"""Estate installs like a tool: a wheel built from the repository works on a spec that lives
outside any checkout (issue 45).

An sdist is built from a copy of the repository's files (as a fresh clone has them), and the
wheel from that sdist (so each carries everything), with the venv's setuptools (the
build-system pin, in the test extra: no index is reached); the wheel is installed into a
fresh venv. Its dependencies come from this venv's site-packages, added
after the fresh venv's own (a plain path in a .pth file: this venv's editable install of
the checkout is not processed), so `estate` and its data are the wheel's. The commands run
from a directory outside the checkout, without PYTHONPATH.
"""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLURM_CONF = ROOT / "tests" / "data" / "slurm-sites" / "deepops-dgx.conf"


def _run(argv, cwd: Path, env: dict | None = None, timeout: int = 180):
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _clone(dest: Path) -> Path:
    """The files a clone of the checkout has (tracked, and new files git does not ignore)."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _files(top: Path) -> set[str]:
    return {str(p.relative_to(top)) for p in top.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """A fresh venv with the wheel installed: its python, estate, and a clean environment."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = _clone(tmp / "src")
    _run([sys.executable, "-c", "import setuptools.build_meta as b, sys; "
          "b.build_sdist(sys.argv[1])", tmp / "sdist"], src)
    sdist, = (tmp / "sdist").glob("estate-*.tar.gz")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
          "--no-index", "-w", tmp / "dist", sdist], tmp)
    wheel, = (tmp / "dist").glob("estate-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp)
    _run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q",
          "--no-deps", "--no-index", wheel], tmp)
    purelib, = (venv / "lib").glob("python3*/site-packages")
    (purelib / "zz-estate-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return {"python": venv / "bin" / "python", "estate": venv / "bin" / "estate",
            "package": purelib / "estate", "env": env}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A directory outside any checkout, with a spec of its own."""
    work = tmp_path_factory.mktemp("stacks")
    shutil.copy(ROOT / "stacks" / "lab.yaml", work / "lab.yaml")
    assert subprocess.run(["git", "rev-parse"], cwd=work, capture_output=True).returncode
    return work


def test_the_installed_estate_reads_its_data_from_the_wheel(installed, work):
    proc = _run([installed["python"], "-c",
                 "import estate.paths as p; print(p.PACKAGE); print(p.TREE); print(p.ROLES); "
                 "p.role_module('munge.tasks'); import roles._lib as lib; print(lib.__file__)"],
                work, installed["env"])
    package, tree, roles, lib = map(Path, proc.stdout.split())
    assert package == installed["package"]
    assert tree == installed["package"] / "_tree"
    assert roles == tree / "roles" and lib == roles / "_lib" / "__init__.py"
    assert os.access(tree / "scripts" / "slurm-root.sh", os.X_OK)
    # the templates compiled ahead (estate.render.templates), and the vendored indexes
    assert (package / "render" / "compiled" / "t_slurm_conf_slurm_conf_j2.py").is_file()
    assert (tree / "k8s" / "kueue" / "manifests.index.json").is_file()


def test_check_render_import_and_plan_run_from_the_wheel(installed, work):
    estate, env = installed["estate"], installed["env"]
    before = _files(installed["package"])
    _run([estate, "check", "lab.yaml", "--output", "text"], work, env)
    _run([estate, "render", "lab.yaml", "-o", "out", "--output", "text"], work, env)
    _run([estate, "plan", "lab.yaml", "--svg", "lab.svg", "--output", "text"], work, env)
    _run([estate, "import", SLURM_CONF, "-o", "imported.yaml"], work, env)
    assert (work / "lab.svg").read_text().lstrip().startswith(("<svg", "<?xml"))
    _run([estate, "check", "imported.yaml", "--output", "text"], work, env)
    # Nothing was written into the installed package.
    assert _files(installed["package"]) == before
    # The same import and render as the checkout's, byte for byte.
    checkout = [sys.executable, "-m", "estate"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    _run([*checkout, "import", SLURM_CONF, "-o", "ref.yaml"], work, env)
    assert (work / "imported.yaml").read_text() == (work / "ref.yaml").read_text()
    _run([*checkout, "render", "lab.yaml", "-o", "ref", "--output", "text"], work, env)
    out, ref = work / "out", work / "ref"
    assert _files(out) == _files(ref)
    differ = sorted(f for f in _files(ref) if (out / f).read_bytes() != (ref / f).read_bytes())
    assert not differ
