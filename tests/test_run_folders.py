"""Run folders as a careless or hostile user leaves them: one test per defect found, then
properties (hypothesis) over random corruptions of a real run folder.

Every reader (``RunRecord.load``, ``CheckpointStore.load``, ``load_run``, ``nanlab diagnose``
/ ``locate``) either succeeds or raises one NanlabError line, never another exception.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanlab import cli
from nanlab.checkpoint import CheckpointStore
from nanlab.debug.runs import load_run
from nanlab.errors import NanlabError
from nanlab.faults import run_fault
from nanlab.faults.mystery import grade, reveal, seal
from nanlab.record import RunRecord
from nanlab.train import TrainConfig, Trainer


def quick(out: Path | None, **kw) -> TrainConfig:
    return TrainConfig(**{"steps": 20, "checkpoint_every": 10, "record_every": 10,
                          "progress": False, "out_dir": str(out) if out else None, **kw})


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> Path:
    """A real small run folder: 20 steps, checkpoints at 0, 10 and 20 (made once)."""
    out = tmp_path_factory.mktemp("runs") / "clean"
    Trainer(quick(out)).run()
    return out


@pytest.fixture
def run_dir(clean_run, tmp_path) -> Path:
    """A copy of the clean run to damage."""
    return Path(shutil.copytree(clean_run, tmp_path / "run"))


def one_line_error(excinfo, *fragments: str) -> str:
    text = str(excinfo.value)
    assert "\n" not in text and "Traceback" not in text
    for f in fragments:
        assert f in text, (f, text)
    return text


# -- 1. a run folder is never overwritten --------------------------------------------------
def test_a_new_run_into_a_folder_holding_a_run_is_refused_before_anything_is_written(run_dir):
    before = snapshot(run_dir)
    trainer = Trainer(quick(run_dir, steps=5))
    with pytest.raises(NanlabError) as e:
        trainer.run()
    one_line_error(e, str(run_dir), "overwrite=True", "resume_from")
    with pytest.raises(NanlabError):
        run_fault("nan_input", steps=5, out_dir=str(run_dir))
    assert snapshot(run_dir) == before  # nothing of the old run lost, nothing added


def test_overwrite_removes_the_old_runs_record_checkpoints_and_evidence_first(run_dir):
    (run_dir / "evidence").mkdir()
    (run_dir / "evidence" / "step_000012.pt").write_bytes(b"old")
    (run_dir / "notes.txt").write_text("mine")
    Trainer(quick(run_dir, steps=6, checkpoint_every=3), overwrite=True).run()
    rec = RunRecord.load(run_dir)
    assert [r["step"] for r in rec.steps] == list(range(6))
    assert CheckpointStore(run_dir / "checkpoints").steps() == [0, 3, 6]
    assert not (run_dir / "evidence").exists()
    assert (run_dir / "notes.txt").read_text() == "mine"  # not part of a run: kept
    assert "overwrite" not in rec.manifest["config"]  # a one-off action, not a setting


def test_a_resume_into_a_folder_holding_its_run_is_still_allowed(run_dir):
    Trainer(quick(run_dir, steps=30)).run(resume_from=20)
    assert [r["step"] for r in RunRecord.load(run_dir).steps] == list(range(30))


def test_cli_run_overwrite_and_resume(tmp_path, capsys):
    out = str(tmp_path / "r")
    base = ["run", "--checkpoint-every", "2", "--out", out, "--json"]
    assert cli.main([*base, "--steps", "4"]) == 0
    assert cli.main([*base, "--steps", "4"]) == 2  # refused: it holds a run
    assert cli.main([*base, "--steps", "4", "--overwrite"]) == 0
    assert [r["step"] for r in RunRecord.load(out).steps] == list(range(4))
    assert cli.main([*base, "--steps", "6", "--resume"]) == 0
    rec = RunRecord.load(out)
    assert [r["step"] for r in rec.steps] == list(range(6))
    assert [e["kind"] for e in rec.events] == ["resume"] and rec.events[0]["step"] == 4
    assert cli.main([*base, "--resume", "--overwrite"]) == 2
    capsys.readouterr()


# -- 2. Ctrl-C --------------------------------------------------------------------------------
def test_sigint_saves_a_checkpoint_records_a_stop_and_marks_the_manifest(tmp_path):
    out = tmp_path / "r"

    def ctrl_c_at_7(tr, info):
        if tr.step == 7:
            raise KeyboardInterrupt

    trainer = Trainer(quick(out, checkpoint_every=5))
    trainer.add_callback("on_step_end", ctrl_c_at_7)
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    rec = RunRecord.load(out)
    assert rec.manifest["status"] == "interrupted"
    assert rec.manifest["stop_reason"] == "interrupted (SIGINT)"
    assert rec.events[-1] == {"kind": "stop", "step": 7, "reason": "interrupted (SIGINT)"}
    assert CheckpointStore(out / "checkpoints").steps() == [0, 5, 7]
    resumed = Trainer(quick(out, checkpoint_every=5))
    resumed.run(resume_from=7)
    assert [r["step"] for r in RunRecord.load(out).steps] == list(range(20))
    assert RunRecord.load(out).manifest["status"] == "finished"


def test_cli_exits_130_on_ctrl_c_with_the_run_marked_interrupted(tmp_path, monkeypatch, capsys):
    step = Trainer.train_step

    def train_step(self, *a, **kw):
        if self.step == 3:
            raise KeyboardInterrupt
        return step(self, *a, **kw)

    monkeypatch.setattr(Trainer, "train_step", train_step)
    out = tmp_path / "r"
    assert cli.main(["run", "--steps", "10", "--out", str(out), "--json"]) == 130
    assert RunRecord.load(out).manifest["status"] == "interrupted"
    assert 3 in CheckpointStore(out / "checkpoints").steps()
    capsys.readouterr()


# -- 3. readers answer a corrupt folder with one line ---------------------------------------
@pytest.mark.parametrize("damage, what", [
    (b"", "is empty"),
    (b'{"config": {"steps": 2', "not valid JSON (line 1, column"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[1, 2]", "not an object"),
])
def test_a_damaged_manifest_is_one_line_naming_the_file(run_dir, damage, what, capsys):
    (run_dir / "manifest.json").write_bytes(damage)
    for read in (RunRecord.load, load_run, reveal):
        with pytest.raises(NanlabError) as e:
            read(run_dir)
        one_line_error(e, str(run_dir / "manifest.json"), what)
    assert cli.main(["diagnose", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nanlab: error:") and what in err


def test_a_bad_json_lines_row_names_the_file_and_line_a_torn_last_line_is_skipped(run_dir):
    path = run_dir / "steps.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + "{oops\n" + "".join(lines[4:]))
    with pytest.raises(NanlabError) as e:
        RunRecord.load(run_dir)
    one_line_error(e, f"{path}: line 4 is not valid JSON")
    path.write_text("".join(lines[:3]) + '{"step": 3, "lo')  # a crash mid-write
    with pytest.warns(UserWarning, match="line 4 is torn"):
        assert len(RunRecord.load(run_dir).steps) == 3
    path.write_text("".join(lines[:3]) + '{"step": "three"}\n')
    with pytest.raises(NanlabError) as e:
        RunRecord.load(run_dir)
    one_line_error(e, f"{path}: line 4: 'step' must be an integer")


@pytest.mark.parametrize("damage", ["empty", "random", "truncated"])
def test_a_damaged_checkpoint_is_one_line_naming_the_file(run_dir, damage):
    path = run_dir / "checkpoints" / "ckpt_000010.pt"
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "random": bytes(range(256)) * 4,
                      "truncated": data[:len(data) // 2]}[damage])
    with pytest.raises(NanlabError) as e:
        CheckpointStore(run_dir / "checkpoints").load(10)
    one_line_error(e, str(path), "not a readable checkpoint")


def test_a_stray_checkpoint_name_is_ignored(run_dir, capsys):
    shutil.copy(run_dir / "checkpoints" / "ckpt_000020.pt", run_dir / "checkpoints" /
                "ckpt_final.pt")
    (run_dir / "checkpoints" / "ckpt_x.pt").write_bytes(b"")
    assert CheckpointStore(run_dir / "checkpoints").steps() == [0, 10, 20]
    assert load_run(run_dir).trainer.checkpoints.steps() == [0, 10, 20]
    assert cli.main(["locate", str(run_dir), "--step", "12"]) == 0
    capsys.readouterr()


def test_a_crafted_manifest_cannot_make_a_replay_run_without_end(run_dir):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["config"]["steps"] = 10**9
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    config = load_run(run_dir).trainer.config
    assert config.steps <= 20 + 100  # bound by the 20 recorded rows, not the manifest
    assert config.decay_steps == 10**9  # the schedule (the recorded losses) kept
    manifest["config"]["steps"] = -5  # TrainConfig's own checks apply
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(NanlabError) as e:
        load_run(run_dir)
    one_line_error(e, "manifest.json", "steps=-5")


def test_a_refused_pickle_says_safety_and_never_suggests_weights_only_false(run_dir):
    buf = io.BytesIO()
    torch.save({"step": 0, "model": io.StringIO("not a tensor")}, buf)
    path = run_dir / "checkpoints" / "ckpt_000000.pt"
    path.write_bytes(buf.getvalue())
    with pytest.raises(NanlabError) as e:
        CheckpointStore(run_dir / "checkpoints").load(0)
    text = one_line_error(e, str(path), "refused for safety", "weights_only=True")
    assert "weights_only=False" not in text


def test_mystery_grade_is_case_insensitive_and_trims(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(
        {"fault": {"sealed": seal({"name": "nan_input", "params": {}})}}))
    assert grade(folder, " NaN_Input ").startswith("right")
    (folder / "answers.jsonl").unlink()  # a fresh try: a right answer ends the grading
    assert grade(folder, "DATA").startswith("right")
    (folder / "manifest.json").write_text(json.dumps({"fault": {"sealed": "sealed:v1:!!"}}))
    with pytest.raises(NanlabError) as e:
        reveal(folder)
    one_line_error(e, "manifest.json", "damaged sealed fault")


# -- 4. properties: random damage, never a traceback ----------------------------------------
FILES = ["manifest.json", "steps.jsonl", "events.jsonl", "layers.jsonl",
         "checkpoints/ckpt_000010.pt", "checkpoints/ckpt_000000.pt"]


@st.composite
def corruption(draw):
    name = draw(st.sampled_from(FILES))
    op = draw(st.sampled_from(["truncate", "replace", "append", "delete_lines"]))
    return name, op, draw(st.integers(0, 10**6)), draw(st.binary(min_size=1, max_size=24))


def damage(folder: Path, name: str, op: str, at: int, junk: bytes) -> None:
    path = folder / name
    data = path.read_bytes() if path.exists() else b""
    at = at % (len(data) + 1)
    if op == "truncate":
        data = data[:at]
    elif op == "replace":
        data = data[:at] + junk + data[at + len(junk):]
    elif op == "append":
        data = data + junk
    else:
        lines = data.splitlines(keepends=True)
        if lines:
            del lines[at % len(lines):at % len(lines) + 1 + junk[0] % 3]
        data = b"".join(lines)
    path.write_bytes(data)


def read_everything(folder: Path) -> None:
    """Every reader: succeeds, or raises NanlabError (anything else fails the property)."""
    for read in (RunRecord.load, load_run):
        try:
            read(folder)
        except NanlabError as e:
            assert "\n" not in str(e)
    store = CheckpointStore(folder / "checkpoints")
    for step in store.steps():
        try:
            store.load(step)
        except NanlabError as e:
            assert "\n" not in str(e)


def cli_one_line(args: list[str], capsys) -> None:
    capsys.readouterr()
    code = cli.main(args)
    err = capsys.readouterr().err
    assert code in (0, 2), (code, err)
    if code == 2:
        assert err.startswith("nanlab: error:") and err.count("\n") == 1, err


SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(corruption())
def test_property_random_damage_is_read_or_refused_in_one_line(clean_run, capsys, c):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(shutil.copytree(clean_run, Path(tmp) / "run"))
        damage(folder, *c)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a torn last line warns; this is about errors
            read_everything(folder)
            cli_one_line(["locate", str(folder)], capsys)
            cli_one_line(["diagnose", str(folder)], capsys)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)


@st.composite
def manifests(draw):
    """Random JSON objects, some shaped like a manifest (a config, a fault, fixes)."""
    m = draw(st.dictionaries(st.sampled_from(["config", "fault", "fixes", "seed", "x"]),
                             json_values, max_size=4))
    if draw(st.booleans()):
        m["config"] = draw(st.dictionaries(
            st.sampled_from(["steps", "lr", "seed", "model", "precision", "checkpoint_every",
                             "decay_steps", "device", "nope"]), json_values, max_size=4))
    return m


@SETTINGS
@given(manifests())
def test_property_random_json_manifests_are_read_or_refused_in_one_line(clean_run, capsys, m):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(shutil.copytree(clean_run, Path(tmp) / "run"))
        (folder / "manifest.json").write_text(json.dumps(m))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read_everything(folder)
            for read in (reveal, lambda f: grade(f, "lr")):
                try:
                    read(folder)
                except NanlabError as e:
                    assert "\n" not in str(e)
            cli_one_line(["locate", str(folder)], capsys)

