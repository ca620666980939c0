"""How the rubric reads an answer: normalising, tokens, stems, sentences, negation.

The rules themselves (what earns a key point, the caps, the feedback) are in
``nanlab.course.rubric``, whose module docstring spells out what is matched and how a
negation or a dismissal reaches a phrase; this module is the machinery that reads the
words. Nothing here evaluates or runs the learner's text.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

LIST_ITEM_WORDS = 3
"""A comma- or 、-separated item under this many words is a keyword, not an explanation."""

CJK_WORD_WEIGHT = 0.5
"""One Chinese character counts as this many words of context."""

NEGATION_WINDOW_WORDS = 6
"""An English negation reaches at most this many words ahead."""

NEGATION_WINDOW_CJK = 3
"""A Chinese negation reaches at most this many characters ahead."""

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
CONDITION_NEGATION_WORDS = 2
"""A negation inside an ``if`` clause ("if that isn't enough") reaches at most this many
words: what follows is the main clause, which the condition does not negate."""
_CLAUSE_STARTS = frozenset({"i", "we", "you", "they", "he", "she", "我", "就"})
"""A subject (or 就) after a conditional negation starts the main clause: "if that isn't
enough I study ...", 如果还不行就看 ..."""
_FILLERS = frozenset({
    "always", "usually", "typically", "normally", "generally", "simply", "just", "really",
    "actually", "definitely", "also", "quickly", "carefully",
})
"""Adverbs that may stand between the words of a phrase: "step one is always the input"
says "step one is the input". Never the first word of a match."""
_CODE_SWITCH = (  # a Chinese phrase also matches with the English term engineers mix in
    ("梯度范数", ("gradient norm", "grad norm")),
    ("混合精度", ("mixed precision", "amp")),
    ("学习率", ("learning rate", "lr")),
    ("初始化", ("init", "initialization")),
    ("检查点", ("checkpoint",)),
    ("梯度", ("gradient", "grad")),
    ("数据", ("data",)),
    ("批次", ("batch",)),
    ("标签", ("label",)),
)
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
    r"|[/*^<>]"  # operators: lr / 10 is not lr * 10, inf / inf not inf * inf
    r"|(?<![a-z0-9_.)\]])-(?=\s*(?:\d|inf))"  # a sign: -inf is not inf, -100 not 100
    r"|[\u0370-\u03ff]"  # a Greek letter: σ
    r"|[\u3400-\u4dbf\u4e00-\u9fff]"  # one Chinese character
)
_CLAUSE_END = re.compile(r"[\n。!?;]+|\.(?=\s|$)")
_LIST_SEP = re.compile(r"[,、]")
_PART_SEP = re.compile(r"[:()（）：\[\]]")  # more places where a negation's reach ends
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_BRITISH = re.compile(r"is(e|ed|es|ing|ation|ations)$")
_DOUBLE = re.compile(r"([b-df-hj-np-tv-z])\1$")

def normalize(text: str) -> str:
    """Fold width and case, drop thousands separators; why: compare like with like.

    >>> normalize("ＦＰ16 max is 65,504！")
    'fp16 max is 65504!'
    """
    text = unicodedata.normalize("NFKC", text or "").lower()
    text = text.replace("**", "^").replace("×", "*").replace("÷", "/")
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
    >>> tokens("lr / 10, not lr*10; fill -inf, 2^-24")
    ['lr', '/', '10', 'not', 'lr', '*', '10', 'fill', '-', 'inf', '2', '^', '-', '24']
    """
    return _TOKEN.findall(text)


def clauses(text: str) -> list[str]:
    """Cut normalised text at sentence ends and line breaks (not at commas).

    >>> clauses("check the data. then turn amp off;\\n1.0 stays")
    ['check the data', ' then turn amp off', '1.0 stays']
    """
    return [c for c in _CLAUSE_END.split(text) if c.strip()]


def _sentences(answer: str) -> list[tuple[str, str]]:
    """Each sentence of the answer, normalised for matching and as the learner wrote it."""
    text = unicodedata.normalize("NFKC", answer or "")
    return [(normalize(c), c) for c in _CLAUSE_END.split(text) if c.strip()]


def _is_cjk(token: str) -> bool:
    return len(token) == 1 and ("\u3400" <= token <= "\u4dbf" or "\u4e00" <= token <= "\u9fff")


def _code_switched(phrase: str) -> list[str]:
    """The phrase, plus its forms with Chinese terms said in English (``_CODE_SWITCH``).

    >>> _code_switched("关掉混合精度")
    ['关掉混合精度', '关掉 mixed precision', '关掉 amp']
    >>> _code_switched("检查点")
    ['检查点']
    """
    forms = [phrase]
    for zh, english in _CODE_SWITCH:
        forms += [f.replace(zh, f" {en} ").strip() for f in forms if zh in f for en in english]
    # a bare term (检查点) would become one English word (checkpoint): a topic, not a claim
    return [f for f in forms if f is phrase or any(_is_cjk(c) for c in f)]


def _patterns(phrases: Sequence[str]) -> list[list[str]]:
    """Stemmed token sequences for each phrase, plus a joined form of multi-word ones."""
    seen: list[list[str]] = []
    for phrase in (form for text in phrases for form in _code_switched(text)):
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


def _find(seq: list[str], pattern: list[str]) -> list[tuple[int, int]]:
    """(start, end) of each place where ``pattern`` occurs in ``seq``.

    A filler adverb (``_FILLERS``) may stand between two of its words.

    >>> _find(["step", "one", "is", "alway", "the", "input"], ["step", "one", "is", "the"])
    [(0, 5)]
    """
    out = []
    for i in range(len(seq) - len(pattern) + 1):
        if seq[i] != pattern[0]:
            continue
        k, m = i + 1, 1
        while m < len(pattern) and k < len(seq):
            if seq[k] == pattern[m]:
                m += 1
            elif seq[k] not in _FILLER_STEMS:
                break
            k += 1
        if m == len(pattern):
            out.append((i, k))
    return out


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
            spans[side].extend(_find(stems, pattern))
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
            return near and not double and not _condition_ends(raw, part, i, start)
        if _is_cjk(raw[i]):
            chars += 1
        else:
            words += 1
        if words > NEGATION_WINDOW_WORDS and chars > NEGATION_WINDOW_CJK:
            return False
    return False


def _condition_ends(raw: list[str], part: list[int], at: int, start: int) -> bool:
    """Whether the negation at ``at`` sits in an ``if`` clause that ends before ``start``.

    "If that isn't enough I study per-layer gradient norms": the negation belongs to the
    condition, whose predicate is a word or two long; a subject (or 就) or more than
    ``CONDITION_NEGATION_WORDS`` words later, the main clause has begun, un-negated.
    """
    if not _conditional(raw, part, at, reach=5):
        return False
    between = raw[at + 1 : start]
    return _weight(between) > CONDITION_NEGATION_WORDS or any(
        t in _CLAUSE_STARTS for t in between)


def _conditional(raw: list[str], part: list[int], start: int, reach: int = 0) -> bool:
    """Whether an ``if`` (如果, 若) earlier in the same part makes the phrase a condition.

    With ``reach``, the ``if`` must stand at most that many tokens before ``start``.
    """
    for i in range(start - 1, max(-1, start - 1 - reach) if reach else -1, -1):
        if part[i] != part[start]:
            return False
        if raw[i] in _CONDITIONS and not (i > 0 and raw[i - 1] in _NOT_A_CONDITION_BEFORE):
            return True
    return False


def _matches(stems, patterns, raw, part, neg, want_negated: bool, dismiss=((), ())):
    """(start, end) of each occurrence of a pattern, negated (or dismissed) or not as wanted."""
    out = []
    for pattern in patterns:
        for i, j in _find(stems, pattern):
            negated = _negated(raw, part, neg, i) != _dismissed(raw, part, i, j, dismiss)
            if negated == want_negated:
                out.append((i, j))
    return out



_FILLER_STEMS = frozenset(stem(w) for w in _FILLERS)
_DISMISS_BEFORE_P = _patterns(_DISMISS_BEFORE)
_DISMISS_AFTER_P = _patterns(_DISMISS_AFTER)
