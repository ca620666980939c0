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

from nanlab.errors import require

# The course needs the ``course`` extra: without it, one line naming the extra instead of
# "No module named 'ipywidgets'" (jupytext and nbclient are imported where they are used).
require("ipywidgets", "course")
require("nbformat", "course")

from nanlab.course import progress  # noqa: E402
from nanlab.course.checks import check, hint, predict, solution, start_lab  # noqa: E402
from nanlab.course.progress import show_progress  # noqa: E402
from nanlab.course.questions import practice  # noqa: E402
from nanlab.course.rubric import KeyPoint, WrongClaim, score_answer  # noqa: E402
from nanlab.course.widgets import FreeText, MultipleChoice, Ordering, RootCause  # noqa: E402

__all__ = ["FreeText", "KeyPoint", "MultipleChoice", "Ordering", "RootCause", "WrongClaim",
           "check", "hint", "practice", "predict", "progress", "score_answer", "show_progress",
           "solution", "start_lab"]
