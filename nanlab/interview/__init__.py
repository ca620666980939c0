"""Interview practice: the question bank, answer frameworks, a mock interview, a cheat sheet.

Why this module exists: "your loss suddenly became NaN, what do you do?" is a standard
LLM-training interview question. Knowing the fix is half of it; the other half is saying
it in order, with numbers, at the depth the interviewer's level expects.

Everything here is plain Python, unit-tested without a browser; the two notebook
widgets at the end (``MockInterviewWidget``, ``free_text``) are thin shells over it and
import ``ipywidgets`` only when made.

- The bank is data: ``nanlab/interview/questions.json``, one file an instructor can extend.
  ``load_bank(path)`` validates every entry and reports each problem by id and field.
- ``answer_framework(level)``: what a new graduate, an experienced engineer and a
  senior/architect are expected to show, a fill-in template, and the typical mistake.
- ``MockInterview``: seeded question choice, rubric feedback (``nanlab.course.rubric``), a
  follow-up aimed at what the answer missed, and a summary.
- ``cheat_sheet()``: the one-page SOP for the night before.
- ``star_story(run, diagnosis)``: a STAR story (Situation, Task, Action, Result) of the
  learner's own incident, written from the run's real numbers (``incident_facts``), for
  every fault family; ``StarStory.markdown()`` / ``save(path)`` export it.

Quick start::

    from nanlab.interview import MockInterview
    mock = MockInterview(level="new_grad", seed=1)
    print(mock.current.prompt())
    reply = mock.answer("First I would stop the run and keep the logs ...")
    print(reply.message)
"""

from __future__ import annotations

import html
import json
import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from nanlab.course.rubric import KeyPoint, RubricResult, score_answer
from nanlab.errors import NanlabError, check_choice, check_range

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

GOOD_SCORE = 0.7
"""A rubric score at or above this counts as a good answer in summaries."""

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
_INLINE_FIELDS = ("question", "question_zh", "answer", "key_points", "common_mistakes", "targets")
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

    def score(self, text: str) -> RubricResult:
        """Score a free-text answer to this question with its own rubric.

        >>> get_question("nan-vs-oom").score("").score
        0.0
        """
        return score_answer(text, self.key_points)

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
        return "\n".join(lines)


# ----------------------------------------------------------------------------- the bank


def default_bank_path() -> Path:
    """Where the bank shipped with nanlab lives (package data).

    >>> default_bank_path().name
    'questions.json'
    """
    return Path(str(resources.files("nanlab.interview").joinpath("questions.json")))


def load_bank(path: str | Path | None = None) -> list[Question]:
    """Read and validate a question bank; raise ``BankError`` listing every problem.

    The file holds ``{"questions": [...]}`` or a bare list of entries. Every problem
    names the entry (index and id), the field, the value and what is allowed.

    >>> bank = load_bank()
    >>> len(bank) >= 36
    True
    """
    if path is None:
        return list(_default_bank())
    return _load(Path(path))


@lru_cache(maxsize=1)
def _default_bank() -> tuple[Question, ...]:
    return tuple(_load(default_bank_path()))


def _load(path: Path) -> list[Question]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BankError(str(path), [f"cannot read the file: {exc}"]) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise BankError(str(path), [f"not valid JSON at {where}: {exc.msg}"]) from exc
    return parse_bank(data, source=str(path))


def parse_bank(data: Any, source: str = "<data>") -> list[Question]:
    """Validate already-parsed bank data (a dict with "questions", or a list).

    >>> try:
    ...     parse_bank([])
    ... except BankError as err:
    ...     print(err.problems)
    ['the bank has no questions']
    """
    entries = data.get("questions") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        kind = type(entries).__name__
        msg = f'expected a list of questions (or {{"questions": [...]}}), got {kind}'
        raise BankError(source, [msg])
    problems = check_bank(entries)
    if problems:
        raise BankError(source, problems)
    return [_build(entry) for entry in entries]


def check_bank(entries: Sequence[Any]) -> list[str]:
    """Every problem in a list of raw entries, one message each (empty list: valid).

    >>> print(check_bank([{"id": "x", "topic": "cooking"}])[-1])  # doctest: +ELLIPSIS
    questions[0] (id 'x'): field 'topic' = 'cooking' is not allowed; choose one of 'data', ...
    """
    problems: list[str] = []
    if not entries:
        return ["the bank has no questions"]
    first_index: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            qid = entry["id"]
            if qid in first_index:
                problems.append(
                    f"questions[{i}] (id {qid!r}): duplicate id; questions[{first_index[qid]}] "
                    "already uses it; ids must be unique"
                )
            else:
                first_index[qid] = i
    known = set(first_index)
    for i, entry in enumerate(entries):
        problems += _check_entry(i, entry, known)
    return problems


def _where(i: int, entry: Any) -> str:
    qid = entry.get("id") if isinstance(entry, dict) else None
    return f"questions[{i}] (id {qid!r})" if isinstance(qid, str) else f"questions[{i}]"


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


def _check_entry(i: int, entry: Any, known: set[str]) -> list[str]:
    if not isinstance(entry, dict):
        return [
            f"questions[{i}]: expected an object with fields {_allowed(_ENTRY_FIELDS)}, "
            f"got {type(entry).__name__}"
        ]
    where = _where(i, entry)
    out = [
        f"{where}: unknown field {k!r}; allowed: {_allowed(_ENTRY_FIELDS)}"
        for k in entry
        if k not in _ENTRY_FIELDS
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
        extra = [k for k in point if k not in ("name", "synonyms", "hint")]
        if extra:
            out.append(f"{at}: unknown field {extra[0]!r}; allowed: 'name', 'synonyms', 'hint'")
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
        if "hint" in point and not isinstance(point["hint"], str):
            out.append(f"{at}: field 'hint' = {point['hint']!r} must be text")
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
    return out


def _key_points(raw: list[dict]) -> tuple[KeyPoint, ...]:
    return tuple(KeyPoint(p["name"], tuple(p["synonyms"]), p.get("hint", "")) for p in raw)


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


# ----------------------------------------------------------------------- answer frameworks


@dataclass(frozen=True)
class Framework:
    """What an interviewer expects from one level, a fill-in template, and its pitfall.

    >>> print(answer_framework("senior"))  # doctest: +SKIP
    """

    level: str
    title: str
    expected: tuple[str, ...]
    template: str
    typical_mistakes: tuple[str, ...]


FRAMEWORKS: dict[str, Framework] = {
    "new_grad": Framework(
        level="new_grad",
        title="New graduate / junior (校招 / 初级): principles and the standard steps",
        expected=(
            "Name the problem: a numerical instability (数值不稳定) that turns the loss into "
            "inf or NaN, usually an overflow or a 0/0 somewhere.",
            "Give several causes with their mechanism, not one: dirty data (脏数据), a high "
            "learning rate or missing warmup (学习率预热), gradient explosion (梯度爆炸), FP16 "
            "overflow in mixed precision (混合精度), init and eps.",
            "Give the order of checks and what each rules out: data -> AMP off -> LR / 10 -> "
            "grad norms -> init / eps.",
            "Name the tools: torch.isfinite assertions, clip_grad_norm_ (梯度裁剪), "
            "torch.amp.GradScaler (损失缩放), TensorBoard for the loss and grad norms.",
            "Back it with a small experiment of your own (a toy Transformer counts), with "
            "its numbers.",
        ),
        template=(
            "A NaN loss is a numerical instability (数值不稳定): somewhere a value ____ "
            "(overflowed to inf / was divided by zero). First I would stop the run, keep the "
            "logs, find the first bad step and roll back (回滚) to the last good checkpoint "
            "(检查点). Then I check, cheapest first: the data (____), AMP off (____), the "
            "learning rate divided by 10 (____), the gradient norms (____), init and eps "
            "(____). In my own experiment on ____, ____ made the loss NaN at step ____ and "
            "____ fixed it. To prevent it I would use ____ and monitor ____."
        ),
        typical_mistakes=(
            'Only saying "gradient explosion" (只回答"梯度爆炸"): one cause, no order, no tools.',
            "Reciting a memorised list with no debugging of your own.",
        ),
    ),
    "experienced": Framework(
        level="experienced",
        title="Experienced engineer (社招 / 中高级): a real case and its details",
        expected=(
            "One real incident, told as STAR: the model and scale, the step at which it "
            "happened, what the logs showed.",
            "The actions in order with the evidence each produced (rollback, replay of the "
            "bad step, AMP off, LR / 10, grad norms), and the root cause it proved.",
            "The fix and why it is the fix and not a workaround (a GradScaler setting, "
            "warmup, a data filter, an eps).",
            "Numbers: the step, the grad norm jump, the loss before and after, how many "
            "steps you ran to confirm it did not recur.",
            "What you built afterwards: a detection script, a guard, an alert.",
        ),
        template=(
            "Situation: training ____ (model, parameters, data, precision) on ____ (hardware), "
            "the loss became NaN at step ____ after ____. Task: find the root cause without "
            "losing ____. Action: I rolled back to the checkpoint at step ____, replayed the "
            "failing batch, and found ____ (evidence: ____). Disabling AMP / lowering the LR "
            "showed ____. Result: after ____ the run passed step ____ and matched the clean "
            "run's loss (____ vs ____); no NaN in the next ____ steps. I then added ____ so it "
            "is caught automatically."
        ),
        typical_mistakes=(
            "No numbers (没有量化): 'I lowered the learning rate and it worked' says nothing "
            "about evidence or effect.",
            "Stopping at the workaround (lower LR, fp32) without naming the root cause.",
        ),
    ),
    "senior": Framework(
        level="senior",
        title="Senior / architect (资深 / 架构师): the system that prevents and recovers",
        expected=(
            "A concrete anchor: the model size, the cluster, the precision, and what a NaN "
            "costs there in GPU-hours.",
            "Prevention built into the framework: data validation in the pipeline, bf16, "
            "warmup and clipping defaults, sane eps, z-loss or QK-LayerNorm for large "
            "models.",
            "Detection and monitoring: on-device finiteness checks and a running z-score "
            "spike detector with no host sync, per-layer dashboards, alerts.",
            "Recovery as a policy: skip, roll back and skip batches, lower the LR, bounded "
            "retries, all ranks agreeing (all-reduce of the flag), every action logged.",
            "Reproducibility and learning: run manifests, exact replay, post-mortems, "
            "incident metrics over time.",
        ),
        template=(
            "For a ____ (model size) run on ____ (GPUs) in ____ (precision), a NaN costs "
            "about ____ GPU-hours per incident, so the framework has to handle it without a "
            "human. Prevention: ____. Detection: ____ checked on device every step, a spike "
            "detector at ____ sigma over ____ steps, dashboards of ____. Recovery: on a hit "
            "every rank ____ (agreed by ____); repeated hits roll back to ____ and skip ____ "
            "batches, at most ____ retries before paging. Reproducibility: ____. Over the "
            "last ____ months this cut incidents from ____ to ____."
        ),
        typical_mistakes=(
            "Detached from a concrete model (脱离具体模型): generic architecture talk with no "
            "scale, no cost, no numbers.",
            "No prevention or monitoring story: only how to debug one run, not how the "
            "system keeps it from happening and notices when it does.",
        ),
    ),
}


def answer_framework(level: str) -> str:
    """The answer framework for one level, as Markdown.

    >>> print(answer_framework("senior").splitlines()[0])
    ### Senior / architect (资深 / 架构师): the system that prevents and recovers
    """
    check_choice("level", level, LEVELS)
    fw = FRAMEWORKS[level]
    lines = [f"### {fw.title}", "", "**What the interviewer wants to hear**"]
    lines += [f"- {e}" for e in fw.expected]
    lines += ["", "**Fill-in template**", "", f"> {fw.template}", "", "**Typical mistakes**"]
    lines += [f"- {m}" for m in fw.typical_mistakes]
    return "\n".join(lines)


def frameworks_markdown() -> str:
    """All three frameworks and a comparison table, as Markdown.

    >>> "| level |" in frameworks_markdown()
    True
    """
    rows = [
        "| level | strategy | typical mistake |",
        "|---|---|---|",
        "| new graduate (校招) | principles + the standard steps, in order | only "
        '"gradient explosion" |',
        "| experienced (社招) | one real case + the details that proved it | no numbers |",
        "| senior (资深) | system design: prevention, detection, recovery | no concrete model; "
        "no prevention/monitoring story |",
    ]
    parts = ["## Answer frameworks by level", "", *rows]
    parts += ["", *(answer_framework(lv) + "\n" for lv in LEVELS)]
    return "\n".join(parts).rstrip() + "\n"


# -------------------------------------------------------------------------- mock interview


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
            if t.result.score >= GOOD_SCORE or not t.result.missing:
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


# ------------------------------------------------------------------- widgets (thin shells)


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

        progress.record(self.lab, f"mock:{asked.id}", correct=reply.result.score >= GOOD_SCORE,
                        answered=bool(text.strip()), kind="interview")
        self.answer.value = ""
        self._show_question()
        if self.mock.done:
            self._on_finish()

    def _on_finish(self, _button: Any = None) -> None:
        self.summary.value = _md_html(self.mock.summary().markdown())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict | None:
        return self.widget._repr_mimebundle_(**kwargs)


def free_text(question: Question | str, *, lab: str | None = None, pass_score: float = 0.6):
    """A bank question as a ``nanlab.course.FreeText`` practice widget (rubric = key points).

    >>> free_text("nan-vs-oom").question.qid  # doctest: +SKIP
    'nan-vs-oom'
    """
    from nanlab.course.widgets import FreeText

    q = get_question(question) if isinstance(question, str) else question
    hints = [f"{p.name}: {p.hint}" if p.hint else p.name for p in q.key_points]
    return FreeText(q.id, f"{q.question} ({q.question_zh})", list(q.key_points),
                    pass_score=pass_score, model_answer=q.answer, hints=hints, lab=lab)


# ----------------------------------------------------------------------------- cheat sheet


def cheat_sheet() -> str:
    """The one-page SOP for the night before, as Markdown (English with Chinese terms).

    >>> "data -> AMP off -> LR / 10" in cheat_sheet()
    True
    """
    return _CHEAT_SHEET


_CHEAT_SHEET = """\
# Loss spike / NaN: the one-page SOP (Loss突增 / NaN 排查)

**Order: data -> AMP off -> LR / 10 -> grad norms -> init / eps** (从易到难，一次只改一处)

## First five minutes (先回滚，再定位)
1. Stop the run (止损) and keep the evidence: logs, a snapshot of the broken state, the step.
2. Find the **first** non-finite step in the per-step log; look for the first **inf**, not
   the first NaN (inf usually comes first: inf - inf, 0 * inf, inf / inf = NaN).
3. Roll back (回滚) to the last good checkpoint (检查点); after a NaN every weight and Adam
   moment is garbage. A spike that recovers (可恢复) keeps finite weights; a NaN does not.

## The SOP (排查顺序)
1. **Data (数据检查)**: `torch.isfinite` on inputs, labels in range, mask count > 0, std > 0.
   Shows dirty data (脏数据): non-finite from the first forward of one batch.
   Cure: clean or filter, `std.clamp_min(eps)`, skip empty batches.
2. **AMP off (关闭混合精度)**: rerun the step in fp32. A **hint, not proof** of a precision
   problem: a too-high LR can stay finite in fp32 and only NaN in fp16.
   Cure: bf16, loss scaling (损失缩放), a stable softmax, fp32 for the overflowing op.
3. **LR / 10 (降低学习率)**: restart from the good checkpoint at a tenth of the LR. Clean
   now means the step size is involved. Cure: lower peak LR, warmup (学习率预热) + cosine.
4. **Grad norms (梯度范数)**: global and per-layer, log scale. A jump of orders of magnitude
   before the NaN confirms explosion (梯度爆炸) and names the layer.
   Cure: gradient clipping (梯度裁剪) max_norm 1.0, scaled init, residual + pre-LN.
5. **Init / eps (初始化)**: activation std per layer, LayerNorm eps, Adam eps dtype. Shows a
   bad init or a 0/0. Cure: Xavier/He/normal 0.02, eps 1e-5, fp32 optimizer states.

Then prove the fix: same seed, pass the old failure step, match the clean run's loss at the
same step, run several times the gap between incidents without a NaN.

## Numbers worth remembering (关键数字)
- FP16 (半精度): max **65504**; smallest subnormal **~6e-8** (2^-24); smallest normal 6.1e-5.
  exp overflows past x = 11.1 in fp16, 88.7 in fp32. Adam eps **1e-8 -> 0** in fp16.
- BF16: fp32's range (8 exponent bits, max ~3.4e38), 7 mantissa bits: usually **no scaler**.
- GradScaler (`torch.amp.GradScaler`): init **2^16** = 65536, x**2** after **2000** clean steps,
  x**0.5** and skip the step on inf/NaN. `scaler.unscale_` before `clip_grad_norm_`.
- z-loss (Z损失): **1e-4 * log^2 Z** (PaLM). QK-LayerNorm: runs whose max attention logit
  passed **~1e4** diverged (Wortsman et al. 2023).
- Spike skip: loss or grad norm > mean + **6 sigma** of the last **128** steps (OLMo-core);
  Megatron spiky loss: 10x the max of the first 100 steps.
- PaLM 540B: ~20 spikes; restart **~100 steps** before, skip **~200-500 batches**.
- `torch.autograd.detect_anomaly`: backward only, **~2-3x** slower: use it in a replay.

## Myths and corrections (纠正)
- Dead ReLU / deep sigmoid: they **stall** (梯度消失), they do not NaN.
- NaN is **silent**, OOM is **loud**: check `isfinite` every step; `nan == nan` is False.
- Data parallel: all-reduce (MAX) the found-inf flag so **every rank** skips together.
- API: `torch.amp.autocast(device_type=...)`, not the deprecated `torch.cuda.amp`.

## Prevention (预防)
Data assertions in the pipeline; bf16; warmup + cosine; clipping; eps in the compute dtype;
z-loss / QK-LayerNorm for big models; a guard (stop / skip / roll back + skip batches,
bounded retries, every skip logged); running z-score spike detector; checkpoints every k
steps; a run manifest (config, seed, data version, code commit) for exact replay.

## The 30-second answer (答题结构)
Name it (数值不稳定) -> locate (data, precision, LR, gradients, structure) -> diagnose in
order with evidence -> fix + prove it with numbers -> prevention and monitoring.
"""


# ------------------------------------------------------------------------------ STAR story
# A STAR story (Situation, Task, Action, Result) of the learner's own incident, written
# from a real run with its real numbers (claim I4). The facts are gathered first, as a
# plain dict (``incident_facts``), then put into sentences whose wording depends on the
# root cause found (``_CAUSE_WORDS``), so the story reads naturally for every fault family.

RECOVERY_TOLERANCE = 0.10
RECOVERY_SLACK = 0.05
"""A fixed run is "back on the clean curve" from the step on which its loss stays within
``RECOVERY_TOLERANCE`` (a fraction) plus ``RECOVERY_SLACK`` (absolute) of the clean run's
loss at the same step, to the end of the run."""

JUMP_WINDOW = 20
"""Steps before the failure in which ``grad_norm_jump`` looks for a jump."""

_SOP_SHORT = {
    "data": "data (数据检查)",
    "amp": "AMP off (关闭混合精度)",
    "lr": "LR / 10 (降低学习率)",
    "grad_norms": "grad norms (梯度范数)",
    "init_eps": "init / eps (初始化 / eps)",
}
_VERDICT_WORDS = {"cause": "the cause", "ruled out": "ruled out", "skipped": "not needed"}


@dataclass(frozen=True)
class _Words:
    """How a story talks about one root cause."""

    name: str  # the root cause, as a noun phrase
    mechanism: str  # how it made the failure, one sentence
    why_fix: str  # why the fix is the cure and not a workaround
    prevention: str  # what keeps it from coming back
    on_error: str = ""  # the mechanism when the run crashed instead (if it can)


_CAUSE_WORDS: dict[str, _Words] = {
    "dirty_data": _Words(
        "dirty data (脏数据) in one batch",
        "one bad batch (a non-finite input, an illegal label, a fully masked target or a "
        "zero std) poisons the loss at the step it arrives, and a single optimizer step then "
        "writes NaN into the weights, so every later step is NaN too",
        "it removes the cause at the source: the bad batch is caught before the model sees "
        "it, so the learning rate and the precision stay as they were",
        "data assertions (数据校验) right after the loader: torch.isfinite on float inputs, "
        "labels in range, at least one unmasked target, std.clamp_min(eps) when "
        "normalising; a bad batch is logged and skipped, not trained on",
        "one bad batch carried a label outside the class range; PyTorch's cross-entropy "
        "checks the range and raises (a device-side assert on CUDA), so this kind of dirty "
        "data is loud, not a silent NaN",
    ),
    "learning_rate": _Words(
        "a learning rate too high for this model (学习率过大)",
        "the oversized updates grow the weights until activations or attention scores "
        "overflow; in fp16 that shows up as inf and then NaN, in fp32 as a loss that climbs "
        "instead of falling",
        "the data and the precision were ruled out first, and a tenth of the LR trains "
        "cleanly on the same seed: the step size is the cause, not a side effect",
        "warmup (学习率预热) plus cosine decay, a short LR range test before a long run, "
        "gradient clipping (梯度裁剪) at max_norm 1.0 as a safety net, and a spike detector "
        "on the loss and the grad norm",
    ),
    "no_warmup": _Words(
        "a high learning rate with no warmup (缺少学习率预热)",
        "the first Adam steps were full size while the second-moment estimate was still "
        "noise, which threw the fresh weights far off",
        "warmup keeps the peak LR and only ramps up to it, so the noisy first steps stay "
        "small; lowering the LR for the whole run would have cost speed for nothing",
        "warmup (学习率预热) plus cosine decay as the default schedule, gradient clipping "
        "(梯度裁剪) at 1.0, and a spike detector on the first hundred steps",
    ),
    "lr_jump": _Words(
        "a learning-rate schedule glitch (学习率调度错误)",
        "the recorded LR jumped for a few steps; the burst of oversized updates knocked the "
        "model off its solution",
        "fixing the schedule removes the burst at its source; the model, the data and the "
        "precision need no change",
        "log and plot the LR every step, unit-test the scheduler (warmup, decay, resume), "
        "and alert on an LR change larger than the schedule allows",
    ),
    "fp16_overflow": _Words(
        "FP16 overflow under mixed precision (混合精度 / FP16 溢出)",
        "a value passed fp16's maximum of 65504 and became inf, and inf - inf or inf / inf "
        "then gave NaN; in fp32 and bf16 (max about 3.4e38) the same values fit",
        "bf16 has fp32's exponent range, so the value that overflowed now fits, and it needs "
        "no loss scaling",
        "bf16 where the hardware has it; otherwise torch.amp.GradScaler (损失缩放), "
        "numerically stable ops (log_softmax, a max-subtracted softmax) and fp32 for the ops "
        "that overflow; plot activation abs-max against 65504",
    ),
    "softmax_overflow": _Words(
        "a naive softmax overflowing in FP16 (softmax 溢出)",
        "exp(x) of a score above about 11.1 overflows fp16 to inf, and inf / inf is NaN",
        "the stable softmax subtracts the row max before exp, so every exp is at most 1: the "
        "same function, computed so it cannot overflow, and fp16 keeps its speed",
        "F.softmax or scaled_dot_product_attention instead of a hand-written softmax, "
        "QK-LayerNorm or z-loss for large models, and a dashboard of the largest attention "
        "logit",
    ),
    "position_overflow": _Words(
        "position ids overflowing FP16 in the sinusoidal encoding (位置编码溢出)",
        "an absolute position past 65504 does not fit in fp16: it became inf, and sin(inf) "
        "is NaN",
        "in bf16 (or fp32) the position fits and the encoding is finite again",
        "compute positional encodings in fp32, reset positions per window, and assert the "
        "largest position id against the dtype's range",
    ),
    "adam_eps_fp16": _Words(
        "Adam's eps underflowing to 0 in pure FP16 (eps 下溢)",
        "eps = 1e-8 is below fp16's smallest subnormal (about 6e-8) and rounds to 0, so the "
        "update m / (sqrt(v) + eps) divided by zero and wrote inf or NaN into the weights",
        "fp16 autocast with a GradScaler keeps fp32 master weights and optimizer state, "
        "where 1e-8 is representable",
        "keep optimizer state and master weights in fp32 (autocast, not model.half()), and "
        "choose eps in the dtype of the optimizer state",
    ),
    "bad_init": _Words(
        "a bad initialisation (初始化不当)",
        "weights far too large for their fan-in, in a stack without LayerNorm, multiplied "
        "the activations layer after layer until they overflowed",
        "a scaled init (normal(0, 0.02), the GPT-2 recipe) with pre-LN residual blocks keeps "
        "every layer's output near unit scale; a lower LR cannot help a forward pass that "
        "overflows before the first update",
        "a standard init (normal 0.02, Xavier or He), pre-LN blocks, and a check of the "
        "activation std per layer at step 0, before the run is launched",
    ),
    "deep_explosion": _Words(
        "gradient explosion in a deep stack without LayerNorm (梯度爆炸)",
        "without norms every block adds to a residual stream that grows with each update, "
        "and the gradients grew by orders of magnitude until the loss blew up",
        "pre-LN blocks rescale the stream at every layer, so the gradients stay bounded; "
        "clipping alone would only hide the growth",
        "pre-LN blocks, gradient clipping (梯度裁剪) at 1.0 as a safety net, and per-layer "
        "grad-norm dashboards on a log scale with an alert on a jump of an order of "
        "magnitude",
    ),
    "tiny_eps": _Words(
        "a LayerNorm eps of (almost) zero (eps 过小)",
        "a row with zero variance (a padding token's all-zero embedding) made "
        "(x - mean) / sqrt(var + eps) = 0 / 0 = NaN, and attention spread it to the real "
        "positions",
        "eps = 1e-5 keeps the denominator above zero, so a constant row normalises to 0 "
        "instead of NaN, and nothing else about the model changes",
        "keep norm eps at 1e-5 (representable in the compute dtype), review config diffs "
        "for eps changes, and test that padded batches give a finite loss",
    ),
    "myth": _Words(
        "vanishing gradients (梯度消失), a stall rather than a NaN",
        "dead ReLUs or a deep sigmoid chain pass almost no gradient back, so the early "
        "layers stop learning; nothing overflows, so the loss stalls instead of turning NaN",
        "a sane init and modern blocks (GELU, residuals, LayerNorm) give the gradient a path "
        "back to every layer",
        "per-layer grad norms and the fraction of dead units on the dashboard, not only the "
        "loss; residual pre-LN blocks and a standard init",
    ),
    "unknown": _Words(
        "an instability the SOP could not pin on one cause (根因未定)",
        "none of the controlled replays singled out one cause",
        "it has not been proven",
        "a guard around the optimizer step and more per-layer logging, to catch it next time",
    ),
}

_ALWAYS_PREVENT = (
    "for every cause: an isfinite check on the loss and the grad norm every step, a guard "
    "around the optimizer step (stop / skip / roll back to the last checkpoint, bounded "
    "retries), a running z-score spike detector, and checkpoints every k steps"
)


def _words_for(diagnosis: Any, family: str | None) -> tuple[str, _Words]:
    """The wording key and words for the cause found (detail first, then the family)."""
    for key in (getattr(diagnosis, "detail", None), getattr(diagnosis, "cause", None), family):
        if key in _CAUSE_WORDS:
            return key, _CAUSE_WORDS[key]
    return "unknown", _CAUSE_WORDS["unknown"]


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _num(x: Any, digits: int = 3) -> str:
    """A loss or norm for prose: 3 significant digits; 'NaN' and 'inf' spelled out."""
    if x is None:
        return "n/a"
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def grad_norm_jump(record: Any, step: int | None = None, window: int = JUMP_WINDOW) -> dict | None:
    """How the global grad norm moved in the ``window`` steps before ``step``.

    Among the finite grad norms of steps ``step - window`` .. ``step - 1``: the smallest
    (``low`` at ``low_step``), the largest at or after it (``high`` at ``high_step``) and
    ``decades = log10(high / low)``, the orders of magnitude it grew. ``at_step`` is the
    grad norm at ``step`` itself (often inf or NaN). ``step`` defaults to the first
    non-finite step (or the last step). None when fewer than two finite norms precede it
    (a run that failed on its first steps has no history).

    >>> from nanlab.record import RunRecord
    >>> rec = RunRecord()
    >>> for s, g in enumerate([1.0, 0.5, 0.8, 50.0, float("inf")]):
    ...     rec.log_step({"step": s, "loss": 1.0, "grad_norm": g, "finite": s < 4})
    >>> jump = grad_norm_jump(rec)
    >>> jump["low_step"], jump["high_step"], round(jump["decades"], 2), jump["at_step"]
    (1, 3, 2.0, inf)
    """
    rows = {r["step"]: r for r in record.steps}
    if step is None:
        step = record.first_nonfinite_step
        if step is None:
            step = max(rows) if rows else 0
    points = []
    for s in range(max(0, step - window), step):
        g = rows.get(s, {}).get("grad_norm")
        if _finite(g) and g > 0:
            points.append((s, float(g)))
    if len(points) < 2:
        return None
    low_step, low = min(points, key=lambda p: p[1])
    high_step, high = max((p for p in points if p[0] >= low_step), key=lambda p: p[1])
    at = rows.get(step, {}).get("grad_norm")
    return {
        "step": step,
        "window": window,
        "low_step": low_step,
        "low": low,
        "high_step": high_step,
        "high": high,
        "decades": math.log10(high / low),
        "steps": high_step - low_step,
        "at_step": None if at is None else float(at),
    }


def _loss_at(record: Any, step: int | None) -> float | None:
    if step is None:
        return None
    for r in record.steps:
        if r["step"] == step:
            return None if r.get("loss") is None else float(r["loss"])
    return None


def _last_finite_before(record: Any, step: int) -> tuple[int, float] | None:
    best = None
    for r in record.steps:
        if r["step"] < step and _finite(r.get("loss")):
            best = (r["step"], float(r["loss"]))
    return best


def _run_summary(run: Any) -> dict:
    """What a fixed or clean run did: steps, losses, non-finite steps, spikes, skips."""
    from nanlab.signals import find_spikes

    rec = run.record
    losses = rec.losses()
    last = rec.steps[-1]["step"] if rec.steps else None
    nonfinite = [r["step"] for r in rec.steps if not r.get("finite", True)]
    bad_batches = [e.get("batch") for e in rec.events if e.get("kind") == "bad_batch"]
    skipped = [r["step"] for r in rec.steps if r.get("skipped")]
    return {
        "fixes": list(getattr(run, "fixes", []) or []),
        "steps_run": len(rec.steps),
        "last_step": last,
        "start_loss": float(losses[0]) if len(losses) else None,
        "final_loss": _loss_at(rec, last),
        "nonfinite_steps": nonfinite,
        "spikes": [int(s) for s in find_spikes(losses) if s >= 10],
        "bad_batches_skipped": bad_batches,
        "steps_skipped": skipped,
        "error": getattr(run, "error", None),
    }


def _rebuild(run: Any, fixes: Sequence[str]) -> Any:
    """The same run (fault, parameters, config, seed) again, with ``fixes``, to the end."""
    from nanlab import faults as faults_mod

    config = run.trainer.config.replace(out_dir=None, progress=False)
    return faults_mod.run_fault(run.fault, fixes=list(fixes), base=config, **run.params)


def _clean_run(run: Any) -> Any:
    """The clean baseline with the run's length, seed, batch size and device."""
    from nanlab import faults as faults_mod

    c = run.trainer.config
    return faults_mod.run_fault(None, steps=c.steps, seed=c.seed, batch_size=c.batch_size,
                                device=c.device)


def _locate_quietly(run: Any) -> Any:
    try:
        from nanlab.debug.locate import locate

        loc = locate(run.trainer)
    except (RuntimeError, IndexError, ValueError):  # NanlabError is a ValueError
        return None
    return loc if loc.found else None


def incident_facts(
    fault_run: Any,
    diagnosis: Any = None,
    *,
    clean: Any = None,
    fixed: Any = None,
    location: Any = None,
) -> dict:
    """Every number a STAR story of ``fault_run`` needs, as a plain dict.

    Runs what is missing: the SOP (``diagnose``), ``locate`` on the first bad step, the
    same run with the diagnosed fix (``fixed``) and the clean baseline (``clean``), each
    with the original run's seed and length. The keys are documented by
    :func:`star_story`; ``facts["fixed"]`` and ``facts["clean"]`` summarise those runs.

    >>> from nanlab import faults
    >>> facts = incident_facts(faults.run_fault("nan_input"))  # doctest: +SKIP
    >>> facts["first_bad_step"]  # doctest: +SKIP
    40
    """
    from nanlab import faults as faults_mod
    from nanlab.faults import fixes as fixes_mod
    from nanlab.signals import final_loss

    if diagnosis is None:
        from nanlab.debug.diagnose import diagnose

        diagnosis = diagnose(fault_run)
    if diagnosis.symptom == "healthy":
        raise NanlabError("this run is healthy: there is no incident to tell a story about; "
                          "run a fault first, e.g. faults.run_fault('nan_input')")
    trainer = fault_run.trainer
    config = trainer.config
    manifest = fault_run.record.manifest
    name = getattr(fault_run, "fault", None)
    family = faults_mod.FAULTS[name].family if name in faults_mod.FAULTS else None
    key, _ = _words_for(diagnosis, family)
    rec = fault_run.record
    step = diagnosis.symptom_step
    bad_row = next((r for r in rec.steps if r["step"] == step), None) if step is not None else None
    before = _last_finite_before(rec, step) if step is not None else None
    losses = rec.losses()
    start = next((float(x) for x in losses if math.isfinite(x)), None)
    m = config.model
    facts: dict[str, Any] = {
        "fault": name,
        "fault_params": dict(getattr(fault_run, "params", {}) or {}),
        "family": family,
        "cause_key": key,
        "model": {
            "num_params": manifest.get("num_params"),
            "n_layer": m.n_layer,
            "n_head": m.n_head,
            "d_model": m.n_embd,
            "vocab_size": m.vocab_size,
            "block_size": m.block_size,
            "use_norms": m.use_norms,
            "class": manifest.get("model_class"),
        },
        "task": "counting" if str(manifest.get("model_class", "")).endswith("nanlab.model.GPT")
        else None,
        "precision": config.precision,
        "grad_scaler": bool(trainer.scaler),
        "optimizer": config.optimizer,
        "lr": config.lr,
        "warmup_steps": config.warmup_steps,
        "schedule": config.schedule,
        "adam_eps": config.adam_eps,
        "grad_clip": config.grad_clip,
        "batch_size": config.batch_size,
        "seed": config.seed,
        "steps_planned": config.steps,
        "device": manifest.get("device"),
        "symptom": diagnosis.symptom,
        "symptom_step": step,
        "first_bad_step": fault_run.first_bad_step,
        "steps_run": len(rec.steps),
        "error": getattr(fault_run, "error", None),
        "loss_at_symptom": None if bad_row is None else bad_row.get("loss"),
        "grad_norm_at_symptom": None if bad_row is None else bad_row.get("grad_norm"),
        "last_good_step": before[0] if before else None,
        "last_good_loss": before[1] if before else None,
        "start_loss": start,
        "end_loss": final_loss(losses) if start is not None else None,
        "grad_jump": grad_norm_jump(rec, step) if step is not None else None,
        "location": None,
        "rollback_step": None,
        "recovered_by_itself_in": None,
        "steps_after_symptom": None if step is None else sum(r["step"] > step
                                                             for r in rec.steps),
        "later_spikes": [],
        "last_loss": float(losses[-1]) if len(losses) else None,
        "cause": diagnosis.cause,
        "detail": diagnosis.detail,
        "fix": diagnosis.fix,
        "fix_summary": fixes_mod.FIXES[diagnosis.fix].summary
        if diagnosis.fix in fixes_mod.FIXES else None,
        "fix_verified": diagnosis.fix_verified,
        "fix_evidence": diagnosis.fix_evidence,
        "sop": [
            {"step": f.step, "verdict": f.verdict, "text": f.text}
            for f in diagnosis.findings if f.verdict != "hint"
        ],
        "ruled_out": [
            {"step": f.step, "text": f.text} for f in diagnosis.findings if f.verdict == "ruled out"
        ],
        "fixed": None,
        "clean": None,
        "loss_fixed_at_step": None,
        "loss_clean_at_step": None,
        "compare_step": None,
        "batches_after_fix": None,
        "back_on_clean_curve_at": None,
    }
    # where the first non-finite value was made, and the checkpoint to roll back to
    if diagnosis.symptom in ("nonfinite", "error") and step is not None:
        if location is None:  # diagnose() already replayed the bad step: reuse its report
            location = getattr(diagnosis, "location", None) or _locate_quietly(fault_run)
            location = location if location is not None and location.found else None
        if location is not None:
            facts["location"] = {
                "step": location.step,
                "checkpoint": location.checkpoint,
                "pass": location.pass_name,
                "module": location.module,
                "module_type": location.module_type,
                "tensor": location.tensor,
                "counts": location.counts,
                "inf_before_nan": location.inf_before_nan,
                "error": location.error,
            }
        kept = [s for s in trainer.checkpoints.steps() if s <= step]
        if location is not None:
            facts["rollback_step"] = location.checkpoint
        elif kept:
            facts["rollback_step"] = max(kept)
    if diagnosis.symptom == "spike" and step is not None:
        from nanlab.signals import find_spikes, recovery_steps

        facts["recovered_by_itself_in"] = recovery_steps(losses, step)
        facts["later_spikes"] = [int(x) for x in find_spikes(losses) if x > step]
    # the fixed run and the clean baseline, same seed and length
    if fixed is None and diagnosis.fix and name is not None:
        fixed = _rebuild(fault_run, [*getattr(fault_run, "fixes", []), diagnosis.fix])
    if clean is None and name is not None:
        clean = _clean_run(fault_run)
    compare = step if step is not None else (config.steps - 1)
    facts["compare_step"] = compare
    if fixed is not None:
        facts["fixed"] = _run_summary(fixed)
        facts["loss_fixed_at_step"] = _loss_at(fixed.record, compare)
        if step is not None:
            facts["batches_after_fix"] = sum(r["step"] > step for r in fixed.record.steps)
    if clean is not None:
        facts["clean"] = _run_summary(clean)
        facts["loss_clean_at_step"] = _loss_at(clean.record, compare)
    if fixed is not None and clean is not None:
        facts["back_on_clean_curve_at"] = _back_on_curve(fixed.record, clean.record, compare)
    return facts


def _back_on_curve(fixed: Any, clean: Any, start: int) -> int | None:
    """The first step >= ``start`` from which the fixed run's loss stays within
    ``RECOVERY_TOLERANCE`` (or ``RECOVERY_SLACK`` absolute) of the clean run's, to the end."""
    clean_loss = {r["step"]: r["loss"] for r in clean.steps}
    pairs = [(r["step"], r["loss"], clean_loss.get(r["step"])) for r in fixed.steps
             if r["step"] >= start and r["step"] in clean_loss]
    back = None
    for s, got, want in pairs:
        close = _finite(got) and _finite(want) and \
            got <= want * (1 + RECOVERY_TOLERANCE) + RECOVERY_SLACK
        if not close:
            back = None
        elif back is None:
            back = s
    return back


@dataclass
class StarStory:
    """A STAR story of one incident, with the run's numbers; ``markdown()`` to export.

    ``situation``, ``task``, ``action`` and ``result`` are Markdown paragraphs (English
    with the Chinese key terms beside them); ``headline`` is the one-line, quantified
    version for a CV; ``facts`` holds every number used (see ``incident_facts``).

    >>> from nanlab import faults
    >>> story = star_story(faults.run_fault("nan_input"))  # doctest: +SKIP
    >>> story.save("my_incident.md")  # doctest: +SKIP
    """

    title: str
    headline: str
    situation: str
    task: str
    action: str
    result: str
    facts: dict = field(default_factory=dict)

    def markdown(self) -> str:
        """The story as Markdown: title, one-line headline, the four parts, key numbers."""
        parts = [
            f"## {self.title}",
            "",
            f"> {self.headline}",
            "",
            f"**Situation (情境).** {self.situation}",
            "",
            f"**Task (任务).** {self.task}",
            "",
            f"**Action (行动).** {self.action}",
            "",
            f"**Result (结果).** {self.result}",
            "",
            "**Key numbers (关键数字)**",
            "",
            "| fact | value |",
            "|---|---|",
        ]
        parts += [f"| {k} | {v} |" for k, v in self.key_numbers()]
        return "\n".join(parts) + "\n"

    def key_numbers(self) -> list[tuple[str, str]]:
        """(label, value) rows of the numbers an interviewer asks for."""
        f = self.facts
        rows = [("parameters", f"{f['model']['num_params']:,}" if f["model"]["num_params"]
                 else "n/a"),
                ("layers / d_model / heads",
                 f"{f['model']['n_layer']} / {f['model']['d_model']} / {f['model']['n_head']}"),
                ("precision", f["precision"]),
                ("optimizer, peak LR", f"{f['optimizer']}, {f['lr']:g}"),
                ("symptom", f["symptom"] + (f" at step {f['symptom_step']}"
                                            if f["symptom_step"] is not None else ""))]
        jump = f.get("grad_jump")
        if jump:
            rows.append(("grad-norm jump before it",
                         f"{jump['decades']:.1f} decades, steps {jump['low_step']}"
                         f"-{jump['high_step']}"))
        loc = f.get("location")
        if loc and loc["tensor"]:
            rows.append(("first non-finite value", f"{loc['pass']} pass, "
                         f"{loc['module'] or loc['tensor']}"))
        elif loc:
            rows.append(("crashed in", f"{loc['pass']} pass"
                         + (f", {loc['module']}" if loc["module"] else "")))
        rows.append(("root cause", f["detail"] or f["cause"] or "not found"))
        rows.append(("fix", f["fix"] or "none needed"))
        if f["rollback_step"] is not None and f["symptom_step"] is not None:
            rows.append(("rolled back to / steps redone",
                         f"step {f['rollback_step']} / "
                         f"{f['symptom_step'] - f['rollback_step'] + 1}"))
        if f["fixed"] is not None:
            rows.append((f"loss at step {f['compare_step']}: fixed vs clean",
                         f"{_num(f['loss_fixed_at_step'])} vs {_num(f['loss_clean_at_step'])}"))
        elif f["recovered_by_itself_in"] is not None:
            rows.append(("steps for the loss to come back by itself",
                         str(f["recovered_by_itself_in"])))
        if f["batches_after_fix"] is not None:
            rows.append(("batches after the old failure step, no recurrence",
                         str(f["batches_after_fix"])))
        return rows

    def save(self, path: str | Path) -> Path:
        """Write ``markdown()`` to ``path`` (UTF-8; folders made as needed); returns it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.markdown(), encoding="utf-8")
        return path

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def __str__(self) -> str:
        return self.markdown()


def _precision_words(f: dict) -> str:
    p = f["precision"]
    if p == "fp32":
        return "fp32 (full precision)"
    if p == "bf16":
        return "bf16 autocast (混合精度, bf16)"
    if p == "fp16-pure":
        return "pure fp16 (model weights and optimizer state in fp16, 半精度)"
    scaler = "with a GradScaler" if f["grad_scaler"] else "without a GradScaler"
    return f"fp16 mixed precision (混合精度: torch.amp autocast {scaler})"


def _optimizer_words(f: dict) -> str:
    name = "AdamW" if f["optimizer"] == "adamw" else "SGD with momentum"
    warm = f"{f['warmup_steps']} warmup steps" if f["warmup_steps"] else "no warmup"
    decay = "cosine decay" if f["schedule"] == "cosine" else "a constant LR"
    clip = (f"gradient clipping (梯度裁剪) at {f['grad_clip']:g}" if f["grad_clip"]
            else "no gradient clipping")
    return f"{name} at a peak LR of {f['lr']:g} ({warm}, {decay}), {clip}"


def _device_words(device: str | None) -> str:
    if not device:
        return "its machine"
    return "the CPU" if device == "cpu" else f"a GPU ({device})"


def _model_words(f: dict) -> str:
    m = f["model"]
    params = f"{m['num_params']:,} parameters" if m["num_params"] else "parameters unknown"
    norms = "" if m["use_norms"] else ", no LayerNorm"
    if f["task"] == "counting":
        what = "a decoder-only Transformer (GPT-style"
    else:
        what = f"a model ({m['class'] or 'my own'}"
    return (f"{what}, {m['n_layer']} layers, d_model {m['d_model']}, {m['n_head']} heads"
            f"{norms}, {params})")


def _task_words(f: dict) -> str:
    if f["task"] == "counting":
        m = f["model"]
        return (f"a synthetic next-token task (counting in strides, vocab {m['vocab_size']}, "
                f"sequence length {m['block_size']}, batch {f['batch_size']})")
    return f"its training task (batch {f['batch_size']})"


def _symptom_words(f: dict) -> str:
    """The failure itself, as it showed in the record."""
    s, step = f["symptom"], f["symptom_step"]
    if s == "nonfinite":
        loss = f["loss_at_symptom"]
        if _finite(loss):
            what = (f"the global grad norm became {_num(f['grad_norm_at_symptom'])} while the "
                    f"loss was still {_num(loss)}")
        else:
            what = f"the loss became {_num(loss)}"
        where = (f"On the very first step (step {step})" if step == 0 else f"At step {step}")
        before = ""
        if f["last_good_step"] is not None:
            before = (f" (at step {f['last_good_step']} the loss was still "
                      f"{_num(f['last_good_loss'])})")
        silent = "" if f["error"] else (
            " Nothing raised an error: without a check the run would have kept training on "
            "NaN weights (a NaN is silent, an OOM is loud).")
        return f"{where}, {what}{before}.{silent}"
    if s == "error":
        return f"At step {step} the run crashed: `{str(f['error']).rstrip('.')}`."
    if s == "spike":
        back = f["recovered_by_itself_in"]
        tail = (f" It came back on its own within {back} steps." if back is not None
                else " It did not come back on its own.")
        jump = ""
        if f["last_good_step"] is not None and _finite(f["loss_at_symptom"]) \
                and f["last_good_loss"]:
            ratio = f["loss_at_symptom"] / f["last_good_loss"]
            jump = (f" from {_num(f['last_good_loss'])} at step {f['last_good_step']}, "
                    f"{ratio:.0f}x")
        return (f"At step {step} the loss spiked to {_num(f['loss_at_symptom'])}{jump}, "
                f"with no NaN." + tail)
    if s == "diverge":
        start, end = f["start_loss"], f["end_loss"]
        if _finite(start) and _finite(end) and end >= start:
            return (f"The loss climbed from {_num(start)} to {_num(end)} over "
                    f"{f['steps_run']} steps instead of falling: it diverged (发散), with no "
                    f"NaN.")
        clean = f["clean"]
        ref = (f"; the clean baseline reaches {_num(clean['final_loss'])}" if clean
               and clean.get("final_loss") is not None else "")
        return (f"The loss only went from {_num(start)} to {_num(end)} over {f['steps_run']} "
                f"steps{ref}: the run failed to converge (不收敛), with no NaN.")
    if s == "stall":
        return (f"The loss stayed near {_num(f['end_loss'])} after {f['steps_run']} steps "
                f"(it started at {_num(f['start_loss'])}): training stalled, with no NaN.")
    return f"The run showed a {s}."


def _jump_words(f: dict) -> str:
    jump, step = f["grad_jump"], f["symptom_step"]
    if step is None:
        return ""
    if jump is None:
        return ("There was no grad-norm history before it to read: it failed within the "
                "first steps.")
    at = jump["at_step"]
    then = f", then {_num(at)} at step {step}" if at is not None else ""
    span = (f"from {_num(jump['low'])} at step {jump['low_step']} to {_num(jump['high'])} at "
            f"step {jump['high_step']}")
    decades = round(jump["decades"], 1)  # decide on the number the sentence shows
    if decades >= 1.0:
        return (f"In the {jump['window']} steps before it the global grad norm (梯度范数) "
                f"grew {jump['decades']:.1f} orders of magnitude, {span}{then}.")
    if decades >= 0.5:
        return (f"In the {jump['window']} steps before it the global grad norm (梯度范数) "
                f"rose {jump['decades']:.1f} orders of magnitude ({span}){then}: less than "
                f"one order of magnitude, so no explosion was building up.")
    return (f"The global grad norm (梯度范数) was flat in the {jump['window']} steps before "
            f"it ({span}, {jump['decades']:.1f} orders of magnitude){then}: nothing was "
            f"building up.")


def _location_words(f: dict) -> str:
    loc, step = f["location"], f["symptom_step"]
    rollback = f["rollback_step"]
    if rollback is None or step is None:
        return ""
    head = (f"I rolled back (回滚) to the last good checkpoint (检查点), saved at the start of "
            f"step {rollback}, and replayed step {step} exactly, with hooks on every module "
            f"and op, forward and backward (`locate`)")
    if loc is None:
        return head + "; the replay did not show where the value was made."
    if loc["error"] and not loc["tensor"]:
        return (f"{head}: it crashed in the {loc['pass']} pass"
                + (f", in `{loc['module']}`" if loc["module"] else "") + ".")
    where = f"in the {loc['pass']} pass"
    if loc["module"]:
        kind = f" ({loc['module_type']})" if loc["module_type"] else ""
        where += f", in `{loc['module']}`{kind}"
    c = loc["counts"] or {}
    counts = ""
    if c:
        inf = (c.get("posinf") or 0) + (c.get("neginf") or 0)
        counts = f", {c.get('nan', 0)} NaN and {inf} inf of {c.get('numel', '?')} values"
    tensor = f", tensor `{loc['tensor']}`" if loc["tensor"] else ""
    order = {True: "inf came before NaN (an overflow first, then inf - inf or inf / inf)",
             False: "NaN came without an inf before it (a 0 / 0 or a NaN fed in, not an "
                    "overflow)",
             None: "inf and NaN appeared in the same operation"}[loc["inf_before_nan"]]
    return f"{head}: the first non-finite value was made {where}{tensor}{counts}; {order}."


def _sop_words(f: dict) -> str:
    """The SOP steps in order, each with its verdict, as a Markdown list."""
    lines = []
    for item in f["sop"]:
        label = _SOP_SHORT.get(item["step"], item["step"])
        verdict = _VERDICT_WORDS.get(item["verdict"], item["verdict"])
        lines.append(f"- **{label}**: {verdict}: {item['text']}.")
    done = {item["step"] for item in f["sop"]}
    rest = [_SOP_SHORT[k] for k in _SOP_SHORT if k not in done]
    if rest and f["cause"]:
        lines.append(f"- The SOP stops at the first step that explains the failure, so "
                     f"{', '.join(rest)} did not need a replay.")
    jump = f["grad_jump"]
    if (jump and jump["decades"] < 1.0 and f["symptom"] in ("nonfinite", "error")
            and "grad_norms" not in done):
        lines.append(f"- The grad norm before the failure grew only {jump['decades']:.1f} orders "
                     f"of magnitude in {jump['window']} steps, which also rules out a gradient "
                     f"explosion building up.")
    return "\n".join(lines)


def _result_words(f: dict, words: _Words) -> str:
    fixed, clean, step = f["fixed"], f["clean"], f["compare_step"]
    failed_at = f["symptom_step"]
    parts = []
    fix = f["fix"]
    if fixed is not None:
        healthy = not fixed["nonfinite_steps"] and not fixed["spikes"] and not fixed["error"]
        against = (lambda x: f" against {_num(x)} in the clean baseline") if clean is not None \
            else (lambda x: "")
        head = (f"With `{fix}` and the same seed ({f['seed']}), the run trained all "
                f"{fixed['steps_run']} steps.")
        if failed_at is not None:
            head += (f" At step {step}, where it had failed, the loss was "
                     f"{_num(f['loss_fixed_at_step'])}{against(f['loss_clean_at_step'])}")
            if fixed["last_step"] != step:
                head += (f"; at the last step ({fixed['last_step']}) "
                         f"{_num(fixed['final_loss'])}"
                         + (f" against {_num(clean['final_loss'])}" if clean else ""))
            head += "."
        else:
            head += (f" The loss fell from {_num(fixed['start_loss'])} to "
                     f"{_num(fixed['final_loss'])} at step {fixed['last_step']}"
                     f"{against(clean['final_loss'] if clean else None)}, where the faulty "
                     f"run had ended near {_num(f['end_loss'])}.")
        parts.append(head)
        if healthy and failed_at is not None:
            verify = (f"Verified (验证) with the same seed: {f['batches_after_fix']} batches "
                      f"after the old failure step, no non-finite loss and no spike: no "
                      f"recurrence (未复现).")
        elif healthy:
            verify = (f"Verified (验证) with the same seed over all {fixed['steps_run']} "
                      f"batches: no non-finite loss, no spike, and no "
                      f"{'stall' if f['symptom'] == 'stall' else 'divergence'}.")
        else:
            bad = fixed["nonfinite_steps"][:1] or fixed["spikes"][:1]
            verify = (f"Not yet proven: the fixed run still shows a problem at step "
                      f"{bad[0] if bad else fixed['last_step']}"
                      + (f" ({fixed['error']})" if fixed["error"] else "") + ".")
        skipped = fixed["bad_batches_skipped"]
        if skipped:
            noun = "batch was" if len(skipped) == 1 else "batches were"
            verify += (f" {len(skipped)} bad {noun} logged and skipped (batch "
                       f"{', '.join(str(b) for b in skipped)}).")
        parts.append(verify)
        back = f["back_on_clean_curve_at"]
        near = f"within {RECOVERY_TOLERANCE:.0%} (+{RECOVERY_SLACK:g}) of the clean run's loss"
        if clean is not None and failed_at is not None:
            if back is not None and back == step:
                parts.append(f"From step {step} to the end it stayed {near}.")
            elif back is not None:
                parts.append(f"It was back {near} {back - step} steps after step {step}, "
                             f"at step {back}, and stayed there.")
            else:
                parts.append(f"It ended above the clean run's loss ({_num(fixed['final_loss'])}"
                             f" vs {_num(clean['final_loss'])} at step {fixed['last_step']}): "
                             f"with this fix it learns more slowly than the clean baseline.")
    elif fix is None and f["cause"]:
        text = (f"The cure is in the {'scheduler' if f['cause_key'] == 'lr_jump' else 'setup'}"
                f", not in the model or the data: {words.why_fix}.")
        back = f["recovered_by_itself_in"]
        if back is not None:
            text += (f" The record shows it: the loss was back at its level before the spike "
                     f"{back} steps later, and the other {f['steps_after_symptom']} steps "
                     f"after it had {len(f['later_spikes']) or 'no'} further spike"
                     f"{'' if len(f['later_spikes']) == 1 else 's'}")
            if clean is not None:
                text += (f"; at the last step the loss was {_num(f['last_loss'])} against "
                         f"{_num(clean['final_loss'])} in the clean baseline")
            text += "."
        if f["cause_key"] == "lr_jump" and clean is not None:
            n = len(clean["spikes"])
            text += (f" With the schedule fixed, the same seed and config are the clean "
                     f"baseline: {clean['steps_run']} steps, {n or 'no'} "
                     f"spike{'' if n == 1 else 's'}, loss {_num(clean['final_loss'])} at the "
                     f"last step.")
        parts.append(text)
    else:
        parts.append(f"The diagnosed fix was checked by the SOP's replay: "
                     f"{f['fix_evidence']}.")
    if f["rollback_step"] is not None and failed_at is not None:
        redo = failed_at - f["rollback_step"] + 1
        which = (f"only step {failed_at}" if redo == 1
                 else f"{redo} steps ({f['rollback_step']} to {failed_at})")
        parts.append(f"Recovery cost: the last good checkpoint was saved at the start of "
                     f"step {f['rollback_step']}, so {which} had to be redone.")
    parts.append(f"Prevention (预防) and monitoring (监控): {words.prevention}; "
                 f"{_ALWAYS_PREVENT}.")
    return " ".join(parts)


def _problem(f: dict) -> str:
    """The incident in two or three words: 'NaN loss', 'loss spike', ..."""
    if f["symptom"] == "diverge":
        start, end = f["start_loss"], f["end_loss"]
        climbed = _finite(start) and _finite(end) and end >= start
        return "divergence" if climbed else "failure to converge"
    return {"nonfinite": "NaN loss", "error": "crash", "spike": "loss spike",
            "stall": "training stall"}.get(f["symptom"], "failure")


def _headline(f: dict, words: _Words) -> str:
    m = f["model"]
    size = f"{m['num_params']:,}-parameter" if m["num_params"] else "small"
    what = _problem(f)
    at = f" at step {f['symptom_step']}" if f["symptom_step"] is not None else ""
    line = f"Diagnosed a {what}{at} of a {size} Transformer as {words.name}"
    fixed, clean = f["fixed"], f["clean"]
    if f["fix"]:
        line += f", fixed it with `{f['fix']}`"
    if fixed is not None and f["batches_after_fix"] is not None:
        line += (f" and verified it over {f['batches_after_fix']} batches with the same seed "
                 f"(loss {_num(f['loss_fixed_at_step'])}")
        if f["loss_clean_at_step"] is not None:
            line += f" vs {_num(f['loss_clean_at_step'])} clean"
        line += f" at step {f['compare_step']})"
    elif fixed is not None:
        line += (f" and verified it over {fixed['steps_run']} steps with the same seed (final "
                 f"loss {_num(fixed['final_loss'])}")
        if clean is not None:
            line += f" vs {_num(clean['final_loss'])} clean"
        line += f", against {_num(f['end_loss'])} before the fix)"
    elif f["recovered_by_itself_in"] is not None:
        line += f"; the loss came back on its own within {f['recovered_by_itself_in']} steps"
    return line + "."


def story_from_facts(facts: dict) -> StarStory:
    """Write the STAR story from ``incident_facts`` (no runs, no replays: just words).

    >>> story = story_from_facts(incident_facts(run))  # doctest: +SKIP
    """
    f = facts
    words = _CAUSE_WORDS.get(f["cause_key"], _CAUSE_WORDS["unknown"])
    situation = " ".join(s for s in [
        f"I was training {_model_words(f)} on {_task_words(f)}, in {_precision_words(f)} on "
        f"{_device_words(f['device'])}, with {_optimizer_words(f)}; seed {f['seed']}, "
        f"{f['steps_planned']} steps planned.",
        _symptom_words(f),
        _jump_words(f),
    ] if s)
    problem = _problem(f)
    mechanism = words.on_error if f["symptom"] == "error" and words.on_error \
        else words.mechanism
    task = (f"Find the root cause (根因) of the {problem}, not just a workaround; fix it; and "
            f"prove the fix on the same seed against the clean baseline, losing as little "
            f"training as possible.")
    stop = ""
    if f["symptom"] == "error":
        stop = ("The crash stopped the run; I kept its record and checkpoints as "
                "evidence. ")
    elif f["symptom"] == "nonfinite":
        if f["symptom_step"] is not None and f["steps_run"] <= f["symptom_step"] + 1:
            stop = (f"The run was stopped at step {f['symptom_step']} (止损), keeping its "
                    f"record and checkpoints as evidence. ")
        else:
            stop = ("I stopped the run (止损) and kept its record and checkpoints as "
                    "evidence. ")
    elif f["symptom"] == "spike":
        stop = ("The loss came back by itself, so nothing had to be rolled back; I read the "
                "run's record (loss, LR and grad norm per step) against the clean baseline. ")
    else:
        stop = ("I read the run's record (loss, LR and grad norm per step) against the clean "
                "baseline. ")
    fix_line = ""
    if f["fix"]:
        summary = f": {f['fix_summary']}" if f["fix_summary"] else ""
        fix_line = (f"Fix: `{f['fix']}`{summary}. Why this is the fix and not a "
                    f"workaround: {words.why_fix}.")
    action = (
        stop + _location_words(f)
        + ("\n\n" if f["location"] or f["rollback_step"] is not None else "")
        + "Then I went through the SOP in order (排查顺序: data -> AMP off -> LR / 10 -> "
          "grad norms -> init / eps), one change at a time, each a controlled replay with "
          "the same seed:\n\n"
        + _sop_words(f)
        + f"\n\nRoot cause (根因): {words.name}: {mechanism}. " + fix_line
    ).strip()
    result = _result_words(f, words)
    what = f["fault"] or "my run"
    title = f"STAR story: {words.name} ({what})"
    return StarStory(title, _headline(f, words), situation, task, action, result, facts)


def star_story(
    fault_run: Any,
    diagnosis: Any = None,
    *,
    clean: Any = None,
    fixed: Any = None,
    location: Any = None,
) -> StarStory:
    """A STAR story of the incident in ``fault_run``, with that run's real numbers.

    ``fault_run`` is a :class:`nanlab.faults.FaultRun` (best made with
    ``checkpoint_every=10, stop_when_poisoned=True``); ``diagnosis`` its
    :class:`nanlab.debug.diagnose.Diagnosis` (run here when not given). ``fixed`` is the same
    run with the diagnosed fix and ``clean`` the clean baseline; both are run here, with
    the original seed and length, when not given (``faults.run_fault(name,
    fixes=[diagnosis.fix])`` and ``faults.run_fault(None)``). ``location`` is a
    :class:`nanlab.debug.locate.Location` of the first bad step (found here when not given).

    The story names the model (parameters, layers, d_model), the task, precision,
    optimizer and LR; the step of the first NaN or spike and the grad-norm jump before
    it; where ``locate`` found the first non-finite value and whether inf came first;
    each SOP step's verdict (what was ruled out, and why); the root cause and the fix;
    the steps redone after the rollback; the loss at the same step against the clean
    run; the batches run after the fix without a recurrence; and prevention.

    >>> from nanlab import faults
    >>> run = faults.run_fault("nan_input", steps=60, checkpoint_every=10,
    ...                        stop_when_poisoned=True)
    >>> story = star_story(run)  # doctest: +SKIP
    >>> print(story.markdown())  # doctest: +SKIP
    """
    facts = incident_facts(fault_run, diagnosis, clean=clean, fixed=fixed, location=location)
    return story_from_facts(facts)
