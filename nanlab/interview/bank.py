"""The question bank: its entries, loading and validating them, and looking questions up.

The shipped bank is data: one JSON file per topic, ``nanlab/interview/questions/<topic>.json``,
each a list of entries, read in ``TOPICS`` order. Each entry: id, topic, level, question,
question_zh, answer, key_points (name, synonyms, hint, optional denied, optional bonus),
common_mistakes, follow_ups (a bank id or an inline question, each with targets = the key
point names it probes) and, optionally: must_not, the wrong claims a good answer must not
make (claim, synonyms, why, example), one of which caps the rubric score; ordered (true
when the core points are steps whose order is the point, as in the SOP); good_answers and
wrong_answers, whole answers written in candidates' own words that must pass and must
fail (the tests check each one). Key points without ``bonus`` are the core points that
decide a pass (``PASS_MARK`` of them); bonus points are reported, never needed. An
instructor extends the bank with a file or a folder of their own: ``load_bank(path)``
validates every entry and names the file, the entry and the field of each problem.

>>> bank_counts()["topic"]["data"] > 0
True
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from nanlab.course.rubric import KeyPoint, RubricResult, WrongClaim, score_answer
from nanlab.errors import NanlabError
from nanlab.interview.schema import (  # noqa: F401  (re-exported: the bank's API)
    LEVEL_LABELS,
    LEVELS,
    MAX_FOLLOW_UPS,
    TOPIC_LABELS,
    TOPICS,
    _allowed,
    _problems,
    check_bank,
)


class BankError(NanlabError):
    """The question bank has problems; ``problems`` lists each one on its own.

    >>> try:
    ...     parse_bank([{"id": "x"}])
    ... except BankError as err:
    ...     print(len(err.problems) > 0)
    True
    """

    def __init__(self, source: str, problems: Sequence[str]):
        self.problems = list(problems)
        count = len(self.problems)
        lines = "\n".join(f"- {p}" for p in self.problems)
        plural = "" if count == 1 else "s"
        super().__init__(f"question bank {source} has {count} problem{plural}:\n{lines}")


@dataclass(frozen=True)
class FollowUp:
    """A follow-up question and the key points of its parent that it probes.

    ``id`` names a bank question; an inline follow-up carries its own ``question``.

    >>> q = load_bank()[0]
    >>> all(isinstance(f, FollowUp) and f.targets for f in q.follow_ups)
    True
    """

    targets: tuple[str, ...]
    id: str | None = None
    question: Question | None = None


@dataclass(frozen=True)
class Question:
    """One bank entry, validated. ``parent`` is set for inline follow-ups.

    >>> q = get_question("sop-order")
    >>> q.topic, q.level
    ('process', 'new_grad')
    """

    id: str
    topic: str
    level: str
    question: str
    question_zh: str
    answer: str
    key_points: tuple[KeyPoint, ...]
    common_mistakes: tuple[str, ...] = ()
    follow_ups: tuple[FollowUp, ...] = ()
    parent: str | None = None
    must_not: tuple[WrongClaim, ...] = ()
    wrong_answers: tuple[str, ...] = ()
    good_answers: tuple[str, ...] = ()
    ordered: bool = False

    def score(self, text: str) -> RubricResult:
        """Score a free-text answer to this question with its own rubric and wrong claims.

        >>> get_question("nan-vs-oom").score("").score
        0.0
        """
        return score_answer(text, self.key_points, self.must_not, ordered=self.ordered)

    def prompt(self) -> str:
        """The question as Markdown, English first and the Chinese phrasing below.

        >>> get_question("fp16-range").prompt().startswith("**What are the numeric limits")
        True
        """
        level = LEVEL_LABELS[self.level]
        return f"**{self.question}**\n\n{self.question_zh}\n\n*{self.topic} · {level}*"

    def model_answer(self) -> str:
        """The model answer, its key points and the common mistakes, as Markdown.

        >>> "Key points" in get_question("sop-order").model_answer()
        True
        """
        points = "\n".join(
            f"- {p.name}" + (f": {p.hint}" if p.hint else "") for p in self.key_points
        )
        lines = [f"**Model answer.** {self.answer}", "", "**Key points**", points]
        if self.common_mistakes:
            lines += ["", "**Common mistakes**"]
            lines += [f"- {m}" for m in self.common_mistakes]
        if self.must_not:
            lines += ["", "**Wrong claims (they cap the score)**"]
            lines += [f"- {c.claim}" + (f": {c.why}" if c.why else "") for c in self.must_not]
        return "\n".join(lines)


# ----------------------------------------------------------------------------- the bank


def default_bank_path() -> Path:
    """Where the bank shipped with nanlab lives (package data): a folder, one file per topic.

    >>> default_bank_path().name
    'questions'
    >>> sorted(p.stem for p in default_bank_path().glob("*.json")) == sorted(TOPICS)
    True
    """
    return Path(str(resources.files("nanlab.interview").joinpath("questions")))


def load_bank(path: str | Path | None = None) -> list[Question]:
    """Read and validate a question bank; raise ``BankError`` listing every problem.

    ``path`` is one JSON file or a folder of them; no path reads the shipped bank. A
    file holds ``{"questions": [...]}`` or a bare list of entries. A folder is read as
    one bank: the files named after a topic first, in ``TOPICS`` order, then the other
    ``*.json`` files by name. Every problem names the entry (file, index and id), the
    field, the value and what is allowed.

    >>> bank = load_bank()
    >>> len(bank) >= 36
    True
    """
    if path is None:
        return list(_default_bank())
    path = Path(path)
    return _load_folder(path) if path.is_dir() else _load(path)


@lru_cache(maxsize=1)
def _default_bank() -> tuple[Question, ...]:
    return tuple(_load_folder(default_bank_path()))


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BankError(str(path), [f"cannot read the file: {exc}"]) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise BankError(str(path), [f"not valid JSON at {where}: {exc.msg}"]) from exc


def _load(path: Path) -> list[Question]:
    return parse_bank(_read(path), source=str(path))


def _bank_files(folder: Path) -> list[Path]:
    """The folder's ``*.json`` files: ``<topic>.json`` in ``TOPICS`` order, then the rest."""
    files = {p.name: p for p in folder.glob("*.json")}
    first = [files.pop(f"{t}.json") for t in TOPICS if f"{t}.json" in files]
    return first + [files[name] for name in sorted(files)]


def _load_folder(folder: Path) -> list[Question]:
    """All files of a folder as one bank (follow-ups may point into another file)."""
    files = _bank_files(folder)
    if not files:
        raise BankError(str(folder), ["the folder has no .json files"])
    entries: list[Any] = []
    labels: list[str] = []
    for file in files:
        part = _entries(_read(file), str(file))
        entries += part
        labels += [f"{file.name}[{j}]" for j in range(len(part))]
    problems = _problems(entries, labels)
    if problems:
        raise BankError(str(folder), problems)
    return [_build(entry) for entry in entries]


def _entries(data: Any, source: str) -> list[Any]:
    entries = data.get("questions") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        kind = type(entries).__name__
        msg = f'expected a list of questions (or {{"questions": [...]}}), got {kind}'
        raise BankError(source, [msg])
    return entries


def parse_bank(data: Any, source: str = "<data>") -> list[Question]:
    """Validate already-parsed bank data (a dict with "questions", or a list).

    >>> try:
    ...     parse_bank([])
    ... except BankError as err:
    ...     print(err.problems)
    ['the bank has no questions']
    """
    entries = _entries(data, source)
    problems = check_bank(entries)
    if problems:
        raise BankError(source, problems)
    return [_build(entry) for entry in entries]


def _key_points(raw: list[dict]) -> tuple[KeyPoint, ...]:
    return tuple(KeyPoint(p["name"], tuple(p["synonyms"]), p.get("hint", ""),
                          tuple(p.get("denied", ())), p.get("bonus", False)) for p in raw)


def _claims(raw: list[dict]) -> tuple[WrongClaim, ...]:
    return tuple(WrongClaim(c["claim"], tuple(c["synonyms"]), c.get("why", ""),
                            c.get("example", "")) for c in raw)


def _build(entry: dict) -> Question:
    follow_ups = []
    for j, item in enumerate(entry["follow_ups"]):
        targets = tuple(item["targets"])
        if "id" in item:
            follow_ups.append(FollowUp(targets, id=item["id"]))
            continue
        inline = Question(
            id=f"{entry['id']}/follow-up-{j + 1}",
            topic=entry["topic"],
            level=entry["level"],
            question=item["question"],
            question_zh=item["question_zh"],
            answer=item["answer"],
            key_points=_key_points(item["key_points"]),
            common_mistakes=tuple(item.get("common_mistakes", ())),
            parent=entry["id"],
            must_not=_claims(item.get("must_not", [])),
            wrong_answers=tuple(item.get("wrong_answers", ())),
            good_answers=tuple(item.get("good_answers", ())),
            ordered=item.get("ordered", False),
        )
        follow_ups.append(FollowUp(targets, question=inline))
    return Question(
        id=entry["id"],
        topic=entry["topic"],
        level=entry["level"],
        question=entry["question"],
        question_zh=entry["question_zh"],
        answer=entry["answer"],
        key_points=_key_points(entry["key_points"]),
        common_mistakes=tuple(entry["common_mistakes"]),
        follow_ups=tuple(follow_ups),
        must_not=_claims(entry.get("must_not", [])),
        wrong_answers=tuple(entry.get("wrong_answers", ())),
        good_answers=tuple(entry.get("good_answers", ())),
        ordered=entry.get("ordered", False),
    )


def get_question(qid: str, bank: Sequence[Question] | None = None) -> Question:
    """Look a question up by id (inline follow-ups too, as ``parent/follow-up-N``).

    >>> get_question("gradscaler").topic
    'precision'
    """
    questions = list(bank) if bank is not None else load_bank()
    for q in questions:
        if q.id == qid:
            return q
        for f in q.follow_ups:
            if f.question is not None and f.question.id == qid:
                return f.question
    ids = ", ".join(q.id for q in questions[:8])
    raise NanlabError(f"question id {qid!r} not found in the bank; ids look like {ids}, ...")


def resolve(follow_up: FollowUp, bank: Sequence[Question] | None = None) -> Question:
    """The question a follow-up points at.

    >>> resolve(get_question("first-thing").follow_ups[0]).id
    'sop-order'
    """
    if follow_up.question is not None:
        return follow_up.question
    return get_question(str(follow_up.id), bank)


def bank_counts(bank: Sequence[Question] | None = None) -> dict[str, dict[str, int]]:
    """How many questions per topic and per level; why: spot gaps when extending the bank.

    >>> bank_counts()["level"]["senior"] > 0
    True
    """
    questions = list(bank) if bank is not None else load_bank()
    return {
        "topic": {t: sum(q.topic == t for q in questions) for t in TOPICS},
        "level": {lv: sum(q.level == lv for q in questions) for lv in LEVELS},
    }
