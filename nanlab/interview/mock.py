"""The mock interview: seeded questions, rubric feedback, targeted follow-ups, a summary."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from nanlab.course.rubric import PASS_MARK, RubricResult
from nanlab.errors import NanlabError, check_choice, check_range
from nanlab.interview.bank import (
    LEVELS,
    MAX_FOLLOW_UPS,
    TOPIC_LABELS,
    TOPICS,
    Question,
    _allowed,
    get_question,
    load_bank,
    resolve,
)

GOOD_SCORE = PASS_MARK
"""A rubric score at or above this counts as a good answer: the course's one pass mark."""


@dataclass
class Turn:
    """One question asked and answered.

    >>> mock = MockInterview(seed=1, n_questions=1, max_follow_ups=0)
    >>> _ = mock.answer("")
    >>> mock.turns[0].answer
    ''
    """

    question: Question
    answer: str
    result: RubricResult
    follow_up: bool


@dataclass
class Reply:
    """What ``MockInterview.answer`` returns: the feedback and what comes next.

    >>> reply = MockInterview(seed=1, n_questions=1, max_follow_ups=0).answer("")
    >>> reply.result.score, reply.next_question is None
    (0.0, True)
    """

    result: RubricResult
    next_question: Question | None
    is_follow_up: bool
    message: str


@dataclass
class InterviewSummary:
    """Per-question scores, topic averages, and what to practise next.

    >>> mock = MockInterview(seed=1, n_questions=1, max_follow_ups=0)
    >>> _ = mock.answer("I don't know")
    >>> mock.summary().average
    0.0
    """

    rows: list[tuple[str, str, float, bool]] = field(default_factory=list)
    average: float = 0.0
    by_topic: dict[str, float] = field(default_factory=dict)
    strongest: list[str] = field(default_factory=list)
    weakest: list[str] = field(default_factory=list)
    practise: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        """The summary as Markdown, for a notebook cell.

        >>> InterviewSummary().markdown().splitlines()[0]
        '## Mock interview summary'
        """
        if not self.rows:
            return "## Mock interview summary\n\nNo answers yet."
        lines = ["## Mock interview summary", "", "| question | topic | score |", "|---|---|---|"]
        for qid, topic, score, follow in self.rows:
            mark = " (follow-up)" if follow else ""
            lines.append(f"| {qid}{mark} | {topic} | {score:.0%} |")
        lines += ["", f"Average: {self.average:.0%}."]
        if self.strongest:
            lines.append("Strongest: " + ", ".join(_topic_label(t) for t in self.strongest) + ".")
        if self.weakest:
            lines.append("Weakest: " + ", ".join(_topic_label(t) for t in self.weakest) + ".")
        if self.practise:
            lines += ["", "**Practise next**"]
            lines += [f"- {p}" for p in self.practise]
        return "\n".join(lines)


def _topic_label(topic: str) -> str:
    return f"{topic} ({TOPIC_LABELS[topic]})"


class MockInterview:
    """A seeded mock interview: questions, rubric feedback, follow-ups, a summary.

    Questions come from the chosen ``level`` first (then the other levels, if the pool
    is short), spread across ``topics``, in an order fixed by ``seed``. After each
    answer, if a follow-up of that question targets a key point the answer missed, it
    is asked next (at most ``max_follow_ups`` in a row); otherwise the next question.
    ``ids`` fixes the questions and their order instead (an instructor's set exam).

    >>> mock = MockInterview(level="new_grad", seed=3, n_questions=2)
    >>> reply = mock.answer("")
    >>> reply.is_follow_up
    True
    """

    def __init__(
        self,
        level: str = "new_grad",
        topics: Sequence[str] | None = None,
        seed: int = 0,
        n_questions: int = 5,
        max_follow_ups: int = 1,
        bank: Sequence[Question] | None = None,
        ids: Sequence[str] | None = None,
    ):
        check_choice("level", level, LEVELS)
        check_range("n_questions", n_questions, 1, integer=True)
        check_range("max_follow_ups", max_follow_ups, 0, MAX_FOLLOW_UPS, integer=True)
        check_range("seed", seed, integer=True)
        if isinstance(topics, str):
            topics = [topics]
        chosen = list(TOPICS) if topics is None else list(topics)
        for t in chosen:
            check_choice("topics", t, TOPICS)
        self.level = level
        self.topics = tuple(chosen)
        self.seed = seed
        self.max_follow_ups = max_follow_ups
        self.bank = list(bank) if bank is not None else load_bank()
        self.turns: list[Turn] = []
        if ids is not None:
            self._queue = [get_question(qid, self.bank) for qid in ids]
        else:
            self._queue = _pick(self.bank, level, self.topics, seed, n_questions)
        if not self._queue:
            raise NanlabError(
                f"no questions in the bank for topics {_allowed(self.topics)}; "
                f"choose from {_allowed(TOPICS)}"
            )
        self._asked: set[str] = set()
        self._depth = 0
        self.current: Question | None = self._next_main()

    @property
    def done(self) -> bool:
        """True when every question has been answered.

        >>> MockInterview(seed=0).done
        False
        """
        return self.current is None

    def answer(self, text: str) -> Reply:
        """Score ``text`` for the current question, then move on; returns a ``Reply``.

        >>> mock = MockInterview(level="senior", seed=2, n_questions=1, max_follow_ups=0)
        >>> mock.answer("I do not know.").next_question is None
        True
        """
        if self.current is None:
            raise NanlabError("the mock interview is over; call summary() to see the results")
        question = self.current
        result = question.score(text)
        self.turns.append(Turn(question, text, result, follow_up=self._depth > 0))
        follow = self._follow_up_for(question, result)
        if follow is not None:
            self._depth += 1
            self.current = follow
            self._asked.add(follow.id)
        else:
            self._depth = 0
            self.current = self._next_main()
        return Reply(result, self.current, follow is not None, self._message(result, follow))

    def summary(self) -> InterviewSummary:
        """Scores per question, strongest and weakest topics, what to practise.

        >>> MockInterview(seed=0).summary().rows
        []
        """
        turns = self.turns
        if not turns:
            return InterviewSummary()
        rows = [(t.question.id, t.question.topic, t.result.score, t.follow_up) for t in turns]
        by_topic: dict[str, list[float]] = {}
        for t in turns:
            by_topic.setdefault(t.question.topic, []).append(t.result.score)
        averages = {k: sum(v) / len(v) for k, v in by_topic.items()}
        best, worst = max(averages.values()), min(averages.values())
        strongest = [k for k, v in averages.items() if v == best]
        weakest = [k for k, v in averages.items() if v == worst and k not in strongest]
        practise = []
        for t in sorted(turns, key=lambda t: t.result.score):
            if t.result.passed or not t.result.missing:
                continue
            hints = {p.name: p.hint for p in t.question.key_points}
            gaps = "; ".join(f"{m} ({hints[m]})" if hints[m] else m for m in t.result.missing)
            practise.append(f"{t.question.id}: add {gaps}")
        asked = {t.question.id for t in turns}
        focus = weakest or [k for k, v in averages.items() if v < GOOD_SCORE]
        for topic in focus:
            more = [q.id for q in self.bank if q.topic == topic and q.id not in asked][:3]
            if more:
                practise.append(f"more {topic} questions: " + ", ".join(more))
        average = sum(t.result.score for t in turns) / len(turns)
        return InterviewSummary(rows, average, averages, strongest, weakest, practise)

    def _next_main(self) -> Question | None:
        while self._queue:
            q = self._queue.pop(0)
            if q.id not in self._asked:
                self._asked.add(q.id)
                return q
        return None

    def _follow_up_for(self, question: Question, result: RubricResult) -> Question | None:
        """The first follow-up that targets a missed key point and was not asked yet."""
        if self._depth >= self.max_follow_ups:
            return None
        missing = set(result.missing)
        for f in question.follow_ups:
            if missing.intersection(f.targets):
                candidate = resolve(f, self.bank)
                if candidate.id not in self._asked:
                    return candidate
        return None

    def _message(self, result: RubricResult, follow: Question | None) -> str:
        lines = [f"**Score: {result.score:.0%}**", "", result.feedback, ""]
        if follow is not None:
            question = self.turns[-1].question
            probed = [
                n
                for f in question.follow_ups
                if resolve(f, self.bank).id == follow.id
                for n in f.targets
                if n in result.missing
            ]
            lines += [f"**Follow-up** (probing: {', '.join(probed)})", "", follow.prompt()]
        elif self.current is not None:
            lines += ["**Next question**", "", self.current.prompt()]
        else:
            lines.append("That was the last question: call `summary()`.")
        return "\n".join(lines)


def _pick(
    bank: Sequence[Question], level: str, topics: Sequence[str], seed: int, n: int
) -> list[Question]:
    """Seeded choice: the level's questions first, topics interleaved, then other levels."""
    rng = random.Random(seed)
    pool = sorted((q for q in bank if q.topic in topics), key=lambda q: q.id)
    primary = _interleave([q for q in pool if q.level == level], rng)
    rest = _interleave([q for q in pool if q.level != level], rng)
    return (primary + rest)[:n]


def _interleave(questions: list[Question], rng: random.Random) -> list[Question]:
    """Shuffle, then take one question per topic in turn, so topics do not bunch up."""
    groups: dict[str, list[Question]] = {}
    for q in questions:
        groups.setdefault(q.topic, []).append(q)
    order = sorted(groups)
    rng.shuffle(order)
    for t in order:
        rng.shuffle(groups[t])
    out: list[Question] = []
    while any(groups[t] for t in order):
        out += [groups[t].pop(0) for t in order if groups[t]]
    return out
