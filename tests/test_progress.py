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
def test_corrupt_file_warns_and_starts_fresh(tmp_path, content):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.warns(UserWarning, match="could not be read.*starting fresh"):
        entry = progress.record("lab", "a", correct=True, path=path)
    assert entry["attempts"] == 1
    assert (tmp_path / "p.json.corrupt").read_text() == content  # set aside, not lost
    assert progress.load(path)["labs"]["lab"]["a"]["correct"]


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
