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
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from nanlab.course.rubric import KeyPoint, RubricResult, WrongClaim, score_answer
from nanlab.errors import NanlabError

TOPICS: tuple[str, ...] = (
    "data",
    "precision",
    "lr",
    "gradients",
    "init",
    "norms",
    "monitoring",
    "recovery",
    "distributed",
    "process",
    "large_runs",
)
"""Allowed ``topic`` values, in the order the course meets them."""

TOPIC_LABELS: dict[str, str] = {
    "data": "dirty data (脏数据)",
    "precision": "mixed precision (混合精度)",
    "lr": "learning rate and warmup (学习率 / 学习率预热)",
    "gradients": "gradients and clipping (梯度 / 梯度裁剪)",
    "init": "initialisation (初始化)",
    "norms": "normalisation and logits (归一化 / softmax)",
    "monitoring": "monitoring and locating (监控 / 定位)",
    "recovery": "rollback and recovery (回滚 / 恢复)",
    "distributed": "distributed training (分布式训练)",
    "process": "method and answering (排查流程 / 答题)",
    "large_runs": "large runs: optimizer state, LLM data, accumulation, SDC (大规模训练)",
}

LEVELS: tuple[str, ...] = ("new_grad", "experienced", "senior")
"""Allowed ``level`` values: new graduate (校招), experienced (社招), senior/architect (资深)."""

LEVEL_LABELS: dict[str, str] = {
    "new_grad": "new graduate / junior (校招 / 初级)",
    "experienced": "experienced engineer (社招 / 中高级)",
    "senior": "senior / architect (资深 / 架构师)",
}

MAX_FOLLOW_UPS = 3
"""Each bank entry carries 1 to this many follow-ups."""

_ENTRY_FIELDS = (
    "id",
    "topic",
    "level",
    "question",
    "question_zh",
    "answer",
    "key_points",
    "common_mistakes",
    "follow_ups",
)
_OPTIONAL_FIELDS = ("must_not", "wrong_answers", "good_answers", "ordered")
_INLINE_FIELDS = ("question", "question_zh", "answer", "key_points", "common_mistakes", "targets",
                  "must_not", "wrong_answers", "good_answers", "ordered")
_POINT_FIELDS = ("name", "synonyms", "hint", "denied", "bonus")
_CLAIM_FIELDS = ("claim", "synonyms", "why", "example")
_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")


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


def check_bank(entries: Sequence[Any]) -> list[str]:
    """Every problem in a list of raw entries, one message each (empty list: valid).

    >>> print(check_bank([{"id": "x", "topic": "cooking"}])[-1])  # doctest: +ELLIPSIS
    questions[0] (id 'x'): field 'topic' = 'cooking' is not allowed; choose one of 'data', ...
    """
    return _problems(entries, [f"questions[{i}]" for i in range(len(entries))])


def _problems(entries: Sequence[Any], labels: Sequence[str]) -> list[str]:
    """``check_bank``, each entry called ``labels[i]`` in the messages."""
    problems: list[str] = []
    if not entries:
        return ["the bank has no questions"]
    first_index: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            qid = entry["id"]
            if qid in first_index:
                problems.append(
                    f"{labels[i]} (id {qid!r}): duplicate id; {labels[first_index[qid]]} "
                    "already uses it; ids must be unique"
                )
            else:
                first_index[qid] = i
    known = set(first_index)
    for i, entry in enumerate(entries):
        problems += _check_entry(labels[i], entry, known)
    return problems


def _where(label: str, entry: Any) -> str:
    qid = entry.get("id") if isinstance(entry, dict) else None
    return f"{label} (id {qid!r})" if isinstance(qid, str) else label


def _allowed(values: Iterable[str]) -> str:
    return ", ".join(repr(v) for v in values)


_REQUIRED_HELP = {
    "id": "a lower-case id made of letters, digits, '-' and '_'",
    "topic": f"a topic, one of {_allowed(TOPICS)}",
    "level": f"a level, one of {_allowed(LEVELS)}",
    "question": "the question in English",
    "question_zh": "the question in Chinese",
    "answer": "a model answer in English, with Chinese key terms beside the English ones",
    "key_points": "a non-empty list of {name, synonyms, hint}",
    "common_mistakes": "a non-empty list of strings",
    "follow_ups": f"a list of 1 to {MAX_FOLLOW_UPS} follow-ups",
}


def _check_entry(label: str, entry: Any, known: set[str]) -> list[str]:
    if not isinstance(entry, dict):
        return [
            f"{label}: expected an object with fields {_allowed(_ENTRY_FIELDS)}, "
            f"got {type(entry).__name__}"
        ]
    where = _where(label, entry)
    out = [
        f"{where}: unknown field {k!r}; allowed: {_allowed(_ENTRY_FIELDS + _OPTIONAL_FIELDS)}"
        for k in entry
        if k not in _ENTRY_FIELDS + _OPTIONAL_FIELDS
    ]
    for name in _ENTRY_FIELDS:
        if name not in entry:
            out.append(f"{where}: missing field {name!r}; required: {_REQUIRED_HELP[name]}")
    qid = entry.get("id")
    if "id" in entry and (not isinstance(qid, str) or not _ID.match(qid)):
        out.append(f"{where}: field 'id' = {qid!r} is not allowed; use {_REQUIRED_HELP['id']}")
    for name, allowed in (("topic", TOPICS), ("level", LEVELS)):
        value = entry.get(name)
        if name in entry and value not in allowed:
            out.append(
                f"{where}: field {name!r} = {value!r} is not allowed; "
                f"choose one of {_allowed(allowed)}"
            )
    out += _check_texts(where, entry, ("question", "question_zh", "answer"))
    zh = entry.get("question_zh")
    if isinstance(zh, str) and zh.strip() and not _CJK.search(zh):
        out.append(
            f"{where}: field 'question_zh' = {zh!r} has no Chinese characters; "
            "give the Chinese phrasing of the question"
        )
    answer = entry.get("answer")
    if isinstance(answer, str) and answer.strip() and not _CJK.search(answer):
        out.append(
            f"{where}: field 'answer' has no Chinese key terms; put them beside the "
            "English ones, e.g. 'gradient clipping (梯度裁剪)'"
        )
    if "key_points" in entry:
        out += _check_key_points(where, "key_points", entry["key_points"])
    if "common_mistakes" in entry:
        out += _check_string_list(where, "common_mistakes", entry["common_mistakes"])
    if "follow_ups" in entry:
        out += _check_follow_ups(where, entry, known)
    if "must_not" in entry:
        out += _check_claims(where, entry["must_not"])
    out += _check_answers_and_order(where, entry)
    return out


def _check_answers_and_order(where: str, entry: dict) -> list[str]:
    """The optional ``good_answers``, ``wrong_answers`` (lists of text) and ``ordered`` (bool)."""
    out = []
    for name in ("good_answers", "wrong_answers"):
        if name in entry:
            out += _check_string_list(where, name, entry[name])
    if "ordered" in entry and not isinstance(entry["ordered"], bool):
        out.append(f"{where}: field 'ordered' = {entry['ordered']!r} must be true or false "
                   "(true: the core points must come in their listed order)")
    points = entry.get("key_points")
    if isinstance(points, list) and points and all(isinstance(p, dict) for p in points) \
            and all(p.get("bonus") is True for p in points):
        out.append(f"{where}: every key point is a bonus; mark the 2 to 4 that decide a pass "
                   "as core (leave out 'bonus')")
    return out


def _check_texts(where: str, entry: dict, names: Iterable[str]) -> list[str]:
    out = []
    for name in names:
        if name in entry and (not isinstance(entry[name], str) or not entry[name].strip()):
            out.append(f"{where}: field {name!r} = {entry[name]!r} must be non-empty text")
    return out


def _check_string_list(where: str, name: str, value: Any) -> list[str]:
    ok = isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value)
    return (
        []
        if ok
        else [f"{where}: field {name!r} = {value!r} must be a non-empty list of non-empty strings"]
    )


def _check_key_points(where: str, name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not value:
        return [
            f"{where}: field {name!r} = {value!r} must be a non-empty list of key points "
            "{name, synonyms, hint}"
        ]
    out: list[str] = []
    seen: set[str] = set()
    for j, point in enumerate(value):
        at = f"{where}: {name}[{j}]"
        if not isinstance(point, dict):
            out.append(
                f"{at} must be an object {{name, synonyms, hint}}, got {type(point).__name__}"
            )
            continue
        extra = [k for k in point if k not in _POINT_FIELDS]
        if extra:
            out.append(f"{at}: unknown field {extra[0]!r}; allowed: {_allowed(_POINT_FIELDS)}")
        pname = point.get("name")
        if not isinstance(pname, str) or not pname.strip():
            out.append(f"{at}: field 'name' = {pname!r} must be non-empty text")
        elif pname in seen:
            out.append(
                f"{at}: duplicate key point name {pname!r}; names must be unique within a question"
            )
        else:
            seen.add(pname)
        syns = point.get("synonyms")
        good = isinstance(syns, list) and syns and all(isinstance(s, str) for s in syns)
        if not good:
            out.append(
                f"{at}: field 'synonyms' = {syns!r} must be a non-empty list of "
                "English and Chinese phrases"
            )
        elif not all(re.search(r"\w", s) for s in syns):
            out.append(
                f"{at}: field 'synonyms' = {syns!r} contains a phrase with no letters, "
                "digits or Chinese characters; it could never match"
            )
        if "bonus" in point and not isinstance(point["bonus"], bool):
            out.append(f"{at}: field 'bonus' = {point['bonus']!r} must be true or false")
        if "hint" in point and not isinstance(point["hint"], str):
            out.append(f"{at}: field 'hint' = {point['hint']!r} must be text")
        denied = point.get("denied", [])
        if not isinstance(denied, list) or not all(
                isinstance(d, str) and re.search(r"\w", d) for d in denied):
            out.append(
                f"{at}: field 'denied' = {denied!r} must be a list of phrases that count "
                "only when the answer negates them"
            )
    return out


def _check_claims(where: str, value: Any) -> list[str]:
    """The optional ``must_not`` list: wrong claims, each {claim, synonyms, why, example}."""
    if not isinstance(value, list):
        return [f"{where}: field 'must_not' = {value!r} must be a list of wrong claims "
                "{claim, synonyms, why, example}"]
    out: list[str] = []
    for j, item in enumerate(value):
        at = f"{where}: must_not[{j}]"
        if not isinstance(item, dict):
            out.append(f"{at} must be an object {{claim, synonyms, why, example}}, "
                       f"got {type(item).__name__}")
            continue
        extra = [k for k in item if k not in _CLAIM_FIELDS]
        if extra:
            out.append(f"{at}: unknown field {extra[0]!r}; allowed: {_allowed(_CLAIM_FIELDS)}")
        for name in ("claim", "why"):
            if not isinstance(item.get(name), str) or not item[name].strip():
                out.append(f"{at}: field {name!r} = {item.get(name)!r} must be non-empty text")
        if "example" in item and not isinstance(item["example"], str):
            out.append(f"{at}: field 'example' = {item['example']!r} must be text")
        syns = item.get("synonyms")
        if not (isinstance(syns, list) and syns
                and all(isinstance(s, str) and re.search(r"\w", s) for s in syns)):
            out.append(f"{at}: field 'synonyms' = {syns!r} must be a non-empty list of the "
                       "phrases that make the claim")
    return out


def _check_follow_ups(where: str, entry: dict, known: set[str]) -> list[str]:
    value = entry["follow_ups"]
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_FOLLOW_UPS:
        return [
            f"{where}: field 'follow_ups' = {value!r} must be a list of 1 to "
            f"{MAX_FOLLOW_UPS} follow-ups"
        ]
    names = {p.get("name") for p in entry.get("key_points") or [] if isinstance(p, dict)}
    out: list[str] = []
    for j, item in enumerate(value):
        at = f"{where}: follow_ups[{j}]"
        if not isinstance(item, dict):
            out.append(
                f"{at} must be an object with 'id' or an inline 'question', "
                f"got {type(item).__name__}"
            )
            continue
        targets = item.get("targets")
        if not isinstance(targets, list) or not targets:
            out.append(
                f"{at}: field 'targets' = {targets!r} must be a non-empty list of this "
                "question's key point names (the points the follow-up probes)"
            )
        else:
            for t in targets:
                if t not in names:
                    out.append(
                        f"{at}: target {t!r} is not a key point of this question; "
                        f"allowed: {_allowed(sorted(n for n in names if n))}"
                    )
        if "id" in item:
            extra = [k for k in item if k not in ("id", "targets")]
            if extra:
                out.append(
                    f"{at}: a follow-up by id takes only 'id' and 'targets'; "
                    f"remove {_allowed(extra)}"
                )
            fid = item["id"]
            if fid == entry.get("id"):
                out.append(f"{at}: follow-up id {fid!r} is the question itself")
            elif fid not in known:
                out.append(f"{at}: follow-up id {fid!r} not found in the bank")
        else:
            extra = [k for k in item if k not in _INLINE_FIELDS]
            if extra:
                out.append(
                    f"{at}: unknown field {extra[0]!r}; an inline follow-up allows "
                    f"{_allowed(_INLINE_FIELDS)}"
                )
            for name in ("question", "question_zh", "answer", "key_points"):
                if name not in item:
                    out.append(
                        f"{at}: missing field {name!r}; an inline follow-up needs "
                        "'question', 'question_zh', 'answer' and 'key_points' "
                        "(or give 'id' of a bank question)"
                    )
            out += _check_texts(at, item, ("question", "question_zh", "answer"))
            if "key_points" in item:
                out += _check_key_points(at, "key_points", item["key_points"])
            if "must_not" in item:
                out += _check_claims(at, item["must_not"])
            out += _check_answers_and_order(at, item)
    return out


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
