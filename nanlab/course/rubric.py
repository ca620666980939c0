"""Score a free-text interview answer (English, Chinese or mixed) against key points.

Why a rubric and not a model: the course runs offline, and a learner should be able to
see exactly why an answer earned what it earned. The rules are deliberately simple.

Matching
    Text is normalised first: Unicode NFKC (full-width letters, digits and punctuation
    become half-width), lower case, thousands separators dropped (``65,504`` ->
    ``65504``). It is then cut into tokens: English words and numbers (``1e-8``,
    ``fp16``, ``clip_grad_norm_``), and single Chinese characters. A synonym matches
    when its tokens appear consecutively in the answer. English words are compared
    after light stemming (plural ``-s``/``-es``/``-ies``, ``-ed``, ``-ing``, a final
    ``-e``, British ``-ise`` = ``-ize``); Chinese is compared character by character, so
    a Chinese synonym matches as a substring and spaces between characters do not
    matter. A multi-word English synonym also matches written as one word
    (``warm up`` matches ``warmup``; hyphens split words, so ``warm-up`` matches too).

The anti-stuffing rule (``CONTEXT_WORDS_PER_POINT`` = 3)
    A key point earns credit only when it is explained, not just named. The answer is
    cut into sentences at ``.`` ``!`` ``?`` ``;`` ``。`` and line breaks (commas do not
    cut). The *context* of a sentence is its distinct words that are not part of a
    matched phrase; one Chinese character counts as half a word, and words inside a
    short list item (a comma- or ``、``-separated item under three words, such as
    ``warmup,`` in a list) do not count. Then:

    1. a sentence earns at most ``context // 3`` key points, the earliest first;
    2. the whole answer earns at most ``(distinct context words in the answer) // 3``
       key points, so repeating the same filler sentence does not help.

    So every credited point needs about three words (six Chinese characters) of its own
    explanation; a bare keyword list, a comma list or one keyword per line earns
    nothing. Points named but not credited are reported as ``unexplained``.

Limits, said plainly: the rubric does not understand negation ("I would *not* check
the data" still matches) and cannot tell a right number from a wrong one unless the
key point lists only the right one. It is a practice aid, not a grader of record.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

CONTEXT_WORDS_PER_POINT = 3
"""Distinct non-keyword words a clause needs for each key point it is credited with."""

CJK_WORD_WEIGHT = 0.5
"""One Chinese character counts as this many words of context."""

_TOKEN = re.compile(
    r"\d+(?:\.\d+)?(?:e[-+]?\d+)?"  # numbers: 2000, 1.0, 1e-8, 6e4
    r"|[a-z_][a-z0-9_]*"  # words and identifiers: fp16, clip_grad_norm_
    r"|[\u0370-\u03ff]"  # a Greek letter: σ
    r"|[\u3400-\u4dbf\u4e00-\u9fff]"  # one Chinese character
)
_CLAUSE_END = re.compile(r"[\n。!?;]+|\.(?=\s|$)")
_LIST_SEP = re.compile(r"[,、]")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_BRITISH = re.compile(r"is(e|ed|es|ing|ation|ations)$")
_DOUBLE = re.compile(r"([b-df-hj-np-tv-z])\1$")


@dataclass(frozen=True)
class KeyPoint:
    """One thing a good answer must say, with the phrases that count as saying it.

    ``synonyms`` hold English and Chinese phrases; ``hint`` is what the feedback tells
    a learner who left the point out.

    >>> KeyPoint("check the data first", ("check the data", "检查数据"))
    KeyPoint(name='check the data first', synonyms=('check the data', '检查数据'), hint='')
    """

    name: str
    synonyms: tuple[str, ...]
    hint: str = ""


@dataclass
class RubricResult:
    """The outcome of scoring one answer.

    ``present``: points credited. ``missing``: points not credited (this includes
    ``unexplained``, the points that were named but only as bare keywords).

    >>> point = KeyPoint("check the data first", ("check the data",))
    >>> result = score_answer("I would check the data of the bad step first.", [point])
    >>> result.score, result.present
    (1.0, ['check the data first'])
    """

    score: float
    present: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    feedback: str = ""
    unexplained: list[str] = field(default_factory=list)


def normalize(text: str) -> str:
    """Fold width and case, drop thousands separators; why: compare like with like.

    >>> normalize("ＦＰ16 max is 65,504！")
    'fp16 max is 65504!'
    """
    text = unicodedata.normalize("NFKC", text or "").lower()
    return _THOUSANDS.sub("", text)


def stem(word: str) -> str:
    """Strip common English endings so 'overflows' and 'overflowed' meet at 'overflow'.

    >>> stem("clipping"), stem("batches"), stem("normalised")
    ('clip', 'batch', 'normaliz')
    """
    if not word.isalpha() or not word.isascii() or len(word) <= 3:
        return word
    w = _BRITISH.sub(r"iz\1", word)
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("es") and (w[-3] in "sxz" or w[-4:-2] in ("ch", "sh")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if w.endswith("ing") and len(w) > 5:
        w = w[:-3]
    elif w.endswith("ed") and len(w) > 4:
        w = w[:-2]
    w = _DOUBLE.sub(r"\1", w)
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    return w


def tokens(text: str) -> list[str]:
    """The raw tokens of already-normalised text.

    >>> tokens("用fp16训练, lr=1e-4")
    ['用', 'fp16', '训', '练', 'lr', '1e-4']
    """
    return _TOKEN.findall(text)


def clauses(text: str) -> list[str]:
    """Cut normalised text at sentence ends and line breaks (not at commas).

    >>> clauses("check the data. then turn amp off;\\n1.0 stays")
    ['check the data', ' then turn amp off', '1.0 stays']
    """
    return [c for c in _CLAUSE_END.split(text) if c.strip()]


def _is_cjk(token: str) -> bool:
    return len(token) == 1 and ("\u3400" <= token <= "\u4dbf" or "\u4e00" <= token <= "\u9fff")


def _patterns(point: KeyPoint) -> list[list[str]]:
    """Stemmed token sequences for each synonym, plus a joined form of multi-word ones."""
    seen: list[list[str]] = []
    for synonym in point.synonyms:
        raw = tokens(normalize(synonym))
        if not raw:
            continue
        forms = [[stem(t) for t in raw]]
        words = [t for t in raw if not _is_cjk(t)]
        if len(raw) > 1 and len(words) == len(raw) and all(t.isalpha() for t in raw):
            forms.append([stem("".join(raw))])
        for form in forms:
            if form not in seen:
                seen.append(form)
    return seen


def _find(seq: list[str], pattern: list[str]) -> list[int]:
    """Start indices where ``pattern`` occurs in ``seq``."""
    n = len(pattern)
    return [i for i in range(len(seq) - n + 1) if seq[i : i + n] == pattern]


def _weight(words: set[str] | list[str]) -> float:
    """Words, with a Chinese character counting half."""
    return sum(CJK_WORD_WEIGHT if _is_cjk(t) else 1.0 for t in words)


def _clause_tokens(clause: str) -> tuple[list[str], list[bool]]:
    """Tokens of a clause, and for each whether it sits in a short list item."""
    raw: list[str] = []
    short: list[bool] = []
    for item in _LIST_SEP.split(clause):
        toks = tokens(item)
        raw += toks
        short += [_weight(toks) < CONTEXT_WORDS_PER_POINT] * len(toks)
    return raw, short


def score_answer(answer: str, points: Sequence[KeyPoint]) -> RubricResult:
    """Score ``answer`` against ``points``: the share of points credited, 0..1.

    A point is credited when one of its synonyms occurs in a sentence that also carries
    three distinct words of explanation per credited point, and the answer as a whole
    has three distinct explaining words per credited point (the rule is spelled out in
    the module docstring). Empty, off-topic and keyword-list answers score 0, and so does
    an answer that is not text (never an error).

    >>> pts = [KeyPoint("check the data first", ("check the data", "检查数据"))]
    >>> score_answer("I would first check the data for NaN values.", pts).score
    1.0
    >>> score_answer("check the data", pts).unexplained
    ['check the data first']
    >>> score_answer(42, pts).feedback
    'Answer with text, a sentence or two; got int.'
    """
    if answer is not None and not isinstance(answer, str):
        return RubricResult(0.0, [], [p.name for p in points],
                            f"Answer with text, a sentence or two; got {type(answer).__name__}.")
    if not points:
        return RubricResult(0.0, [], [], "This question has no key points to score against.")
    patterns = {p.name: _patterns(p) for p in points}
    credited: list[str] = []
    named: set[str] = set()
    all_context: set[str] = set()
    for clause in clauses(normalize(answer)):
        raw, short = _clause_tokens(clause)
        stems = [stem(t) for t in raw]
        covered: set[int] = set()
        found: list[tuple[int, str]] = []
        for point in points:
            starts = []
            for pattern in patterns[point.name]:
                for i in _find(stems, pattern):
                    starts.append(i)
                    covered.update(range(i, i + len(pattern)))
            if starts:
                found.append((min(starts), point.name))
        context = {raw[i] for i in range(len(raw)) if i not in covered and not short[i]}
        all_context |= context
        budget = int(_weight(context) // CONTEXT_WORDS_PER_POINT)
        for _, name in sorted(found):
            named.add(name)
            if name not in credited and budget > 0:
                credited.append(name)
                budget -= 1
    credited = credited[: int(_weight(all_context) // CONTEXT_WORDS_PER_POINT)]
    present = [p.name for p in points if p.name in credited]
    missing = [p.name for p in points if p.name not in credited]
    unexplained = [p.name for p in points if p.name in named and p.name not in credited]
    score = len(present) / len(points)
    feedback = _feedback(answer, points, present, missing, unexplained)
    return RubricResult(score, present, missing, feedback, unexplained)


def _feedback(
    answer: str,
    points: Sequence[KeyPoint],
    present: list[str],
    missing: list[str],
    unexplained: list[str],
) -> str:
    """Plain-words feedback: what was covered, what was not, and the rule if it bit."""
    total = len(points)
    if not (answer or "").strip():
        return f"No answer yet: 0 of {total} key points. Say it in full sentences."
    lines = [f"You covered {len(present)} of {total} key points."]
    if present:
        lines.append("Covered: " + "; ".join(present) + ".")
    hints = {p.name: p.hint for p in points}
    gaps = [m for m in missing if m not in unexplained]
    if gaps:
        lines.append("Missing:")
        lines += [f"- {m}" + (f": {hints[m]}" if hints[m] else "") for m in gaps]
    if unexplained:
        lines.append(
            "Named but not explained, so not counted: " + "; ".join(unexplained) + ". "
            f"Each point needs about {CONTEXT_WORDS_PER_POINT} words of its own explanation "
            "in the same sentence (a Chinese character counts as half a word); bare "
            "keyword lists, one keyword per line and repeated filler earn nothing."
        )
    if not present and not unexplained:
        lines.append("None of the key points came up: this answer looks off-topic.")
    return "\n".join(lines)
