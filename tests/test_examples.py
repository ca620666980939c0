"""The examples the README and the documentation show: one source, ``examples/``.

Each example appears whole, exactly as in its file, in the documentation page that
explains it; the README shows about ten lines of each, and every one of those lines is a
line of the example, in order. The examples themselves do what the pages say."""

import importlib.util
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {"own_model.py": None, "hugging_face.py": "transformers"}
# where each example is shown whole
PAGES = {"own_model.py": "docs/guides/diagnose.md", "hugging_face.py": "docs/guides/diagnose.md",
         "guard_hf.py": "docs/guides/guard.md", "guard_lightning.py": "docs/guides/guard.md"}
# the README's excerpts: "your own model", "a Hugging Face model", "guard a run"
README_EXCERPTS = {"own_model.py", "hugging_face.py", "guard_hf.py"}


def python_blocks(path: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / path).read_text(), re.S)


def readme_blocks() -> list[str]:
    return python_blocks("README.md")


def page_blocks(name: str) -> list[str]:
    """The Python blocks of the documentation page that shows examples/NAME whole."""
    return python_blocks(PAGES[name])


def code_of(name: str) -> str:
    """The example without its module docstring: what its page shows."""
    text = (ROOT / "examples" / name).read_text()
    return re.sub(r'^""".*?"""\n', "", text, count=1, flags=re.S).lstrip("\n")


def excerpt_of(block: str, name: str) -> bool:
    """Every non-blank line of ``block`` is a line of examples/NAME, in the same order."""
    lines = iter(code_of(name).splitlines())
    return all(any(line == have for have in lines) for line in block.splitlines() if line.strip())


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_docs_show_the_example_as_it_is(name):
    assert code_of(name) in page_blocks(name), f"{PAGES[name]}'s copy of examples/{name} is stale"


def test_the_readme_shows_ten_lines_of_each_example():
    excerpted = set()
    for block in readme_blocks():
        names = {name for name in PAGES if excerpt_of(block, name)}
        assert names, f"a README block is no excerpt of an example:\n{block}"
        excerpted |= names
        assert len([line for line in block.splitlines() if line.strip()]) <= 12, block
    assert excerpted >= README_EXCERPTS, README_EXCERPTS - excerpted


def test_an_excerpt_must_keep_the_examples_order():
    block = "trainer.run()\ntrainer = build(TrainConfig(steps=100, lr=3e-3, checkpoint_every=10, " \
            "progress=False))\n"
    assert not excerpt_of(block, "own_model.py")
    assert excerpt_of("\n".join(reversed(block.splitlines())), "own_model.py")
    assert not excerpt_of("trainer.run()  # changed\n", "own_model.py")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_example_names_the_cause_and_proves_the_fix(name, capsys):
    needs = EXAMPLES[name]
    if needs and importlib.util.find_spec(needs) is None:
        pytest.skip(f"needs {needs}")
    runpy.run_path(str(ROOT / "examples" / name), run_name="__main__")
    out = capsys.readouterr().out
    assert "root cause: dirty_data" in out
    assert "fix: validate_data (proven" in out
    if name == "hugging_face.py":
        assert "guard: 1 incident, 1 rollback" in out
