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

Core and bonus points, one pass mark
    A question's key points are claims. The core points (2 to 4) decide the score: the
    share of them credited. Bonus points (``KeyPoint(..., bonus=True)``) are named in the
    feedback and never lower a score. An answer passes at ``PASS_MARK`` (60 %: 2 of 3,
    3 of 4), the same mark in every lab widget and in the mock interview.

The anti-stuffing rule (``CONTEXT_WORDS_PER_POINT`` = 2)
    A key point earns credit only when it is explained, not just named. The answer is
    cut into sentences at ``.`` ``!`` ``?`` ``;`` ``。`` and line breaks (commas do not
    cut). The *context* of a sentence is its distinct words that are not part of a
    matched phrase; one Chinese character counts as half a word, and words inside a
    short list item (a comma- or ``、``-separated item under ``LIST_ITEM_WORDS``
    words) do not count.
    A sentence earns at most ``context // 2`` key points, the earliest first, and the
    whole answer at most ``(distinct context words in the answer) // 2``, so a bare
    keyword list, one keyword per line or repeated filler earns nothing. Points named
    but not credited are reported as ``unexplained``.

Negation and dismissal
    A phrase that the sentence negates does not count: "I would *not* roll back" does
    not earn "roll back". A negation is one of ``not``, ``no``, ``never``, ``without``,
    ``cannot``, an ``n't`` contraction, ``instead of``, ``rather than``, or in Chinese
    不 / 没 / 无 / 别 / 未 / 非 (not inside words such as 不同, 非常, 特别). It must stand
    before the phrase in the same part of the sentence, at most ``NEGATION_WINDOW_WORDS``
    words (``NEGATION_WINDOW_CJK`` Chinese characters) away; a comma, a colon or a word
    such as ``but``, ``then``, ``because``, ``if`` ends its reach, and so does ``is`` /
    ``are`` for a negation in the subject ("no growth before it is bad data" does not
    negate "bad data"); two negations side by side cancel. A dismissal counts as a
    negation too, before the phrase ("the last thing I would do is ...", "a waste of
    time to ...", 忽略) or after it ("... is a waste of time", "... is pointless", 没必要,
    多余), within ``DISMISS_WINDOW_WORDS``. A key point about what something does *not*
    do lists its phrases under ``denied``: they count only when negated ("clipping does
    not cure a gradient that is *already NaN*").

Order
    ``score_answer(..., ordered=True)`` is for questions whose steps are the point (the
    SOP): core points said out of their listed order cap the score at ``ORDER_CAP``.

Wrong claims (``must_not``)
    A question can list claims a good answer must not make (``WrongClaim``). A wrong
    claim that the answer asserts (matched and not negated, no explanation needed) caps
    the score at ``WRONG_CLAIM_CAP``, whatever else the answer gets right, and the
    feedback says why the claim is wrong. A claim inside a condition is not asserted: after
    ``if``, ``unless``, ``when`` or 如果 / 若 in the same part of the sentence ("if you clip
    before unscaling, max_norm means nothing" warns against the mistake).

Feedback
    Each credited point is shown with the sentence that earned it, so a learner sees what
    the rules read. The widgets add a self-assessment: after a graded try the learner
    compares with the model answer and ticks the core points covered.

Limits, said plainly: the rules read words, not meaning. A paraphrase the phrasings do
not know is missed (the self-assessment is there for it), an unusual negation can be
missed, and a wrong number is caught only when a key point or a wrong claim names it.
Each bank question's ``good_answers`` and ``wrong_answers``, written by people who had
not seen the key points, are the test of the phrasings (``bench/bench_grader.py``).
It is a practice aid, not a
grader of record. Nothing here evaluates or runs the learner's text.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

CONTEXT_WORDS_PER_POINT = 2
"""Distinct words of its own explanation a sentence needs for each key point it earns."""

LIST_ITEM_WORDS = 3
"""A comma- or 、-separated item under this many words is a keyword, not an explanation."""

CJK_WORD_WEIGHT = 0.5
"""One Chinese character counts as this many words of context."""

NEGATION_WINDOW_WORDS = 6
"""An English negation reaches at most this many words ahead."""

NEGATION_WINDOW_CJK = 3
"""A Chinese negation reaches at most this many characters ahead."""

PASS_MARK = 0.6
"""The one pass mark: the share of core key points an answer must earn (3 of 4, 2 of 3).

Every free-text question in the course and the mock interview passes at this mark, so a
learner never sees "good answer" from one widget and "not yet" from another."""

WRONG_CLAIM_CAP = 0.4
"""The highest score an answer that asserts a wrong claim can get (below the pass mark)."""

MAX_ANSWER_CHARS = 20_000
"""Longer answers are not scored (one line says so): an interview answer is a few
sentences, and the scan, linear in the length, must never freeze a kernel."""

ORDER_CAP = 0.4
"""The highest score of an answer that puts an ordered question's steps out of order."""

_NEGATORS = frozenset({
    "not", "no", "never", "nor", "neither", "cannot", "without", "none", "nothing",
    "dont", "doesnt", "didnt", "isnt", "wasnt", "arent", "werent", "cant", "wont",
    "shouldnt", "wouldnt", "couldnt", "hasnt", "havent", "hadnt", "neednt", "mustnt",
})
_CONTRACTED = frozenset({  # the part before n't, which the tokenizer splits off: don|t
    "don", "doesn", "didn", "isn", "wasn", "aren", "weren", "won", "can", "shouldn",
    "wouldn", "couldn", "hasn", "haven", "hadn", "needn", "mustn", "ain",
})
_NOT_A_NEGATION_AFTER = frozenset({"only", "just", "merely", "matter"})  # not only, no matter
_PAIRED = {"instead": "of", "rather": "than"}  # instead of X, rather than X
_SCOPE_ENDS = frozenset({
    "but", "however", "yet", "then", "so", "because", "since", "while", "whereas",
    "although", "though", "otherwise", "unless", "until", "if", "when", "once", "which",
    "who", "where", "instead",
    "但", "而", "然", "所", "因", "如", "否", "再", "才",
})
_COPULAS = frozenset({"is", "are", "was", "were"})  # a negated subject does not reach past
_CJK_NEGATORS = frozenset("不没无别未非勿莫")
_DISMISS_BEFORE = (  # "a waste of time to X", "the last thing I would do is X": X is dismissed
    "pointless to", "a waste of time to", "waste of time to", "unnecessary to",
    "last thing i would do", "last thing i'd do", "last thing you want", "forget about",
    "ignore", "用不着", "犯不着", "忽略", "别管", "懒得",
)  # phrases that start with a negation ("no need to", 没必要) already reach forward
_DISMISS_AFTER = (  # "X is a waste of time", "X 没必要": X is dismissed
    "waste of time", "pointless", "unnecessary", "not necessary", "not needed", "useless",
    "irrelevant", "doesn't matter", "does not matter", "don't matter", "do not matter",
    "not important", "can be ignored", "not worth it", "isn't necessary", "isn't needed",
    "is not needed", "would not help", "wouldn't help", "won't help", "does not help",
    "doesn't help", "changes nothing", "change nothing", "nothing to do with",
    "is a mistake", "is the last thing i'd do", "is the last thing i would do",
    "overkill", "rarely matters", "never matters", "is a myth",
    "没必要", "没用", "不需要", "浪费时间", "多余", "无关", "不重要", "没意义", "意义不大",
    "可以忽略", "不用管",
)
DISMISS_WINDOW_WORDS = 8
"""A dismissal ("a waste of time", 没必要) reaches at most this many words (characters)."""
_CONDITIONS = frozenset({"if", "unless", "when", "whenever", "若", "如"})
_NOT_A_CONDITION_BEFORE = frozenset("例比譬")  # 例如, 比如: for example
_CJK_NOT_NEGATIONS = (  # words that contain a negation character but negate nothing
    "不同", "不断", "不仅", "不但", "不管", "不论", "不过", "不久", "不少", "不错", "不然",
    "要不", "差不多", "不足", "无论", "无穷", "非常", "非法", "非零", "非线性", "未来",
    "区别", "分别", "特别", "类别", "级别", "识别", "告别", "性别", "个别", "别的", "别人",
    "有没有", "是不是", "要不要", "能不能", "会不会", "可不可以", "对不对", "好不好", "有无",
    "并非只", "不只", "不止",
)  # questions (有没有 NaN: whether there is NaN) and "not only" negate nothing

_TOKEN = re.compile(
    r"\d+(?:\.\d+)?(?:e[-+]?\d+)?"  # numbers: 2000, 1.0, 1e-8, 6e4
    r"|[a-z_][a-z0-9_]*"  # words and identifiers: fp16, clip_grad_norm_
    r"|[\u0370-\u03ff]"  # a Greek letter: σ
    r"|[\u3400-\u4dbf\u4e00-\u9fff]"  # one Chinese character
)
_CLAUSE_END = re.compile(r"[\n。!?;]+|\.(?=\s|$)")
_LIST_SEP = re.compile(r"[,、]")
_PART_SEP = re.compile(r"[:()（）：\[\]]")  # more places where a negation's reach ends
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_BRITISH = re.compile(r"is(e|ed|es|ing|ation|ations)$")
_DOUBLE = re.compile(r"([b-df-hj-np-tv-z])\1$")


@dataclass(frozen=True)
class KeyPoint:
    """One thing a good answer must say, with the phrases that count as saying it.

    ``synonyms`` hold English and Chinese phrases that say the point; ``hint`` is what
    the feedback tells a learner who left the point out. ``denied`` holds phrases that
    say the point only when the sentence negates them (a point about what something
    does *not* do).

    >>> KeyPoint("check the data first", ("check the data", "检查数据")).denied
    ()
    >>> point = KeyPoint("clipping does not cure NaN", ("spreads nan",), denied=("already nan",))
    >>> score_answer("Clipping cannot rescue a gradient that is already NaN.", [point]).score
    1.0
    """

    name: str
    synonyms: tuple[str, ...]
    hint: str = ""
    denied: tuple[str, ...] = ()
    bonus: bool = False


@dataclass(frozen=True)
class WrongClaim:
    """A claim a good answer must not make, the phrases that make it, and why it is wrong.

    ``example`` is a sentence that makes the claim (the tests check that it is caught).

    >>> claim = WrongClaim("PyTorch raises on 0 / 0", ("raises an error",),
    ...                    "tensor division returns inf or NaN silently")
    >>> point = KeyPoint("std is zero", ("std is 0",))
    >>> result = score_answer("The std is 0 there, so PyTorch raises an error at once.",
    ...                       [point], [claim])
    >>> result.score, result.wrong
    (0.4, ['PyTorch raises on 0 / 0'])
    >>> score_answer("The std is 0 there, and PyTorch never raises an error for it.",
    ...              [point], [claim]).score
    1.0
    """

    claim: str
    synonyms: tuple[str, ...]
    why: str = ""
    example: str = ""


@dataclass
class RubricResult:
    """The outcome of scoring one answer.

    ``present``: points credited. ``missing``: points not credited (this includes
    ``unexplained``, the points that were named but only as bare keywords, and
    ``negated``, the points whose phrases the answer only negated). ``wrong``: the wrong
    claims the answer asserted; any of them caps the score at ``WRONG_CLAIM_CAP``.

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
    negated: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    evidence: dict[str, str] = field(default_factory=dict)
    out_of_order: list[str] = field(default_factory=list)
    bonus_missing: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether the answer reaches the one pass mark (``PASS_MARK``)."""
        return self.score >= PASS_MARK - 1e-9


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
    elif w.endswith("s") and (not w.endswith(("ss", "us", "is")) or w.endswith(("pus", "lus"))):
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


def _patterns(phrases: Sequence[str]) -> list[list[str]]:
    """Stemmed token sequences for each phrase, plus a joined form of multi-word ones."""
    seen: list[list[str]] = []
    for phrase in phrases:
        raw = tokens(normalize(phrase))
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


def _clause_tokens(clause: str) -> tuple[list[str], list[bool], list[int]]:
    """Tokens of a clause; for each, whether it sits in a short list item, and its part.

    A part is a stretch between commas, colons and brackets: a negation reaches no
    further than its part.
    """
    raw: list[str] = []
    short: list[bool] = []
    part: list[int] = []
    n_parts = 0
    for item in _LIST_SEP.split(clause):
        toks = tokens(item)
        raw += toks
        short += [_weight(toks) < LIST_ITEM_WORDS] * len(toks)
        for piece in _PART_SEP.split(item):
            part += [n_parts] * len(tokens(piece))
            n_parts += 1
    return raw, short, part


def _negations(raw: list[str]) -> list[bool]:
    """For each token, whether it is (the last token of) a negation."""
    masked = [False] * len(raw)
    for word in _CJK_NOT_NEGATIONS:
        for i in range(len(raw) - len(word) + 1):
            if "".join(raw[i : i + len(word)]) == word:
                masked[i : i + len(word)] = [True] * len(word)
    out = [False] * len(raw)
    for i, t in enumerate(raw):
        nxt = raw[i + 1] if i + 1 < len(raw) else ""
        if t in _NEGATORS:
            out[i] = nxt not in _NOT_A_NEGATION_AFTER and not (
                t == "none" and i > 0 and raw[i - 1] == "reduction")  # reduction='none'
        elif t == "t" and i > 0 and raw[i - 1] in _CONTRACTED:
            out[i] = True
        elif t in _PAIRED and nxt == _PAIRED[t]:
            out[i + 1] = True
        elif t in _CJK_NEGATORS and not masked[i]:
            out[i] = True
    return out


def _dismissals(stems: list[str]) -> tuple[list, list]:
    """Spans of the dismissals in a sentence that reach forward, and those that reach back.

    "No need to check the data" and "checking the data is a waste of time" both dismiss
    the data check: a phrase inside a dismissal's reach counts as negated.
    """
    spans = ([], [])
    for side, phrases in enumerate((_DISMISS_BEFORE_P, _DISMISS_AFTER_P)):
        for pattern in phrases:
            for i in _find(stems, pattern):
                spans[side].append((i, i + len(pattern)))
    return spans


def _dismissed(raw, part, start, end, spans) -> bool:
    """Whether a dismissal reaches the phrase at ``start:end`` within its part."""
    before, after = spans
    for _, b in before:
        gap = range(b, start)
        if b <= start and start - b <= DISMISS_WINDOW_WORDS and _open(raw, part, gap, start):
            return True
    for a, _ in after:
        gap = range(end, a)
        if a >= end and a - end <= DISMISS_WINDOW_WORDS and _open(raw, part, gap, start):
            return True
    return False


def _open(raw, part, gap, start) -> bool:
    """No part boundary and no scope-ending word between a dismissal and its phrase."""
    return all(part[i] == part[start] and raw[i] not in _SCOPE_ENDS for i in gap)


def _negated(raw: list[str], part: list[int], neg: list[bool], start: int) -> bool:
    """Whether the phrase starting at ``start`` is negated.

    The nearest negation before it in the same part counts, unless a second one stands
    right before that one (a double negation: "not un-", 不是不). Two separate negations
    ("no data version and no code commit") each negate their own phrase.
    """
    words, chars = 0, 0
    for i in range(start - 1, -1, -1):
        if part[i] != part[start] or (raw[i] in _SCOPE_ENDS and not neg[i]):
            return False
        if raw[i] in _COPULAS and i + 1 < start:  # "no growth before it is bad data"
            return False
        if neg[i]:
            near = (chars <= NEGATION_WINDOW_CJK) if _is_cjk(raw[i]) else (
                words <= NEGATION_WINDOW_WORDS)
            double = any(neg[j] and part[j] == part[start] for j in range(max(0, i - 2), i))
            return near and not double
        if _is_cjk(raw[i]):
            chars += 1
        else:
            words += 1
        if words > NEGATION_WINDOW_WORDS and chars > NEGATION_WINDOW_CJK:
            return False
    return False


def _conditional(raw: list[str], part: list[int], start: int) -> bool:
    """Whether an ``if`` (如果, 若) earlier in the same part makes the phrase a condition."""
    for i in range(start - 1, -1, -1):
        if part[i] != part[start]:
            return False
        if raw[i] in _CONDITIONS and not (i > 0 and raw[i - 1] in _NOT_A_CONDITION_BEFORE):
            return True
    return False


def _matches(stems, patterns, raw, part, neg, want_negated: bool, dismiss=((), ())):
    """(start, end) of each occurrence of a pattern, negated (or dismissed) or not as wanted."""
    out = []
    for pattern in patterns:
        for i in _find(stems, pattern):
            j = i + len(pattern)
            negated = _negated(raw, part, neg, i) != _dismissed(raw, part, i, j, dismiss)
            if negated == want_negated:
                out.append((i, j))
    return out


def score_answer(
    answer: str,
    points: Sequence[KeyPoint],
    must_not: Sequence[WrongClaim] = (),
    *,
    ordered: bool = False,
) -> RubricResult:
    """Score ``answer``: the share of its core key points credited, 0..1.

    A point is credited when one of its phrasings occurs, not negated or dismissed, in a
    sentence that also carries words of its own explanation (the rules are spelled out
    in the module docstring). Bonus points (``KeyPoint.bonus``) are reported but never
    lower the score. A wrong claim of ``must_not`` that the answer asserts caps the score
    at ``WRONG_CLAIM_CAP``; with ``ordered``, core points said out of their listed order
    cap it at ``ORDER_CAP``. Empty, off-topic and keyword-list answers score 0, and so
    does an answer that is not text (never an error).

    >>> pts = [KeyPoint("check the data first", ("check the data", "检查数据"))]
    >>> score_answer("I would first check the data for NaN values.", pts).score
    1.0
    >>> score_answer("I would not check the data for NaN values.", pts).negated
    ['check the data first']
    >>> score_answer("Checking the data is a waste of time here.", pts).negated
    ['check the data first']
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
    if answer and len(answer) > MAX_ANSWER_CHARS:
        return RubricResult(0.0, [], [p.name for p in points if not p.bonus],
                            f"That is {len(answer):,} characters; an answer is a few sentences "
                            f"(at most {MAX_ANSWER_CHARS:,} characters). Shorten it and try "
                            "again.")
    said = {p.name: _patterns(p.synonyms) for p in points}
    denied = {p.name: _patterns(p.denied) for p in points}
    claims = {c.claim: _patterns(c.synonyms) for c in must_not}
    bonus = {p.name: p.bonus for p in points}
    credited: list[str] = []
    where: dict[str, tuple[int, int]] = {}  # point -> (sentence, token) where it was earned
    quotes: dict[str, str] = {}
    named: set[str] = set()
    negated: set[str] = set()
    wrong: list[str] = []
    all_context: set[str] = set()
    for n, (clause, original) in enumerate(_sentences(answer)):
        raw, short, part = _clause_tokens(clause)
        stems = [stem(t) for t in raw]
        neg = _negations(raw)
        dismiss = _dismissals(stems)
        covered: set[int] = set()
        found: list[tuple[int, str]] = []
        for point in points:
            spans = (_matches(stems, said[point.name], raw, part, neg, False, dismiss)
                     + _matches(stems, denied[point.name], raw, part, neg, True, dismiss))
            against = (_matches(stems, said[point.name], raw, part, neg, True, dismiss)
                       + _matches(stems, denied[point.name], raw, part, neg, False, dismiss))
            for a, b in spans + against:
                covered.update(range(a, b))
            if spans:
                found.append((min(a for a, _ in spans), point.name))
            elif against:
                negated.add(point.name)
        for claim, patterns in claims.items():
            asserted = [(a, b) for a, b in _matches(stems, patterns, raw, part, neg, False)
                        if not _conditional(raw, part, a)]
            if claim not in wrong and asserted:
                wrong.append(claim)
        context = {raw[i] for i in range(len(raw)) if i not in covered and not short[i]}
        all_context |= context
        budget = int(_weight(context) // CONTEXT_WORDS_PER_POINT)
        for _, at, name in sorted((bonus[name], at, name) for at, name in found):
            named.add(name)
            if name not in credited and budget > 0:
                credited.append(name)
                where[name] = (n, at)
                quotes[name] = original.strip()
                budget -= 1
    credited = sorted(credited, key=lambda name: bonus[name])  # core points first
    credited = credited[: int(_weight(all_context) // CONTEXT_WORDS_PER_POINT)]
    core = [p for p in points if not p.bonus] or list(points)
    present = [p.name for p in points if p.name in credited]
    missing = [p.name for p in core if p.name not in credited]
    bonus_missing = [p.name for p in points if p not in core and p.name not in credited]
    unexplained = [p.name for p in points if p.name in named and p.name not in credited]
    denied_only = [p.name for p in points
                   if p.name in negated and p.name not in named and p.name not in credited]
    score = sum(p.name in credited for p in core) / len(core)
    out_of_order = _out_of_order([p.name for p in core if p.name in where], where) if ordered \
        else []
    if wrong:
        score = min(score, WRONG_CLAIM_CAP)
    if out_of_order:
        score = min(score, ORDER_CAP)
    why = {c.claim: c.why for c in must_not}
    result = RubricResult(score, present, missing, "", unexplained, denied_only, wrong,
                          {k: quotes[k] for k in present}, out_of_order, bonus_missing)
    result.feedback = _feedback(answer, points, result, [(c, why[c]) for c in wrong])
    return result


def _sentences(answer: str) -> list[tuple[str, str]]:
    """Each sentence of the answer, normalised for matching and as the learner wrote it."""
    text = unicodedata.normalize("NFKC", answer or "")
    return [(normalize(c), c) for c in _CLAUSE_END.split(text) if c.strip()]


def _out_of_order(names: list[str], where: dict[str, tuple[int, int]]) -> list[str]:
    """The first pair of points (in their listed order) that the answer said the other way round.

    >>> _out_of_order(["data", "amp"], {"data": (2, 0), "amp": (0, 5)})
    ['amp', 'data']
    >>> _out_of_order(["data", "amp"], {"data": (0, 1), "amp": (0, 5)})
    []
    """
    for i, first in enumerate(names):
        for later in names[i + 1:]:
            if where[later] < where[first]:
                return [later, first]
    return []


def _feedback(
    answer: str,
    points: Sequence[KeyPoint],
    result: RubricResult,
    wrong: Sequence[tuple[str, str]] = (),
) -> str:
    """Plain-words feedback: what was covered (quoting where), what was not, and why."""
    core = [p for p in points if not p.bonus] or list(points)
    if not (answer or "").strip():
        return f"No answer yet: 0 of {len(core)} core points. Say it in full sentences."
    credited = [p.name for p in core if p.name in result.present]
    lines = [f"You covered {len(credited)} of {len(core)} core points "
             f"(a pass needs {PASS_MARK:.0%})."]
    for name in result.present:
        extra = "" if any(p.name == name for p in core) else " (bonus)"
        lines.append(f"Covered{extra}: {name}, in \"{_clip(result.evidence[name])}\"")
    hints = {p.name: p.hint for p in points}
    if wrong:
        lines.append(f"Wrong, so the score is capped at {WRONG_CLAIM_CAP:.0%}:")
        lines += [f"- {claim}" + (f": {why}" if why else "") for claim, why in wrong]
    if result.out_of_order:
        later, first = result.out_of_order
        lines.append(f"Out of order, so the score is capped at {ORDER_CAP:.0%}: "
                     f"'{later}' comes before '{first}' in your answer; the order is the point.")
    gaps = [m for m in result.missing
            if m not in result.unexplained and m not in result.negated]
    if gaps:
        lines.append("Missing:")
        lines += [f"- {m}" + (f": {hints[m]}" if hints[m] else "") for m in gaps]
    if result.bonus_missing:
        lines.append("Worth adding (bonus, never needed to pass): "
                     + "; ".join(result.bonus_missing) + ".")
    if result.unexplained:
        lines.append(
            "Named but not explained, so not counted: " + "; ".join(result.unexplained) + ". "
            f"Each point needs about {CONTEXT_WORDS_PER_POINT} words of its own explanation "
            "in the same sentence (a Chinese character counts as half a word); bare "
            "keyword lists, one keyword per line and repeated filler earn nothing."
        )
    if result.negated:
        lines.append(
            "Negated, so not counted: " + "; ".join(result.negated) + ". The answer says the "
            "opposite of these points, dismisses them, or only says what not to do."
        )
    if not result.present and not result.unexplained and not result.negated and not wrong:
        lines.append("None of the key points came up: this answer looks off-topic, or says "
                     "them in words the rules do not know. Compare with the model answer.")
    return "\n".join(lines)


def _clip(text: str, most: int = 120) -> str:
    """A quoted sentence, shortened to ``most`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 3].rstrip() + "..."


_DISMISS_BEFORE_P = _patterns(_DISMISS_BEFORE)
_DISMISS_AFTER_P = _patterns(_DISMISS_AFTER)
