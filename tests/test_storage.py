"""The disk's failures named for what they are, and run folders that cannot be turned
against the machine: a full disk, no permission, a link out of the folder, a FIFO, a
device. Each is one line (``StorageError``, or NanlabError for a reader), never a hang,
a read without end, a file written outside the folder, or a training cause.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from nanlab import cli
from nanlab.errors import NanlabError, StorageError
from nanlab.faults.mystery import grade, seal
from nanlab.runs.atomic import atomic_write, open_append, read_capped, storage_error
from nanlab.runs.record import RunRecord
from nanlab.train import TrainConfig, Trainer


def quick(out: Path, **kw) -> TrainConfig:
    return TrainConfig(**{"steps": 30, "checkpoint_every": 10, "record_every": 10,
                          "progress": False, "out_dir": str(out), **kw})


def rows(folder: Path, stream: str = "steps") -> list[dict]:
    return [json.loads(line) for line in (folder / f"{stream}.jsonl").read_text().splitlines()]


# -- a full disk -------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB tmpfs (root on Linux); skipped where a test cannot mount one."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_full_disk_is_named_exit_7_and_the_run_resumes_once_there_is_room(small_disk,
                                                                            capsys):
    out = small_disk / "run"
    code = cli.main(["run", "--out", str(out), "--steps", "30", "--checkpoint-every", "10"])
    text = capsys.readouterr().out
    assert code == cli.EXIT_CODE_STORAGE == 7
    assert "no space left on device" in text and "outcome: storage" in text
    assert "crashed" not in text and "Traceback" not in text
    [error] = [e for e in rows(out, "events") if e["kind"] == "error"]
    assert error["storage"] == "no space left on device"
    assert [r["step"] for r in rows(out)] == list(range(error["step"]))  # every row kept
    assert not [p for p in out.rglob("*.tmp")]  # the half-written checkpoint is gone
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    assert cli.main(["run", "--out", str(out), "--resume"]) == 0
    assert [r["step"] for r in rows(out)] == list(range(30))


def test_a_failed_torch_save_on_a_nearly_full_disk_is_no_space(tmp_path, monkeypatch):
    """torch.save's C++ writer says only "unexpected pos"; the space left says why."""
    def full_disk_save(obj, f, *a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    class NoRoom:
        f_bavail, f_frsize = 0, 4096

    monkeypatch.setattr(torch, "save", full_disk_save)
    monkeypatch.setattr(os, "statvfs", lambda path: NoRoom())
    trainer = Trainer(quick(tmp_path / "run"))
    with pytest.raises(StorageError, match="no space left on device; free some space"):
        trainer.run()
    assert trainer.record.manifest["status"] == "storage"


def test_the_errors_are_classified_by_number():
    assert storage_error(OSError(errno.EDQUOT, "Disk quota exceeded"), "x").reason == \
        "no space left on device"
    assert "permission denied" in storage_error(PermissionError(errno.EACCES, "no"), "x").reason
    assert "read-only" in storage_error(OSError(errno.EROFS, "ro"), "x").reason
    wrapped = RuntimeError("writer failed")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert storage_error(wrapped, "x").reason == "no space left on device"
    assert storage_error(KeyError("no"), "x") is None


def test_a_folder_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    import tempfile

    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(StorageError, match="permission denied .*choose a folder this user"):
        atomic_write(tmp_path / "manifest.json", "{}")


# -- hostile folders ---------------------------------------------------------------------
def test_a_run_never_writes_through_a_link_out_of_its_folder(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "steps.jsonl").symlink_to(outside / "x.txt")  # dangling: the run would create it
    with pytest.raises(StorageError, match="steps.jsonl: is a symbolic link"):
        Trainer(quick(run, steps=5, checkpoint_every=0)).run()
    assert not (outside / "x.txt").exists()


def test_a_fifo_in_a_run_folder_neither_blocks_a_run_nor_a_reader(tmp_path):
    run = tmp_path / "run"
    Trainer(quick(run, steps=5, checkpoint_every=0)).run()
    (run / "steps.jsonl").unlink()
    os.mkfifo(run / "steps.jsonl")
    with pytest.raises(NanlabError, match="steps.jsonl: is not a regular file"):
        RunRecord.load(run)
    with pytest.raises(StorageError, match="not a regular file"):
        open_append(run / "steps.jsonl")


def test_a_link_to_an_endless_device_is_refused_not_read(tmp_path):
    run = tmp_path / "run"
    Trainer(quick(run, steps=5, checkpoint_every=0)).run()
    (run / "events.jsonl").unlink()
    (run / "events.jsonl").symlink_to("/dev/zero")
    with pytest.raises(NanlabError, match="events.jsonl: is a symbolic link"):
        RunRecord.load(run)


def test_readers_cap_the_size_of_a_file(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text("{}" + " " * 100)
    with pytest.raises(StorageError, match="over the cap of 10 bytes"):
        read_capped(path, 10)


def test_a_grade_never_appends_through_a_link(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(
        {"fault": {"sealed": seal({"name": "nan_input", "params": {}})}}))
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (folder / "answers.jsonl").symlink_to(victim)
    with pytest.raises(NanlabError, match="answers.jsonl: is a symbolic link"):
        grade(folder, "lr")
    assert victim.read_text() == "keep me\n"


def test_a_grade_that_cannot_be_recorded_is_not_graded(tmp_path, monkeypatch):
    import nanlab.faults.mystery as mystery

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(
        {"fault": {"sealed": seal({"name": "nan_input", "params": {}})}}))

    def full(path, fresh=False):
        raise StorageError("no space left on device", path, "free some space")
    monkeypatch.setattr(mystery, "open_append", full)
    with pytest.raises(NanlabError, match="cannot be recorded, so it is not graded"):
        grade(folder, "lr")


# -- sizes -------------------------------------------------------------------------------
@pytest.mark.parametrize("setting", ["model.n_embd=16384", "model.vocab_size=1000000000",
                                     "model.block_size=1000000"])
def test_a_model_past_the_machines_memory_is_refused_before_a_folder_is_made(
        setting, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["run", "--out", str(out), "--config", setting]) == cli.EXIT_CODE_BAD_INPUT
    err = capsys.readouterr().err
    assert "GiB to train, more than this machine's" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_a_reader_that_goes_away_is_not_a_traceback(tmp_path, monkeypatch, capsys):
    """``nanlab faults --json | head -c 1``: the pipe closes under print."""
    sink = open(tmp_path / "sink", "w")  # noqa: SIM115 - its fd is dup2-ed over

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

        def flush(self):
            pass

        def fileno(self):
            return sink.fileno()

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert cli.main(["faults", "--json"]) == 1
    assert "Traceback" not in capsys.readouterr().err
    sink.close()


def test_a_guard_attached_to_nothing_is_one_line():
    from nanlab.guard import Guard

    with pytest.raises(NanlabError, match="Guard.attach needs a nanlab Trainer; got NoneType"):
        Guard("skip").attach(None)


def test_a_compressed_checkpoint_is_refused_before_it_inflates(tmp_path):
    import io
    import zipfile

    from nanlab.runs.checkpoint import safe_load

    buf = io.BytesIO()
    torch.save({"w": torch.zeros(1000)}, buf)
    plain = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    with zipfile.ZipFile(tmp_path / "c.pt", "w", compression=zipfile.ZIP_DEFLATED) as z:
        for info in plain.infolist():
            z.writestr(info.filename, plain.read(info.filename))
    with pytest.raises(NanlabError, match="compressed entr.*torch.save writes them uncompressed"):
        safe_load(tmp_path / "c.pt")
    assert safe_load(buf.getvalue())["w"].shape == (1000,)  # what torch.save wrote loads
    os.mkfifo(tmp_path / "f.pt")
    with pytest.raises(NanlabError, match="f.pt: is not a regular file"):
        safe_load(tmp_path / "f.pt")  # and does not hang


def test_diagnose_names_no_training_cause_for_a_run_stopped_by_its_disk(tmp_path, monkeypatch):
    from nanlab.debug import diagnose

    def full_disk_save(obj, f, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    run = tmp_path / "run"
    trainer = Trainer(quick(run))
    real_save = torch.save
    calls = {"n": 0}

    def second_fails(obj, f, *a, **k):  # the first checkpoint lands, the second does not
        calls["n"] += 1
        return (real_save if calls["n"] == 1 else full_disk_save)(obj, f, *a, **k)
    monkeypatch.setattr(torch, "save", second_fails)
    with pytest.raises(StorageError):
        trainer.run()
    monkeypatch.setattr(torch, "save", real_save)
    with pytest.raises(NanlabError, match="on no space left on device, not on a training"):
        diagnose(str(run))
    assert cli.main(["diagnose", str(run)]) == cli.EXIT_CODE_BAD_INPUT


def test_a_checkpoint_past_the_recorded_rows_bounds_nothing(tmp_path):
    from nanlab.debug import load_run

    run = tmp_path / "run"
    Trainer(quick(run, steps=20)).run()
    (run / "checkpoints" / "ckpt_999999999.pt").write_bytes(b"")
    with pytest.raises(NanlabError, match="ckpt_999999999.pt: a checkpoint of step 999999999, "
                                          "past the 20 recorded steps"):
        load_run(run)


def test_an_lr_fault_on_an_optimizer_without_groups_is_refused_at_inject():
    from nanlab import faults

    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    opt.param_groups.clear()
    with pytest.raises(NanlabError, match="param groups each have an lr; this SGD has 0"):
        faults.inject("high_lr", model=torch.nn.Linear(2, 1), optimizer=opt,
                      batches=lambda s: (torch.ones(2, 2), torch.ones(2, 1)))


def test_a_config_error_is_caught_before_a_folder_is_written(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["run", "--out", str(out), "--config", "accum_steps=64"]) == 2
    assert "accum_steps=64 is more than the batch's 32 rows" in capsys.readouterr().err
    assert not out.exists()


def test_the_default_loss_on_a_foreign_batch_says_what_to_pass():
    trainer = Trainer(TrainConfig(steps=2, progress=False), model=torch.nn.Linear(2, 1),
                      batches=lambda step: ["a", "b"])
    with pytest.raises(NanlabError, match="default loss .* got list; for your own batches pass "
                                          "Trainer\\(loss_fn="):
        trainer.run()


def test_a_grade_with_a_folder_for_its_answers_is_one_line(tmp_path):
    folder = tmp_path / "m"
    (folder / "answers.jsonl").mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(
        {"fault": {"sealed": seal({"name": "nan_input", "params": {}})}}))
    with pytest.raises(NanlabError, match="answers.jsonl: is not a regular file"):
        grade(folder, "lr")
