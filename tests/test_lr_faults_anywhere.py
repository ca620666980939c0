"""The learning-rate and optimizer-state faults on runs nanlab did not make (issue 27).

The LR lever is a factor on whatever LR the optimizer and its schedule give at each step
(nanlab.optim.lr_lever): it holds under any scheduler, and the scheduler, ReduceLROnPlateau
and a checkpoint still see the user's own LR. Each fault runs in the user's own loop
(AdamW, a warmup + cosine LambdaLR) against the same loop without it; numbers measured
on one CPU thread are in the comments.
"""

import math

import numpy as np
import pytest
import torch

from nanlab import faults
from nanlab.errors import NanlabError
from nanlab.optim.lr_lever import applied_lr, lr_lever, set_lr_factor
from tests.foreign_models import (
    DigitCNN,
    TinyEncoderLM,
    WindGRU,
    classifier_loss,
    digit_batches,
    lm_batches,
    lm_loss,
    wind_batches,
    wind_loss,
)

STEPS = 120
MODELS = {  # make, batches, loss, keys for inject()
    "encoder_lm": (TinyEncoderLM, lm_batches, lm_loss, {"inputs": "x", "labels": "y"}),
    "wind_gru": (WindGRU, wind_batches, wind_loss, {}),
    "digit_cnn": (DigitCNN, digit_batches, classifier_loss, {}),
}


def warmup_cosine(optimizer, steps=STEPS):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / 10) * (
        0.1 + 0.45 * (1 + math.cos(math.pi * min(k, steps) / steps))))


def own_loop(arch: str, lr: float, fault: str | None = None, steps: int = STEPS, **params):
    """The user's loop: AdamW, a warmup + cosine LambdaLR, the fault via faults.inject."""
    make, batches, loss_fn, keys = MODELS[arch]
    torch.manual_seed(0)
    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scheduler = warmup_cosine(optimizer, steps)
    if fault is not None:
        batches = faults.inject(fault, model=model, optimizer=optimizer, batches=batches,
                                scheduler=scheduler, **keys, **params).batches
    losses = []
    for step in range(steps):
        loss = loss_fn(model, batches(step))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return np.array(losses)


def spike_after(clean, bad, at: int, window: int = 25) -> tuple[int, float]:
    """(the step of the faulted run's highest loss in the window after ``at``, its ratio to
    the clean run's highest loss in the same window)."""
    w = slice(at, at + window)
    peak = at + int(np.nanargmax(bad[w]))
    return peak, float(np.nanmax(bad[w]) / np.max(clean[w]))


# -- the lever -----------------------------------------------------------------------------
def one_param_loop(make_scheduler, steps=12, factor=10.0, metric=None):
    """A one-weight SGD loop under a scheduler with the lever at ``factor``: the LR each
    step applied (read from the update: the gradient is 1) and the scheduler's own LR."""
    w = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))  # exact enough to read
    opt = torch.optim.SGD([w], lr=0.1)
    sched = make_scheduler(opt)
    set_lr_factor(opt, "test", factor)
    applied, own = [], []
    for step in range(steps):
        before = w.detach().clone()
        opt.zero_grad()
        w.sum().backward()  # d/dw = 1: the update is -lr
        opt.step()
        applied.append(float(before - w.detach()))
        own.append(opt.param_groups[0]["lr"])
        sched.step(metric(step)) if metric else sched.step()
    return np.array(applied), np.array(own)


SCHEDULERS = {
    "lambda_warmup": (lambda opt: torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: min(1.0, (k + 1) / 5)), None),
    "cosine": (lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=12), None),
    "plateau": (lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1,
                                                                       factor=0.5),
                lambda step: 1.0),  # a metric that never improves: the LR halves
}


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_the_factor_holds_every_step_and_the_scheduler_keeps_its_own_lr(name):
    make, metric = SCHEDULERS[name]
    applied, own = one_param_loop(make, metric=metric)
    plain, plain_own = one_param_loop(make, metric=metric, factor=1.0)
    assert np.allclose(applied, 10 * plain, rtol=1e-6)  # every step, not only the first
    assert np.array_equal(own, plain_own)  # the scheduler never saw the factor
    assert len(set(np.round(plain, 8))) > 2  # the schedule did move the LR


def test_checkpoints_see_the_users_lr_and_a_failed_step_does_not_compound():
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.AdamW([w], lr=1e-3)
    set_lr_factor(opt, "x", 40.0)
    assert opt.state_dict()["param_groups"][0]["lr"] == 1e-3
    assert applied_lr(opt) == pytest.approx(0.04)
    lever = lr_lever(opt)
    lever._before(opt, (), {})  # a step that raised after the pre-hook: no post-hook ran
    lever._before(opt, (), {})
    assert opt.param_groups[0]["lr"] == pytest.approx(0.04)  # once, not 40 * 40
    lever._after(opt, (), {})
    assert opt.param_groups[0]["lr"] == 1e-3
    with pytest.raises(NanlabError, match="LR factor x=0 is not allowed"):
        set_lr_factor(opt, "x", 0)


def test_an_lr_jump_under_a_lambda_lr_lasts_its_length_then_the_schedule_is_exact():
    """The old lever wrote group['lr'] and base_lrs: a LambdaLR undid the jump's later
    steps and the base LR came back as 0.005 * 10 * 0.1 = 0.005000000000000001."""
    w = torch.nn.Parameter(torch.zeros(()))
    opt = torch.optim.SGD([w], lr=5e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 / (1 + k))
    inj = faults.inject("lr_jump", optimizer=opt, batches=lambda i: None, scheduler=sched,
                        at_step=3, factor=10.0, length=2)
    seen = []
    for step in range(7):
        inj.batches(step)
        seen.append(applied_lr(opt) / opt.param_groups[0]["lr"])
        w.sum().backward()
        opt.step()
        sched.step()
    assert seen == [1, 1, 1, 10, 10, 1, 1]
    assert sched.base_lrs == [5e-3]


# -- the learning-rate faults on foreign models -------------------------------------------
@pytest.mark.parametrize("arch, lr", [("encoder_lm", 3e-3), ("wind_gru", 30.0),
                                      ("digit_cnn", 1e-2)])
def test_high_lr_is_a_factor_of_the_runs_own_lr_and_fires(arch, lr):
    """40x the user's LR, on every step of their schedule. The wind-power GRU predicts kW
    in raw units and trains at LR 30: an absolute 0.2 would have been 150x too low.
    Measured: the encoder ends at 2.78 (clean 0.054), the GRU turns NaN, the CNN ends
    11x above its clean run."""
    clean = own_loop(arch, lr)
    bad = own_loop(arch, lr, "high_lr")
    assert not np.isfinite(bad).all() or bad[-10:].mean() > 5 * clean[-10:].mean(), \
        (bad[-1], clean[-1])


def test_no_warmup_removes_the_users_warmup_or_refuses_in_one_line():
    make, batches, loss_fn, keys = MODELS["digit_cnn"]
    model = make()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with pytest.raises(NanlabError, match="no_warmup needs scheduler="):
        faults.inject("no_warmup", model=model, optimizer=opt, batches=batches)
    flat = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    with pytest.raises(NanlabError, match="starts at its peak LR"):
        faults.inject("no_warmup", optimizer=opt, batches=batches, scheduler=flat)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = warmup_cosine(opt)
    inj = faults.inject("no_warmup", optimizer=opt, batches=batches, scheduler=sched,
                        factor=1.0)
    applied = []
    for step in range(15):
        inj.batches(step)
        applied.append(applied_lr(opt))
        opt.step()
        sched.step()
    assert applied[:10] == pytest.approx([1e-2] * 10)  # the peak from step 0
    assert applied[10:] == pytest.approx([1e-2 * sched.lr_lambdas[0](k) for k in range(10, 15)])


# -- the optimizer-state faults on foreign models -----------------------------------------
@pytest.mark.parametrize("arch, lr, height", [("encoder_lm", 3e-2, 20), ("digit_cnn", 3e-2, 2)])
def test_resume_fresh_optimizer_spikes_right_after_the_step(arch, lr, height):
    """Adam's state emptied before step 80, as a fresh AdamW on resume holds it: its first
    updates are lr * sign(g) on every weight. Measured: the encoder's loss 127x the clean
    run's highest in the 25 steps after (at step 81), the CNN's 2.5x (at step 84)."""
    clean = own_loop(arch, lr)
    bad = own_loop(arch, lr, "resume_fresh_optimizer", at_step=80)
    assert np.array_equal(bad[:80], clean[:80])  # nothing changes before the restart
    peak, ratio = spike_after(clean, bad, 80)
    assert 80 < peak <= 90 and ratio > height, (peak, ratio)


def test_resume_fresh_optimizer_leaves_adam_as_a_fresh_one_is():
    make, batches, loss_fn, keys = MODELS["wind_gru"]
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.AdamW(model.parameters(), lr=1.0)
    inj = faults.inject("resume_fresh_optimizer", model=model, optimizer=opt,
                        batches=batches, at_step=3)
    for step in range(4):
        batch = inj.batches(step)
        if step == 3:
            assert not opt.state  # m = v = 0 and step 0: no state at all
        opt.zero_grad()
        loss_fn(model, batch).backward()
        opt.step()
    assert {int(s["step"]) for s in opt.state.values()} == {1}
    plain_sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NanlabError, match="plain SGD .* keeps no state"):
        faults.inject("resume_fresh_optimizer", optimizer=plain_sgd, batches=batches)


def test_resume_reset_schedule_puts_the_schedule_back_to_step_0():
    """A LambdaLR and a OneCycleLR both go back to their step-0 LR at the restart and climb
    to their peak again; without scheduler= (or with one already stepped) it refuses."""
    make, batches, loss_fn, keys = MODELS["digit_cnn"]
    model = make()
    for build in (warmup_cosine, lambda opt: torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=1e-2, total_steps=STEPS)):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = build(opt)
        fresh = [g["lr"] for g in opt.param_groups]
        inj = faults.inject("resume_reset_schedule", optimizer=opt, batches=batches,
                            scheduler=sched, at_step=60)
        lrs = []
        for step in range(90):
            inj.batches(step)
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        assert lrs[60] == fresh[0] and lrs[60:90] == lrs[:30], type(sched).__name__
        assert max(lrs[60:]) > lrs[59]  # back up towards the peak
    with pytest.raises(NanlabError, match="resume_reset_schedule needs scheduler="):
        faults.inject("resume_reset_schedule", optimizer=opt, batches=batches)
    with pytest.raises(NanlabError, match="has already stepped 30 times"):
        faults.inject("resume_reset_schedule", optimizer=opt, batches=batches,
                      scheduler=sched)


def test_resume_reset_schedule_raises_the_loss_of_a_run_trained_hot():
    """An encoder trained at a peak LR of 6e-2 the cosine had decayed: back at the peak,
    the loss climbs again. Measured: 1.8x the clean run's highest after the restart."""
    clean = own_loop("encoder_lm", 6e-2)
    bad = own_loop("encoder_lm", 6e-2, "resume_reset_schedule", at_step=100)
    assert np.array_equal(bad[:100], clean[:100])
    peak, ratio = spike_after(clean, bad, 100, window=20)
    assert peak > 105 and ratio > 1.4, (peak, ratio)


@pytest.mark.parametrize("arch, lr, layer, height", [
    ("digit_cnn", 1e-2, "features.4", 10), ("wind_gru", 30.0, "head", 2)])
def test_adam_unfreeze_spike_fires_when_the_masked_layer_wakes_up(arch, lr, layer, height):
    """Gradient hooks zero the layer's gradients for 60 steps while AdamW (b2 = 0.999 set
    on its groups) keeps stepping it. Measured: the CNN 19x the clean run's highest right
    after the unfreeze (step 61), the GRU's raw-units head 2.6x (step 64)."""
    clean = own_loop(arch, lr)
    bad = own_loop(arch, lr, "adam_unfreeze_spike", at_step=60, layer=layer)
    peak, ratio = spike_after(clean, bad, 60)
    assert 60 < peak <= 70 and ratio > height, (peak, ratio)


def test_adam_unfreeze_spike_masks_only_the_named_layer_and_refuses_what_it_cannot_do():
    make, batches, loss_fn, keys = MODELS["digit_cnn"]
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inj = faults.inject("adam_unfreeze_spike", model=model, optimizer=opt, batches=batches,
                        at_step=2, layer="classifier")
    assert all(g["betas"][1] == 0.999 for g in opt.param_groups)
    for step in range(3):
        opt.zero_grad()
        loss_fn(model, inj.batches(step)).backward()
        zero = [bool((p.grad == 0).all()) for p in model.classifier.parameters()]
        assert zero == [step < 2] * 2, step
        assert step == 0 or int(opt.state[model.classifier.weight]["step"]) == step
        opt.step()
    assert model.features[0].weight.grad.abs().sum() > 0
    with pytest.raises(NanlabError, match="layer='ffn' matches no parameter name of DigitCNN"):
        faults.inject("adam_unfreeze_spike", model=model, optimizer=opt, layer="ffn")
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(NanlabError, match="needs an Adam-type optimizer"):
        faults.inject("adam_unfreeze_spike", model=model, optimizer=sgd, layer="classifier")
    head_only = torch.optim.AdamW(model.features.parameters())
    with pytest.raises(NanlabError, match="are not in the optimizer"):
        faults.inject("adam_unfreeze_spike", model=model, optimizer=head_only,
                      layer="classifier")


def test_adam_unfreeze_spike_freezes_the_largest_linear_when_no_layer_is_named():
    """No toy name assumed: without layer= the fault freezes the model's largest
    nn.Linear (weight and bias) and says which; a model with none is refused in one line."""
    make, batches, loss_fn, keys = MODELS["digit_cnn"]
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inj = faults.inject("adam_unfreeze_spike", model=model, optimizer=opt, batches=batches,
                        at_step=2)
    named = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    name, largest = max(named, key=lambda nm: nm[1].weight.numel())
    assert any(f"the largest Linear {name!r}" in note for note in inj.notes), inj.notes
    opt.zero_grad()
    loss_fn(model, inj.batches(0)).backward()
    assert all(bool((q.grad == 0).all()) for q in largest.parameters())
    assert all(q.grad.abs().sum() > 0 for m in model.modules()
               if isinstance(m, torch.nn.Conv2d) for q in m.parameters())
    convs = torch.nn.Sequential(torch.nn.Conv1d(1, 2, 3), torch.nn.ReLU())
    with pytest.raises(NanlabError, match="no trainable, untied nn.Linear to freeze by default"):
        faults.inject("adam_unfreeze_spike", model=convs,
                      optimizer=torch.optim.AdamW(convs.parameters()))
    # a head tied to the embedding is passed over: freezing it would freeze the embedding
    tied = torch.nn.ModuleDict({"emb": torch.nn.Embedding(50, 8), "mlp": torch.nn.Linear(8, 8),
                                "head": torch.nn.Linear(8, 50, bias=False)})
    tied.head.weight = tied.emb.weight
    inj = faults.inject("adam_unfreeze_spike", model=tied,
                        optimizer=torch.optim.AdamW(tied.parameters()))
    assert any("the largest Linear 'mlp'" in note for note in inj.notes), inj.notes
