"""The graders: right, wrong, partial and empty answers for every question kind, and checks."""

import pytest
import torch

from nanlab.course import checks
from nanlab.course.quiz import (
    FreeTextQuestion,
    Hints,
    MultipleChoiceQuestion,
    OrderingQuestion,
    QuizError,
    RootCauseQuestion,
)

SOP = ["data", "AMP off", "LR / 10", "grad norms", "init / eps"]


@pytest.fixture
def single():
    return MultipleChoiceQuestion("fp16-max", "Largest fp16?", ["65504", "65536", "1e4"], 0,
                                  explanation="10 mantissa bits.")


@pytest.fixture
def several():
    return MultipleChoiceQuestion("which-nan", "Which are NaN?",
                                  ["inf - inf", "1 / 0", "0 / 0", "log(0)"], [0, 2])


def test_single_choice_right_wrong_empty(single):
    right = single.grade(0)
    assert right.correct and right.score == 1.0 and "10 mantissa bits" in right.message
    assert single.grade("65504").correct  # option text works too
    wrong = single.grade(1)
    assert not wrong.correct and wrong.answered and "'65536' is not the answer" in wrong.message
    for empty in (None, [], ()):
        fb = single.grade(empty)
        assert not fb.answered and "No answer yet" in fb.message
    assert "Not an option" in single.grade(7).message
    assert "only one" in single.grade([0, 1]).message


def test_several_choices_partial_credit_is_explained(several):
    assert several.grade([0, 2]).correct
    half = several.grade([0])
    assert not half.correct and half.score == 0.5
    assert "missed: 1 more right answer(s) not picked" in half.details
    assert not any("0 / 0" in d for d in half.details)  # the missed answer is not named
    cancelled = several.grade([0, 1])  # one right, one wrong: no credit
    assert cancelled.score == 0.0 and "should not be picked: 1 / 0" in cancelled.details
    assert not several.grade([]).answered


def test_bad_question_definitions_are_author_errors():
    with pytest.raises(QuizError, match="answers=\\[5\\] must be option indices from 0 to 1"):
        MultipleChoiceQuestion("q", "?", ["a", "b"], 5)
    with pytest.raises(QuizError, match="qid='Bad Id'"):
        MultipleChoiceQuestion("Bad Id", "?", ["a", "b"], 0)
    with pytest.raises(QuizError, match="duplicates"):
        OrderingQuestion("q", "?", ["a", "a"])
    with pytest.raises(QuizError, match="answer='x' is not one of families"):
        RootCauseQuestion("q", "?", ["a", "b"], "x", ["e1", "e2"], ["e1"])


def test_ordering_right_partial_and_empty():
    q = OrderingQuestion("sop-order", "Order the SOP", SOP)
    assert q.grade(SOP).correct
    swapped = q.grade(["data", "LR / 10", "AMP off", "grad norms", "init / eps"])
    assert swapped.score == pytest.approx(0.6)
    assert "position 1: data (right)" in swapped.details
    assert "position 2: LR / 10 (not here)" in swapped.details
    assert not q.grade([]).answered
    assert "Fill all 5 positions" in q.grade(["data", None, None, None, None]).message
    assert "repeated: data" in q.grade(["data"] * 5).message
    assert "Not a step" in q.grade(["data", "x", "LR / 10", "grad norms", "init / eps"]).message


def test_root_cause_grades_family_and_evidence():
    q = RootCauseQuestion(
        "mystery-1", "What broke?", ["dirty data", "high LR", "fp16 overflow"], "dirty data",
        ["NaN in the input batch", "loss-scale drops", "grad norm grows for 50 steps"],
        ["NaN in the input batch"],
    )
    assert q.grade("dirty data", ["NaN in the input batch"]).correct
    family_only = q.grade("dirty data", [])
    assert family_only.score == 0.5 and "Right family" in family_only.message
    evidence_only = q.grade("high LR", ["NaN in the input batch"])
    assert evidence_only.score == 0.5 and "family is not" in evidence_only.message
    wrong = q.grade("high LR", ["loss-scale drops"])
    assert wrong.score == 0.0 and wrong.answered
    assert not q.grade(None, []).answered
    assert "Not a fault family" in q.grade("cosmic rays", []).message


def test_free_text_uses_the_rubric():
    q = FreeTextQuestion(
        "nan-vs-oom", "Why is NaN worse than OOM?",
        [("silent", ("no error", "silent")), ("spreads", ("weights", "spread"))],
        model_answer="No error is raised while it spreads into the weights.",
    )
    right = q.grade("There is no error, and the NaN spreads into the weights.")
    assert right.correct and right.score == 1.0
    assert "A model answer: No error is raised while it spreads into the weights." in right.details
    partial = q.grade("It is silent, so nobody notices the problem.")
    assert not partial.correct and partial.score == 0.5
    assert any("spreads" in line for line in partial.details)
    wrong = q.grade("Memory is expensive on every machine.")
    assert not wrong.correct and wrong.answered and wrong.score == 0.0
    for empty in ("", "   ", None):
        assert not q.grade(empty).answered


def test_hints_come_one_at_a_time():
    h = Hints(["first", "second"])
    assert h.next() == "Hint 1 of 2: first"
    assert h.next() == "Hint 2 of 2: second"
    assert h.next() == "No more hints (all 2 shown)."
    assert Hints().next() == "No hints for this one."


def _stub():
    raise NotImplementedError()


def test_check_statuses_are_stable_first_lines():
    assert checks.evaluate("ex", lambda: 2, 2).line() == "passed: ex"
    assert checks.evaluate("ex", _stub, 2).line() == "not done yet: ex"
    assert checks.evaluate("ex", lambda: 3, 2).line() == "not yet right: ex: got 3, expected 2"
    boom = checks.evaluate("ex", lambda: 1 / 0, 2)
    assert boom.line() == "not yet right: ex: your code raised ZeroDivisionError: division by zero"


def test_check_compares_dicts_tensors_nan_and_tests():
    assert checks.evaluate("d", {"nan": 1, "inf": 2}, {"nan": 1, "inf": 3}).detail == \
        "['inf']: got 2, expected 3"
    assert "keys differ" in checks.evaluate("d", {"nan": 1}, {"inf": 1}).detail
    assert checks.evaluate("f", float("nan"), float("nan")).passed
    t = torch.tensor([1.0, float("nan")])
    assert checks.evaluate("t", t.clone(), t).passed
    assert "at index (0,)" in checks.evaluate("t", torch.tensor([2.0, float("nan")]), t).detail
    assert "expected a dict, got NoneType" in checks.evaluate("d", None, {"a": 1}).detail
    assert checks.evaluate("t", 5, test=lambda v: None if v > 3 else "too small").passed
    assert checks.evaluate("t", 1, test=lambda v: None if v > 3 else "too small").detail == \
        "too small"
    assert "checking it raised TypeError" in checks.evaluate("t", "x", test=lambda v: v > 3).detail


def test_check_prints_records_and_hints(capsys):
    checks.check("ex-hint", _stub, 1, hints=["look up", "look down"], lab="lab-x")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "not done yet: ex-hint"
    assert "hint('ex-hint')" in out[-1]
    checks.hint()
    assert capsys.readouterr().out == "Hint 1 of 2: look up\n"
    checks.check("ex-hint", lambda: 1, 1, hints=["look up", "look down"], lab="lab-x")
    assert capsys.readouterr().out == "passed: ex-hint\n"
    from nanlab.course import progress

    entry = progress.load()["labs"]["lab-x"]["ex-hint"]
    assert entry["correct"] and entry["attempts"] == 1 and entry["hints_used"] == 1
    checks.hint("never-checked")
    assert "No hints registered for 'never-checked'" in capsys.readouterr().out


def test_grade_of_a_wrong_kind_is_wrong_with_what_is_expected(single, several):
    assert single.grade(1.0).message == \
        "Answer with one option number (0 to 2) or an option's text, like 0; got 1.0."
    assert several.grade(None).message.startswith("No answer yet")
    fb = several.grade([0, "inf - inf", None, 1.5])
    assert not fb.correct and fb.message.startswith("Not an option here: None, 1.5.")
    assert not OrderingQuestion("sop-order", "?", SOP).grade({"data": 1}).correct


def test_option_reasons_of_the_wrong_length_are_refused():
    with pytest.raises(QuizError, match=r"^q: why has 1 reason\(s\) for 2 options; give one "
                                        r"string per option, in the same order, or none$"):
        MultipleChoiceQuestion("q", "?", ["a", "b"], 0, why=["only one"])
    with pytest.raises(QuizError, match="family_why has 3 reason"):
        RootCauseQuestion("q", "?", ["a", "b"], "a", ["e1", "e2"], ["e1"],
                          family_why=["x", "y", "z"])
    with pytest.raises(QuizError, match="why has 1 reason"):
        RootCauseQuestion("q", "?", ["a", "b"], "a", ["e1", "e2"], ["e1"], why=["x"])


def test_a_wrong_pick_shows_its_reason_and_a_missed_answer_only_on_reveal():
    q = MultipleChoiceQuestion("fp16-max", "Largest fp16?", ["65504", "65536", "1e4"], 0,
                               why=["Section 1: 10 mantissa bits.", "2**16 rounds to inf.",
                                    "Far below the top."])
    wrong = q.grade(1)
    assert wrong.details == ["Why not: 2**16 rounds to inf."]
    assert "65504" not in wrong.text()  # a wrong try is not handed the answer
    revealed = q.grade(1, reveal=True).text()
    assert "The answer: '65504'. Why: Section 1: 10 mantissa bits." in revealed
    several = MultipleChoiceQuestion("nan", "NaN?", ["inf - inf", "1 / 0", "0 / 0"], [0, 2],
                                     why=["Two infinities.", "+inf, not NaN.", "No value."])
    fb = several.grade([0, 1])
    assert "should not be picked: 1 / 0. Why: +inf, not NaN." in fb.details
    assert "missed: 1 more right answer(s) not picked" in fb.details
    assert "missed: 0 / 0. Why: No value." in several.grade([0, 1], reveal=True).details
    text = several.answer_text()
    assert "- '1 / 0' (wrong): +inf, not NaN." in text.splitlines()


def test_a_root_cause_wrong_family_and_evidence_show_their_reasons():
    q = RootCauseQuestion("m", "Why?", ["data", "lr"], "data", ["NaN in x", "lr high", "fp32"],
                          ["NaN in x"], why=["The bad value.", "It would climb first.",
                                             "Clears, does not point."],
                          family_why=["The batch holds it.", "No climb before it."])
    fb = q.grade("lr", ["lr high"])
    assert "fault family: 'lr' is not it. Why: No climb before it." in fb.details
    assert "evidence should not be picked: lr high. Why: It would climb first." in fb.details
    assert "NaN in x" not in fb.text() and "The batch holds it" not in fb.text()
    shown = q.grade("lr", ["lr high"], reveal=True).details
    assert "the family is 'data'. Why: The batch holds it." in shown
    assert "evidence missed: NaN in x. Why: The bad value." in shown
    assert "- 'fp32' (does not): Clears, does not point." in q.answer_text().splitlines()


def shipped_with_options():
    from nanlab.course import questions

    for qid in questions.ids():
        q = questions.question(qid)
        if isinstance(q, MultipleChoiceQuestion):
            right = [q.options[i] for i in q.answers]
            yield qid, list(zip(q.options, q.why or [""] * len(q.options), strict=True)), \
                {q.options[i] for i in q.answers}, right
        elif isinstance(q, RootCauseQuestion):
            pairs = list(zip(q.evidence, q.why or [""] * len(q.evidence), strict=True))
            pairs += list(zip(q.families, q.family_why or [""] * len(q.families), strict=True))
            yield qid, pairs, {*q.supporting, q.answer}, [q.answer, *q.supporting]


def test_every_option_of_every_shipped_question_has_a_reason():
    checked = 0
    for qid, pairs, _, _ in shipped_with_options():
        empty = [option for option, reason in pairs if not reason.strip()]
        assert not empty, f"{qid}: no reason for {empty}"
        checked += 1
    assert checked >= 30


def test_a_shipped_wrong_option_s_reason_does_not_name_a_right_one():
    """A wrong pick's reason is shown at once: it must not hand over the answer."""
    for qid, pairs, right_set, right in shipped_with_options():
        for option, reason in pairs:
            if option not in right_set:
                named = [r for r in right if r in reason]
                assert not named, f"{qid}: the reason for {option!r} names {named}"


def test_the_widget_shows_a_wrong_pick_s_reason_and_after_show_answer_the_right_one():
    from nanlab.course.widgets import MultipleChoice

    q = MultipleChoice("w-why", "Largest fp16?", ["65504", "65536"], 0,
                       why=["Ten mantissa bits.", "Two to the sixteenth."])
    q.choices.value = "65536"
    q.check_button.click()
    assert "Why not: Two to the sixteenth." in q.feedback.value
    assert "Ten mantissa bits" not in q.feedback.value
    q.answer_button.click()
    assert "Ten mantissa bits." in q.answer_area.value and "<br>" in q.answer_area.value
    q.check_button.click()
    assert "The answer: &#x27;65504&#x27;. Why: Ten mantissa bits." in q.feedback.value
