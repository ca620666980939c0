"""How often the free-text grader passes correct answers and fails wrong ones.

Every bank question (and every free-text question in the labs) carries ``good_answers``
and ``wrong_answers`` written in candidates' own words, without sight of the key points.
This script scores each one with its question's rubric and prints the pass rates, split
by language and length, then every answer the grader gets wrong with its feedback.
``--extra FILE`` scores another set of answers in the same shape, e.g. a held-out set
the rubric was never tuned on: ``{"<question id>": {"good": [...], "wrong": [...]}}``
(a wrong answer may be a string or ``{"text": ...}``). Asserts nothing.

    .venv/bin/python bench/bench_grader.py                      # the shipped answers
    .venv/bin/python bench/bench_grader.py --extra heldout.json --quiet
    .venv/bin/python bench/bench_grader.py --only precision,sop-order   # topics or ids
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from nanlab.course.questions import _store
from nanlab.course.quiz import FreeTextQuestion
from nanlab.interview.bank import load_bank

CJK = re.compile(r"[\u4e00-\u9fff]")
SHORT_WORDS = 40


def graders() -> dict[str, tuple[object, callable]]:
    """Question id -> (question, a function scoring text to (passed, feedback))."""
    out: dict[str, tuple[object, callable]] = {}
    for q in load_bank():
        out[q.id] = (q, lambda text, q=q: (q.score(text).passed, q.score(text).feedback))
        for f in q.follow_ups:
            if f.question is not None:
                fq = f.question
                out[fq.id] = (fq, lambda text, fq=fq: (fq.score(text).passed,
                                                       fq.score(text).feedback))
    for _, q in _store().values():
        if isinstance(q, FreeTextQuestion):
            def grade(text, q=q):
                fb = q.grade(text)
                return fb.correct, "\n".join([fb.message, *fb.details])
            out[q.qid] = (q, grade)
    return out


def kind(text: str) -> str:
    chinese = len(CJK.findall(text)) > len(text) / 6
    short = len(text.split()) < SHORT_WORDS if not chinese else len(text) < 90
    return ("zh" if chinese else "en") + (" short" if short else "")


def shipped() -> dict[str, dict[str, list[str]]]:
    answers = {}
    for qid, (q, _) in graders().items():
        answers[qid] = {"good": list(getattr(q, "good_answers", ())),
                        "wrong": list(getattr(q, "wrong_answers", ()))}
    return answers


def measure(answers: dict, quiet: bool) -> dict:
    table = graders()
    counts: dict[str, list[int]] = {}
    misses = []
    for qid, sets in answers.items():
        if qid not in table:
            print(f"unknown question id {qid!r}; skipped", file=sys.stderr)
            continue
        _, grade = table[qid]
        for want, texts in (("good", sets.get("good", [])), ("wrong", sets.get("wrong", []))):
            for item in texts:
                text = item["text"] if isinstance(item, dict) else item
                passed, feedback = grade(text)
                right = passed == (want == "good")
                for key in (want, f"{want} {kind(text)}"):
                    counts.setdefault(key, [0, 0])
                    counts[key][0] += right
                    counts[key][1] += 1
                if not right:
                    misses.append((qid, want, text, feedback))
    if not quiet:
        for qid, want, text, feedback in misses:
            verdict = "FAILED a good answer" if want == "good" else "PASSED a wrong answer"
            print(f"--- {qid}: {verdict}\n{text}\n{feedback}\n")
    for key in sorted(counts):
        right, total = counts[key]
        label = "pass" if key.startswith("good") else "fail"
        print(f"{key:18s} {label}ed correctly: {right:4d} of {total:4d} ({right / total:.0%})")
    return {k: v for k, v in counts.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", help="a JSON file of answers to score instead")
    parser.add_argument("--quiet", action="store_true", help="only the rates")
    parser.add_argument("--only", help="comma-separated question ids, id prefixes or topics")
    args = parser.parse_args(argv)
    answers = shipped()
    if args.extra:
        with open(args.extra, encoding="utf-8") as f:
            answers = json.load(f)
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        table = graders()
        answers = {qid: a for qid, a in answers.items()
                   if any(qid.startswith(w) or getattr(table.get(qid, (None,))[0], "topic", "")
                          == w for w in wanted)}
    counts = measure(answers, args.quiet)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
