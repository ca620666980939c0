"""The progress file: where it lives, atomic writes, recovery from a corrupt file."""

import json
import os

import pytest

from nanlab.course import progress


def test_env_var_overrides_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("NANLAB_PROGRESS", str(tmp_path / "p.json"))
    assert progress.progress_path() == tmp_path / "p.json"
    monkeypatch.delenv("NANLAB_PROGRESS")
    assert progress.progress_path().parts[-2:] == (".nanlab", "progress.json")


def test_record_counts_attempts_and_keeps_first_solve(tmp_path):
    path = tmp_path / "sub" / "p.json"
    progress.record("01_numbers", "ex", correct=False, answered=False, path=path)
    entry = progress.record("01_numbers", "ex", correct=False, path=path)
    assert entry["attempts"] == 1 and not entry["correct"]
    solved = progress.record("01_numbers", "ex", correct=True, hints_used=2, path=path)
    assert solved["attempts"] == 2 and solved["correct"] and solved["solved_at"]
    assert solved["hints_used"] == 2 and solved["first_seen"] <= solved["last_attempt"]
    assert json.loads(path.read_text())["labs"]["01_numbers"]["ex"]["attempts"] == 2


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    progress.record("lab", "a", correct=True, path=path)
    before = path.read_text()

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.warns(UserWarning, match="could not save progress"):
        progress.record("lab", "b", correct=True, path=path)
    assert path.read_text() == before  # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temporary file left


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"labs": {"x": {"a": 3}}}', ""])
def test_corrupt_file_warns_starts_fresh_and_is_backed_up(tmp_path, content):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.warns(UserWarning, match="p.json: .*; starting fresh; the original is kept as "
                                         r"p.json.bad-<time>"):
        entry = progress.record("lab", "a", correct=True, path=path)
    assert entry["attempts"] == 1
    backups = list(tmp_path.glob("p.json.bad-*"))
    assert [b.read_text() for b in backups] == [content]  # set aside, not lost
    assert progress.load(path)["labs"]["lab"]["a"]["correct"]


def test_a_damaged_file_keeps_its_readable_entries(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"labs": {"x": {"a": 3, "b": {"attempts": 2, "correct": true}}}}')
    with pytest.warns(UserWarning, match="entry x/a is not an object.*kept what could be read"):
        entry = progress.record("lab", "a", correct=True, path=path)
    assert entry["attempts"] == 1
    assert progress.load(path)["labs"]["x"]["b"]["attempts"] == 2


def test_an_unreadable_file_is_moved_aside_not_overwritten(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    path.write_text('{"labs": {}}')

    def denied(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(path), "read_bytes", denied)
    with pytest.warns(UserWarning, match="could not be read.*moved to p.json.bad-<time>"):
        progress.record("lab", "a", correct=True, path=path)
    monkeypatch.undo()
    assert [b.read_text() for b in tmp_path.glob("p.json.bad-*")] == ['{"labs": {}}']
    assert progress.load(path)["labs"]["lab"]["a"]["attempts"] == 1


def test_old_files_without_hints_used_load_silently(tmp_path, recwarn):
    path = tmp_path / "p.json"
    entry = {"kind": "exercise", "attempts": 1, "first_seen": None, "last_attempt": None,
             "solved_at": None}
    path.write_text(json.dumps({"version": 1, "labs": {"lab": {"a": entry}}}))
    loaded = progress.load(path)["labs"]["lab"]["a"]
    assert loaded["hints_used"] == 0 and loaded["answered"] is False and not recwarn.list


def test_show_progress_prints_a_readable_summary(tmp_path, capsys):
    path = tmp_path / "p.json"
    assert "nothing recorded yet" in progress.show_progress(path)
    progress.record("01_numbers", "is_finite_report", correct=True, path=path)
    progress.record("01_numbers", "fp16-max", correct=False, path=path)
    progress.record("01_numbers", "fp16-max", correct=False, path=path)
    text = progress.show_progress(path)
    assert text in capsys.readouterr().out
    assert "01_numbers: 1 of 2 correct (2 answered, 3 attempts)" in text
    assert "  [x] is_finite_report (1 attempt)" in text
    assert "  [~] fp16-max (2 attempts)" in text
    assert progress.summary(path)["01_numbers"]["attempts"] == 3


def test_set_lab_names_the_default_lab(tmp_path):
    progress.set_lab("07_demo")
    try:
        progress.record(None, "q", correct=True, path=tmp_path / "p.json")
        assert "07_demo" in progress.load(tmp_path / "p.json")["labs"]
        with pytest.raises(ValueError, match="lab='' must be a non-empty string"):
            progress.set_lab("")
    finally:
        progress.set_lab("unknown")


def test_a_first_solve_after_the_answer_was_shown_is_told_apart(tmp_path, capsys):
    path = tmp_path / "p.json"
    progress.record("lab", "alone", correct=True, path=path)
    progress.record("lab", "alone", correct=False, answered=False, answer_shown=True, path=path)
    progress.record("lab", "helped", correct=False, path=path)
    progress.record("lab", "helped", correct=False, answered=False, answer_shown=True,
                    path=path)
    helped = progress.record("lab", "helped", correct=True, path=path)
    assert helped["solved_after_answer"] and helped["answer_shown"]
    alone = progress.entry("lab", "alone", path=path)
    assert alone["answer_shown"] and not alone["solved_after_answer"]
    assert progress.summary(path)["lab"] == {"seen": 2, "answered": 2, "correct": 2,
                                             "attempts": 3, "after_answer": 1}
    text = progress.show_progress(path)
    assert "lab: 2 of 2 correct (2 answered, 3 attempts); 1 of them after seeing the answer" \
        in text
    assert "  [x] alone (1 attempt, solution seen)" in text
    assert "  [x] helped (2 attempts, solved after seeing the solution)" in text


def test_a_bad_answer_flag_is_repaired_with_one_warning(tmp_path):
    path = tmp_path / "p.json"
    entry = {"kind": "exercise", "answered": True, "correct": True, "attempts": 1,
             "hints_used": 0, "first_seen": None, "last_attempt": None, "solved_at": None,
             "answer_shown": "yes", "solved_after_answer": 1}
    path.write_text(json.dumps({"version": 1, "labs": {"lab": {"a": entry}}}))
    with pytest.warns(UserWarning, match="'answer_shown' is not valid \\('yes'\\) \\(and 1 more"):
        loaded = progress.load(path)["labs"]["lab"]["a"]
    assert loaded["answer_shown"] is False and loaded["solved_after_answer"] is False
