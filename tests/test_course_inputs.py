"""Learner input of any kind never breaks a lab: graders, checks, the progress file, execute.

One test per defect a careless learner found, then properties (hypothesis) over answers of
every type and over any bytes as the progress file.
"""

import argparse
import contextlib
import io
import json
import math
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanlab.course import checks, progress
from nanlab.course import notebooks as course
from nanlab.course.quiz import (
    Feedback,
    FreeTextQuestion,
    MultipleChoiceQuestion,
    OrderingQuestion,
    RootCauseQuestion,
)

SOP = ["data", "AMP off", "LR / 10"]
SINGLE = MultipleChoiceQuestion("fp16-max", "Largest fp16?", ["65504", "65536", "1e4"], 0)
SEVERAL = MultipleChoiceQuestion("which-nan", "NaN?", ["inf - inf", "1 / 0", "0 / 0"], [0, 2])
ORDER = OrderingQuestion("sop", "Order the SOP", SOP)
CAUSE = RootCauseQuestion("m1", "Why?", ["data", "lr"], "data", ["nan in x", "lr high"],
                          ["nan in x"])
TEXT = FreeTextQuestion("why-silent", "Why is NaN silent?",
                        [("no error", ("no error", "no exception"))])


def _warnings_of(func, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = func(*args, **kwargs)
    return result, [str(w.message) for w in caught]


# --- progress file -------------------------------------------------------------------------


def test_check_survives_a_progress_entry_with_missing_fields(tmp_path, capsys):
    path = tmp_path / "progress.json"  # the conftest points NANLAB_PROGRESS here
    original = b'{"version": 1, "labs": {"lab": {"ex": {"attempts": 1}}}}'
    path.write_bytes(original)
    _, caught = _warnings_of(checks.check, "ex", lambda: 2, 2, lab="lab")
    assert capsys.readouterr().out == "passed: ex\n"
    assert len(caught) == 1 and str(path) in caught[0] and "'kind' is missing" in caught[0]
    entry = progress.load(path)["labs"]["lab"]["ex"]
    assert entry["attempts"] == 2 and entry["correct"] and entry["solved_at"]
    assert [p.read_bytes() for p in tmp_path.glob("progress.json.bad-*")] == [original]


def test_check_survives_a_progress_entry_with_wrong_typed_fields(tmp_path, capsys):
    path = tmp_path / "progress.json"
    entry = {"kind": 3, "answered": "yes", "correct": None, "attempts": "two",
             "hints_used": [1], "first_seen": 5, "last_attempt": {}, "solved_at": 1.5}
    path.write_text(json.dumps({"version": 1, "labs": {"lab": {"ex": entry}}}))
    _, caught = _warnings_of(checks.check, "ex", lambda: 2, 2, hints=["h"], lab="lab")
    assert capsys.readouterr().out.startswith("passed: ex\n")
    assert len(caught) == 1 and "is not valid" in caught[0]
    assert progress.load(path)["labs"]["lab"]["ex"]["attempts"] == 1


@pytest.mark.parametrize("content", [b"[1, 2]", b'"text"', b"3", b"null", b"{not json",
                                     b"\xff\xfe\x00{", b"[" * 100_000])
def test_a_file_that_is_not_a_json_object_is_warned_about_and_kept(tmp_path, content, capsys):
    path = tmp_path / "progress.json"
    path.write_bytes(content)
    _, caught = _warnings_of(checks.check, "ex", lambda: 1, 1, lab="lab")
    assert capsys.readouterr().out == "passed: ex\n"
    assert len(caught) == 1 and f"progress file {path}" in caught[0]
    assert [p.read_bytes() for p in tmp_path.glob("progress.json.bad-*")] == [content]


def test_load_keeps_what_it_can_read_and_changes_nothing_on_disk(tmp_path):
    path = tmp_path / "p.json"
    good = {"kind": "exercise", "answered": True, "correct": True, "attempts": 2,
            "hints_used": 0, "first_seen": None, "last_attempt": None, "solved_at": None}
    original = json.dumps({"version": 1, "labs": {"x": {"a": 3}, "y": {"b": good}}}).encode()
    path.write_bytes(original)
    data, caught = _warnings_of(progress.load, path)
    assert data["labs"] == {"y": {"b": good}}
    assert len(caught) == 1 and "entry x/a is not an object" in caught[0]
    assert path.read_bytes() == original and sorted(tmp_path.iterdir()) == [path]


def test_every_damaged_file_is_kept_not_only_the_last(tmp_path):
    path = tmp_path / "p.json"
    for content in (b"{first", b"{second"):
        path.write_bytes(content)
        _warnings_of(progress.record, "lab", "a", correct=True, path=path)
    kept = sorted(p.read_bytes() for p in tmp_path.glob("p.json.bad-*"))
    assert kept == [b"{first", b"{second"]


def test_progress_path_naming_a_folder_never_touches_it(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "progress"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    monkeypatch.setenv("NANLAB_PROGRESS", str(folder))
    _, caught = _warnings_of(checks.check, "ex", lambda: 1, 1, lab="lab")
    assert capsys.readouterr().out == "passed: ex\n"
    assert len(caught) == 1 and "it is a folder, not a file" in caught[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["progress"]
    assert [p.name for p in folder.iterdir()] == ["keep.txt"]
    text, caught = _warnings_of(progress.show_progress)
    assert "not saved: it is a folder" in text and len(caught) == 1


def test_progress_path_under_a_file_is_one_warning(tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("mine")
    monkeypatch.setenv("NANLAB_PROGRESS", str(tmp_path / "afile" / "progress.json"))
    _, caught = _warnings_of(checks.check, "ex", lambda: 1, 1, lab="lab")
    assert capsys.readouterr().out == "passed: ex\n"
    assert len(caught) == 1 and "is a file, not a folder" in caught[0]
    assert (tmp_path / "afile").read_text() == "mine"


# --- graders -------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", [2.5, math.nan, {"a": 1}, b"\x00", object()],
                         ids=["float", "nan", "dict", "bytes", "object"])
@pytest.mark.parametrize(("grade", "expected"), [
    (SINGLE.grade, "Answer with one option number (0 to 2) or an option's text, like 0"),
    (SEVERAL.grade, "Answer with a list of option numbers (0 to 2), like [0, 2]"),
    (ORDER.grade, "Answer with a list of the 3 steps in order, each a step's text"),
    (lambda a: CAUSE.grade("data", a), "Answer the evidence with a list of evidence texts"),
    (lambda a: CAUSE.grade(a, ["nan in x"]), "Answer the fault family with one of"),
    (TEXT.grade, "Answer with text, a sentence or two in quotes"),
], ids=["single", "several", "ordering", "evidence", "family", "free-text"])
def test_an_answer_of_the_wrong_kind_says_what_kind_is_expected(grade, expected, answer):
    fb = grade(answer)
    assert isinstance(fb, Feedback) and not fb.correct and fb.score == 0.0
    assert fb.message.startswith(expected) and "; got " in fb.message


def test_wrong_kind_feedback_shows_what_came():
    assert SEVERAL.grade(2.5).message == \
        "Answer with a list of option numbers (0 to 2), like [0, 2]; got 2.5."
    assert SEVERAL.grade("abc").message == ("Not an option here: 'abc'. Answer with a list of "
                                            "option numbers (0 to 2), like [0, 2].")
    assert ORDER.grade(5).message.endswith("; got 5.")
    assert ORDER.grade("data").message.endswith("; got 'data'.")  # not three letters
    assert "Not a step here: 1, [2]." in ORDER.grade(["data", 1, [2]]).message
    long = SINGLE.grade("x" * 10**6).message
    assert len(long) < 200 and "..." in long


def test_a_huge_free_text_answer_is_feedback_not_a_hang():
    fb = TEXT.grade("no error because the loop goes on. " * 10_000)
    assert not fb.correct and "characters" in fb.message and "Shorten it" in fb.message


def test_the_rubric_scores_an_answer_that_is_not_text_as_zero():
    from nanlab.course.rubric import KeyPoint, score_answer

    result = score_answer(b"no error", [KeyPoint("no error", ("no error",))])
    assert result.score == 0.0 and result.missing == ["no error"]
    assert result.feedback == "Answer with text, a sentence or two; got bytes."


def test_hint_with_a_name_that_is_not_text_is_a_line(capsys):
    checks.hint(["is_finite_report"])
    assert "hint() takes the exercise's name as text" in capsys.readouterr().out


class _Unprintable:
    def __repr__(self):
        raise RuntimeError("no repr")

    def __eq__(self, other):
        raise RuntimeError("no ==")


@pytest.mark.parametrize("value", [10**5000, _Unprintable(), [_Unprintable()]],
                         ids=["huge-int", "unprintable", "list-of-unprintable"])
def test_check_never_raises_on_values_it_cannot_print(value, capsys):
    checks.check("odd", lambda: value, 1.0)
    assert capsys.readouterr().out.startswith("not yet right: odd: ")


# --- course execute ------------------------------------------------------------------------


def _execute(*paths):
    return course.execute_command(argparse.Namespace(notebooks=[str(p) for p in paths],
                                                     solutions="solutions", timeout=60))


@pytest.mark.parametrize(("name", "content", "reason"), [
    ("missing.ipynb", None, "does not exist"),
    ("folder.ipynb", "dir", "is a folder, not a notebook"),
    ("notes.txt", b"hello", "is not a notebook"),
    ("garbled.ipynb", b"{not json", "is not JSON"),
    ("latin1.ipynb", b"\xff\xfe", "is not UTF-8 text"),
    ("list.ipynb", b"[1, 2]", "is not a valid notebook"),
    ("empty.ipynb", b"{}", "is not a valid notebook"),
    ("nocells.ipynb", b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": 3}',
     "is not a valid notebook"),
])
def test_execute_of_a_bad_input_is_one_error_line(tmp_path, capsys, name, content, reason):
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    assert _execute(path) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"error: {path}: {reason}")
    assert content is None or content == "dir" or path.read_bytes() == content


def test_execute_of_a_py_whose_pair_is_garbled_is_one_error_line(tmp_path, capsys):
    (tmp_path / "nb.py").write_text("# %%\nprint(1)\n")
    (tmp_path / "nb.ipynb").write_bytes(b"{garbled")
    assert _execute(tmp_path / "nb.py") == 1
    assert capsys.readouterr().out == f"error: {tmp_path / 'nb.ipynb'}: is not JSON, so not a " \
                                      "notebook\n"
    assert (tmp_path / "nb.ipynb").read_bytes() == b"{garbled"


# --- properties ----------------------------------------------------------------------------

_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), max_size=20),
    st.text(alphabet=st.characters(max_codepoint=0x1F), max_size=10),  # control characters
    st.text(alphabet=st.characters(categories=["Cs", "Co", "Zs", "Mn"]), max_size=10),
)
_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**400),
                                                         max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.complex_numbers(), _TEXT, st.binary(),
)
ANYTHING = st.recursive(
    _LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.tuples(inner, inner), st.sets(st.integers() | _TEXT),
        st.dictionaries(_TEXT | st.integers(), inner, max_size=4),
    ),
    max_leaves=12,
)


def _answers(options):
    """Anything, plus answers near the right shape (option texts, indices, lists of them)."""
    near = st.sampled_from(list(options)) | st.integers(-2, len(options) + 1)
    return st.one_of(ANYTHING, near, st.lists(near | ANYTHING, max_size=len(options) + 2))


def _valid(fb):
    assert isinstance(fb, Feedback) and isinstance(fb.message, str) and fb.message
    assert 0.0 <= fb.score <= 1.0 and isinstance(fb.correct, bool)
    assert all(isinstance(d, str) for d in fb.details)
    fb.text()


@settings(max_examples=100, deadline=None)
@given(_answers(SINGLE.options), _answers(SEVERAL.options))
def test_property_multiple_choice_grades_anything(one, several):
    _valid(SINGLE.grade(one))
    _valid(SEVERAL.grade(several))


@settings(max_examples=100, deadline=None)
@given(_answers(SOP))
def test_property_ordering_grades_anything(order):
    _valid(ORDER.grade(order))


@settings(max_examples=100, deadline=None)
@given(_answers(CAUSE.families), _answers(CAUSE.evidence))
def test_property_root_cause_grades_anything(family, evidence):
    _valid(CAUSE.grade(family, evidence))


@settings(max_examples=100, deadline=None)
@given(ANYTHING | _TEXT | st.text(max_size=2000))
def test_property_free_text_grades_anything(answer):
    fb = TEXT.grade(answer)
    _valid(fb)
    assert fb.correct is False or isinstance(answer, str)


_EXPECTED = [2, 0.5, math.nan, None, True, "fp16", [1, 2], (1.0, math.nan), {1, 2},
             {"finite": 2, "nan": 1}, torch.tensor([1.0, math.nan])]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANYTHING, st.sampled_from(_EXPECTED), st.booleans())
def test_property_check_reports_anything_on_one_line(value, expected, raises):
    def attempt():
        if raises:
            raise ValueError(value)
        return value

    result = checks.evaluate("prop", attempt, expected)
    assert result.status in (checks.PASSED, checks.WRONG)
    assert "\n" not in result.line()
    tested = checks.evaluate("prop", attempt, test=lambda v: v > 0)  # the test may trip on v
    assert tested.status in (checks.PASSED, checks.WRONG) and "\n" not in tested.line()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        checks.check("prop", attempt, expected, lab="lab")  # recorded in the conftest's file
    assert out.getvalue().split("\n")[0] == result.line()


_ENTRY = st.fixed_dictionaries({}, optional={
    "kind": ANYTHING | st.just("exercise"), "answered": ANYTHING | st.booleans(),
    "correct": st.booleans() | ANYTHING, "attempts": st.integers(0, 9) | ANYTHING,
    "hints_used": st.integers(0, 3) | ANYTHING, "first_seen": st.none() | ANYTHING,
    "last_attempt": st.none() | _TEXT, "solved_at": st.none() | ANYTHING,
})
_LAYOUT = st.fixed_dictionaries(
    {"labs": st.dictionaries(_TEXT, st.dictionaries(_TEXT, _ENTRY | ANYTHING, max_size=3)
                             | ANYTHING, max_size=3)},
    optional={"version": st.just(1) | ANYTHING},
)
_JSON_BYTES = _LAYOUT.map(lambda d: json.dumps(d, default=repr).encode())
PROGRESS_BYTES = st.one_of(
    st.binary(max_size=200), _JSON_BYTES,
    st.tuples(_JSON_BYTES, st.integers(0, 200)).map(lambda t: t[0][: t[1]]),  # cut short
    ANYTHING.map(lambda v: json.dumps(v, default=repr).encode()),
)


@settings(max_examples=100, deadline=None)
@given(PROGRESS_BYTES)
def test_property_any_progress_bytes_are_never_fatal_and_never_lost(original):
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "progress.json"
        path.write_bytes(original)
        data, caught = _warnings_of(progress.load, path)
        assert isinstance(data["labs"], dict) and len(caught) <= 1
        assert path.read_bytes() == original  # load changes nothing
        _warnings_of(progress.show_progress, path)
        entry, _ = _warnings_of(progress.record, "lab", "item", correct=True, path=path)
        assert entry["attempts"] >= 1
        backups = [p.read_bytes() for p in Path(scratch).glob("progress.json.bad-*")]
        if caught:
            assert backups == [original]  # damaged: kept byte for byte
        else:
            assert backups == []
            before = json.loads(original.decode("utf-8-sig"))
            after = json.loads(path.read_text())
            for lab, items in before["labs"].items():  # a clean file loses no entry
                for item, old in items.items():
                    assert after["labs"][lab][item]["attempts"] >= old.get("attempts", 0)
        text, _ = _warnings_of(progress.show_progress, path)
        assert "lab: " in text
