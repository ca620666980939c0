"""The free-text grader judged on answers it was not written from.

Every bank question and every free-text question in the labs carries good answers and
wrong answers that helpers wrote in candidates' own words (English, Chinese with the
English terms engineers mix in, short and long) from the question alone, without sight
of the key points or the model answer. They are kept as written: the rubric is tuned to
them, never the other way round. Each good answer must pass at the one pass mark and
each wrong answer must fail.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nanlab.course.questions import _store
from nanlab.course.quiz import FreeTextQuestion
from nanlab.course.rubric import PASS_MARK, KeyPoint, normalize, score_answer, tokens
from nanlab.interview import load_bank

CJK = re.compile(r"[\u4e00-\u9fff]")


def _bank_questions():
    bank = load_bank()
    return bank + [f.question for q in bank for f in q.follow_ups if f.question]


def _lab_questions():
    return [q for _, q in _store().values() if isinstance(q, FreeTextQuestion)]


def _passes(question, text: str) -> tuple[bool, str]:
    if isinstance(question, FreeTextQuestion):
        fb = question.grade(text)
        return fb.correct, "\n".join([fb.message, *fb.details])
    result = question.score(text)
    return result.passed, result.feedback


def _qid(question) -> str:
    return getattr(question, "qid", None) or question.id


ALL = _bank_questions() + _lab_questions()
GOOD = [(q, i, a) for q in ALL for i, a in enumerate(q.good_answers)]
WRONG = [(q, i, a) for q in ALL for i, a in enumerate(q.wrong_answers)]


@pytest.mark.parametrize("question, i, answer", GOOD, ids=[f"{_qid(q)}-{i}" for q, i, _ in GOOD])
def test_every_good_answer_passes(question, i, answer):
    passed, feedback = _passes(question, answer)
    assert passed, f"{_qid(question)} good answer {i} failed:\n{answer}\n{feedback}"


@pytest.mark.parametrize("question, i, answer", WRONG,
                         ids=[f"{_qid(q)}-{i}" for q, i, _ in WRONG])
def test_every_wrong_answer_fails(question, i, answer):
    passed, feedback = _passes(question, answer)
    assert not passed, f"{_qid(question)} wrong answer {i} passed:\n{answer}\n{feedback}"


def test_every_question_has_answers_of_every_kind():
    """At least two good and two wrong answers per question; across them a quarter in
    Chinese and a quarter short, so the grader is tested on how people really answer."""
    for q in ALL:
        assert len(q.good_answers) >= 2, _qid(q)
        assert len(q.wrong_answers) >= 2, _qid(q)
    goods = [a for q in ALL for a in q.good_answers]
    chinese = [a for a in goods if len(CJK.findall(a)) > len(a) / 6]
    short = [a for a in goods if (len(a) < 90 if a in chinese else len(a.split()) < 40)]
    assert len(chinese) >= len(goods) / 4, (len(chinese), len(goods))
    assert len(short) >= len(goods) / 4, (len(short), len(goods))


def test_the_model_answer_passes():
    for q in _bank_questions():
        assert q.score(q.answer).passed, q.id


def test_one_pass_mark_everywhere():
    from nanlab.course.widgets import FreeText
    from nanlab.interview.mock import GOOD_SCORE

    assert GOOD_SCORE == PASS_MARK
    assert FreeTextQuestion("x", "?", [("a", ("a b",))]).pass_score == PASS_MARK
    import inspect

    assert inspect.signature(FreeText).parameters["pass_score"].default == PASS_MARK
    for q in _lab_questions():
        assert q.pass_score == PASS_MARK, q.qid


TOPIC_WORDS_ZH = {"数据", "跳过", "梯度", "学习率", "精度", "初始化", "监控", "回滚", "告警"}


def test_no_core_point_is_a_single_topic_word():
    """A key point is a claim: an answer that names the topic while contradicting it
    ("每个 rank 自己决定", "per-shard statistics") must not earn it. So no phrasing of a
    core point is one plain English word or a bare Chinese topic word; single tokens
    with a digit or an underscore (65504, 1e-8, clip_grad_norm_) are specific enough."""
    offenders = []
    for q in ALL:
        for p in q.key_points:
            if isinstance(p, KeyPoint) and p.bonus:
                continue
            for phrase in (p.synonyms if isinstance(p, KeyPoint) else p[1]):
                toks = tokens(normalize(phrase))
                plain_word = len(toks) == 1 and not re.search(r"[\d_]", toks[0])
                if plain_word or phrase.strip() in TOPIC_WORDS_ZH:
                    offenders.append(f"{_qid(q)}: {p.name if isinstance(p, KeyPoint) else p[0]}"
                                     f": {phrase!r}")
    assert not offenders, "\n".join(offenders)


# ------------------------------------------------------------------ the rules themselves

ROLL_BACK = [KeyPoint("roll back to a good checkpoint",
                      ("roll back", "reload the last good checkpoint", "回滚到"))]


@pytest.mark.parametrize("answer", [
    "The last thing I would do is roll back; I would keep training and watch it.",
    "Rolling back is a waste of time, the run usually recovers by itself.",
    "Honestly a roll back is pointless here because Adam recovers.",
    "回滚到上一个 checkpoint 没必要，继续训练就行。",
    "不用回滚到之前的 checkpoint，直接接着跑。",
])
def test_dismissing_a_step_is_not_saying_it(answer):
    result = score_answer(answer, ROLL_BACK)
    assert result.score == 0.0 and result.negated, (answer, result)


@pytest.mark.parametrize("answer", [
    "I would roll back to the last good checkpoint and replay the bad step.",
    "Blind tweaking is a waste of time: I roll back to the last good checkpoint first.",
    "先回滚到最近的正常 checkpoint，再复现那一步。",
])
def test_saying_it_plainly_still_counts(answer):
    assert score_answer(answer, ROLL_BACK).score == 1.0, answer


SOP = [KeyPoint("data first", ("check the data", "检查数据")),
       KeyPoint("AMP off", ("amp off", "关掉amp", "关闭混合精度")),
       KeyPoint("LR / 10", ("lower the lr", "降低学习率"))]


def test_order_is_scored_where_order_is_the_point():
    right = ("First I check the data of the failing batch. Then I turn AMP off and rerun "
             "in fp32. Then I lower the LR by ten from a good checkpoint.")
    data_last = ("First I turn AMP off and rerun in fp32. Then I lower the LR by ten from a "
                 "good checkpoint. Last I would check the data of the failing batch.")
    assert score_answer(right, SOP, ordered=True).passed
    result = score_answer(data_last, SOP, ordered=True)
    assert not result.passed and result.out_of_order == ["AMP off", "data first"]
    assert "Out of order" in result.feedback
    assert score_answer(data_last, SOP).passed  # order only counts where it is the point


def test_feedback_quotes_the_sentence_that_earned_each_point():
    answer = "It trained fine for a while. Then I would roll back to the last good state."
    result = score_answer(answer, ROLL_BACK)
    assert result.evidence == {"roll back to a good checkpoint":
                               "Then I would roll back to the last good state"}
    assert '"Then I would roll back to the last good state"' in result.feedback


@pytest.mark.parametrize(("phrase", "right", "flipped"), [
    ("lr / 10", "Retry with lr/10 first.", "Retry with lr * 10 first."),
    ("inf / inf", "It is inf/inf, which is NaN.", "It is inf * inf, which is NaN."),
    ("max is -inf", "The row's max is -inf.", "The row's max is inf."),
    ("2^-24", "fp16's smallest step is 2 ** -24.", "fp16's smallest step is 2^24."),
    ("0 * inf", "0×inf gives NaN.", "0 / inf gives NaN."),
])
def test_an_operator_or_a_sign_is_part_of_the_claim(phrase, right, flipped):
    """lr / 10 and lr * 10 are opposite advice, -inf and inf opposite fills: the tokenizer
    keeps operators and a sign, so the flipped claim earns nothing (both met the same
    tokens once, when operators were dropped)."""
    points = [KeyPoint("the claim", (phrase,))]
    assert score_answer(right, points).passed, right
    assert not score_answer(flipped, points).passed, flipped


def test_bonus_points_never_fail_an_answer():
    points = [KeyPoint("core", ("roll back",)), KeyPoint("extra", ("replay the step",),
                                                         bonus=True)]
    result = score_answer("I would roll back to the last good checkpoint now.", points)
    assert result.score == 1.0 and result.passed and result.bonus_missing == ["extra"]
    assert "bonus, never needed to pass" in result.feedback


def test_self_assessment_records_beside_the_grader(tmp_path, monkeypatch):
    from nanlab.course import progress
    from nanlab.course.widgets import FreeText

    monkeypatch.setenv("NANLAB_PROGRESS", str(tmp_path / "progress.json"))
    widget = FreeText("sa-demo", "Why roll back?",
                      [KeyPoint("roll back", ("roll back",)),
                       KeyPoint("replay", ("replay the step",))], lab="10_interview")
    widget.answer.value = "I would reload the weights from before the spike and rerun it."
    widget.check_button.click()
    assert not widget.last_feedback.correct
    panel = widget.assessment
    assert panel.widget.layout.display != "none"
    assert [b.value for b in panel.boxes] == [False, False]
    for box in panel.boxes:
        box.value = True
    panel.record_button.click()
    assert "you ticked 2 of 2" in panel.verdict.value
    entry = progress.load()["labs"]["10_interview"]["sa-demo:self"]
    assert entry["correct"] and entry["kind"] == "self-assessment"


# ------------------------------------------------------- the bar, on a held-out set

HELDOUT = Path(__file__).parent / "data" / "grader_heldout.json"


def test_the_bar_on_answers_the_rubric_was_never_tuned_on():
    """A second set of blind answers (one good and one wrong per question, 20 with a
    second good one), written by a helper who saw neither the key points nor the other
    answers, and never used to tune a phrasing: the issue's bar is that at least 90 % of
    correct answers pass and at least 95 % of wrong ones fail. Tune on the questions'
    own ``good_answers`` / ``wrong_answers``, never on this file, or it stops measuring."""
    answers = json.loads(HELDOUT.read_text(encoding="utf-8"))
    by_id = {_qid(q): q for q in ALL}
    assert set(answers) <= set(by_id)
    good = [_passes(by_id[qid], a)[0] for qid, sets in answers.items() for a in sets["good"]]
    wrong = [not _passes(by_id[qid], a)[0] for qid, sets in answers.items()
             for a in sets["wrong"]]
    assert len(good) >= 90 and len(wrong) >= 70
    assert sum(good) / len(good) >= 0.90, f"{sum(good)} of {len(good)} good answers pass"
    assert sum(wrong) / len(wrong) >= 0.95, f"{sum(wrong)} of {len(wrong)} wrong answers fail"


def test_a_huge_answer_is_refused_in_one_line_not_scanned():
    """The scan is linear (about 27 s for 1 MB on a 2-core machine before the cap), so an
    answer over MAX_ANSWER_CHARS is answered at once with one line, never scored."""
    from nanlab.course.rubric import MAX_ANSWER_CHARS
    from nanlab.interview import get_question

    q = get_question("sop-order")
    huge = (q.answer + " ") * (1_000_000 // len(q.answer))
    result = q.score(huge)
    assert result.score == 0.0 and not result.passed
    assert len(result.feedback.splitlines()) == 1 and f"{MAX_ANSWER_CHARS:,}" in result.feedback
    assert q.score(q.answer).passed


def test_skipping_the_bad_batch_is_not_inspecting_it():
    """The SOP's first step is a claim (inspect the failing batch), not the topic: an
    answer that throws the batch away names it without checking it."""
    from nanlab.interview import get_question

    q = get_question("sop-order")
    skip = q.score("I would skip the bad batch and carry on from the last good checkpoint.")
    assert "data first" not in skip.present
    look = q.score("First I inspect the bad batch for NaN inputs and out-of-range labels.")
    assert "data first" in look.present
