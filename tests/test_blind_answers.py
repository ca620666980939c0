"""Blind answers kept as a test: each good one passes, each wrong one fails.

Each ``tests/data/blind_*.json`` holds answers to one bank question, written by someone
who never saw the grader, its key points or its model answer, and kept exactly as
written (``{"question", "written_by", "good_answers", "wrong_answers", "measured"}``).
They were the measure of a grader fix (issue 26: the SOP order), so they stay: a later
change to a phrasing or a rule that loses one of them fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nanlab.interview import get_question

SETS = sorted((Path(__file__).parent / "data").glob("blind_*.json"))


def _answers(want: str) -> list[tuple[str, int, str]]:
    out = []
    for path in SETS:
        data = json.loads(path.read_text(encoding="utf-8"))
        out += [(data["question"], i, text) for i, text in enumerate(data[f"{want}_answers"])]
    return out


GOOD, WRONG = _answers("good"), _answers("wrong")


def test_there_are_blind_sets():
    assert SETS and len(GOOD) >= 6 and len(WRONG) >= 6


@pytest.mark.parametrize("qid, i, answer", GOOD, ids=[f"{q}-good-{i}" for q, i, _ in GOOD])
def test_every_blind_good_answer_passes(qid, i, answer):
    result = get_question(qid).score(answer)
    assert result.passed, f"{qid} blind good answer {i}:\n{answer}\n{result.feedback}"


@pytest.mark.parametrize("qid, i, answer", WRONG, ids=[f"{q}-wrong-{i}" for q, i, _ in WRONG])
def test_every_blind_wrong_answer_fails(qid, i, answer):
    result = get_question(qid).score(answer)
    assert not result.passed, f"{qid} blind wrong answer {i}:\n{answer}\n{result.feedback}"
