"""The library works with only its core dependencies installed (``pip install nanlab``):
torch, numpy, matplotlib, tqdm and what they pull in; no JupyterLab, widgets, notebook
tools, transformers, Lightning or TensorBoard.

A fresh interpreter is made to see every package outside that core (what pyproject's
``dependencies`` install, read from the installed metadata) as not installed, then:

- imports every module of ``nanlab``, found by walking the folders (nothing is imported
  to find them). A module of the library must import; one that needs an extra
  (``nanlab.course`` and ``nanlab.interview``: ``course``; ``nanlab.guard.hf``: ``hf``;
  ``nanlab.guard.lightning``: ``lightning``) must fail with one line that names it;
- trains the toy, injects a fault into a batch source nanlab did not make, runs a fault
  into a run folder and diagnoses it, guards a run, and uses the command line:
  ``nanlab --help``, ``nanlab run``, and ``nanlab course`` saying what to install.

The same as a separate venv with ``pip install torch==2.13.0 && pip install -e .`` proves,
in seconds instead of minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# the modules that need an extra, and the extra each must name when it is missing
NEEDS_EXTRA = {"nanlab.course": "course", "nanlab.interview": "course",
               "nanlab.guard.hf": "hf", "nanlab.guard.lightning": "lightning"}


def outside_core() -> list[str]:
    """The top-level modules installed here that the core dependencies do not bring: not
    theirs, nor those of what they require in turn (markers evaluated here, no extras)."""
    todo = [canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]]
    dists: set[str] = set()
    while todo:
        name = todo.pop()
        if name in dists:
            continue
        dists.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return sorted(module for module, owners in metadata.packages_distributions().items()
                  if module != "nanlab" and not any(canonicalize_name(d) in dists for d in owners))


CHILD = textwrap.dedent('''
    import importlib, importlib.util, json, os, pkgutil, sys

    OUTSIDE_CORE, NEEDS_EXTRA = json.loads(sys.argv[1])
    # None in sys.modules: "import x" raises ModuleNotFoundError and importlib.util.find_spec
    # says None, as for a package that is not installed (torch probes optional packages with
    # find_spec, so a meta_path finder that raises would break torch, not simulate absence)
    for name in OUTSIDE_CORE:
        sys.modules.setdefault(name, None)
    absent = importlib.util.find_spec("ipywidgets") is None
    import nanlab


    def walk(folder, prefix):
        for info in pkgutil.iter_modules([folder], prefix):
            if not info.name.endswith("__main__"):
                yield info.name
            if info.ispkg:
                yield from walk(os.path.join(folder, info.name.rpartition(".")[2]),
                                info.name + ".")


    modules = {}
    for name in ["nanlab", *walk(nanlab.__path__[0], "nanlab.")]:
        try:
            importlib.import_module(name)
            modules[name] = None
        except Exception as err:
            modules[name] = f"{type(err).__name__}: {err}"

    import contextlib, io
    import torch
    from nanlab import cli
    from nanlab.viz.tensorboard import export_tensorboard

    smoke = {}
    os.chdir(sys.argv[2])  # a scratch folder for the runs
    torch.set_num_threads(1)
    trainer = nanlab.Trainer(nanlab.TrainConfig(steps=3, progress=False))
    smoke["train"] = len(trainer.run().losses())
    source = lambda step: (torch.ones(4, 3), torch.zeros(4).long())  # a batch nanlab did not make
    injection = nanlab.inject("nan_input", batches=source, at_step=1)
    smoke["inject"] = [bool(injection.batches(s)[0].isnan().any()) for s in range(3)]
    nanlab.run_fault("nan_input", at_step=3, steps=6, out_dir="nan", progress=False)
    smoke["diagnose"] = nanlab.diagnose(nanlab.load_run("nan")).cause
    guard = nanlab.Guard("skip")
    nanlab.run_fault("nan_input", at_step=3, steps=6, callbacks=guard.callbacks(),
                     progress=False)
    smoke["guard"] = guard.counts["skip"]
    try:
        export_tensorboard(trainer.record, "tb")
    except ImportError as err:
        smoke["tensorboard"] = str(err)
    for args in (["--help"], ["course", "--help"], ["course", "build"],
                 ["run", "--steps", "2", "--json", "--out", "cli-run"]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main(args)
            except Exception as e:  # what a core-only user would see as a traceback
                status = f"{type(e).__name__}: {e}"
        smoke[" ".join(args)] = [status, out.getvalue(), err.getvalue()]
    print(json.dumps({"modules": modules, "smoke": smoke, "absent": absent,
                      "nanlab": nanlab.__path__[0]}))
''')


def run_core_only(scratch: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-c", CHILD, json.dumps([outside_core(), NEEDS_EXTRA]), str(scratch)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def needs_extra(module: str) -> str | None:
    return next((extra for prefix, extra in NEEDS_EXTRA.items()
                 if module == prefix or module.startswith(prefix + ".")), None)


def test_core_dependencies_are_torch_numpy_matplotlib_tqdm():
    names = sorted(canonicalize_name(Requirement(r).name)
                   for r in PYPROJECT["project"]["dependencies"])
    assert names == ["matplotlib", "numpy", "torch", "tqdm"], names


def test_the_library_imports_and_runs_with_only_the_core_installed(tmp_path):
    result = run_core_only(tmp_path)
    modules, smoke = result["modules"], result["smoke"]
    assert len(modules) > 50, sorted(modules)  # the walk found the package

    broken = {m: e for m, e in modules.items() if e is not None and needs_extra(m) is None}
    assert not broken, f"library modules that need more than the core: {broken}"
    for module, error in modules.items():
        extra = needs_extra(module)
        if extra is None:
            continue
        assert error is not None, f"{module} imported without the {extra} extra"
        assert "\n" not in error and f"pip install 'nanlab[{extra}]'" in error, (module, error)

    assert smoke["train"] == 3
    assert smoke["inject"] == [False, True, False]
    assert smoke["diagnose"] == "dirty_data", smoke["diagnose"]
    assert smoke["guard"] >= 1
    assert "nanlab[tensorboard]" in smoke["tensorboard"]
    status, out, _ = smoke["--help"]
    assert status == 0 and "The nanlab command line" in out, out
    status, out, _ = smoke["course --help"]
    assert status == 0 and "nanlab[course]" in out, out
    status, _, err = smoke["course build"]
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith("nanlab: error: nanlab course: ") and "nanlab[course]" in err, err
    status, out, err = smoke["run --steps 2 --json --out cli-run"]
    assert status == 0 and json.loads(out.splitlines()[-1])["outcome"] == "healthy", (out, err)
    assert result["absent"], "the child saw ipywidgets installed: it tested nothing"
    assert Path(result["nanlab"]) == ROOT / "nanlab", result["nanlab"]  # this tree's nanlab


def test_course_check_needs_no_torch():
    """`nanlab course check` compares notebooks: it runs where torch and the widgets are
    not installed (a docs or hook machine with nbformat and jupytext), and nothing on its
    path imports them."""
    code = ("import sys; sys.modules['torch'] = sys.modules['ipywidgets'] = None\n"
            "from nanlab.cli import main\n"
            "sys.exit(main(['course', 'check']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert "in sync" in done.stdout
