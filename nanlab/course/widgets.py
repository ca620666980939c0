"""Practice widgets: thin ipywidgets shells around the graders in ``nanlab.course.quiz``.

Each widget shows a question, the controls to answer it, a Check button, a Hint button and
a feedback area. The Check button calls the question's ``grade`` and shows the
:class:`~nanlab.course.quiz.Feedback`; nothing here decides what is right. A wrong try is
told what is wrong, never what is right; after ``REVEAL_AFTER`` (3) wrong tries, or when the learner
presses **Show answer**, the right answer and its explanation are shown (and the progress
file notes that the answer was shown). The feedback lives in an
``HTML`` widget (not an ``Output``) so a test can click and read it without a kernel::

    q = MultipleChoice("fp16-max", "Largest finite fp16 value?", ["65504", "65536"], 0)
    q.choices.value = "65504"
    q.check_button.click()
    q.feedback.value   # '... Right. ...'

In a notebook, put the object last in a cell (or ``display(q)``) to show it.
"""

from __future__ import annotations

import html
import random
from collections.abc import Sequence
from typing import Any

from nanlab.course import progress
from nanlab.course.checks import _one_line
from nanlab.course.quiz import (
    REVEAL_AFTER,
    Feedback,
    FreeTextQuestion,
    Hints,
    MultipleChoiceQuestion,
    OrderingQuestion,
    RootCauseQuestion,
)
from nanlab.course.rubric import PASS_MARK
from nanlab.errors import require

require("ipywidgets", "course")  # one line naming the extra, not a ModuleNotFoundError
import ipywidgets as w  # noqa: E402

_WIDE = w.Layout(width="auto")


class QuestionWidget:
    """Shared shell: prompt, answer controls, Check and Hint buttons, feedback, hints.

    Subclasses build ``self.controls`` and implement ``_grade()``. Use one of them:
    :class:`MultipleChoice`, :class:`Ordering`, :class:`RootCause`, :class:`FreeText`;
    each has the attributes below. Check never raises: whatever was entered, and a damaged
    progress file, end as feedback (or a warning), never as a traceback.

    >>> q = MultipleChoice("w-demo", "Largest finite fp16?", ["65504", "65536"], 0)
    >>> q.choices.value = "65536"
    >>> q.check_button.click()
    >>> q.feedback_text()
    "Not quite: '65536' is not the answer. Try again."
    """

    def __init__(self, question: Any, controls: list[w.Widget], lab: str | None = None):
        self.question = question
        self.lab = lab
        self.hints = Hints(question.hints)
        self.last_feedback: Feedback | None = None
        self.wrong_tries = 0
        self.answer_shown = False
        self.prompt = w.HTML(f"<b>{html.escape(question.prompt)}</b>")
        self.check_button = w.Button(description="Check", button_style="primary")
        self.hint_button = w.Button(description="Hint", disabled=not question.hints)
        self.feedback = w.HTML("")
        self.hint_area = w.HTML("")
        self.answer_button = w.Button(description="Show answer")
        self.answer_area = w.HTML("")
        self.check_button.on_click(self._on_check)
        self.hint_button.on_click(self._on_hint)
        self.answer_button.on_click(self._on_show_answer)
        buttons = w.HBox([self.check_button, self.hint_button, self.answer_button])
        self.widget = w.VBox(
            [self.prompt, *controls, buttons, self.feedback, self.hint_area, self.answer_area],
            layout=w.Layout(border="1px solid #ccc", padding="6px", margin="6px 0"),
        )

    @property
    def qid(self) -> str:
        return self.question.qid

    def _grade(self) -> Feedback:
        raise NotImplementedError

    def _on_check(self, _button: w.Button | None = None) -> None:
        try:
            fb = self._grade()
        except Exception as err:  # a grader bug must show as feedback, never a traceback
            fb = Feedback(False, 0.0, f"Could not grade this answer ({_one_line(err)}). "
                                      "Please report it.", False)
        if fb.answered and not fb.correct:
            self.wrong_tries += 1
            if self.wrong_tries >= REVEAL_AFTER and not self.answer_shown:
                fb.details.append(f"After {self.wrong_tries} tries: "
                                  f"{self.question.answer_text()}")
        self.last_feedback = fb
        self.feedback.value = _render(fb)
        progress.record(self.lab, self.qid, correct=fb.correct, answered=fb.answered,
                        kind="question", hints_used=self.hints.revealed)

    def _on_show_answer(self, _button: w.Button | None = None) -> None:
        """Show the right answer on request; the progress file notes it was shown."""
        self.answer_shown = True
        text = self.question.answer_text()
        self.answer_area.value = f"<div>&#128273; {_lines(text)}</div>"
        progress.record(self.lab, self.qid, correct=False, answered=False, kind="question",
                        hints_used=self.hints.revealed, answer_shown=True)

    def _on_hint(self, _button: w.Button | None = None) -> None:
        text = self.hints.next()
        shown = self.hint_area.value
        self.hint_area.value = shown + f"<div>&#128161; {html.escape(text)}</div>"

    def _reveal(self) -> dict[str, bool]:
        """``reveal=True`` for the grader once the answer was shown (then a missed right
        option is named with its reason); before that, nothing (a wrong try is told what is
        wrong, and the third one gets ``answer_text`` with every reason)."""
        return {"reveal": True} if self.answer_shown else {}

    def feedback_text(self) -> str:
        """The last feedback as plain text ('' before the first Check)."""
        return self.last_feedback.text() if self.last_feedback else ""

    def _repr_mimebundle_(self, **kwargs: Any) -> dict | None:
        return self.widget._repr_mimebundle_(**kwargs)


class MultipleChoice(QuestionWidget):
    """Radio buttons for one right answer; checkboxes when several answers are right.

    >>> q = MultipleChoice("fp16-max", "Largest finite fp16?", ["65504", "65536"], 0)
    >>> q.choices.value = "65504"
    >>> q.check_button.click(); q.last_feedback.correct  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        qid: str,
        question: str,
        options: Sequence[str],
        answers: int | Sequence[int],
        explanation: str = "",
        hints: Sequence[str] = (),
        lab: str | None = None,
        why: Sequence[str] = (),
    ):
        self._setup(MultipleChoiceQuestion(qid, question, list(options), answers, explanation,
                                           hints, why=tuple(why)), lab)

    def _setup(self, q: MultipleChoiceQuestion, lab: str | None) -> None:
        if q.multiple:
            self.boxes = [w.Checkbox(value=False, description=o, indent=False, layout=_WIDE)
                          for o in q.options]
            controls: list[w.Widget] = [w.VBox(self.boxes)]
        else:
            self.choices = w.RadioButtons(options=list(q.options), value=None, layout=_WIDE)
            controls = [self.choices]
        super().__init__(q, controls, lab)

    def _grade(self) -> Feedback:
        if self.question.multiple:
            picked: Any = [i for i, b in enumerate(self.boxes) if b.value]
        else:
            picked = self.choices.value
        return self.question.grade(picked, **self._reveal())


class Ordering(QuestionWidget):
    """One dropdown per position; the learner picks which step goes where.

    ``items`` is the right order; the dropdowns list them in a shuffled order fixed by
    the qid, so the page does not give the answer away and looks the same every time.

    >>> q = Ordering("sop", "Order the SOP", ["data", "AMP off", "LR / 10"])
    >>> for box, step in zip(q.slots, ["data", "AMP off", "LR / 10"]): box.value = step
    >>> q.check_button.click(); q.last_feedback.correct  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        qid: str,
        question: str,
        items: Sequence[str],
        explanation: str = "",
        hints: Sequence[str] = (),
        lab: str | None = None,
    ):
        self._setup(OrderingQuestion(qid, question, list(items), explanation, hints), lab)

    def _setup(self, q: OrderingQuestion, lab: str | None) -> None:
        shuffled = list(q.items)
        random.Random(q.qid).shuffle(shuffled)
        self.slots = [
            w.Dropdown(options=[("(choose)", None)] + [(s, s) for s in shuffled], value=None,
                       description=f"Step {i + 1}", layout=w.Layout(width="28em"))
            for i in range(len(q.items))
        ]
        super().__init__(q, [w.VBox(self.slots)], lab)

    def _grade(self) -> Feedback:
        return self.question.grade([s.value for s in self.slots])


class RootCause(QuestionWidget):
    """Pick the fault family of a mystery run, then tick the evidence that supports it.

    >>> q = RootCause("m1", "Why?", ["data", "lr"], "data", ["nan in x", "lr high"], ["nan in x"])
    >>> q.family.value = "data"; q.boxes[0].value = True
    >>> q.check_button.click(); q.last_feedback.correct  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        qid: str,
        question: str,
        families: Sequence[str],
        answer: str,
        evidence: Sequence[str],
        supporting: Sequence[str],
        explanation: str = "",
        hints: Sequence[str] = (),
        lab: str | None = None,
        why: Sequence[str] = (),
        family_why: Sequence[str] = (),
    ):
        self._setup(RootCauseQuestion(qid, question, list(families), answer, list(evidence),
                                      list(supporting), explanation, hints, tuple(why),
                                      tuple(family_why)), lab)

    def _setup(self, q: RootCauseQuestion, lab: str | None) -> None:
        self.family = w.RadioButtons(options=list(q.families), value=None, layout=_WIDE)
        self.boxes = [w.Checkbox(value=False, description=e, indent=False, layout=_WIDE)
                      for e in q.evidence]
        controls = [w.HTML("Fault family:"), self.family,
                    w.HTML("Evidence that supports it:"), w.VBox(self.boxes)]
        super().__init__(q, controls, lab)

    def _grade(self) -> Feedback:
        picked = [e for e, b in zip(self.question.evidence, self.boxes, strict=True) if b.value]
        return self.question.grade(self.family.value, picked, **self._reveal())


class FreeText(QuestionWidget):
    """A short written answer, scored against key points by ``nanlab.course.rubric``.

    >>> q = FreeText("why-silent", "Why is a NaN loss silent?", [("no error", ("no error",))])
    >>> q.answer.value = "The loop keeps going and raises no error at all."
    >>> q.check_button.click(); q.last_feedback.correct  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        qid: str,
        question: str,
        key_points: Sequence[Any],
        pass_score: float = PASS_MARK,
        model_answer: str = "",
        hints: Sequence[str] = (),
        lab: str | None = None,
        must_not: Sequence[Any] = (),
        ordered: bool = False,
    ):
        self._setup(FreeTextQuestion(qid, question, list(key_points), pass_score, model_answer,
                                     hints, tuple(must_not), ordered), lab)

    def _setup(self, q: FreeTextQuestion, lab: str | None) -> None:
        self.answer = w.Textarea(placeholder="Your answer, in a sentence or two",
                                 layout=w.Layout(width="100%", height="6em"))
        super().__init__(q, [self.answer], lab)
        self.assessment = SelfAssessment(q, lab)
        self.widget.children = (*self.widget.children, self.assessment.widget)

    def _on_check(self, _button: w.Button | None = None) -> None:
        super()._on_check(_button)
        if self.last_feedback is not None and self.last_feedback.answered:
            self.assessment.offer(self.answer.value)

    def _grade(self) -> Feedback:
        reveal = self.wrong_tries + 1 >= REVEAL_AFTER or self.answer_shown
        return self.question.grade(self.answer.value, reveal=reveal)


class SelfAssessment:
    """After a graded try: the model answer and the core points to tick, the grader's pre-ticked.

    The rules read words, not meaning, so a correct paraphrase can miss a point. The learner
    compares their answer with the model answer and ticks the core points they covered;
    the progress file records it as a self-assessment (item ``<qid>:self``), beside, never
    instead of, the grader's verdict.

    >>> from nanlab.course.quiz import FreeTextQuestion
    >>> q = FreeTextQuestion("sa", "Why?", [("no error", ("no error",)), ("silent", ("silent",))])
    >>> panel = SelfAssessment(q, None)
    >>> panel.offer("The loop raises no error at all here.")
    >>> [box.value for box in panel.boxes]
    [True, False]
    """

    def __init__(self, question: FreeTextQuestion, lab: str | None):
        from nanlab.course.rubric import KeyPoint

        self.question = question
        self.lab = lab
        self.points = [p if isinstance(p, KeyPoint) else KeyPoint(str(p[0]), tuple(p[1]))
                       for p in question.key_points]
        self.core = [p for p in self.points if not p.bonus] or self.points
        self.boxes = [w.Checkbox(description=p.name, indent=False,
                                 layout=w.Layout(width="auto")) for p in self.core]
        self.record_button = w.Button(description="Record my self-assessment")
        self.record_button.on_click(self._on_record)
        self.model = w.HTML("")
        self.verdict = w.HTML("")
        self.widget = w.VBox([self.model, *self.boxes, self.record_button, self.verdict],
                             layout=w.Layout(display="none"))
        self.grader_found = 0

    def offer(self, answer: str) -> None:
        """Show the panel for ``answer``, ticking the core points the grader credited."""
        from nanlab.course.rubric import score_answer

        result = score_answer(answer, self.points, tuple(self.question.must_not),
                              ordered=self.question.ordered)
        for box, point in zip(self.boxes, self.core, strict=True):
            box.value = point.name in result.present
        self.grader_found = sum(box.value for box in self.boxes)
        model = html.escape(self.question.answer_text())
        self.model.value = ("<details><summary>Compare with the model answer and tick the core "
                            f"points you covered</summary><div>{model}</div></details>")
        self.widget.layout.display = "flex"

    def _on_record(self, _button: w.Button | None = None) -> None:
        ticked = sum(box.value for box in self.boxes)
        passed = ticked / len(self.boxes) >= self.question.pass_score - 1e-9
        self.verdict.value = html.escape(
            f"Recorded: you ticked {ticked} of {len(self.boxes)} core points "
            f"(the grader found {self.grader_found}); "
            + ("a self-assessed pass." if passed else "not yet a pass."))
        progress.record(self.lab, f"{self.question.qid}:self", correct=passed,
                        kind="self-assessment")


_WIDGETS: dict[type, type[QuestionWidget]] = {
    MultipleChoiceQuestion: MultipleChoice, OrderingQuestion: Ordering,
    RootCauseQuestion: RootCause, FreeTextQuestion: FreeText,
}


def widget_for(question: Any, lab: str | None = None) -> QuestionWidget:
    """The widget that shows an already-built question (from the question store).

    >>> q = MultipleChoiceQuestion("w-for", "Largest finite fp16?", ["65504", "65536"], 0)
    >>> type(widget_for(q)).__name__
    'MultipleChoice'
    """
    kind = _WIDGETS.get(type(question))
    if kind is None:
        raise TypeError(f"no widget for {type(question).__name__}; expected one of "
                        f"{sorted(k.__name__ for k in _WIDGETS)}")
    shown = kind.__new__(kind)
    shown._setup(question, lab)
    return shown


def _render(fb: Feedback) -> str:
    """Feedback as HTML: a coloured verdict line, then the details as a list."""
    color = "#1a7f37" if fb.correct else ("#9a6700" if fb.answered else "#555")
    mark = "&#10004;" if fb.correct else ("&#10008;" if fb.answered else "&#8230;")
    items = "".join(f"<li>{_lines(d)}</li>" for d in fb.details)
    details = f"<ul style='margin:2px 0'>{items}</ul>" if items else ""
    return f"<div style='color:{color}'>{mark} {html.escape(fb.message)}</div>{details}"


def _lines(text: str) -> str:
    """Plain text as HTML, its line breaks kept (``answer_text`` puts one reason a line)."""
    return html.escape(text).replace("\n", "<br>")
