"""Gradient accumulation and the grad_accum family: the loop's own arithmetic goes wrong.

The Trainer's accumulation must equal one pass over the whole batch (padding and all);
each fault shows its signature within 300 steps, is cured by its fix, not by a wrong
one, and is diagnosed right.
"""

import dataclasses
from functools import partial

import numpy as np
import pytest
import torch
from shared_runs import DIAGNOSED, shared_diagnosis, shared_run

from nanlab import faults
from nanlab.analysis.judge import judge
from nanlab.analysis.signals import final_loss
from nanlab.debug.diagnose import diagnose
from nanlab.debug.grad_accum_checks import audit_gradient
from nanlab.errors import NanlabError
from nanlab.faults.grad_accum import mean_of_means as averaged_means
from nanlab.faults.matrix import run_cell
from nanlab.toy.data import IGNORE_INDEX
from nanlab.train import Trainer
from nanlab.train.accum import accumulate
from nanlab.train.config import TrainConfig

PADDED = {"pad_prob": 0.5, "model": {"vocab_size": 33, "pad_id": 32}}


def gradients(config: TrainConfig, batch, weight=None) -> tuple[float, torch.Tensor]:
    """The step's loss and all gradients, flattened, from a fresh model (same seed);
    ``weight``: the micro-batch loop's weighting, where a fault's loop differs."""
    trainer = Trainer(config)
    if weight is not None:
        trainer.accumulate = partial(accumulate, weight=weight)
    g = trainer.forward_backward(batch)
    return g.loss_value, torch.cat([p.grad.flatten() for p in trainer.params])


@pytest.fixture(scope="module")
def padded_batch():
    """A padded batch whose four micro-batches hold different numbers of targets."""
    config = TrainConfig(progress=False).replace(**PADDED)
    return config, Trainer(config).batches(3)


def test_token_weighted_accumulation_equals_one_pass_over_the_batch(padded_batch):
    config, batch = padded_batch
    from nanlab.train.accum import split_batch, target_count

    counts = [target_count(m) for m in split_batch(batch, 4)]
    assert len(set(counts)) > 1, counts  # the micro-batches differ: the test can fail
    loss1, grad1 = gradients(config, batch)
    loss4, grad4 = gradients(config.replace(accum_steps=4), batch)
    assert loss4 == pytest.approx(loss1, rel=1e-5)
    torch.testing.assert_close(grad4, grad1, rtol=1e-4, atol=1e-6)
    mean_loss, mean_grad = gradients(config.replace(accum_steps=4), batch, averaged_means)
    assert (mean_grad - grad1).norm() > 1e-3 * grad1.norm()  # the bug is a real difference


def test_an_all_masked_micro_batch_adds_nothing(padded_batch):
    config, batch = padded_batch
    rows = batch.targets.shape[0] // 4
    targets = batch.targets.clone()
    targets[:rows] = IGNORE_INDEX
    batch = dataclasses.replace(batch, targets=targets)
    loss1, grad1 = gradients(config, batch)
    loss4, grad4 = gradients(config.replace(accum_steps=4), batch)
    assert np.isfinite(loss4) and loss4 == pytest.approx(loss1, rel=1e-5)
    torch.testing.assert_close(grad4, grad1, rtol=1e-4, atol=1e-6)
    # the mean of means: 0 / 0 in the loss; cross_entropy's backward sends 0 for it
    loss_mm, grad_mm = gradients(config.replace(accum_steps=4), batch, averaged_means)
    assert np.isnan(loss_mm) and torch.isfinite(grad_mm).all()
    # a token-count weighting of the means (mean * n / N) would not help: NaN * 0 = NaN
    assert torch.isnan(torch.tensor(float("nan")) * 0)


def test_accumulation_on_a_model_nanlab_did_not_make():
    """A dict batch, a torch.nn.TransformerEncoder and your own loss: the labels are found
    as the batch's last integer tensor, and 4 micro-batches of 2 rows equal one pass."""
    from foreign_models import TinyEncoderLM, lm_batches, lm_loss

    batch = lm_batches(0)
    batch["y"][:2, 3:] = IGNORE_INDEX  # the first micro-batch is mostly masked
    batch["y"][2:4, :] = IGNORE_INDEX  # the second entirely
    grads = {}
    for accum in (1, 4):
        torch.manual_seed(0)
        trainer = Trainer(TrainConfig(accum_steps=accum, progress=False),
                          model=TinyEncoderLM(), batches=lm_batches, loss_fn=lm_loss)
        g = trainer.forward_backward(batch)
        grads[accum] = (g.loss_value, torch.cat([p.grad.flatten() for p in trainer.params]))
    assert np.isfinite(grads[4][0]) and grads[4][0] == pytest.approx(grads[1][0], rel=1e-5)
    torch.testing.assert_close(grads[4][1], grads[1][1], rtol=1e-4, atol=1e-6)


def test_the_grad_scaler_updates_once_per_optimizer_step():
    trainer = Trainer(TrainConfig(precision="fp16", accum_steps=4, steps=2, progress=False))
    trainer.train_step()
    trainer.train_step()
    # two optimizer steps, two updates (growth_tracker counts unskipped updates; a
    # skipped one resets it and halves the scale)
    tracker = int(trainer.scaler._growth_tracker)
    halvings = round(np.log2(65536.0 / trainer.scaler.get_scale()))
    assert tracker + halvings == 2, (tracker, trainer.scaler.get_scale())


def test_accum_steps_is_checked():
    with pytest.raises(NanlabError, match="accum_steps=0"):
        TrainConfig(accum_steps=0)
    with pytest.raises(NanlabError, match="accum_norm='mean_of_means', a fault switch"):
        TrainConfig.from_dict({"accum_norm": "mean_of_means"})  # an older run's manifest
    with pytest.raises(NanlabError, match="accum_steps=64 is more than the batch's 32 rows"):
        Trainer(TrainConfig(accum_steps=64, progress=False)).train_step()


# -- the faults --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def clean_final():
    return final_loss(faults.run_fault(None, accum_steps=4).record.losses())


@pytest.fixture(scope="module")
def mean_of_means():
    return shared_run("accum_mean_of_means", **DIAGNOSED)  # test_diagnose's run


def test_mean_of_means_spikes_after_the_short_micro_batches(mean_of_means):
    losses = mean_of_means.record.losses()
    verdict = judge(mean_of_means)
    assert verdict.kind == "spike" and 140 <= verdict.step < 160, verdict
    before = np.median(losses[130:140])
    assert np.nanmax(losses[140:160]) > 4 * before  # measured: 0.62 at step 150, 5.6x 0.11
    assert np.isfinite(losses).all()


def test_mean_of_means_is_not_cured_by_clipping(clean_final):
    """(token_weighted cures it: test_faults' cure test, on the matrix's judge.)"""
    assert run_cell("accum_mean_of_means", "grad_clip", 200, 0, clean_final).outcome \
        == "not cured"


def test_mean_of_means_diagnosed():
    d = shared_diagnosis("accum_mean_of_means")  # test_diagnose's diagnosis
    assert (d.cause, d.detail, d.fix, d.fix_verified) == (
        "grad_accum", "accum_mean_of_means", "token_weighted", True), d.report()
    assert any("micro-batch" in f.text and f.step == "data" for f in d.findings)


@pytest.fixture(scope="module")
def masked():
    return shared_run("accum_masked_micro_batch", **DIAGNOSED)


def test_an_all_masked_micro_batch_makes_the_step_nan(masked):
    assert masked.record.first_nonfinite_step == 40
    assert judge(masked).kind == "nonfinite"


def test_masked_micro_batch_is_not_cured_by_the_batch_check(clean_final):
    """(token_weighted cures it: test_faults' cure test.) The step's whole batch has
    targets, so validate_data lets it through."""
    wrong = run_cell("accum_masked_micro_batch", "validate_data", 200, 0, clean_final)
    assert wrong.outcome == "not cured" and wrong.first_bad_step == 40


def test_masked_micro_batch_diagnosed():
    d = shared_diagnosis("accum_masked_micro_batch")
    assert (d.cause, d.detail, d.fix, d.fix_verified) == (
        "grad_accum", "accum_masked_micro_batch", "token_weighted", True), d.report()
    data = [f for f in d.findings if f.step == "data" and f.verdict != "hint"]
    assert data[0].verdict == "ruled out", d.report()  # the step's batch passes the check
    assert data[1].verdict == "cause" and "0 / 0" in data[1].text


@pytest.fixture(scope="module")
def scaler_run():
    return shared_run("scaler_update_micro_batch", **DIAGNOSED)


def test_scaler_update_per_micro_batch_is_pytorchs_own_error(scaler_run):
    assert scaler_run.error_step == 0
    assert "No inf checks were recorded prior to update" in scaler_run.error
    assert judge(scaler_run).kind == "error"


def test_scaler_update_diagnosed_cured_by_replay_not_by_an_lr_cut():
    d = shared_diagnosis("scaler_update_micro_batch")  # proves the fix by a replay
    assert (d.cause, d.detail, d.fix, d.fix_verified) == (
        "grad_accum", "scaler_update_micro_batch", "scaler_update_per_step", True), d.report()
    assert any(f.step == "amp" and "No inf checks" in f.text for f in d.findings)
    wrong = faults.run_fault("scaler_update_micro_batch", fixes=["lr_div10"], steps=100)
    assert wrong.error_step == 0 and "No inf checks" in wrong.error


def test_unscale_per_micro_batch_mixes_scaled_and_unscaled_gradients():
    """The silent variant: after a micro-batch's unscale_ and update, the next backward
    adds scaled gradients onto unscaled ones, and the step unscales them all again: the
    step's gradient is the last micro-batch's / the scale (earlier ones are lost)."""
    config = faults.fault_config("scaler_update_micro_batch", per_micro_batch="unscale_update")
    batch = Trainer(config).batches(0)
    good = Trainer(config).forward_backward(batch)  # the trainer's own loop
    bad = faults.build_fault_trainer("scaler_update_micro_batch", config,
                                     {"per_micro_batch": "unscale_update"}
                                     ).forward_backward(batch)
    assert bad.finite and good.finite
    ratio = good.grad_norm_value / bad.grad_norm_value
    assert 1e4 < ratio < 1e6, ratio  # about the scale, 65536, times 4 micro-batches


def test_the_silent_scaler_variant_is_found_by_the_gradient_audit():
    """Its curve learns (healthy by its own start), so only the audit can see it: the
    loop recorded a gradient about 1/scale of the loss's; the fix is proven by replay."""
    run = faults.run_fault("scaler_update_micro_batch", per_micro_batch="unscale_update")
    assert judge(run).healthy  # what a loss-curve check alone concludes
    d = diagnose(run)
    assert (d.symptom, d.cause, d.detail, d.fix, d.fix_verified) == (
        "silent", "grad_accum", "scaler_update_micro_batch", "scaler_update_per_step",
        True), d.report()
    assert "unscaled twice" in d.findings[0].text


def test_the_gradient_audit_passes_a_correct_accumulating_fp16_loop():
    run = faults.run_fault(None, accum_steps=4, precision="fp16", steps=30)
    build = lambda c: faults.build_fault_trainer(None, c, {})  # noqa: E731
    assert audit_gradient(run, build) == (None, None)
