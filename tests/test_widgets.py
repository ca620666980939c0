"""Widget shells, clicked without a browser: feedback appears, empty answers never raise."""

from nanlab.course import progress
from nanlab.course.widgets import FreeText, MultipleChoice, Ordering, RootCause

SOP = ["data", "AMP off", "LR / 10", "grad norms", "init / eps"]


def test_single_choice_click_shows_feedback_and_records():
    q = MultipleChoice("w-fp16-max", "Largest fp16?", ["65504", "65536"], 0,
                       explanation="Because.", lab="lab-w")
    q.check_button.click()  # nothing selected
    assert "No answer yet" in q.feedback.value
    q.choices.value = "65536"
    q.check_button.click()
    assert "is not the answer" in q.feedback.value and not q.last_feedback.correct
    q.choices.value = "65504"
    q.check_button.click()
    assert "Right. Because." in q.feedback_text()
    entry = progress.load()["labs"]["lab-w"]["w-fp16-max"]
    assert entry == entry | {"kind": "question", "attempts": 2, "correct": True}


def test_multiple_choice_with_checkboxes_gives_partial_credit():
    q = MultipleChoice("w-nan", "NaN?", ["inf - inf", "1 / 0", "0 / 0"], [0, 2])
    q.boxes[0].value = True
    q.check_button.click()
    assert "Partly right" in q.feedback.value and "missed: 1 more" in q.feedback.value
    assert "0 / 0" not in q.feedback.value  # a wrong try is not handed the answer


def test_ordering_click():
    q = Ordering("w-sop", "Order the SOP", SOP)
    assert sorted(q.slots[0].options[1:]) == sorted((s, s) for s in SOP)
    q.check_button.click()
    assert "No answer yet" in q.feedback.value
    for slot, step in zip(q.slots, SOP, strict=True):
        slot.value = step
    q.check_button.click()
    assert q.last_feedback.correct


def test_root_cause_click():
    q = RootCause("w-mystery", "Why?", ["data", "lr"], "data", ["NaN in x", "lr high"],
                  ["NaN in x"])
    q.check_button.click()
    assert "No answer yet" in q.feedback.value
    q.family.value = "data"
    q.check_button.click()
    assert "Right family" in q.feedback.value
    q.boxes[0].value = True
    q.check_button.click()
    assert q.last_feedback.correct


def test_free_text_click_empty_and_answered():
    q = FreeText("w-silent", "Why is NaN silent?", [("no error", ("no error", "no exception"))])
    q.check_button.click()
    assert "No answer yet" in q.feedback.value
    q.answer.value = "Because there is no exception."
    q.check_button.click()
    assert q.last_feedback.correct


def test_hint_button_reveals_one_at_a_time():
    q = MultipleChoice("w-hints", "?", ["a", "b"], 0, hints=["one", "two"])
    q.hint_button.click()
    assert "Hint 1 of 2: one" in q.hint_area.value and "two" not in q.hint_area.value
    q.hint_button.click()
    assert "Hint 2 of 2: two" in q.hint_area.value
    assert MultipleChoice("w-nohints", "?", ["a", "b"], 0).hint_button.disabled


def test_grader_failure_is_feedback_not_traceback(monkeypatch):
    q = MultipleChoice("w-broken", "?", ["a", "b"], 0)

    def broken(_selection):
        raise RuntimeError("grader bug")

    monkeypatch.setattr(q.question, "grade", broken)
    q.check_button.click()
    assert "Could not grade this answer (RuntimeError: grader bug)" in q.feedback.value


def test_widget_displays_as_its_container():
    bundle = MultipleChoice("w-show", "?", ["a", "b"], 0)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_check_with_a_damaged_progress_file_still_shows_feedback(tmp_path, recwarn):
    path = progress.progress_path()  # the conftest's scratch file
    path.write_text('{"labs": {"lab-w": {"w-damaged": {"attempts": 1}}}}')
    q = MultipleChoice("w-damaged", "?", ["a", "b"], 0, lab="lab-w")
    q.choices.value = "a"
    q.check_button.click()
    assert q.last_feedback.correct and "Right." in q.feedback.value
    assert any("'kind' is missing" in str(w.message) for w in recwarn.list)
    assert progress.load()["labs"]["lab-w"]["w-damaged"]["attempts"] == 2
    assert len(list(path.parent.glob(path.name + ".bad-*"))) == 1


def test_free_text_widget_with_odd_text_gives_feedback():
    q = FreeText("w-odd", "Why?", [("no error", ("no error",))])
    for text in ("\x00\x1b[31m", "没有报错", "\ud800", "x" * 30_000):
        q.answer.value = text
        q.check_button.click()
        assert q.feedback.value and not q.last_feedback.correct


def test_grader_failure_with_an_unprintable_error_is_still_feedback(monkeypatch):
    class Odd(Exception):
        def __str__(self):
            raise RuntimeError("no str")

    q = MultipleChoice("w-odd-error", "?", ["a", "b"], 0)

    def broken(_selection):
        raise Odd()

    monkeypatch.setattr(q.question, "grade", broken)
    q.check_button.click()
    assert "Could not grade this answer (Odd)" in q.feedback.value
