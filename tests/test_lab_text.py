"""Labs stay short enough to learn from (at most about 2,200 words of Markdown prose
each), and their headings carry no claim ids (the claims map points at the sections)."""

import re
from pathlib import Path

import pytest

SOLUTIONS = sorted((Path(__file__).resolve().parents[1] / "solutions").glob("[0-9]*.py"))
MAX_WORDS = 2200


def markdown_words(source: str) -> int:
    """Words in the Markdown cells of a jupytext percent-format source."""
    words = 0
    for cell in re.split(r"^# %%", source, flags=re.M):
        if cell.startswith(" [markdown]"):
            words += sum(len(line.lstrip("#").split()) for line in cell.splitlines()[1:])
    return words


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_a_lab_has_at_most_about_2200_words_of_prose(path):
    words = markdown_words(path.read_text())
    assert 0 < words <= MAX_WORDS, f"{path.name}: {words} words of Markdown (at most {MAX_WORDS})"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_no_claim_ids_in_headings(path):
    headings = [line for line in path.read_text().splitlines() if re.match(r"# #+ ", line)]
    assert not [h for h in headings if re.search(r"\bclaims? [A-Z]\d+", h)]
