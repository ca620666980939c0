"""Grading for the practice questions, as plain Python the tests can call without a browser.

Each question kind is a dataclass with a stable ``qid`` and a ``grade(...)`` method that turns
whatever the learner selected or typed into :class:`Feedback`. ``grade`` never raises on a
learner's answer: empty, partial or nonsense input comes back as feedback saying what to do.
Bad question *definitions* (an answer that is not among the options) raise
:class:`QuizError` when the question is built, so an author sees the mistake at once.
The widgets in ``nanlab.course.widgets`` are thin shells around these.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nanlab.course.rubric import MAX_ANSWER_CHARS, PASS_MARK
from nanlab.errors import NanlabError

_QID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
REVEAL_AFTER = 3
"""Wrong tries after which a widget or an exercise check shows the right answer (a learner
may also ask for it at once, with a widget's Show answer button). Before that, feedback
says what is wrong, never what is right: a first wrong try must still make the learner
think."""


class QuizError(NanlabError):
    """A question was defined wrongly (by an author, not a learner).

    >>> MultipleChoiceQuestion("q1", "Pick", ["a", "b"], answers=[5])
    Traceback (most recent call last):
    ...
    nanlab.course.quiz.QuizError: q1: answers=[5] must be option indices from 0 to 1
    """


@dataclass
class Feedback:
    """The verdict on one answer: right or not, a score in 0..1 and a message for the learner.

    ``answered`` is False when there was nothing to grade (no selection, empty text).

    >>> fb = OrderingQuestion("sop", "Order", ["data", "AMP off"]).grade(["AMP off", "data"])
    >>> fb.correct, fb.score, fb.message
    (False, 0.0, '0 of 2 positions right; score 0%.')
    >>> print(fb.text())
    0 of 2 positions right; score 0%.
    position 1: AMP off (not here)
    position 2: data (not here)
    """

    correct: bool
    score: float
    message: str
    answered: bool = True
    details: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The message and the details as plain text, one per line."""
        return "\n".join([self.message, *self.details])


class Hints:
    """Hints revealed one at a time, so a learner takes only as much help as they need.

    >>> h = Hints(["Look at torch.finfo.", "Compare with 65504."])
    >>> h.next()
    'Hint 1 of 2: Look at torch.finfo.'
    """

    def __init__(self, hints: Sequence[str] = ()):
        self.hints = [str(h) for h in hints]
        self.revealed = 0

    def next(self) -> str:
        """Reveal the next hint, or say there are none left."""
        if not self.hints:
            return "No hints for this one."
        if self.revealed >= len(self.hints):
            return f"No more hints (all {len(self.hints)} shown)."
        self.revealed += 1
        return f"Hint {self.revealed} of {len(self.hints)}: {self.hints[self.revealed - 1]}"


def _check_qid(qid: str) -> None:
    if not isinstance(qid, str) or not _QID.match(qid):
        raise QuizError(
            f"qid={qid!r} is not a stable id; use lower-case letters, digits, '-', '_' or '.'"
        )


def _check_options(qid: str, name: str, options: Sequence[str]) -> None:
    if len(options) < 2:
        raise QuizError(f"{qid}: {name} needs at least 2 entries, got {len(options)}")
    if len(set(options)) != len(options):
        raise QuizError(f"{qid}: {name} has duplicates: {list(options)}")


def _check_why(qid: str, name: str, why: Sequence[str], options: Sequence[str],
               what: str) -> list[str]:
    """The per-option reasons as a list: none at all, or one string per option, in order."""
    if isinstance(why, str):
        why = [why]
    why = list(why)
    if why and (len(why) != len(options) or not all(isinstance(w, str) for w in why)):
        raise QuizError(f"{qid}: {name} has {len(why)} reason(s) for {len(options)} {what}; "
                        f"give one string per {what[:-1]}, in the same order, or none")
    return why


def _because(text: str, reason: str) -> str:
    """A detail line with its reason, when there is one."""
    return f"{text}. Why: {reason}" if reason else text


def _reasons(labels: Sequence[str], options: Sequence[str], why: Sequence[str]) -> list[str]:
    """One line per option: its text, right or wrong, and why (for ``answer_text``)."""
    return [f"- '{o}' ({label}): {w}" for o, label, w in zip(options, labels, why, strict=True)
            if w]


def _pick_score(picked: set[int], right: set[int], options: Sequence[str],
                why: Sequence[str] = (), reveal: bool = False) -> tuple[float, list]:
    """Partial credit for a multiple-answer pick: (right picks - wrong picks) / right answers.

    A wrong pick comes with its reason (``why``, one per option, may be empty). A missed
    right answer is counted, not named, unless ``reveal``: then it is named with its reason.
    """
    hits, wrong, missed = picked & right, picked - right, right - picked
    score = max(0.0, (len(hits) - len(wrong)) / len(right))
    reason = (lambda i: why[i]) if why else (lambda i: "")
    details = [f"right: {options[i]}" for i in sorted(hits)]
    details += [_because(f"should not be picked: {options[i]}", reason(i))
                for i in sorted(wrong)]
    if missed and reveal:
        details += [_because(f"missed: {options[i]}", reason(i)) for i in sorted(missed)]
    elif missed:  # counted, not named: naming them would give the answer away
        details.append(f"missed: {len(missed)} more right answer(s) not picked")
    return score, details


_SEQUENCES = (list, tuple, set, frozenset)
MAX_TEXT = MAX_ANSWER_CHARS
"""The longest free-text answer graded (characters); a longer one is feedback, not a hang."""


def _show(value: Any, limit: int = 60) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters; never raises."""
    try:
        text = repr(value)
    except Exception:  # a huge int, a broken __repr__, a structure nested too deep
        text = f"<{type(value).__name__} object>"
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _listing(values: Sequence[Any], most: int = 3) -> str:
    """The first few values, shown short, then how many more."""
    shown = ", ".join(_show(v, 30) for v in values[:most])
    return shown + (f" and {len(values) - most} more" if len(values) > most else "")


def _as_indices(selection: Any, options: Sequence[str]) -> tuple[set[int], list[Any]] | None:
    """Turn indices or option texts into a set of indices; unknown entries are returned.

    None when ``selection`` is not an index, a text or a list of them (a float, a dict,
    bytes...): the caller says what kind of answer is expected.
    """
    if selection is None:
        return set(), []
    if isinstance(selection, (str, int)):
        selection = [selection]
    elif not isinstance(selection, _SEQUENCES):
        return None
    picked, unknown = set(), []
    for s in selection:
        if isinstance(s, bool):
            unknown.append(s)
        elif isinstance(s, int) and 0 <= s < len(options):
            picked.add(s)
        elif isinstance(s, str) and s in options:
            picked.add(list(options).index(s))
        else:
            unknown.append(s)
    return picked, unknown


def _items(answer: Any) -> list[Any] | None:
    """A list or tuple as a list (None as []); None for any other kind of answer."""
    if answer is None:
        return []
    if isinstance(answer, (list, tuple)):
        return list(answer)
    return None


def _wrong_kind(how: str, got: Any) -> Feedback:
    """Feedback for an answer of the wrong kind: what is expected, and what came."""
    return Feedback(False, 0.0, f"{how}; got {_show(got)}.", False)


@dataclass
class MultipleChoiceQuestion:
    """Pick one option (one right answer) or several (more than one right answer).

    ``answers`` are option indices. With several right answers, credit is partial:
    (right picks - wrong picks) / number of right answers, never below 0.

    ``why`` (optional) gives each option's reason, one string per option in the same
    order: why it is right or why it is wrong, pointing at the lab section that shows it.
    A wrong pick's reason is in the feedback at once; a right answer that was not picked
    is named with its reason only when ``grade(..., reveal=True)`` (after the tries, see
    ``REVEAL_AFTER``). ``answer_text`` gives every reason.

    >>> q = MultipleChoiceQuestion("fp16-max", "Largest finite fp16?", ["65504", "65536"], [0],
    ...                            why=["(2 - 2**-10) * 2**15.", "2**16: one step too far."])
    >>> q.grade(0).correct
    True
    >>> q.grade(1).details
    ['Why not: 2**16: one step too far.']
    """

    qid: str
    prompt: str
    options: Sequence[str]
    answers: Sequence[int]
    explanation: str = ""
    hints: Sequence[str] = ()
    multiple: bool | None = None  # None: several answers means pick-several
    why: Sequence[str] = ()  # one reason per option, in order; () for none

    def __post_init__(self) -> None:
        _check_qid(self.qid)
        _check_options(self.qid, "options", self.options)
        self.why = _check_why(self.qid, "why", self.why, self.options, "options")
        self.answers = [self.answers] if isinstance(self.answers, int) else list(self.answers)
        bad = [a for a in self.answers if not (isinstance(a, int) and 0 <= a < len(self.options))]
        if not self.answers or bad:
            raise QuizError(
                f"{self.qid}: answers={self.answers!r} must be option indices "
                f"from 0 to {len(self.options) - 1}"
            )
        if self.multiple is None:
            self.multiple = len(self.answers) > 1
        if not self.multiple and len(self.answers) > 1:
            raise QuizError(f"{self.qid}: multiple=False but {len(self.answers)} answers given")

    def grade(self, selection: int | str | Sequence[int | str] | None,
              reveal: bool = False) -> Feedback:
        """Grade an option index or text, or (pick-several) a list of them; never raises.

        An answer of the wrong kind (a float, a dict, bytes...) is feedback saying what
        kind is expected, scored as wrong. A wrong pick's reason (``why``) is in the
        details; ``reveal=True`` (after the tries) also names each missed right answer
        with its reason.

        >>> q = MultipleChoiceQuestion("nan", "NaN?", ["inf - inf", "1 / 0", "0 / 0"], [0, 2])
        >>> q.grade(2.5).message
        'Answer with a list of option numbers (0 to 2), like [0, 2]; got 2.5.'
        """
        found = _as_indices(selection, self.options)
        if found is None:
            return _wrong_kind(self._how(), selection)
        picked, unknown = found
        if unknown:
            message = f"Not an option here: {_listing(unknown)}. {self._how()}."
            return Feedback(False, 0.0, message, False)
        if not picked:
            what = "at least one option" if self.multiple else "an option"
            return Feedback(False, 0.0, f"No answer yet: pick {what}, then Check.", False)
        right = set(self.answers)
        if not self.multiple:
            if len(picked) > 1:
                return Feedback(False, 0.0, "Pick only one option for this question.", False)
            if picked == right:
                return Feedback(True, 1.0, _join("Right.", self.explanation))
            pick = next(iter(picked))
            details = [f"Why not: {self.why[pick]}"] if self.why and self.why[pick] else []
            if reveal:
                answer = self.answers[0]
                details.append(_because(f"The answer: '{self.options[answer]}'",
                                        self.why[answer] if self.why else ""))
            message = f"Not quite: '{self.options[pick]}' is not the answer. Try again."
            return Feedback(False, 0.0, message, True, details)
        score, details = _pick_score(picked, right, self.options, self.why, reveal)
        if picked == right:
            return Feedback(True, 1.0, _join("Right: all of them.", self.explanation), True)
        n_hit = len(picked & right)
        message = (
            f"Partly right: {n_hit} of {len(right)} right answers picked, "
            f"{len(picked - right)} wrong pick(s); score {score:.0%}."
        )
        return Feedback(False, score, message, True, details)

    def answer_text(self) -> str:
        """The right answer and why, then each option's reason on a line of its own, for
        after the tries (see ``REVEAL_AFTER``)."""
        right = "; ".join(f"'{self.options[i]}'" for i in self.answers)
        labels = ["right" if i in self.answers else "wrong" for i in range(len(self.options))]
        head = _join(f"The answer{'s' if len(self.answers) > 1 else ''}: {right}.",
                     self.explanation)
        return "\n".join([head, *_reasons(labels, self.options, self.why)])

    def _how(self) -> str:
        last = len(self.options) - 1
        if self.multiple:
            return f"Answer with a list of option numbers (0 to {last}), like [0, 2]"
        return f"Answer with one option number (0 to {last}) or an option's text, like 0"


@dataclass
class OrderingQuestion:
    """Put steps in order; ``items`` is the right order. Feedback names each right position.

    >>> q = OrderingQuestion("sop", "Order the SOP", ["data", "AMP off", "LR / 10"])
    >>> q.grade(["data", "LR / 10", "AMP off"]).score
    0.3333333333333333
    """

    qid: str
    prompt: str
    items: Sequence[str]
    explanation: str = ""
    hints: Sequence[str] = ()

    def __post_init__(self) -> None:
        _check_qid(self.qid)
        _check_options(self.qid, "items", self.items)
        self.items = list(self.items)

    def grade(self, order: Sequence[str | None] | None) -> Feedback:
        """Grade a proposed order (a list of item texts; None for an empty slot); never raises.

        >>> q = OrderingQuestion("sop", "Order the SOP", ["data", "AMP off"])
        >>> q.grade("data").message.split(";")[1]
        " got 'data'."
        """
        items = _items(order)
        if items is None:
            return _wrong_kind(self._how(), order)
        order = items
        unknown = [o for o in order if not (o is None or isinstance(o, str))]
        unknown += [o for o in order if isinstance(o, str) and o and o not in self.items]
        if unknown:
            message = f"Not a step here: {_listing(unknown)}. {self._how()}."
            return Feedback(False, 0.0, message, False)
        filled = [o for o in order if o]
        if not filled:
            return Feedback(False, 0.0, "No answer yet: put the steps in order, then Check.", False)
        if len(order) != len(self.items) or len(filled) != len(order):
            return Feedback(
                False, 0.0, f"Fill all {len(self.items)} positions, then Check.", False
            )
        repeated = sorted({o for o in order if order.count(o) > 1})
        if repeated:
            return Feedback(
                False, 0.0, f"Each step goes in once; repeated: {', '.join(repeated)}.", False
            )
        right = [i for i, (o, want) in enumerate(zip(order, self.items, strict=True)) if o == want]
        score = len(right) / len(self.items)
        if score == 1.0:
            return Feedback(True, 1.0, _join("Right: that is the order.", self.explanation))
        details = [
            f"position {i + 1}: {o} {'(right)' if i in right else '(not here)'}"
            for i, o in enumerate(order)
        ]
        message = f"{len(right)} of {len(self.items)} positions right; score {score:.0%}."
        return Feedback(False, score, message, True, details)

    def answer_text(self) -> str:
        """The right order and why."""
        steps = "; ".join(f"{i + 1}. {s}" for i, s in enumerate(self.items))
        return _join(f"The order: {steps}.", self.explanation)

    def _how(self) -> str:
        return (f"Answer with a list of the {len(self.items)} steps in order, each a step's "
                f"text, like [{self.items[0]!r}, ...]")


@dataclass
class RootCauseQuestion:
    """Name the fault family of a mystery run, then pick the evidence that supports it.

    Both parts are graded: half the score for the family, half for the evidence (partial
    credit as in a pick-several multiple choice). Right means both parts fully right.

    ``why`` (optional, one string per evidence item) and ``family_why`` (one per family)
    say why each supports the cause or not, as ``MultipleChoiceQuestion.why`` does: a wrong
    pick's reason at once, a missed one's only with ``reveal=True``, all in ``answer_text``.

    >>> q = RootCauseQuestion("m1", "Why?", ["data", "lr"], "data", ["nan in x", "lr high"],
    ...                       ["nan in x"])
    >>> q.grade("data", ["nan in x"]).correct
    True
    """

    qid: str
    prompt: str
    families: Sequence[str]
    answer: str
    evidence: Sequence[str]
    supporting: Sequence[str]
    explanation: str = ""
    hints: Sequence[str] = ()
    why: Sequence[str] = ()  # one reason per evidence item, in order; () for none
    family_why: Sequence[str] = ()  # one reason per family, in order; () for none

    def __post_init__(self) -> None:
        _check_qid(self.qid)
        _check_options(self.qid, "families", self.families)
        _check_options(self.qid, "evidence", self.evidence)
        self.why = _check_why(self.qid, "why", self.why, self.evidence, "evidence items")
        self.family_why = _check_why(self.qid, "family_why", self.family_why, self.families,
                                     "families")
        if self.answer not in self.families:
            raise QuizError(
                f"{self.qid}: answer={self.answer!r} is not one of families {list(self.families)}"
            )
        bad = [s for s in self.supporting if s not in self.evidence]
        if not self.supporting or bad:
            raise QuizError(
                f"{self.qid}: supporting={list(self.supporting)!r} must be a non-empty subset "
                f"of evidence {list(self.evidence)}"
            )

    def grade(self, family: str | None, evidence: Sequence[str] | None,
              reveal: bool = False) -> Feedback:
        """Grade the chosen family and the list of evidence picked for it; never raises.

        A wrong family or a wrong pick comes with its reason; ``reveal=True`` (after the
        tries) also names the right family and the missed evidence, with their reasons.

        >>> q = RootCauseQuestion("m1", "Why?", ["data", "lr"], "data", ["nan in x", "lr high"],
        ...                       ["nan in x"])
        >>> q.grade("data", 3).message
        "Answer the evidence with a list of evidence texts, like ['lr high']; got 3."
        """
        families = f"Answer the fault family with one of {list(self.families)}"
        if family is not None and not isinstance(family, str):
            return _wrong_kind(families, family)
        items = _items(evidence)
        if items is None:
            return _wrong_kind(self._how(), evidence)
        evidence = items
        if not family and not evidence:
            return Feedback(
                False, 0.0, "No answer yet: pick a fault family and its evidence.", False
            )
        if family and family not in self.families:
            return Feedback(False, 0.0, f"Not a fault family here: {_show(family)}. "
                                        f"{families}.", False)
        picked, unknown = _as_indices(evidence, self.evidence)  # type: ignore[misc]
        if unknown:
            message = f"Not evidence here: {_listing(unknown)}. {self._how()}."
            return Feedback(False, 0.0, message, False)
        right_family = family == self.answer
        right = {self.evidence.index(s) for s in self.supporting}
        family_reason = (dict(zip(self.families, self.family_why, strict=True))
                         if self.family_why else {})
        details = [
            "fault family: " + ("right" if right_family else "not picked" if not family
                                else _because(f"'{family}' is not it",
                                              family_reason.get(family, "")))
        ]
        if reveal and not right_family:
            details.append(_because(f"the family is '{self.answer}'",
                                    family_reason.get(self.answer, "")))
        if picked or reveal:
            ev_score, ev_details = _pick_score(picked, right, self.evidence, self.why, reveal)
            details += ["evidence " + d for d in ev_details]
        if not picked:
            ev_score = 0.0
            details.append("evidence: none picked; pick what in the run points to the cause")
        score = 0.5 * right_family + 0.5 * ev_score
        if right_family and picked == right:
            return Feedback(True, 1.0, _join("Right: cause and evidence.", self.explanation))
        if right_family:
            message = f"Right family; the evidence is not complete yet (score {score:.0%})."
        elif ev_score > 0:
            message = f"Some evidence is right, but the family is not (score {score:.0%})."
        else:
            message = f"Not yet: neither the family nor the evidence (score {score:.0%})."
        return Feedback(False, score, message, True, details)

    def answer_text(self) -> str:
        """The family, the evidence that supports it, and why; then each family's and each
        evidence item's reason on a line of its own."""
        evidence = "; ".join(self.supporting)
        head = _join(f"The family: {self.answer}. The evidence: {evidence}.", self.explanation)
        families = ["the family" if f == self.answer else "not it" for f in self.families]
        supports = ["supports it" if e in self.supporting else "does not"
                    for e in self.evidence]
        return "\n".join([head, *_reasons(families, self.families, self.family_why),
                          *_reasons(supports, self.evidence, self.why)])

    def _how(self) -> str:
        return f"Answer the evidence with a list of evidence texts, like {self._example()}"

    def _example(self) -> str:
        """An example of the answer's form that is not part of the answer."""
        return f"[{self.evidence[-1]!r}]" if self.evidence[-1] not in self.supporting \
            else "['<evidence text>', ...]"


@dataclass
class FreeTextQuestion:
    """A short written answer, scored against key points by ``nanlab.course.rubric``.

    ``key_points`` are ``nanlab.course.rubric.KeyPoint`` objects or ``(name, synonyms)`` pairs;
    ``must_not`` holds ``nanlab.course.rubric.WrongClaim`` objects (a wrong claim caps the
    score); ``ordered`` says the core points are steps whose order is the point. The answer
    passes when the rubric score reaches ``pass_score``, the course's one ``PASS_MARK``
    unless an instructor sets another. ``good_answers`` and ``wrong_answers`` are answers
    in candidates' own words that must pass and must fail (the tests check each one).

    >>> q = FreeTextQuestion("why-silent", "Why is NaN silent?",
    ...                      [("no error", ("no error", "no exception"))])
    >>> q.grade("The loop keeps going and raises no error at all.").correct
    True
    """

    qid: str
    prompt: str
    key_points: Sequence[Any]
    pass_score: float = PASS_MARK
    model_answer: str = ""
    hints: Sequence[str] = ()
    must_not: Sequence[Any] = ()
    ordered: bool = False
    good_answers: Sequence[str] = ()
    wrong_answers: Sequence[str] = ()

    def __post_init__(self) -> None:
        _check_qid(self.qid)
        if not self.key_points:
            raise QuizError(f"{self.qid}: key_points is empty; give at least one")
        if not 0.0 < self.pass_score <= 1.0:
            raise QuizError(f"{self.qid}: pass_score={self.pass_score!r} must be in (0, 1]")

    def grade(self, answer: str | None, reveal: bool = True) -> Feedback:
        """Score the text; say which key points were found and which are missing; never raises.

        ``reveal=False`` (a widget's first tries) words a missing point by its hint
        (what to say something about), not by its name (what to say).

        >>> q = FreeTextQuestion("why-silent", "Why?", [("no error", ("no error",))])
        >>> q.grade(42).message
        'Answer with text, a sentence or two in quotes; got 42.'
        """
        from nanlab.course.rubric import KeyPoint, score_answer  # lazy: rubric is optional here

        if answer is not None and not isinstance(answer, str):
            return _wrong_kind("Answer with text, a sentence or two in quotes", answer)
        if not answer or not answer.strip():
            message = "No answer yet: write a sentence or two, then Check."
            return Feedback(False, 0.0, message, False)
        if len(answer) > MAX_TEXT:
            message = (f"That is {len(answer):,} characters; a short answer is a few "
                       f"sentences (at most {MAX_TEXT:,} characters). Shorten it, then Check.")
            return Feedback(False, 0.0, message, False)
        points = [
            p if isinstance(p, KeyPoint) else KeyPoint(str(p[0]), tuple(p[1]))
            for p in self.key_points
        ]
        result = score_answer(answer, points, tuple(self.must_not), ordered=self.ordered)
        if result.feedback:  # the rubric explains itself; its count line is the message
            details = [line for line in result.feedback.splitlines()[1:] if line.strip()]
            if not reveal:
                details = [_hide_point(line, points) for line in details]
        else:
            details = [f"said: {name}" for name in result.present]
            details += [f"missing: {name}" for name in result.missing]
        correct = result.score >= self.pass_score - 1e-9
        head = "Good answer." if correct else "Not complete yet."
        core = [p for p in points if not p.bonus] or points
        covered = sum(p.name in result.present for p in core)
        message = (f"{head} Core points covered: {covered} of {len(core)} (score "
                   f"{result.score:.0%}; a pass needs {self.pass_score:.0%}).")
        if correct and self.model_answer:
            details.append(f"A model answer: {self.model_answer}")
        return Feedback(correct, float(result.score), message, True, details)

    def answer_text(self) -> str:
        """A model answer, or the key points when there is none."""
        if self.model_answer:
            return f"A model answer: {self.model_answer}"
        names = [p.name if hasattr(p, "name") else str(p[0]) for p in self.key_points]
        return "The key points: " + "; ".join(names) + "."


def _hide_point(line: str, points: Sequence[Any]) -> str:
    """A rubric line '- <point name>: <hint>' as '- <hint>': the name is the answer."""
    for p in points:
        if p.hint and line.strip() == f"- {p.name}: {p.hint}":
            return f"- {p.hint}"
    return line


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)
