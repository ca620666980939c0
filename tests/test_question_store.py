"""The answer key stays off the screen: labs show stored questions by id, and graders
do not hand a first wrong try the answer.

Read from the lab sources (``solutions/*.py`` and the generated ``labs/*.ipynb``): a
practice cell holds ``practice("<id>")`` and nothing of the key (``answers=``,
``supporting=``, ``model_answer=``, ``explanation=``, ``key_points=``, or a widget built by
hand). Every id a lab shows is stored, under that lab, and every stored question is shown.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nanlab.course import progress, questions
from nanlab.course.quiz import (
    REVEAL_AFTER,
    MultipleChoiceQuestion,
    OrderingQuestion,
    RootCauseQuestion,
)
from nanlab.course.widgets import widget_for

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.py"))
KEY = re.compile(r"\b(answers|supporting|model_answer|explanation|key_points|must_not)=(?!=)|"
                 r"\b(MultipleChoice|Ordering|RootCause|FreeText)\(")
SHOWN = re.compile(r"""practice\(\s*["']([^"']+)["']\s*\)""")


def code_cells(path: Path) -> list[str]:
    """The code cells of a lab source: a jupytext .py or a notebook."""
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text())
        return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    cells = re.split(r"(?m)^# %%", path.read_text())[1:]
    return [c.split("\n", 1)[1] for c in cells if not c.startswith(" [markdown]")]


def lab_files() -> list[Path]:
    return [*SOURCES, *sorted((ROOT / "labs").glob("*.ipynb")),
            *sorted((ROOT / "solutions").glob("*.ipynb"))]


@pytest.mark.parametrize("path", lab_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_answer_key_in_a_lab(path):
    for cell in code_cells(path):
        found = KEY.search(cell)
        assert found is None, f"{path.name}: an answer key in a cell ({found.group(0)!r}):\n" \
                              f"{cell[:300]}"


def test_every_shown_id_is_stored_under_its_lab_and_every_stored_one_is_shown():
    shown: dict[str, str] = {}
    for path in SOURCES:
        for cell in code_cells(path):
            for qid in SHOWN.findall(cell):
                assert qid not in shown, f"{qid} shown twice ({shown[qid]}, {path.stem})"
                shown[qid] = path.stem
    for qid, lab in shown.items():
        assert questions.lab_of(qid) == lab, f"{qid} is shown in {lab}, stored elsewhere"
    assert set(questions.ids()) == set(shown), (
        f"stored, never shown: {sorted(set(questions.ids()) - set(shown))}; "
        f"shown, not stored: {sorted(set(shown) - set(questions.ids()))}")
    assert len(shown) >= 40


def test_the_generated_labs_show_the_same_ids():
    for path in SOURCES:
        lab = ROOT / "labs" / f"{path.stem}.ipynb"
        ids_in = [q for c in code_cells(lab) for q in SHOWN.findall(c)]
        assert ids_in == questions.ids(path.stem), lab.name


def test_progress_is_recorded_by_id_under_the_question_s_lab(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.ENV_VAR, str(tmp_path / "p.json"))
    progress.set_lab("somewhere-else")
    shown = questions.practice("02-lr-no-change")
    shown.choices.value = shown.question.options[1]
    shown.check_button.click()
    entry = progress.entry("02_dirty_data", "02-lr-no-change")
    assert entry["kind"] == "question" and entry["attempts"] == 1 and not entry["correct"]


def wrong_answers(q):
    """(a wrong answer for the widget, the right answer texts it must not name)."""
    if isinstance(q, MultipleChoiceQuestion):
        wrong = next(i for i in range(len(q.options)) if i not in q.answers)
        right = [q.options[i] for i in q.answers]
        return wrong, right
    if isinstance(q, RootCauseQuestion):
        wrong = next(f for f in q.families if f != q.answer)
        return wrong, list(q.supporting)
    return None, []


def answer(shown, wrong):
    q = shown.question
    if isinstance(q, MultipleChoiceQuestion):
        if q.multiple:
            shown.boxes[wrong].value = True
        else:
            shown.choices.value = q.options[wrong]
    elif isinstance(q, RootCauseQuestion):
        shown.family.value = wrong
        shown.boxes[q.evidence.index(q.supporting[0])].value = True
    elif isinstance(q, OrderingQuestion):
        for slot, step in zip(shown.slots, reversed(q.items), strict=True):
            slot.value = step
    else:
        shown.answer.value = "I would restart the job and hope."


@pytest.mark.parametrize("qid", questions.ids())
def test_a_wrong_try_is_not_handed_the_answer_until_the_third(qid, tmp_path, monkeypatch):
    monkeypatch.setenv(progress.ENV_VAR, str(tmp_path / "p.json"))
    shown = widget_for(questions.question(qid))
    wrong, right = wrong_answers(shown.question)
    answer(shown, wrong)
    for attempt in range(1, REVEAL_AFTER + 1):
        shown.check_button.click()
        fb = shown.feedback_text()
        assert not shown.last_feedback.correct, f"{qid}: a wrong answer was graded right"
        if attempt < REVEAL_AFTER:
            assert "After" not in fb
            for text in right:
                picked = isinstance(shown.question, RootCauseQuestion)  # picked on purpose
                assert picked or text not in fb, f"{qid}: try {attempt} names {text!r}"
            if shown.question.__class__.__name__ == "FreeTextQuestion":
                assert shown.question.model_answer not in fb
                for point in shown.question.key_points:  # a missing point: its hint only
                    if getattr(point, "hint", ""):
                        assert f"- {point.name}" not in fb, (qid, point.name)
    assert f"After {REVEAL_AFTER} tries" in shown.feedback_text()


def test_show_answer_on_request_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.ENV_VAR, str(tmp_path / "p.json"))
    shown = questions.practice("01-fp16-max")
    assert shown.answer_area.value == ""
    shown.answer_button.click()
    assert "65504" in shown.answer_area.value
    assert progress.entry("01_numbers", "01-fp16-max")["answer_shown"] is True


PREDICTED = {"01_numbers": "my_predictions", "02_dirty_data": "predict_nan_input",
             "03_learning_rate": "my_predictions", "04_mixed_precision": "predict_precisions",
             "09_data_parallel": "predict_ddp", "11_lr_sensitivity": "predict_sweep",
             "12_incidents": "predict_replay", "13_optimizer_state": "predict_fresh_adam",
             "14_large_run_faults": "predict_accumulation", "15_final_exam": "exam_first_look",
             "16_new_failure_modes": "predict_masked_row"}


@pytest.mark.parametrize("lab", sorted(PREDICTED))
def test_predictions_are_locked_before_the_experiment_runs(lab):
    """The predict(...) cell comes right after the learner's prediction, before any cell
    that runs the experiment, and the check grades the locked prediction."""
    cells = code_cells(ROOT / "solutions" / f"{lab}.py")
    name = PREDICTED[lab]
    defined = next(i for i, c in enumerate(cells) if "def my_predictions" in c)
    assert f'predict("{name}", my_predictions)' in cells[defined + 1]
    checked = next(i for i, c in enumerate(cells) if f'check("{name}"' in c)
    assert "locked=True" in cells[checked] and checked > defined + 1


CODE = re.compile(r"`|\b[A-Za-z_]\w*\(|\s[+\-*/]?=\s|\*\*|\[|\{|==|>=|<=")
"""What makes a hint a code fragment: a call, an assignment, an index, a literal..."""


def test_question_hints_keep_code_for_last():
    for qid in questions.ids():
        hints = list(questions.question(qid).hints)
        for h in hints[:-1]:
            assert not CODE.search(h), f"{qid}: only the last hint may hold code: {h!r}"
