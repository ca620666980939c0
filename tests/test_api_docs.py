"""The API documents itself: ``help()`` on any public name shows an example to paste.

Public means: a function or class defined in a ``nanlab`` module, with no leading
underscore, and in ``__all__`` when the module has one. Its docstring must hold an
example: a ``>>>`` line (a doctest) or an ``Example::`` block. The package docstring
(``help(nanlab)``) names every module on a line of its own. The doctests themselves run
here too, fast ones for real; slow ones are marked ``# doctest: +SKIP``.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import re
from pathlib import Path

import pytest

import nanlab

ROOT = Path(__file__).resolve().parents[1]
def _module_names() -> list[str]:
    """Every module and subpackage as a dotted name below ``nanlab`` ("faults", "faults.run")."""
    names = []
    for path in (ROOT / "nanlab").rglob("*.py"):
        parts = path.relative_to(ROOT / "nanlab").with_suffix("").parts
        if parts[-1] == "__main__" or parts == ("__init__",):
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names)


MODULES = _module_names()
TOP_LEVEL = sorted({name.split(".")[0] for name in MODULES})
EXAMPLE = re.compile(r"^\s*>>> |Examples?::", re.M)


def public_names(module) -> list[tuple[str, object]]:
    """(name, object) of the module's own public functions and classes."""
    listed = getattr(module, "__all__", None)
    out = []
    for name, obj in vars(module).items():
        if name.startswith("_") or (listed is not None and name not in listed):
            continue
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and \
                getattr(obj, "__module__", None) == module.__name__:
            out.append((name, obj))
    return sorted(out)


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_has_an_example(name):
    module = importlib.import_module(f"nanlab.{name}")
    assert module.__doc__ and module.__doc__.strip(), f"nanlab.{name} has no module docstring"
    missing = [n for n, obj in public_names(module)
               if not (obj.__doc__ and EXAMPLE.search(inspect.cleandoc(obj.__doc__)))]
    assert not missing, (
        f"nanlab.{name}: no example ('>>>' line or 'Example::' block) in the docstring of "
        f"{', '.join(missing)}")


def test_package_docstring_names_every_module_on_its_own_line():
    """Each top-level module and subpackage; a subpackage's own docstring lists its modules."""
    doc = nanlab.__doc__ or ""
    listed = re.findall(r"^- ``nanlab\.(\w+)``", doc, re.M)
    assert sorted(listed) == sorted(set(listed)), f"named twice in help(nanlab): {listed}"
    missing = sorted(set(TOP_LEVEL) - set(listed))
    unknown = sorted(set(listed) - set(TOP_LEVEL))
    assert not missing, f"help(nanlab) does not list (one '- ``nanlab.x``' line each): {missing}"
    assert not unknown, f"help(nanlab) lists modules that do not exist: {unknown}"


@pytest.mark.parametrize("package", [m for m in TOP_LEVEL if (ROOT / "nanlab" / m).is_dir()])
def test_subpackage_docstring_names_its_modules(package):
    doc = importlib.import_module(f"nanlab.{package}").__doc__ or ""
    own = [m.split(".")[1] for m in MODULES if m.startswith(package + ".")]
    missing = [m for m in own if f"``{m}``" not in doc]
    assert not missing, f"help(nanlab.{package}) does not name its modules: {missing}"


@pytest.mark.parametrize("name", MODULES)
def test_doctests_pass(name, tmp_path, monkeypatch):
    module = importlib.import_module(f"nanlab.{name}")
    monkeypatch.chdir(tmp_path)  # an example that writes files writes them here
    flags = doctest.ELLIPSIS  # as pytest --doctest-modules; anything else needs a directive
    runner = doctest.DocTestRunner(optionflags=flags)
    for test in doctest.DocTestFinder(exclude_empty=True).find(module):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"nanlab.{name}: {result.failed} doctest example(s) failed " \
                               "(see the captured output above)"


def test_the_front_door_lists_a_small_public_api():
    """``nanlab.<name>`` for each public name: it loads, it has an example, and both
    ``help(nanlab)`` and the README name it, and the API reference documents it."""
    readme = (ROOT / "README.md").read_text()
    reference = (ROOT / "docs" / "api.md").read_text()
    assert 5 <= len(nanlab.__all__) <= 15, nanlab.__all__
    for name in nanlab.__all__:
        obj = getattr(nanlab, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert EXAMPLE.search(inspect.cleandoc(obj.__doc__ or "")), f"{name}: no example"
        assert re.search(rf"\b{name}\b", nanlab.__doc__), f"help(nanlab) does not name {name}"
        assert f"`{name}`" in readme, f"the README's public API does not name {name}"
        assert re.search(rf"^::: nanlab\.[\w.]+\.{name}$", reference, re.M), \
            f"docs/api.md does not document {name}"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        nanlab.nope  # noqa: B018
