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
    A Chinese synonym also matches with the English term engineers mix in for one of its
    Chinese terms (``关掉混合精度`` matches ``关掉mixed precision`` and ``关掉AMP``;
    ``学习率降`` matches ``learning rate降``; the table is ``wording._CODE_SWITCH``). A
    filler adverb (``always``, ``usually``, ``just``, ...) may stand between the words
    of a synonym: ``step one is the input`` matches "step one is always the input".

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
    negate "bad data"); two negations side by side cancel. A negation inside an ``if``
    clause ("if that isn't enough", 如果还不行) is the condition's own: it does not reach
    past a subject (I, we, 我, 就) or more than ``CONDITION_NEGATION_WORDS`` words, so
    "if that isn't enough I study per-layer gradient norms" says the study. A dismissal
    counts as a negation too, before the phrase ("the last thing I would do is ...", "a
    waste of time to ...", 忽略) or after it ("... is a waste of time", "... is
    pointless", 没必要, 多余), within ``DISMISS_WINDOW_WORDS``. A key point about what
    something does *not* do lists its phrases under ``denied``: they count only when
    negated ("clipping does not cure a gradient that is *already NaN*").

Order
    ``score_answer(..., ordered=True)`` is for questions whose steps are the point (the
    SOP): core points said out of their listed order cap the score at ``ORDER_CAP``, and
    so does leaving out the first step while saying a later one (the later step is then
    what the answer does first).

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

from collections.abc import Sequence
from dataclasses import dataclass, field

from nanlab.course.wording import (  # noqa: F401  (normalize, stem, tokens, clauses: the API)
    CJK_WORD_WEIGHT,
    CONDITION_NEGATION_WORDS,
    LIST_ITEM_WORDS,
    NEGATION_WINDOW_CJK,
    NEGATION_WINDOW_WORDS,
    _clause_tokens,
    _conditional,
    _dismissals,
    _matches,
    _negations,
    _patterns,
    _sentences,
    _weight,
    clauses,
    normalize,
    stem,
    tokens,
)

CONTEXT_WORDS_PER_POINT = 2
"""Distinct words of its own explanation a sentence needs for each key point it earns."""

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
    out_of_order = _out_of_order([p.name for p in core], where) if ordered else []
    if wrong:
        score = min(score, WRONG_CLAIM_CAP)
    if out_of_order:
        score = min(score, ORDER_CAP)
    why = {c.claim: c.why for c in must_not}
    result = RubricResult(score, present, missing, "", unexplained, denied_only, wrong,
                          {k: quotes[k] for k in present}, out_of_order, bonus_missing)
    result.feedback = _feedback(answer, points, result, [(c, why[c]) for c in wrong])
    return result


def _out_of_order(steps: list[str], where: dict[str, tuple[int, int]]) -> list[str]:
    """The first pair of steps (in their listed order) that the answer said the other way round.

    ``where`` holds the credited steps. Leaving out the first step while crediting a later
    one is out of order too: the later step is then what the answer does first.

    >>> _out_of_order(["data", "amp"], {"data": (2, 0), "amp": (0, 5)})
    ['amp', 'data']
    >>> _out_of_order(["data", "amp"], {"data": (0, 1), "amp": (0, 5)})
    []
    >>> _out_of_order(["data", "amp", "lr"], {"amp": (0, 5), "lr": (1, 0)})
    ['amp', 'data']
    """
    names = [name for name in steps if name in where]
    if names and names[0] != steps[0]:
        return [min((where[name], name) for name in names)[1], steps[0]]
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
        said = "comes before" if first in result.present else "comes first, without"
        lines.append(f"Out of order, so the score is capped at {ORDER_CAP:.0%}: "
                     f"'{later}' {said} '{first}' in your answer; the order is the point.")
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
