"""The question bank's schema: topics, levels, fields, and the check of raw entries.

``check_bank`` lists every problem of a list of raw bank entries, one message each,
naming the entry and the field and saying what is allowed, so an instructor's own bank
file is fixed in one pass. ``nanlab.interview.bank`` builds questions from entries that
pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

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
