"""The README's "your own model" and "a Hugging Face model" examples: the code in the
README is the code in ``examples/`` (one source), and it does what the README says."""

import importlib.util
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {"own_model.py": None, "hugging_face.py": "transformers"}


def readme_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def code_of(name: str) -> str:
    """The example without its module docstring: what the README shows."""
    text = (ROOT / "examples" / name).read_text()
    return re.sub(r'^""".*?"""\n', "", text, count=1, flags=re.S).lstrip("\n")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_readme_shows_the_example_as_it_is(name):
    assert code_of(name) in readme_blocks(), f"README's copy of examples/{name} is stale"


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
