"""Lab headings carry no claim ids (the claims map points at the sections instead), and
the prose counter used to measure lab length (``markdown_words``) counts only Markdown."""

import re
from pathlib import Path

import pytest

SOLUTIONS = sorted((Path(__file__).resolve().parents[1] / "solutions").glob("[0-9]*.py"))


def markdown_words(source: str) -> int:
    """Words in the Markdown cells of a jupytext percent-format source."""
    words = 0
    for cell in re.split(r"^# %%", source, flags=re.M):
        if cell.startswith(" [markdown]"):
            words += sum(len(line.lstrip("#").split()) for line in cell.splitlines()[1:])
    return words


def test_the_counter_counts_only_markdown():
    source = "# %% [markdown]\n# ## A heading\n# two words\n\n# %%\nx = 1  # not prose\n"
    assert markdown_words(source) == 5


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_no_claim_ids_in_headings(path):
    headings = [line for line in path.read_text().splitlines() if re.match(r"# #+ ", line)]
    assert not [h for h in headings if re.search(r"\bclaims? [A-Z]\d+", h)]
