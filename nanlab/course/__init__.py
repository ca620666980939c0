"""The course machinery: notebooks built from one source, exercise checks, practice, progress.

- ``notebooks``:     solution notebooks (jupytext pairs) -> student labs; build / check / execute
- ``checks``:        exercise checks: passed / not done yet / not yet right, hints, solutions
- ``quiz``:          grading of the practice questions, plain Python
- ``rubric``:        rubric scoring of free-text answers (English and Chinese): core and
                     bonus points, one pass mark, wrong claims, order, feedback
- ``wording``:       how the rubric reads words: tokens, stems, sentences, negation
- ``widgets``:       the practice questions as ipywidgets (Check, Hint, Show answer)
- ``questions``:     the labs' practice questions with their keys; ``practice(id)`` shows one
- ``mysteries``:     Lab 07's mystery runs: a hidden fault, bounded tries, hints from the run
- ``progress``:      the learner's progress file, and ``show_progress()``
- ``claims``:        the source article's claims, and the lab that reproduces or corrects each
- ``pytest_plugin``: nbval check: solutions must pass, unfilled labs must not

What a lab imports, in one line:

>>> from nanlab.course import check, hint, predict, practice, solution, start_lab, show_progress
"""

import importlib

from nanlab.errors import require_installed

require_installed("nbformat", "course")  # the course tools read notebooks
# name -> the module that defines it, loaded on first use: ``nanlab course check`` (which
# compares notebooks, needing only nbformat) imports nanlab.course.notebooks without
# pulling in the widgets. A lab's names need the ``course`` extra: without it, one line
# naming the extra instead of "No module named 'ipywidgets'".
PUBLIC = {
    **dict.fromkeys(("check", "hint", "predict", "solution", "start_lab"), "nanlab.course.checks"),
    "show_progress": "nanlab.course.progress", "practice": "nanlab.course.questions",
    **dict.fromkeys(("KeyPoint", "WrongClaim", "score_answer"), "nanlab.course.rubric"),
    **dict.fromkeys(("FreeText", "MultipleChoice", "Ordering", "RootCause"),
                    "nanlab.course.widgets"),
}
__all__ = sorted([*PUBLIC, "progress"])


def __getattr__(name: str):
    if name in PUBLIC:
        require_installed("ipywidgets", "course")
        require_installed("nbformat", "course")
        value = getattr(importlib.import_module(PUBLIC[name]), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module 'nanlab.course' has no attribute {name!r}")
