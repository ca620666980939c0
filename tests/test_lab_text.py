"""Labs stay short enough to learn from (at most about 2,200 words of Markdown prose
each, at most 300 in one cell), and their headings carry no claim ids (the claims map
points at the sections)."""

import re
from pathlib import Path

import pytest

SOLUTIONS = sorted((Path(__file__).resolve().parents[1] / "solutions").glob("[0-9]*.py"))
MAX_WORDS = 2200
MAX_CELL_WORDS = 300  # one idea a cell: split a longer one


def cell_words(source: str) -> list[int]:
    """Words in each Markdown cell of a jupytext percent-format source."""
    return [sum(len(line.lstrip("#").split()) for line in cell.splitlines()[1:])
            for cell in re.split(r"^# %%", source, flags=re.M)
            if cell.startswith(" [markdown]")]


def markdown_words(source: str) -> int:
    """Words in the Markdown cells of a jupytext percent-format source."""
    return sum(cell_words(source))


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_a_lab_has_at_most_about_2200_words_of_prose(path):
    words = markdown_words(path.read_text())
    assert 0 < words <= MAX_WORDS, f"{path.name}: {words} words of Markdown (at most {MAX_WORDS})"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_no_markdown_cell_is_longer_than_300_words(path):
    long = [w for w in cell_words(path.read_text()) if w > MAX_CELL_WORDS]
    assert not long, f"{path.name}: Markdown cells of {long} words (at most {MAX_CELL_WORDS})"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_no_claim_ids_in_headings(path):
    headings = [line for line in path.read_text().splitlines() if re.match(r"# #+ ", line)]
    # "claim M8", "(M8)", "(I1)-(I4)", "(I1-I4)"
    ids = re.compile(r"\bclaims? [A-Z]\d+|\([CBMVIW]\d+[)\-–,]")
    assert not [h for h in headings if ids.search(h)]
