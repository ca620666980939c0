"""Interview practice: the question bank, answer frameworks, a mock interview, a cheat sheet.

Why this package exists: "your loss suddenly became NaN, what do you do?" is a standard
LLM-training interview question. Knowing the fix is half of it; the other half is saying
it in order, with numbers, at the depth the interviewer's level expects.

Everything here is plain Python, unit-tested without a browser; the two notebook
widgets (``MockInterviewWidget``, ``free_text``) are thin shells over it and import
``ipywidgets`` only when made. Every name below can be imported from ``nanlab.interview``.

- ``bank``:        the question bank; the data is one JSON file per topic,
  ``nanlab/interview/questions/<topic>.json``, easy for an instructor to extend.
  ``load_bank(path)`` validates every entry and reports each problem by file, id and field.
- ``schema``:      the bank's topics, levels and fields, and ``check_bank``, the validation.
- ``frameworks``:  ``answer_framework(level)``: what a new graduate, an experienced engineer
  and a senior/architect are expected to show, a fill-in template, and the typical mistake.
- ``mock``:        ``MockInterview``: seeded question choice, rubric feedback
  (``nanlab.course.rubric``), a follow-up aimed at what the answer missed, and a summary.
- ``widgets``:     ``MockInterviewWidget`` and ``free_text``, the notebook shells.
- ``cheatsheet``:  ``cheat_sheet()``: the one-page SOP for the night before
  (``cheat_sheet.md``).
- ``star``:        ``star_story(run, diagnosis)``: a STAR story (Situation, Task, Action,
  Result) of the learner's own incident, for every fault family; ``StarStory.markdown()`` /
  ``save(path)`` export it.
- ``star_facts``:  ``incident_facts``, the run's real numbers the story is written from, and
  ``grad_norm_jump``.
- ``star_words``:  what the story says about each root cause.

Quick start::

    from nanlab.interview import MockInterview
    mock = MockInterview(level="new_grad", seed=1)
    print(mock.current.prompt())
    reply = mock.answer("First I would stop the run and keep the logs ...")
    print(reply.message)
"""

from nanlab.interview.bank import (
    LEVELS,
    TOPICS,
    BankError,
    Question,
    bank_counts,
    check_bank,
    default_bank_path,
    get_question,
    load_bank,
    parse_bank,
    resolve,
)
from nanlab.interview.cheatsheet import cheat_sheet
from nanlab.interview.frameworks import FRAMEWORKS, answer_framework, frameworks_markdown
from nanlab.interview.mock import GOOD_SCORE, MockInterview, Turn
from nanlab.interview.star import star_story, story_from_facts
from nanlab.interview.star_facts import grad_norm_jump
from nanlab.interview.star_words import _CAUSE_WORDS  # noqa: F401  (tests read every cause)
from nanlab.interview.widgets import MockInterviewWidget, free_text

__all__ = [
    "FRAMEWORKS", "GOOD_SCORE", "LEVELS", "TOPICS", "BankError", "MockInterview",
    "MockInterviewWidget", "Question", "Turn", "answer_framework", "bank_counts", "cheat_sheet",
    "check_bank", "default_bank_path", "frameworks_markdown", "free_text", "get_question",
    "grad_norm_jump", "load_bank", "parse_bank", "resolve", "star_story", "story_from_facts",
]
