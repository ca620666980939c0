"""Interview practice: the question bank, answer frameworks, a mock interview, a cheat sheet.

Why this module exists: "your loss suddenly became NaN, what do you do?" is a standard
LLM-training interview question. Knowing the fix is half of it; the other half is saying
it in order, with numbers, at the depth the interviewer's level expects.

Everything here is plain Python with no widgets, so it is unit-tested without a
browser; notebook widgets are thin shells over it.

- The bank is data: ``nanlab/questions.json``, one file an instructor can extend.
  ``load_bank(path)`` validates every entry and reports each problem by id and field.
- ``answer_framework(level)``: what a new graduate, an experienced engineer and a
  senior/architect are expected to show, a fill-in template, and the typical mistake.
- ``MockInterview``: seeded question choice, rubric feedback (``nanlab.rubric``), a
  follow-up aimed at what the answer missed, and a summary.
- ``cheat_sheet()``: the one-page SOP for the night before.

Quick start::

    from nanlab.interview import MockInterview
    mock = MockInterview(level="new_grad", seed=1)
    print(mock.current.prompt())
    reply = mock.answer("First I would stop the run and keep the logs ...")
    print(reply.message)
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from nanlab.errors import NanlabError, check_choice, check_range
from nanlab.rubric import KeyPoint, RubricResult, score_answer

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
    """The question bank has problems; ``problems`` lists each one on its own."""

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
    return Path(str(resources.files("nanlab").joinpath("questions.json")))


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
    """What an interviewer expects from one level, a fill-in template, and its pitfall."""

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
    """One question asked and answered."""

    question: Question
    answer: str
    result: RubricResult
    follow_up: bool


@dataclass
class Reply:
    """What ``MockInterview.answer`` returns: the feedback and what comes next."""

    result: RubricResult
    next_question: Question | None
    is_follow_up: bool
    message: str


@dataclass
class InterviewSummary:
    """Per-question scores, topic averages, and what to practise next."""

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


# ------------------------------------------------------------------- STAR story (planned)
# The STAR story of an incident is to be generated from the learner's own run record
# (nanlab.record), with their numbers: model and scale, first bad step, the evidence each
# SOP step produced, the fix and the confirmation run. It will live here as
# ``star_story(run) -> str`` and fill ``FRAMEWORKS["experienced"].template``. Not built yet.
