"""The labs' practice questions, keys included, kept out of the notebooks.

A lab shows a question by its id, ``practice("02-lr-no-change")``: the learner sees the
prompt and the widget, not the answer, the explanation, the supporting evidence or the
rubric, which live here, one module per lab (``lab02.py``: ``LAB``, the notebook's name,
and ``QUESTIONS``, the graders of ``nanlab.course.quiz``). A learner who opens these files
can read the keys, as a student can read the back of a textbook; the point is that the
lab's own cells do not put them on screen next to the question. Progress is recorded by id
under the lab the question belongs to. The interview bank (``nanlab/interview/questions``)
is separate: it is taught openly in Lab 10.

>>> question("02-lr-no-change").qid
'02-lr-no-change'
>>> lab_of("02-lr-no-change")
'02_dirty_data'
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any

from nanlab.course.quiz import QuizError

MODULES = (*(f"lab{n:02d}" for n in range(15)), "lab16")
"""One module per lab, in course order (Lab 15, the exam, asks no practice questions)."""


@lru_cache(maxsize=1)
def _store() -> dict[str, tuple[str, Any]]:
    """qid -> (lab, question), every lab's questions; a duplicate id is an author's error."""
    store: dict[str, tuple[str, Any]] = {}
    for name in MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        for q in module.QUESTIONS:
            if q.qid in store:
                raise QuizError(f"{q.qid}: defined twice ({store[q.qid][0]} and {module.LAB})")
            store[q.qid] = (module.LAB, q)
    return store


def ids(lab: str | None = None) -> list[str]:
    """The stored question ids, all or one lab's, in the order the lab shows them.

    >>> ids("00_start_here")[0]
    '00-first-loss'
    """
    return [qid for qid, (owner, _) in _store().items() if lab is None or owner == lab]


def question(qid: str) -> Any:
    """The stored question ``qid`` (a grader from ``nanlab.course.quiz``); unknown: QuizError.

    >>> question("no-such-id")
    Traceback (most recent call last):
    ...
    nanlab.course.quiz.QuizError: no practice question 'no-such-id'; ids look like '00-first-loss'
    """
    try:
        return _store()[qid][1]
    except (KeyError, TypeError):
        raise QuizError(f"no practice question {qid!r}; ids look like "
                        f"{next(iter(_store()))!r}") from None


def lab_of(qid: str) -> str:
    """The lab (notebook name) a question belongs to; progress is recorded under it.

    >>> lab_of("07-step-zero")
    '07_sop_mystery'
    """
    question(qid)  # a clear error for an unknown id
    return _store()[qid][0]


def practice(qid: str) -> Any:
    """The widget for stored question ``qid``: put it last in a cell to show it.

    >>> type(practice("02-lr-no-change")).__name__
    'MultipleChoice'
    """
    from nanlab.course.widgets import widget_for  # lazy: ipywidgets only when shown

    return widget_for(question(qid), lab_of(qid))
