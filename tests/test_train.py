import math
from pathlib import Path

import numpy as np
import pytest
import torch

from nanlab.errors import NanlabError
from nanlab.runs.checkpoint import CheckpointStore
from nanlab.runs.record import RunRecord
from nanlab.toy.data import IGNORE_INDEX, CountingTask
from nanlab.train import TrainConfig, Trainer, lr_factor, train


def quick(**kw) -> TrainConfig:
    return TrainConfig(**{"steps": 30, "progress": False, **kw})


def test_batches_are_a_pure_function_of_seed_and_step():
    a, b = CountingTask(seed=3), CountingTask(seed=3)
    first = a(17)
    a(5), a(99)  # history does not matter
    again = b(17)
    assert torch.equal(first.tokens, again.tokens)
    assert torch.equal(first.features, again.features)
    assert not torch.equal(first.tokens, CountingTask(seed=4)(17).tokens)
    assert (first.targets[:, 0] == IGNORE_INDEX).all()
    assert torch.isfinite(first.features).all()


def test_same_seed_same_losses_different_seed_different():
    a, b, c = (train(quick(seed=s)).losses() for s in (1, 1, 2))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_baseline_learns_within_200_steps():
    losses = train(TrainConfig(steps=200, progress=False)).losses()
    assert losses[0] > 3.0  # about log(32) = 3.47 at the start
    assert losses[199] <= 0.1


def test_resume_reproduces_the_remaining_steps_exactly(tmp_path):
    full = Trainer(quick(steps=60, checkpoint_every=20, out_dir=str(tmp_path / "a")))
    record = full.run()
    ckpt = tmp_path / "a" / "checkpoints" / "ckpt_000020.pt"
    state = torch.load(ckpt, weights_only=True)  # loads with weights_only
    assert state["step"] == 20
    resumed = Trainer(quick(steps=60, checkpoint_every=20, out_dir=str(tmp_path / "b")))
    tail = resumed.run(resume_from=ckpt)
    assert [r["step"] for r in tail.steps] == list(range(20, 60))
    assert [r["loss"] for r in tail.steps] == [r["loss"] for r in record.steps[20:]]
    for p, q in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_resume_from_memory_checkpoint_step():
    trainer = Trainer(quick(steps=40, checkpoint_every=10))
    losses = [r["loss"] for r in trainer.run().steps]
    trainer.record.steps.clear()
    trainer.run(resume_from=10)
    assert [r["loss"] for r in trainer.record.steps] == losses[10:]


def test_a_resume_into_the_same_folder_appends_and_reads_as_one_run(tmp_path):
    out = str(tmp_path / "run")
    config = quick(steps=40, checkpoint_every=10, record_every=5, out_dir=out)

    def skip_some(tr, info):
        if info.step in (7, 22):
            info.skip, info.skip_reason = True, f"test {info.step}"

    def stop_at_25(tr, info):
        if tr.step == 25:
            tr.request_stop("interrupted")

    first = Trainer(config)
    first.add_callback("on_after_backward", skip_some)
    first.add_callback("on_step_end", stop_at_25)
    first.run()
    before = RunRecord.load(out)
    assert [r["step"] for r in before.steps] == list(range(25))
    # a new trainer (a new process) resumes from an earlier checkpoint into the same folder
    resumed = Trainer(config)
    resumed.add_callback("on_after_backward", skip_some)
    resumed.run(resume_from=Path(out) / "checkpoints" / "ckpt_000020.pt")
    after = RunRecord.load(out)
    assert [r["step"] for r in after.steps] == list(range(40))  # each step once, no gap
    assert after.steps[:20] == before.steps[:20]  # every earlier row kept as it was
    assert [r["loss"] for r in after.steps[20:25]] == [r["loss"] for r in before.steps[20:]]
    kept = [e for e in before.events if e["step"] < 20]
    assert after.events[:len(kept)] == kept and kept[0]["reason"] == "test 7"
    resume = after.events[len(kept)]
    assert resume["kind"] == "resume" and resume["step"] == 20
    assert resume["dropped"]["steps"] == 5  # steps 20..24, run again
    assert [(e["kind"], e["step"]) for e in after.events[len(kept) + 1:]] == [("skip", 22)]
    layers = {}
    for r in after.layers:
        layers[r["step"]] = layers.get(r["step"], 0) + 1
    assert sorted(layers) == list(range(0, 40, 5)) and len(set(layers.values())) == 1
    assert after.steps == resumed.record.steps  # the trainer's record is the whole run too


def test_checkpoints_are_written_atomically_and_listed(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(5, {"w": torch.ones(3)})
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt_000005.pt"]  # no temp file left
    assert store.nearest(7) == 5
    with pytest.raises(NanlabError, match="no checkpoint at or before step=3"):
        store.nearest(3)
    with pytest.raises(NanlabError, match="available steps"):
        store.load(6)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_runs_on_cpu(precision):
    trainer = Trainer(quick(steps=12, precision=precision, device="cpu"))
    record = trainer.run()
    assert record.first_nonfinite_step is None
    assert record.losses()[-1] < record.losses()[0]
    if precision == "fp16":
        assert isinstance(trainer.scaler, torch.amp.GradScaler)
        assert record.steps[0]["loss_scale"] == 2.0 ** 16
    else:
        assert trainer.scaler is None and record.steps[0]["loss_scale"] is None


def test_forward_backward_again_gives_the_same_gradients_under_a_grad_scaler():
    trainer = Trainer(quick(precision="fp16", device="cpu"))
    for _ in range(3):  # past step 0, whose scale of 65536 overflows
        trainer.train_step()
    batch, rng = trainer.batches(3), torch.get_rng_state()
    first = trainer.forward_backward(batch)
    grads = [p.grad.clone() for p in trainer.params]
    torch.set_rng_state(rng)
    again = trainer.forward_backward(batch)  # unscale_ ran already: by hand this time
    assert first.finite and (again.loss_value, again.grad_norm_value) == \
        (first.loss_value, first.grad_norm_value)
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, trainer.params, strict=True))
    assert trainer.train_step().finite  # and the step goes on as usual


def test_pure_fp16_keeps_weights_in_half():
    trainer = Trainer(quick(steps=2, precision="fp16-pure"))
    trainer.run()
    assert all(p.dtype == torch.float16 for p in trainer.model.parameters())


def test_per_layer_statistics_present_and_finite():
    record = train(quick(steps=21, record_every=10))
    assert sorted({r["step"] for r in record.layers}) == [0, 10, 20]
    names = record.layer_names()
    assert "blocks.0.attn.scores" in names and "lm_head" in names
    for r in record.layers:
        for key in ("grad_norm", "param_mean", "param_std", "act_absmax"):
            if r[key] is not None:
                assert math.isfinite(r[key]), (r["layer"], key)
    with_params = [r for r in record.layers if r["grad_norm"] is not None]
    assert len(with_params) >= 10
    names, steps, grid = record.layer_matrix("grad_norm")
    assert grid.shape == (len(names), 3) and np.isfinite(grid).all()


def test_record_round_trips_through_disk(tmp_path):
    record = train(quick(steps=12, out_dir=str(tmp_path)))
    loaded = RunRecord.load(tmp_path)
    assert loaded.steps == record.steps and loaded.layers == record.layers
    assert loaded.manifest["config"]["steps"] == 12
    assert loaded.manifest["seed"] == 0 and "torch" in loaded.manifest
    assert loaded.manifest["device"] == "cpu"


def test_warmup_then_cosine_schedule():
    c = TrainConfig(steps=100, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_factor(0, c) == pytest.approx(0.1)
    assert lr_factor(9, c) == pytest.approx(1.0)
    assert lr_factor(10, c) == pytest.approx(1.0)
    assert lr_factor(99, c) == pytest.approx(0.1, abs=1e-3)


def test_callbacks_can_skip_updates_and_stop():
    trainer = Trainer(quick(steps=20))
    before = [p.detach().clone() for p in trainer.model.parameters()]

    def skip_all(tr, info):
        info.skip, info.skip_reason = True, "test"
        if info.step == 4:
            tr.request_stop("enough")
            tr.request_stop("a second reason")  # the first one is kept

    trainer.add_callback("on_after_backward", skip_all)
    record = trainer.run()
    assert len(record.steps) == 5 and all(r["skipped"] for r in record.steps)
    assert [e["kind"] for e in record.events] == ["skip"] * 5 + ["stop"]
    assert record.events[-1]["reason"] == "enough" == record.manifest["stop_reason"]
    for p, q in zip(before, trainer.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_trainer_takes_a_foreign_model_and_loss():
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def batches(i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(32, 4, generator=g)
        return x, x.sum(1, keepdim=True)

    def loss_fn(m, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(m(x), y)

    record = Trainer(quick(steps=60, lr=1e-2), model=model, batches=batches, loss_fn=loss_fn).run()
    assert record.losses()[-1] < 0.2 * record.losses()[0]


@pytest.mark.parametrize("field, value", [
    ("steps", 0), ("precision", "fp8"), ("lr", -1.0), ("device", "tpu"),
    ("optimizer", "lion"), ("grad_clip", -1.0), ("batch_size", 1),
])
def test_bad_train_config_is_a_clear_error(field, value):
    with pytest.raises(NanlabError, match=field):
        TrainConfig(**{field: value})


def test_cuda_without_cuda_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(NanlabError, match="no CUDA GPU"):
        Trainer(quick(device="cuda"))


def test_a_module_swapped_after_the_build_keeps_its_per_layer_row():
    """Faults and fixes swap modules of a built run (a hand-written softmax, an FP8
    Linear): the per-layer statistics follow the module now under each name, so the
    swapped one's activations are recorded, not left None."""
    trainer = Trainer(TrainConfig(steps=1, progress=False))
    old = trainer.model.get_submodule("feat_proj")
    new = torch.nn.Linear(old.in_features, old.out_features)
    new.weight, new.bias = old.weight, old.bias  # the same weights, the optimizer's
    trainer.model.set_submodule("feat_proj", new)
    trainer.run()
    row = next(r for r in trainer.record.layers if r["layer"] == "feat_proj")
    assert row["act_absmax"] is not None and row["grad_norm"] > 0, row

