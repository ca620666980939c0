"""The guard keeps a good checkpoint: a keep-last-k rotation never deletes the newest
checkpoint whose weights and optimizer state are all finite, and a resume refuses a
checkpoint holding NaN or inf unless told to load it.

The incident: a run trained on NaN for longer than k checkpoints, its rotation deleted
every healthy one, and the auto-resume reloaded NaN weights. Here a real fault
(``nan_input``: a NaN reading in the batch of step 12, no guard) poisons the weights at
step 12; with a checkpoint every 3 steps and ``keep_checkpoints=2``, steps 15..30 would
rotate the last finite checkpoint (step 12, the state before the bad step) away.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nanlab import cli
from nanlab.debug.runs import load_run
from nanlab.errors import NanlabError
from nanlab.faults import run_fault
from nanlab.runs.checkpoint import CheckpointStore, nonfinite_state
from nanlab.train import TrainConfig, Trainer

NAN_AT, EVERY, STEPS, KEEP = 12, 3, 30, 2


def nan_run(out_dir=None, keep=KEEP):
    return run_fault("nan_input", at_step=NAN_AT, steps=STEPS, checkpoint_every=EVERY,
                     keep_checkpoints=keep, out_dir=str(out_dir) if out_dir else None)


def one_line(e: Exception, *words: str) -> str:
    text = str(e)
    assert "\n" not in text, text
    for word in words:
        assert word in text, (word, text)
    return text


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "folder"])
def test_a_nan_run_keeps_its_last_finite_checkpoint(tmp_path, on_disk):
    run = nan_run(tmp_path / "run" if on_disk else None)
    assert run.record.first_nonfinite_step == NAN_AT
    store = run.trainer.checkpoints
    # the newest two, and step 12 (the state before the NaN batch) kept beyond them
    assert store.steps() == [NAN_AT, STEPS - EVERY, STEPS]
    assert [store.is_finite(s) for s in store.steps()] == [True, False, False]
    assert nonfinite_state(store.load(NAN_AT)) == []
    if on_disk:
        names = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
        assert names == ["ckpt_000012.pt", "ckpt_000027.pt", "ckpt_000030.pt"], names
    kept = [e for e in run.record.events if e["kind"] == "checkpoint_kept"]
    assert len(kept) == 1 and kept[0]["checkpoint"] == NAN_AT, kept  # said once, when it happened
    assert kept[0]["step"] == NAN_AT + KEEP * EVERY and kept[0]["keep"] == KEEP


def test_keep_zero_keeps_every_checkpoint_as_before():
    run = nan_run(keep=0)
    assert run.trainer.checkpoints.steps() == list(range(0, STEPS + 1, EVERY))
    assert not [e for e in run.record.events if e["kind"] == "checkpoint_kept"]
    assert TrainConfig().keep_checkpoints == 0
    with pytest.raises(NanlabError) as e:
        TrainConfig(keep_checkpoints=-1)
    one_line(e.value, "keep_checkpoints=-1")


def states(*finite: bool) -> list[dict]:
    w = [torch.ones(3), torch.tensor([1.0, float("nan"), 2.0])]
    return [{"model": {"w": w[not ok]}, "optimizer": {"state": {}}} for ok in finite]


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "folder"])
def test_the_store_rotates_and_spares_the_newest_finite(tmp_path, on_disk):
    store = CheckpointStore(tmp_path / "ckpt" if on_disk else None, keep=2)
    for step, state in enumerate(states(True, True, True)):
        store.save(step, state)
    assert store.steps() == [1, 2] and store.kept_finite is None  # healthy: the newest k only
    for step, state in zip((3, 4, 5), states(False, False, False), strict=True):
        store.save(step, state)
    assert store.steps() == [2, 4, 5] and store.kept_finite == 2
    store.save(6, states(True)[0])  # finite again: nothing is kept beyond k any more
    assert store.steps() == [5, 6] and store.kept_finite is None
    # Adam's v overflowing to inf with finite weights is not a good state either
    bad_v = {"model": {"w": torch.ones(2)},
             "optimizer": {"state": {0: {"exp_avg_sq": torch.tensor([float("inf")])}}}}
    store.save(7, bad_v)
    store.save(8, bad_v)
    assert store.steps() == [6, 7, 8] and store.kept_finite == 6
    if on_disk:  # a new process reads the folder: finiteness from the files themselves
        again = CheckpointStore(tmp_path / "ckpt", keep=2)
        assert again.newest_finite() == 6
        again.save(9, bad_v)
        assert again.steps() == [6, 8, 9]


def test_a_crash_mid_rotation_leaves_the_finite_checkpoint(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path, keep=1)
    for step, state in enumerate(states(True, True, False, False)):
        store.save(step, state)
    assert store.steps() == [1, 3]
    calls = []

    def unlink_then_crash(self, missing_ok=False):
        calls.append(self.name)
        raise OSError("the machine went down mid-rotation")

    monkeypatch.setattr(Path, "unlink", unlink_then_crash)
    with pytest.raises(OSError):
        store.save(4, states(False)[0])
    monkeypatch.undo()
    assert calls == ["ckpt_000003.pt"]  # step 1, the finite one, was never a candidate
    assert CheckpointStore(tmp_path).newest_finite() == 1


def test_resume_refuses_a_nan_checkpoint_in_one_line_and_loads_it_when_told(tmp_path):
    out = tmp_path / "run"
    run = nan_run(out)
    config = run.trainer.config
    rows = (out / "steps.jsonl").read_text()
    with pytest.raises(NanlabError) as e:
        Trainer(config).run(resume_from=STEPS)
    one_line(e.value, "ckpt_000030.pt", "non-finite", "model.", "NaN",
             f"the newest finite checkpoint, step {NAN_AT}", "allow_nonfinite=True")
    assert (out / "steps.jsonl").read_text() == rows  # refused before anything was written
    with pytest.raises(NanlabError) as e:  # a checkpoint file: the same refusal
        Trainer(config).run(resume_from=out / "checkpoints" / "ckpt_000027.pt")
    one_line(e.value, "ckpt_000027.pt", f"step {NAN_AT}")
    trainer = Trainer(config)
    with pytest.raises(NanlabError) as e:
        trainer.restore(STEPS)
    one_line(e.value, "ckpt_000030.pt", f"step {NAN_AT}")
    trainer.restore(NAN_AT)  # the finite one loads as before
    assert trainer.step == NAN_AT
    replay = load_run(out).trainer  # a replay of the recorded run may show its NaN state
    replay.restore(STEPS)
    assert nonfinite_state(replay.state_dict())
    told = Trainer(config)
    told.run(resume_from=STEPS - EVERY, allow_nonfinite=True)
    assert any(e["kind"] == "resume" and e["step"] == STEPS - EVERY for e in told.record.events)
    assert not told.record.steps[STEPS - EVERY]["finite"]  # it did train on the NaN state


def cli_run(capsys, *args):
    status = cli.main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_cli_resume_refuses_nan_and_names_the_finite_step(tmp_path, capsys):
    out = str(tmp_path / "run")
    status, printed, _ = cli_run(capsys, "run", "--fault", "nan_input", "--set",
                                 f"at_step={NAN_AT}", "--steps", str(STEPS), "--checkpoint-every",
                                 str(EVERY), "--config", f"keep_checkpoints={KEEP}", "--out", out,
                                 "--json")
    assert status == 3 and json.loads(printed)["outcome"] == "nonfinite"
    status, _, err = cli_run(capsys, "run", "--out", out, "--resume")
    assert status == 2, err
    line = one_line(err.strip(), "ckpt_000030.pt", "non-finite", f"--resume {NAN_AT}",
                    "--allow-nonfinite")
    assert line.startswith("nanlab: error: --resume")
    status, _, err = cli_run(capsys, "run", "--out", out, "--allow-nonfinite")
    assert status == 2 and "without --resume" in err
    status, _, err = cli_run(capsys, "run", "--out", out, "--resume", "7", "--json")
    assert status == 2 and "no checkpoint of step 7" in err
    # from the finite step: the same fault at step 12 poisons it again (exit 3, not refused)
    status, printed, _ = cli_run(capsys, "run", "--out", out, "--resume", str(NAN_AT), "--json")
    assert status == 3, printed
    events = [json.loads(x) for x in (Path(out) / "events.jsonl").read_text().splitlines()]
    resumes = [e for e in events if e["kind"] == "resume"]
    assert resumes[-1]["step"] == NAN_AT and resumes[-1]["source"].endswith("ckpt_000012.pt")
    status, printed, _ = cli_run(capsys, "run", "--out", out, "--resume", "--allow-nonfinite",
                                 "--json")
    assert status == 3 and json.loads(printed)["outcome"] == "nonfinite"
