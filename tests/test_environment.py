"""The two ways to install agree: environment.yml (conda / Binder) and pyproject.toml (pip).

environment.yml installs, under ``pip:``, exactly the packages of pyproject's
``[project] dependencies`` plus its ``course`` extra (what ``make lab`` installs: the labs,
no test tools), with the same version specifiers, plus nanlab itself (``-e .``); conda
itself provides only python and pip. Its python satisfies ``requires-python``, and ruff
targets the oldest python allowed. Every notebook runs on the ``python3`` kernel, the one
``make lab`` and Binder both have.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
ENV_TEXT = (ROOT / "environment.yml").read_text()


ENV = yaml.safe_load(ENV_TEXT)  # PyYAML comes with jupyterlab (via jupyter-events)


def _conda_and_pip() -> tuple[list[str], list[str]]:
    conda, pip = [], []
    for dep in ENV["dependencies"]:
        if isinstance(dep, dict):
            pip += [str(d) for d in dep.get("pip", [])]
        else:
            conda.append(str(dep))
    return conda, pip


def _by_name(reqs: list[str]) -> dict[str, SpecifierSet]:
    out = {}
    for text in reqs:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name not in out, f"{name} listed twice"
        out[name] = req.specifier
    return out


def test_environment_yml_has_the_pyproject_packages_and_specifiers():
    project = PYPROJECT["project"]
    wanted = _by_name(project["dependencies"] + project["optional-dependencies"]["course"])
    conda, pip = _conda_and_pip()
    assert "-e ." in pip, "environment.yml must install nanlab itself: '- -e .' under pip"
    env = _by_name([p for p in pip if not p.startswith("-")])
    missing = sorted(set(wanted) - set(env))
    extra = sorted(set(env) - set(wanted))
    assert not missing, f"in pyproject.toml but not in environment.yml: {missing}"
    assert not extra, f"in environment.yml but not in pyproject.toml (dependencies or the " \
                      f"course extra): {extra}"
    differ = {n: (str(wanted[n]), str(env[n])) for n in wanted if wanted[n] != env[n]}
    assert not differ, f"specifiers differ (pyproject, environment.yml): {differ}"
    conda_names = sorted(re.split(r"[=<>!~ ]", c)[0] for c in conda)
    assert conda_names == ["pip", "python"], (
        f"conda packages besides python and pip: {conda_names}; list them under pip: so "
        "they match pyproject.toml")


def test_python_version_agrees():
    requires = SpecifierSet(PYPROJECT["project"]["requires-python"])
    conda, _ = _conda_and_pip()
    (python,) = [c for c in conda if re.match(r"python\b", c)]
    m = re.fullmatch(r"python\s*=?=\s*(\d+\.\d+)(\.\*)?", python)
    assert m, f"environment.yml: pin python as python=3.X, got {python!r}"
    assert Version(m.group(1)) in requires, (
        f"environment.yml python {m.group(1)} is outside requires-python {requires}")
    oldest = min(Version(s.version) for s in requires if s.operator in (">=", "~="))
    target = PYPROJECT["tool"]["ruff"]["target-version"]
    assert target == f"py{oldest.major}{oldest.minor}", (
        f"ruff target-version {target} but requires-python {requires}")


NOTEBOOKS = sorted(p for d in ("solutions", "labs") for p in (ROOT / d).glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_uses_the_python3_kernel(path):
    spec = json.loads(path.read_text())["metadata"].get("kernelspec", {})
    assert spec.get("name") == "python3", f"{path}: kernelspec {spec!r}, want name python3"
    assert spec.get("language", "python") == "python"


def test_there_are_notebooks():
    assert {p.parent.name for p in NOTEBOOKS} == {"solutions", "labs"}


def _make_variable(name: str) -> str:
    """A Makefile variable as the Makefile defines it on this machine (not as a command
    line like `make test OTHER_KERNELS=` overrode it for the make running this test)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MAKEOVERRIDES", "MFLAGS", "MAKELEVEL", name)}
    out = subprocess.run(["make", "-s", "--no-print-directory", "-f", "Makefile", "-f", "-",
                          "print"], input=f"print:\n\t@echo $({name})\n", text=True,
                         capture_output=True, cwd=ROOT, check=True, env=env)
    return out.stdout.strip()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_proves_two_cpu_kernel_paths():
    """The unit tests run on OTHER_KERNELS, the notebooks on the machine's own, and the
    two are different paths of PyTorch's CPU kernels on this processor."""
    recipe = re.search(r"^test:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    lines = recipe.group(1).replace("\\\n", " ").splitlines()
    unit = [x for x in lines if " tests" in x and "pytest" in x]
    notebooks = [x for x in lines if "nbval" in x]
    assert len(unit) == len(notebooks) == 1, lines
    assert "$(OTHER_KERNELS)" in unit[0] and "$(OTHER_KERNELS)" not in notebooks[0]
    other = dict(kv.split("=", 1) for kv in _make_variable("OTHER_KERNELS").split())
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")}
    own, theirs = (subprocess.run([sys.executable, "-c", probe], env=e, text=True,
                                  capture_output=True, check=True).stdout.strip()
                   for e in (env, {**env, **other}))
    if own == "DEFAULT":  # an ARM processor without SVE: PyTorch has one path here
        pytest.skip("PyTorch has only its default CPU kernels on this processor")
    assert own != theirs, (own, theirs, other)
