"""Where Estate's run-time data lives: one answer for a checkout and an installed wheel.

Estate reads templates (slurm_conf/, k8s/templates/), key tables and update policies
(slurm_conf/keys/, slurm_conf/update-policy/), vendored manifests and schemas (k8s/), the
pyinfra roles (roles/), the lab's recipes (vagrant/) and the scripts it runs (scripts/).
They stay top-level folders of the repository (the design card's layout); pyproject.toml
maps them into the package at build time, under estate/_tree/, so a wheel carries them.

TREE is therefore the installed package's estate/_tree/ where there is one, else the
checkout the package was imported from (estate/..). Both are found through the package
itself (importlib.resources), never by walking up from a module's __file__ or by putting
a directory on sys.path. What Estate writes (.lab/, build/) goes under work(), the
directory it is run from: never into site-packages.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib import resources
from pathlib import Path
from types import ModuleType

# The estate package's directory (a plain directory: Estate is not run from a zip).
PACKAGE = Path(str(resources.files("estate"))).resolve()
SHIPPED = "_tree"   # pyproject.toml's [tool.setuptools.package-dir] maps the folders here


class DataNotFound(RuntimeError):
    """Neither a wheel's data nor a checkout beside the package."""


def _tree() -> Path:
    shipped = PACKAGE / SHIPPED
    if shipped.is_dir():
        return shipped
    checkout = PACKAGE.parent
    if (checkout / "slurm_conf").is_dir() and (checkout / "roles").is_dir():
        return checkout
    raise DataNotFound(f"Estate's data is neither in {shipped} (an installed wheel) nor "
                       f"beside {PACKAGE} (a checkout): reinstall Estate")


TREE = _tree()
SLURM_CONF = TREE / "slurm_conf"
KEYS = SLURM_CONF / "keys"
UPDATE_POLICY = SLURM_CONF / "update-policy"
K8S = TREE / "k8s"
ROLES = TREE / "roles"
VAGRANT = TREE / "vagrant"
SCRIPTS = TREE / "scripts"
# Code that Estate ships as files rather than imports: verify's suites (run by pytest) and
# the acceptance checks (copied onto the login nodes).
CHECKS = PACKAGE / "verify" / "checks"
ACCEPTANCE = PACKAGE / "acceptance"


def work() -> Path:
    """Where Estate writes its working state (.lab/, build/): the directory it runs in."""
    return Path.cwd()


def roles_package() -> ModuleType:
    """The `roles` package (the roles import each other as roles.<role>, roles._lib), loaded
    from ROLES under its own name once; later imports of roles.* find it in sys.modules
    and its submodules through its __path__."""
    loaded = sys.modules.get("roles")
    if loaded is not None:
        if ROLES.resolve() not in [Path(p).resolve() for p in getattr(loaded, "__path__", [])]:
            raise ImportError(f"a package named roles from {list(loaded.__path__)} is "
                              f"already imported; Estate's roles are in {ROLES}")
        return loaded
    spec = importlib.util.spec_from_file_location(
        "roles", ROLES / "__init__.py", submodule_search_locations=[str(ROLES)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["roles"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["roles"]
        raise
    return module


def role_module(name: str) -> ModuleType:
    """roles.<name> (e.g. "munge.tasks", "storage.tests.test_storage"), imported."""
    roles_package()
    return importlib.import_module(f"roles.{name}")
