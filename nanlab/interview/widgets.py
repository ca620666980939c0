"""Notebook widgets for interview practice: thin ipywidgets shells over the mock interview."""

from __future__ import annotations

import html
import re
from typing import Any

from nanlab.interview.bank import LEVEL_LABELS, Question, get_question
from nanlab.interview.mock import MockInterview


def _md_html(text: str) -> str:
    """Just enough Markdown for prompts and feedback: bold, italics, code, lists, breaks.

    >>> _md_html("**Score: 50%**\\n- a `x`")
    '<b>Score: 50%</b><br>&bull; a <code>x</code>'
    """
    out = html.escape(text or "", quote=False)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"(?<![*\w])\*(?!\s)(.+?)(?<!\s)\*(?![*\w])", r"<i>\1</i>", out)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"(?m)^- ", "&bull; ", out)
    return out.replace("\n", "<br>")


class MockInterviewWidget:
    """A mock interview in a notebook: a thin ipywidgets shell over :class:`MockInterview`.

    The question, a text box for the answer, an Answer button, the rubric feedback (with
    the model answer folded under it), the next question (a follow-up aimed at what the
    answer missed, or the next main question) and, after the last one, the summary.
    Every decision is ``MockInterview``'s; the widget only shows it. The areas are
    ``HTML`` widgets, so a test can type, click and read without a browser::

        mw = MockInterviewWidget(level="experienced", seed=1, n_questions=2)
        mw.answer.value = "First I would stop the run ..."
        mw.submit.click()
        mw.feedback.value, mw.question.value, mw.summary.value

    Pass an existing ``mock=MockInterview(...)`` or its keyword arguments. ``lab`` names
    the lab in the learner's progress file.

    >>> MockInterviewWidget(level="experienced", seed=2)  # doctest: +SKIP
    """

    def __init__(self, mock: MockInterview | None = None, *, lab: str | None = None,
                 **kwargs: Any):
        import ipywidgets as w

        self.mock = mock if mock is not None else MockInterview(**kwargs)
        self.lab = lab
        self.header = w.HTML("")
        self.question = w.HTML("")
        self.answer = w.Textarea(placeholder="Your answer, in full sentences (English or 中文)",
                                 layout=w.Layout(width="100%", height="8em"))
        self.submit = w.Button(description="Answer", button_style="primary")
        self.finish = w.Button(description="Show summary")
        self.feedback = w.HTML("")
        self.summary = w.HTML("")
        self.submit.on_click(self._on_submit)
        self.finish.on_click(self._on_finish)
        self.widget = w.VBox(
            [self.header, self.question, self.answer, w.HBox([self.submit, self.finish]),
             self.feedback, self.summary],
            layout=w.Layout(border="1px solid #ccc", padding="6px", margin="6px 0"),
        )
        self._show_question()

    @property
    def done(self) -> bool:
        """True once every question has been answered."""
        return self.mock.done

    def _show_question(self) -> None:
        q = self.mock.current
        n = len(self.mock.turns) + 1
        if q is None:
            self.header.value = "<b>Mock interview finished.</b>"
            self.question.value = ""
            self.submit.disabled = True
            self.answer.disabled = True
            return
        kind = "follow-up" if self.mock._depth > 0 else "question"
        self.header.value = f"<b>Mock interview ({LEVEL_LABELS[self.mock.level]}), {kind} {n}</b>"
        self.question.value = _md_html(q.prompt())

    def _on_submit(self, _button: Any = None) -> None:
        if self.mock.done:
            return
        asked = self.mock.current
        text = self.answer.value
        reply = self.mock.answer(text)
        lines = [f"**Score: {reply.result.score:.0%}**", "", reply.result.feedback]
        if reply.is_follow_up and reply.next_question is not None:
            missed = ", ".join(reply.result.missing)
            lines += ["", f"**Follow-up next**, on what was missing: {missed}."]
        feedback = _md_html("\n".join(lines))
        model = _md_html(asked.model_answer())
        self.feedback.value = (f"<div>{feedback}</div><details><summary>Model answer "
                               f"</summary>{model}</details>")
        from nanlab.course import progress

        progress.record(self.lab, f"mock:{asked.id}", correct=reply.result.passed,
                        answered=bool(text.strip()), kind="interview")
        self.answer.value = ""
        self._show_question()
        if self.mock.done:
            self._on_finish()

    def _on_finish(self, _button: Any = None) -> None:
        self.summary.value = _md_html(self.mock.summary().markdown())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict | None:
        return self.widget._repr_mimebundle_(**kwargs)


def free_text(question: Question | str, *, lab: str | None = None):
    """A bank question as a ``nanlab.course.FreeText`` practice widget (rubric = key points).

    >>> free_text("nan-vs-oom").question.qid  # doctest: +SKIP
    'nan-vs-oom'
    """
    from nanlab.course.widgets import FreeText

    q = get_question(question) if isinstance(question, str) else question
    core = [p for p in q.key_points if not p.bonus] or list(q.key_points)
    hints = [p.hint or p.name for p in core]  # what to say something about, core first
    return FreeText(q.id, f"{q.question} ({q.question_zh})", list(q.key_points),
                    model_answer=q.answer, hints=hints, lab=lab, must_not=q.must_not,
                    ordered=q.ordered)
