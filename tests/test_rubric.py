"""The rubric: matching, the anti-stuffing rule, and realistic answers in English and Chinese."""

from __future__ import annotations

import dataclasses

import pytest

from nanlab.course.rubric import (
    CONTEXT_WORDS_PER_POINT,
    KeyPoint,
    RubricResult,
    normalize,
    score_answer,
    stem,
)

# The rubric of "Your loss just became NaN. What do you do first?" (bank id first-thing),
# copied here so these tests do not depend on the bank's wording.
FIRST = [
    KeyPoint(
        "stop and keep the evidence",
        ("stop the run", "keep the evidence", "snapshot", "停止训练", "保存日志", "快照"),
    ),
    KeyPoint("no blind tweaking", ("不要直接改",), denied=("blindly", "blind", "盲目")),
    KeyPoint("find the first bad step", ("first step", "first nan", "第一次出现", "首个")),
    KeyPoint(
        "roll back to the last good checkpoint",
        ("roll back", "rollback", "last good checkpoint", "回滚", "检查点"),
        hint="after a NaN the weights are unusable",
    ),
    KeyPoint(
        "restart at LR / 10", ("divided by 10", "lr / 10", "lower the lr", "十分之一", "降低学习率")
    ),
    KeyPoint("then AMP off", ("turn amp off", "amp off", "disable amp", "关闭混合精度")),
]

GOOD_EN = (
    "The first thing I do is stop the run so it does not keep training on garbage, and I "
    "save the logs and a snapshot of the weights as evidence. I don't start changing "
    "hyperparameters blindly. Next I look through the loss log to find the first step where "
    "the loss or grad norm went non-finite. Then I roll back to the last good checkpoint "
    "before that step, since after a NaN the weights and Adam state are useless, and restart "
    "with the learning rate divided by 10 to see if it comes back. If it still appears, I "
    "turn AMP off and rerun, and after that go through data, gradients and the model one at "
    "a time."
)
GOOD_ZH = (
    "首先停止训练，保存日志和当前模型的快照，不要盲目调参。然后在日志里找到第一次出现NaN的step。"
    "接着回滚到这个step之前最近的正常checkpoint，因为NaN之后参数和优化器状态都已经坏了。"
    "用十分之一的学习率重新启动，看NaN是否复现；如果还是出现，就关闭混合精度再试，"
    "之后按数据、梯度、模型的顺序逐项排查。"
)
GOOD_MIXED = (
    "我会先 stop the run，把日志和模型快照都保存下来作为证据。不要 blindly 改超参数。"
    "在loss日志里找到 first NaN 出现的那个step。然后 roll back 到之前最后一个正常的checkpoint，"
    "用 LR / 10 重新训练看看是否复现。如果还有问题，再 turn AMP off 用fp32跑一遍确认。"
)
PARTIAL_EN = (
    "I would roll back to the last checkpoint that was still fine and restart training from "
    "there with a smaller learning rate, maybe lower the LR by ten times and watch it."
)
PARTIAL_ZH = "我会先回滚到上一个正常的检查点，然后把学习率调小一点重新训练，看看还会不会出问题。"
OFF_TOPIC_EN = (
    "I really enjoy hiking at the weekend, and at my last job I led a team of five frontend "
    "engineers building a React dashboard for the sales department."
)
OFF_TOPIC_ZH = (
    "我周末喜欢去爬山，上一份工作带领五个人的前端团队，用React给销售部门做了一个数据看板。"
)
STUFFED_COMMAS = (
    "stop the run, snapshot, blindly, first step, roll back, last good checkpoint, lr / 10, "
    "amp off, isfinite, gradient clipping, warmup, GradScaler"
)
STUFFED_LINES = "stop the run\nsnapshot\nblindly\nfirst nan\nrollback\nlr / 10\namp off"
STUFFED_ZH = (
    "停止训练、快照、盲目、第一次出现、回滚、检查点、十分之一、关闭混合精度、梯度裁剪、学习率预热"
)
REPEATED_FILLER = (
    "Stop the run is what I do. Snapshot is what I do. Blindly is what I do. First NaN is "
    "what I do. Rollback is what I do. LR / 10 is what I do. AMP off is what I do."
)


def one(*synonyms: str) -> list[KeyPoint]:
    return [KeyPoint("point", synonyms)]


# ------------------------------------------------------------------------ the interface


def test_interface_other_modules_rely_on():
    point = KeyPoint("name", ("a", "b"))
    assert point.hint == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.name = "other"  # type: ignore[misc]
    result = score_answer("some answer", [point])
    assert isinstance(result, RubricResult)
    assert {"score", "present", "missing", "feedback"} <= {
        f.name for f in dataclasses.fields(result)
    }
    assert 0.0 <= result.score <= 1.0



# ------------------------------------------------------------------------------ matching


def test_case_width_and_punctuation_are_normalised():
    assert normalize("ＧｒａｄＳｃａｌｅｒ，ＦＰ１６！") == "gradscaler,fp16!"
    sentence = "we kept the {} enabled for the whole run on every node"
    for written in ("GRADSCALER", "ＧｒａｄＳｃａｌｅｒ", "GradScaler"):
        assert score_answer(sentence.format(written), one("gradscaler")).score == 1.0


def test_thousands_separator_and_numbers():
    pts = one("65504")
    assert score_answer("The largest fp16 value is 65,504 which is small.", pts).score == 1.0
    assert score_answer("The largest fp16 value is 65504 which is small.", pts).score == 1.0
    assert score_answer("The largest fp16 value is 6550 which is wrong.", pts).score == 0.0


def test_plurals_and_simple_stems():
    assert stem("checkpoints") == stem("checkpoint")
    assert stem("clipping") == stem("clipped") == stem("clip")
    assert stem("batches") == stem("batch")
    assert stem("normalised") == stem("normalized") == stem("normalize")
    text = "we restored the model from one of the saved {} after that"
    for written in ("checkpoint", "checkpoints", "Checkpoints"):
        assert score_answer(text.format(written), one("checkpoint")).score == 1.0


def test_multiword_synonym_matches_joined_and_hyphenated():
    pts = one("warm up")
    for written in ("warm up", "warmup", "warm-up", "Warm-Up"):
        answer = f"I added a linear {written} over the first thousand steps of training."
        assert score_answer(answer, pts).score == 1.0, written


def test_whole_words_only():
    assert score_answer("the nanlab package runs on the cpu here", one("nan")).score == 0.0
    assert score_answer("we saw a solar eclipse during the run", one("clip")).score == 0.0


def test_chinese_is_matched_as_substring_ignoring_spaces():
    pts = one("梯度裁剪")
    assert score_answer("训练时我们加了梯度裁剪之后就稳定多了", pts).score == 1.0
    assert score_answer("训练时我们加了梯度 裁剪之后就稳定多了", pts).score == 1.0
    assert score_answer("训练时我们加了梯度累积之后就稳定多了", pts).score == 0.0


def test_mixed_language_terms():
    pts = one("fp16溢出")
    assert score_answer("后来确认是 FP16 溢出导致的，激活值超过了上限", pts).score == 1.0


# ------------------------------------------------------------------ the anti-stuffing rule


def test_a_point_needs_two_context_words_in_its_sentence():
    assert CONTEXT_WORDS_PER_POINT == 2
    pts = one("gradient clipping")
    assert score_answer("gradient clipping", pts).score == 0.0
    assert score_answer("use gradient clipping", pts).score == 0.0  # 1 context word
    assert score_answer("we use gradient clipping", pts).score == 1.0  # 2


def test_a_chinese_character_counts_half_a_word():
    pts = one("梯度裁剪")
    assert score_answer("加梯度裁剪", pts).score == 0.0  # 1 character: 0.5 words
    assert score_answer("我们加梯度裁剪", pts).score == 0.0  # 3 characters: 1.5 words
    assert score_answer("我们都加梯度裁剪", pts).score == 1.0  # 4 characters: 2 words


def test_a_sentence_shares_its_context_between_points():
    pts = [KeyPoint("a", ("warm up the lr",)), KeyPoint("b", ("gradient clipping",))]
    result = score_answer("we warm up the lr and gradient clipping", pts)
    assert result.present == ["a"]  # 3 context words pay for one point only
    assert result.unexplained == ["b"]
    longer = "we warm up the lr and gradient clipping in every run"
    assert score_answer(longer, pts).score == 1.0


def test_comma_list_newline_list_and_chinese_list_earn_nothing():
    for stuffed in (STUFFED_COMMAS, STUFFED_LINES, STUFFED_ZH):
        result = score_answer(stuffed, FIRST)
        assert result.score <= 1 / 6 and not result.passed, stuffed
        assert len(result.unexplained) >= 4
        assert "Named but not explained" in result.feedback
        assert "keyword lists" in result.feedback


def test_repeating_the_same_filler_does_not_buy_points():
    result = score_answer(REPEATED_FILLER, FIRST)
    assert result.score <= 2 / 6


def test_a_list_plus_one_real_sentence_credits_only_the_sentence():
    answer = STUFFED_LINES + "\nThen I restart with the learning rate divided by 10 from there."
    result = score_answer(answer, FIRST)
    assert result.present == ["restart at LR / 10"]


# ---------------------------------------------------------------------- realistic answers


@pytest.mark.parametrize("answer", [GOOD_EN, GOOD_ZH], ids=["english", "chinese"])
def test_good_answers_score_high(answer):
    result = score_answer(answer, FIRST)
    assert result.score == 1.0
    assert result.missing == []
    assert "You covered 6 of 6 core points" in result.feedback


def test_mixed_language_answer_scores_high():
    assert score_answer(GOOD_MIXED, FIRST).score >= 0.8


@pytest.mark.parametrize(
    "answer, expected",
    [
        (PARTIAL_EN, ["roll back to the last good checkpoint", "restart at LR / 10"]),
        (PARTIAL_ZH, ["roll back to the last good checkpoint"]),
    ],
    ids=["english", "chinese"],
)
def test_partial_answers_score_partially(answer, expected):
    result = score_answer(answer, FIRST)
    assert result.present == expected
    assert 0.1 < result.score < 0.5
    assert "then AMP off" in result.missing


@pytest.mark.parametrize("answer", ["", "   \n ", OFF_TOPIC_EN, OFF_TOPIC_ZH, "不知道。", "idk"])
def test_empty_and_off_topic_answers_score_zero(answer):
    result = score_answer(answer, FIRST)
    assert result.score == 0.0
    assert result.present == []
    assert len(result.missing) == len(FIRST)


def test_feedback_names_present_and_missing_points_in_plain_words():
    result = score_answer(PARTIAL_EN, FIRST)
    assert "You covered 2 of 6 core points (a pass needs 60%)." in result.feedback
    assert "Covered: roll back to the last good checkpoint, in" in result.feedback
    assert "Covered: restart at LR / 10, in" in result.feedback
    assert "- then AMP off" in result.feedback
    assert "- find the first bad step" in result.feedback
    empty = score_answer("", FIRST)
    assert "No answer yet" in empty.feedback
    off = score_answer(OFF_TOPIC_EN, FIRST)
    assert "off-topic" in off.feedback


def test_hints_appear_beside_missing_points():
    result = score_answer("I would stop the run and keep every log file for later.", FIRST)
    assert "roll back to the last good checkpoint: after a NaN the weights are unusable" in (
        result.feedback
    )


def test_no_points_gives_zero_not_an_error():
    result = score_answer("anything at all here", [])
    assert result.score == 0.0
    assert "no key points" in result.feedback


# ------------------------------------------------------------- negation and wrong claims


def test_the_bank_answer_negated_sentence_by_sentence_fails():
    """The SOP answer turned into its opposite, sentence by sentence, must not pass."""
    from nanlab.interview import get_question

    negated = (
        "I would not stop the run and I would not keep the evidence: no logs, no snapshot. "
        "Then I would tweak hyperparameters blindly. I would not look for the first step "
        "where the loss went non-finite. I would never roll back to the last good checkpoint. "
        "I would not check the data of the failing batch, and I would not turn AMP off."
    )
    result = get_question("first-thing").score(negated)
    assert result.score < 0.6, result.feedback
    assert "roll back to the last good checkpoint" in result.negated


def test_a_wrong_zero_std_answer_is_capped():
    from nanlab.interview import get_question

    wrong = ("The std is 0 for a constant column, but PyTorch raises an error on a division "
             "by zero, so the run stops loudly; I would add an eps and assert isfinite anyway "
             "and compute global statistics over the whole training set.")
    result = get_question("data-zero-std").score(wrong)
    assert result.score <= 0.4 and result.wrong, result.feedback


@pytest.mark.parametrize("answer, credited", [
    ("I would roll back to the last good checkpoint before the bad step.", True),
    ("I would not roll back to the last good checkpoint before the bad step.", False),
    ("I would never, ever do anything but roll back to the last good checkpoint.", True),
    ("Instead of a roll back to the last good checkpoint, I would keep training.", False),
    ("It is not only the data: roll back to the last good checkpoint first.", True),
    ("我不会盲目调参,先回滚到最近的检查点再排查。", True),
    ("我不回滚到检查点,直接继续训练下去。", False),
])
def test_negation_in_english_and_chinese(answer, credited):
    point = KeyPoint("roll back", ("roll back", "回滚"))
    assert (score_answer(answer, [point]).score == 1.0) is credited, answer


# ------------------------------------------------- every bank question fails wrong answers


def _bank_questions():
    """Every question of the shipped bank, its inline follow-ups included."""
    from nanlab.interview import load_bank

    bank = load_bank()
    return bank + [f.question for q in bank for f in q.follow_ups if f.question]


@pytest.mark.parametrize("question", _bank_questions(), ids=lambda q: q.id)
def test_every_bank_question_fails_its_wrong_answers(question):
    """Each question ships whole wrong answers (a plausible one built from its common
    mistakes, its own answer negated sentence by sentence, and candidates' wrong answers
    written blind): each fails and the feedback names what was wrong, while the bank's
    answer still earns full marks."""
    assert question.score(question.answer).score == 1.0, question.id
    assert len(question.wrong_answers) >= 2, f"{question.id}: needs at least two wrong answers"
    for wrong in question.wrong_answers:
        result = question.score(wrong)
        assert not result.passed, (question.id, result.score, result.present, wrong)
        named = result.wrong + result.negated + result.missing
        assert named, (question.id, wrong)
        for claim in result.wrong:
            assert claim in result.feedback
        if result.wrong:
            assert "Wrong, so the score is capped" in result.feedback
        elif result.negated:
            assert "Negated, so not counted" in result.feedback
        else:
            assert "Missing:" in result.feedback or "Named but not explained" in result.feedback


def test_chinese_wrong_answers_are_caught_too():
    """Chinese synonyms of the wrong claims work: Chinese wrong answers in the bank are
    capped by a wrong claim, not only failed for missing points."""
    import re

    chinese = [(q, w) for q in _bank_questions() for w in q.wrong_answers
               if len(re.findall(r"[\u4e00-\u9fff]", w)) > len(w) / 3]
    caught = [(q.id, w) for q, w in chinese if q.score(w).wrong]
    assert len(caught) >= 15, caught


@pytest.mark.parametrize("answer, asserted", [
    ("I clip before unscale_ and then call scaler.step.", True),
    ("When the loss is NaN, I clip before unscale_ and step.", True),
    ("If you clip before unscale_, max_norm means nothing, so unscale first.", False),
    ("如果先裁剪再unscale，阈值就没有意义。", False),
    ("例如先裁剪再unscale也可以。", True),  # 例如 is "for example", not a condition
])
def test_a_wrong_claim_inside_a_condition_is_not_asserted(answer, asserted):
    """Warning against a mistake ("if you do X, ...") is not making it."""
    from nanlab.course.rubric import WrongClaim

    claim = WrongClaim("clip before unscale_", ("clip before unscale_", "先裁剪再unscale"))
    point = KeyPoint("unscale first", ("unscale",))
    assert bool(score_answer(answer, [point], [claim]).wrong) is asserted, answer


@pytest.mark.parametrize("qid, answer", [
    ("grad-accum-gradscaler", "If step() and update() run after every micro-batch, the optimizer "
                              "steps on partial sums and the scale changes mid-accumulation."),
    ("token-id-beyond-vocab", "On one device PyTorch always raises an IndexError, but Megatron's "
                              "vocab-parallel layers mask the id silently."),
    ("adam-b2-quiet-layer", "A larger b2 makes v slower to catch up, so the overshoot gets worse; "
                            "lower b2 instead."),
    ("opt-bloom-incidents", "The often quoted 2.5 to 1.0 clipping story comes from abandoned "
                            "earlier runs; the paper clips at 1.0 and then 0.3."),
    ("grad-accum-mean-of-means", "The two are equivalent only when every micro-batch has the "
                                 "same number of tokens."),
    ("amp-api", "If you clip before unscale_, the threshold is applied to scaled gradients."),
])
def test_describing_a_mistake_is_not_making_it(qid, answer):
    """Good answers name the mistake they avoid; the wrong claims must not fire on them."""
    from nanlab.interview import get_question

    assert get_question(qid).score(answer).wrong == [], answer


@pytest.mark.parametrize("qid, answer", [
    ("grad-accum-all-masked",
     "标签全是-100，也就是ignore_index，这个micro-batch没有有效token，"
     "用mean归约时就是0 / 0得到NaN。"
     "梯度累积是求和，一个micro-batch的NaN会污染整个优化器步，其他micro-batch没法稀释。"
     "用fp16时GradScaler会跳过这一步并把缩放因子减半，从而掩盖真正的原因。"
     "修复方法是把所有micro-batch的loss求和后除以总token数并至少为1，在整理数据时丢掉没有有效token的"
     "micro-batch，并记录每个micro-batch的token数。"),
    ("sdc-bit-flip",
     "这是静默数据损坏：某个比特翻转了但没有任何报错。如果翻转的是指数位，数值会变成极大值甚至inf，"
     "再经过softmax变成NaN，并通过all-reduce扩散到所有rank。像Megatron的RerunStateMachine那样，"
     "先在同一块GPU上原地重跑这一步，不能复现就是瞬时错误；能复现就换另一块GPU重跑，"
     "只在原来那块GPU上复现说明是持续性的硬件故障。要保证能精确重放，记录每次出错的节点和GPU，"
     "多次出错就把节点下线。"),
])
def test_good_chinese_answers_to_large_run_questions_score_high(qid, answer):
    from nanlab.interview import get_question

    result = get_question(qid).score(answer)
    assert result.score == 1.0 and not result.wrong, (result.missing, result.wrong)


@pytest.mark.parametrize("answer, credited", [
    ("If that isn't enough I study per-layer gradient norms over the steps.", True),
    ("If it still doesn't converge, I study per-layer gradient norms over the steps.", True),
    ("如果还不行就看每层的梯度范数，找出最早爆掉的那一层。", True),
    ("I would not study per-layer gradient norms over the steps here.", False),
    ("If you don't log per-layer gradient norms you never learn which layer broke.", False),
    ("如果不看每层的梯度范数，就找不到最早爆掉的那一层。", False),
])
def test_a_negation_inside_a_condition_does_not_reach_the_main_clause(answer, credited):
    """"If that isn't enough I study X" says X: the negation is the condition's own
    ("isn't enough"), and the main clause after its subject is not negated. A negation
    that reaches its phrase inside the condition still negates it."""
    point = KeyPoint("grad norms", ("per-layer gradient", "每层的梯度范数"))
    assert (score_answer(answer, [point]).score == 1.0) is credited, answer


@pytest.mark.parametrize("answer", [
    "第二步关掉mixed precision，或者从fp16换成bf16。",
    "第二步关掉AMP再重跑出问题的那一步。",
    "第四步看每一层的gradient norm历史曲线，找出最早爆掉的那一层。",
])
def test_a_chinese_phrase_matches_with_the_english_term_mixed_in(answer):
    """Engineers write 关掉mixed precision as often as 关掉混合精度: a Chinese phrasing
    also matches with the English term in place of the Chinese one."""
    points = [KeyPoint("AMP off", ("关掉混合精度",)), KeyPoint("grad norms", ("每一层的梯度",))]
    assert score_answer(answer, points).present, answer


def test_a_filler_adverb_inside_a_phrase_does_not_break_it():
    point = KeyPoint("data first", ("step one is the input",))
    answer = "Step one is always the input: check it for NaN and out-of-range labels."
    assert score_answer(answer, [point]).score == 1.0
    assert score_answer("Step one is never the input, it is the LR schedule.", [point]).score == 0


def test_leaving_out_the_first_step_of_an_ordered_answer_is_out_of_order():
    """Where the order is the point, an answer that starts at a later step puts that
    step first: it is capped even though the steps it names are in order."""
    steps = [KeyPoint("data first", ("check the data",)),
             KeyPoint("AMP off", ("amp off",)), KeyPoint("LR / 10", ("lower the lr",)),
             KeyPoint("grad norms", ("per-layer grad",))]
    answer = ("I rerun the failing step with AMP off in fp32. Then I lower the LR by ten from "
              "a good checkpoint. Then I log per-layer grad norms to name the layer.")
    result = score_answer(answer, steps, ordered=True)
    assert result.score == 0.4 and result.out_of_order == ["AMP off", "data first"]
    assert "'AMP off' comes first, without 'data first'" in result.feedback
    assert score_answer(answer, steps).passed  # three of four, where order is not scored
